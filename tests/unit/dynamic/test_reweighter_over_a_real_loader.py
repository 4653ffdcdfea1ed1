"""Bucket probabilities, bucket scores and the BucketReweighter over a real PhaseLoader.

The loader is built from tiny datasets prepared by ``prepare`` (real MDS shards), so the bucket
path is the one training uses: static-metric buckets → window of losses → edges → per-sample
buckets in each stream's ``BucketSampler`` → ``PhaseLoader.next_global_batch(probs)``.

From issue 6.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs, recompute
from hypothesis import given
from hypothesis import strategies as st

from curriculum_ds.config import DynamicConfig, PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import (
    BucketReweighter,
    StreamReweighter,
    bucket_probs,
    bucket_scores,
)
from curriculum_ds.kernels import assign_buckets, bucket_edges


# ------------------------------------------------------------------------------ bucket_probs
@given(
    scores=st.lists(st.floats(-50, 50, allow_nan=False), min_size=2, max_size=64),
    temperature=st.sampled_from([1e-6, 1e-3, 0.1, 1.0, 10.0, 1e6]),
    floor_frac=st.floats(0.01, 1.0),
)
def test_probs_floor_holds_and_sum_is_one(scores, temperature, floor_frac):
    num_buckets = len(scores)
    floor = floor_frac / num_buckets
    probs = bucket_probs(scores, temperature=temperature, floor=floor)
    assert probs.dtype == np.float64
    assert probs.shape == (num_buckets,)
    assert np.all(np.isfinite(probs))
    assert np.all(probs >= floor)
    assert abs(probs.sum() - 1.0) <= 1e-12
    # a higher score never gets a lower probability
    order = np.argsort(scores, kind="stable")
    assert np.all(np.diff(probs[order]) >= -1e-15)


def test_probs_equal_scores_are_uniform():
    probs = bucket_probs([2.5] * 8, temperature=0.01, floor=0.02)
    np.testing.assert_allclose(probs, np.full(8, 1 / 8), rtol=0, atol=1e-15)


def test_probs_large_temperature_tends_to_uniform_small_to_argmax():
    scores = [0.5, 1.0, 3.0, 2.0]
    hot = bucket_probs(scores, temperature=1e9, floor=0.05)
    np.testing.assert_allclose(hot, 0.25, atol=1e-8)
    cold = bucket_probs(scores, temperature=1e-9, floor=0.05)
    np.testing.assert_allclose(cold, [0.05, 0.05, 0.85, 0.05], atol=1e-15)
    # the formula itself: floor + (1 - B floor) softmax(s / T)
    z = np.exp(np.array(scores) / 1.0)
    np.testing.assert_allclose(
        bucket_probs(scores, temperature=1.0, floor=0.05), 0.05 + 0.8 * z / z.sum(), rtol=1e-14
    )


def test_probs_floor_equal_to_one_over_buckets_is_uniform():
    probs = bucket_probs([1.0, 9.0, 3.0, 4.0], temperature=0.1, floor=0.25)
    np.testing.assert_array_equal(probs, np.full(4, 0.25))


@pytest.mark.parametrize(
    ("scores", "temperature", "floor", "match"),
    [
        ([1.0, 2.0], 0.0, 0.1, "temperature must be > 0"),
        ([1.0, 2.0], -1.0, 0.1, "temperature must be > 0"),
        ([1.0, 2.0], float("nan"), 0.1, "temperature must be > 0"),
        ([1.0, 2.0], 1.0, 0.0, r"floor must be in \(0, 1/num_buckets\]"),
        ([1.0, 2.0], 1.0, 0.6, r"floor must be in \(0, 1/num_buckets\]"),
        ([1.0, float("nan")], 1.0, 0.1, "bucket scores must be finite"),
        ([1.0, float("inf")], 1.0, 0.1, "bucket scores must be finite"),
        ([], 1.0, 0.1, "at least one bucket"),
        ([[1.0, 2.0]], 1.0, 0.1, "1-D"),
    ],
)
def test_probs_refuses_bad_arguments(scores, temperature, floor, match):
    with pytest.raises(ValueError, match=match):
        bucket_probs(scores, temperature=temperature, floor=floor)


# ----------------------------------------------------------------------------- bucket_scores
def test_scores_are_bucket_means_with_counts():
    values = np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.float32)
    edges = bucket_edges(values, 4)
    scores, counts = bucket_scores(values, edges, 4)
    # bucket = min(B - 1, floor(rank * B)), rank = #{x <= v} / N (exact order statistics)
    np.testing.assert_array_equal(edges, [2, 4, 6])
    np.testing.assert_array_equal(counts, [1, 2, 2, 3])
    np.testing.assert_allclose(scores, [1.0, 2.5, 4.5, 7.0])


def test_scores_empty_buckets_get_the_mean_of_the_populated():
    values = np.array([1.0, 1.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0], dtype=np.float32)
    edges = bucket_edges(values, 4)  # [1, 9, 9]: ties leave buckets 0 and 2 empty
    scores, counts = bucket_scores(values, edges, 4)
    np.testing.assert_array_equal(counts, [0, 2, 0, 6])
    np.testing.assert_allclose(scores, [5.0, 1.0, 5.0, 9.0])
    probs = bucket_probs(scores, temperature=1.0, floor=0.05)
    assert np.all(np.isfinite(probs))
    assert abs(probs.sum() - 1) <= 1e-12


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=32), min_size=1, max_size=300),
    st.integers(2, 64),
)
def test_scores_match_a_numpy_oracle(values, num_buckets):
    v = np.asarray(values, dtype=np.float32)
    edges = bucket_edges(v, num_buckets)
    scores, counts = bucket_scores(v, edges, num_buckets)
    idx = np.searchsorted(edges, v.astype(np.float64), side="right")
    assert counts.sum() == len(v)
    for b in range(num_buckets):
        members = v[idx == b].astype(np.float64)
        assert counts[b] == len(members)
        if len(members):
            assert scores[b] == pytest.approx(members.mean(), rel=1e-12, abs=1e-9)
    assert np.all(np.isfinite(scores))


def test_scores_refuse_an_empty_window():
    with pytest.raises(ValueError, match="no value"):
        bucket_scores(np.array([], dtype=np.float32), np.array([1.0]), 2)


# ------------------------------------------------------------------------ BucketReweighter
@pytest.fixture(autouse=True)
def _no_token_reader(no_token_reader):
    """Loaders without a streaming reader in this module (see ``conftest.no_token_reader``)."""


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("dyn")
    short = make_dataset(root, "short", ragged_docs(120, seed=1, min_len=5, max_len=40))
    long = make_dataset(
        root, "long", ragged_docs(80, seed=2, min_len=30, max_len=120), max_seq_len=128
    )
    return short, long


def _phase(datasets, proportions=(0.3, 0.7)) -> PhaseConfig:
    short, long = datasets
    return PhaseConfig.model_validate(
        {
            "name": "mix",
            "duration": "100000tok",
            "train_loader": {
                "streams": [
                    {"local": str(short), "proportion": proportions[0]},
                    {"local": str(long), "proportion": proportions[1]},
                ],
                "max_seq_len": 128,
            },
        }
    )


def _cfg(**kw) -> DynamicConfig:
    base = {
        "enabled": True,
        "num_buckets": 4,
        "window": 64,
        "recompute_every_n_steps": 2,
        "temperature": 0.5,
        "floor": 0.05,
    }
    return DynamicConfig.model_validate(base | kw)


def _fake_losses(loader: PhaseLoader, batch: np.ndarray) -> np.ndarray:
    """A deterministic per-sample loss: longer samples are harder, with a little jitter."""
    tokens = np.array([loader.num_tokens[s][i] for s, i in batch], dtype=np.float64)
    return np.log1p(tokens) + 0.01 * (batch[:, 1] % 7)


def _run(dyn: BucketReweighter, loader: PhaseLoader, steps: range, batch_size: int = 16):
    records, batches = [], []
    for step in steps:
        batch = loader.next_global_batch(batch_size, dyn.probs)
        batches.append(batch)
        dyn.observe(batch, _fake_losses(loader, batch))
        rec = recompute(dyn, step, loader)
        if rec is not None:
            records.append(rec)
    return records, batches


def test_start_phase_buckets_by_the_static_metric(datasets):
    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    dyn = BucketReweighter(_cfg())
    loader.apply(dyn.start_phase(loader.view(), None))
    columns = [np.asarray(i.metrics["num_tokens"], dtype=np.float64) for i in loader.infos]
    edges = bucket_edges(np.concatenate(columns), 4)
    for sampler, column in zip(loader.samplers, columns, strict=True):
        expected = np.bincount(assign_buckets(column, edges), minlength=4)
        np.testing.assert_array_equal(sampler.counts(), expected)
    np.testing.assert_array_equal(dyn.probs, np.full(4, 0.25))


def test_unknown_static_metric_is_a_clear_error(datasets):
    from curriculum_ds.errors import ConfigError

    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    dyn = BucketReweighter(_cfg(static_metric="no_such_column"))
    with pytest.raises(ConfigError, match=r"curriculum\.dynamic\.static_metric.*no_such_column"):
        loader.apply(dyn.start_phase(loader.view(), None))


def test_non_finite_static_metric_names_stream_column_and_sample(datasets):
    """C06 variant: a NaN in the metric column (metrics.npz edited after validate) is named by
    stream, column and sample, not reported as the kernel's "pass nan_policy" hint."""
    from curriculum_ds.errors import ConfigError

    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    info = loader.infos[1]
    column = np.array(info.metrics["token_entropy"], dtype=np.float64)
    column[5] = np.nan
    info.metrics["token_entropy"] = column
    dyn = BucketReweighter(_cfg(static_metric="token_entropy"))
    with pytest.raises(
        ConfigError,
        match=rf"stream '{loader.stream_names[1]}': metric column 'token_entropy' is nan at "
        r"sample 5; every value must be finite",
    ):
        loader.apply(dyn.start_phase(loader.view(), None))


def test_recompute_gives_floored_probs_that_sum_to_one(datasets):
    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    dyn = BucketReweighter(_cfg())
    loader.apply(dyn.start_phase(loader.view(), None))
    records, _ = _run(dyn, loader, range(1, 13))
    assert len(records) == 6  # steps 2, 4, ..., 12
    for rec in records:
        w = np.array(rec["weights"])
        assert np.all(w >= 0.05)
        assert abs(w.sum() - 1) <= 1e-12
        assert rec["window_size"] <= 64
        assert rec["num_non_finite"] == 0
        assert sum(rec["bucket_counts"]) == rec["window_size"]
    # harder (higher-loss) buckets get more weight
    assert np.all(np.diff(records[-1]["weights"]) > 0)
    # every seen sample sits in the bucket of its latest loss against the edges
    edges = np.asarray(records[-1]["edges"])
    for stream, (sampler, last) in enumerate(zip(loader.samplers, dyn.last_loss, strict=True)):
        seen = np.isfinite(last)
        static = dyn.static_buckets[stream]
        expected = np.where(seen, assign_buckets(np.where(seen, last, 0.0), edges), static)
        np.testing.assert_array_equal(sampler.counts(), np.bincount(expected, minlength=4))


def test_recompute_is_deterministic_and_a_pure_function_of_the_inputs(datasets):
    runs = []
    for _ in range(2):
        loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
        dyn = BucketReweighter(_cfg())
        loader.apply(dyn.start_phase(loader.view(), None))
        runs.append(_run(dyn, loader, range(1, 11)))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        np.testing.assert_array_equal(a, b)


def test_empty_window_keeps_the_previous_probs(datasets):
    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    dyn = BucketReweighter(_cfg())
    loader.apply(dyn.start_phase(loader.view(), None))
    batch = loader.next_global_batch(8, dyn.probs)
    dyn.observe(batch, np.full(8, np.nan))  # e.g. a step whose samples bear no loss
    rec = recompute(dyn, 2, loader)
    assert rec is not None
    assert rec["kept_previous"]
    assert rec["weights"] == [0.25] * 4
    assert rec["window_size"] == 0
    assert rec["num_non_finite"] == 8
    _run(dyn, loader, range(3, 7))
    previous = dyn.probs.copy()
    assert not np.allclose(previous, 0.25)
    # a phase swap empties the window: the next recompute keeps the last weights
    loader2 = PhaseLoader(_phase(datasets, (0.5, 0.5)), 1, seed=3, num_buckets=4)
    loader2.apply(dyn.start_phase(loader2.view(), None))
    rec = recompute(dyn, 8, loader2)
    assert rec is not None
    assert rec["kept_previous"]
    np.testing.assert_array_equal(dyn.probs, previous)


def test_state_dict_restores_probs_window_and_buckets_exactly(datasets):
    """Case C01, third part: restored weights and window equal those at the checkpoint, and the
    continuation (batches and weights) equals the uninterrupted one, at any checkpoint step."""
    for checkpoint_step in (4, 5):  # on a recompute step, and between two recomputes
        loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
        dyn = BucketReweighter(_cfg(recompute_every_n_steps=4))
        loader.apply(dyn.start_phase(loader.view(), None))
        _run(dyn, loader, range(1, checkpoint_step + 1))
        saved = pickle.loads(pickle.dumps({"dynamic": dyn.state(), "loader": loader.state()}))
        window_at_checkpoint = dyn.window.values()
        rest = _run(dyn, loader, range(checkpoint_step + 1, 15))

        loader_b = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
        dyn_b = BucketReweighter(_cfg(recompute_every_n_steps=4))
        loader_b.apply(dyn_b.start_phase(loader_b.view(), saved["dynamic"]))
        loader_b.restore(saved["loader"])
        np.testing.assert_array_equal(dyn_b.probs, saved["dynamic"].probs)
        np.testing.assert_array_equal(dyn_b.window.values(), window_at_checkpoint)
        rest_b = _run(dyn_b, loader_b, range(checkpoint_step + 1, 15))
        assert rest_b[0] == rest[0]
        for a, b in zip(rest[1], rest_b[1], strict=True):
            np.testing.assert_array_equal(a, b)


def test_observe_records_the_latest_finite_loss_per_sample(datasets):
    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    dyn = BucketReweighter(_cfg())
    loader.apply(dyn.start_phase(loader.view(), None))
    batch = np.array([[0, 5], [1, 7], [0, 5], [1, 9]], dtype=np.int64)
    dyn.observe(batch, np.array([1.0, 2.0, 3.0, np.nan]))
    assert dyn.last_loss[0][5] == 3.0  # the later of two losses of one sample in a batch
    assert dyn.last_loss[1][7] == 2.0
    assert np.isnan(dyn.last_loss[1][9])  # a NaN loss leaves the sample unseen
    assert len(dyn.window) == 3
    assert dyn.window.num_non_finite == 1


def test_state_from_an_earlier_phase_carries_only_the_probs(datasets):
    """A checkpoint on a phase boundary: the next phase starts with the weights it would have."""
    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    dyn = BucketReweighter(_cfg())
    loader.apply(dyn.start_phase(loader.view(), None))
    _run(dyn, loader, range(1, 7))
    saved = dyn.state()
    assert saved.phase_idx == 0
    assert not np.allclose(saved.probs, 0.25)

    loader_b = PhaseLoader(_phase(datasets, (0.5, 0.5)), 1, seed=3, num_buckets=4)
    dyn_b = BucketReweighter(_cfg())
    loader_b.apply(dyn_b.start_phase(loader_b.view(), saved))
    np.testing.assert_array_equal(dyn_b.probs, saved.probs)
    assert len(dyn_b.window) == 0
    assert dyn_b.edges is None
    assert dyn_b.num_recomputes == saved.num_recomputes
    for sampler, static in zip(loader_b.samplers, dyn_b.static_buckets, strict=True):
        np.testing.assert_array_equal(sampler.counts(), np.bincount(static, minlength=4))


@pytest.mark.parametrize("saved_unit", ["streams", "buckets"])
def test_a_boundary_state_of_other_weights_starts_the_buckets_uniform(datasets, saved_unit):
    """A checkpoint on a phase boundary whose run weighted 2 streams, or 8 buckets: the next
    phase's 4 buckets start uniform (neither may be read as bucket probabilities; both may change
    at a boundary), and the loader draws with them."""
    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    if saved_unit == "streams":
        saved = StreamReweighter(_cfg(unit="streams"))
        saved.start_phase(loader.view(), None)
        saved.probs = np.array([0.8, 0.2])
    else:
        saved = BucketReweighter(_cfg(num_buckets=8))
        saved.start_phase(PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=8).view(), None)
        saved.probs = np.linspace(1, 8, 8) / 36
    state = saved.state()

    loader_b = PhaseLoader(_phase(datasets, (0.5, 0.5)), 1, seed=3, num_buckets=4)
    dyn_b = BucketReweighter(_cfg())
    loader_b.apply(dyn_b.start_phase(loader_b.view(), state))
    np.testing.assert_array_equal(dyn_b.probs, np.full(4, 0.25))
    assert dyn_b.num_recomputes == state.num_recomputes
    assert loader_b.next_global_batch(16).shape == (16, 2)


def test_weights_drive_the_sampler_within_the_datamix(datasets):
    """Item 5: bucket shares of the next few thousand samples match the probs (binomial 4σ),
    overall and within each stream, while the stream proportions still hold exactly."""
    loader = PhaseLoader(_phase(datasets), 0, seed=5, num_buckets=4)
    dyn = BucketReweighter(_cfg(window=10_000, recompute_every_n_steps=1))
    loader.apply(dyn.start_phase(loader.view(), None))
    # a loss for every sample, unrelated to its length, so each stream has all four buckets
    pairs = np.array(
        [[s, i] for s, info in enumerate(loader.infos) for i in range(info.num_samples)],
        dtype=np.int64,
    )
    losses = ((pairs[:, 1] * 2654435761 + pairs[:, 0] * 97) % 1000).astype(np.float64) / 100
    dyn.observe(pairs, losses)
    recompute(dyn, 1, loader)
    for sampler in loader.samplers:
        assert np.all(sampler.counts() > 0)

    probs = np.array([0.05, 0.15, 0.3, 0.5])
    drawn = np.concatenate([loader.next_global_batch(32, probs) for _ in range(150)])
    n = len(drawn)
    buckets = np.array([dyn.buckets[s][i] for s, i in drawn])

    def within_4_sigma(observed, k):
        expected = probs * k
        sigma = np.sqrt(k * probs * (1 - probs))
        assert np.all(np.abs(observed - expected) <= 4 * sigma), (observed, expected, sigma)

    within_4_sigma(np.bincount(buckets, minlength=4), n)
    for stream in range(2):
        mine = drawn[:, 0] == stream
        within_4_sigma(np.bincount(buckets[mine], minlength=4), int(mine.sum()))
    # the datamix: Megatron's largest-deficit rule keeps every prefix within one sample
    for prefix in (32, 1000, n):
        counts = np.bincount(drawn[:prefix, 0], minlength=2)
        assert np.all(np.abs(counts - loader.proportions * prefix) < 1.0)


def test_phase_start_keeps_the_previous_phases_weights_and_buckets_by_the_static_metric(datasets):
    """At a new phase's first step the weights are the previous phase's (not
    uniform, not recomputed) and its samples are bucketed by the static metric.

    From issue 14, item 8.
    """
    loader = PhaseLoader(_phase(datasets), 0, seed=3, num_buckets=4)
    dyn = BucketReweighter(_cfg())
    loader.apply(dyn.start_phase(loader.view(), None))
    _run(dyn, loader, range(1, 7))
    learned = dyn.probs.copy()
    assert not np.allclose(learned, 0.25)
    swapped = PhaseLoader(_phase(datasets, (0.5, 0.5)), 1, seed=3, num_buckets=4)
    buckets = dyn.start_phase(swapped.view(), None).buckets
    assert buckets is not None
    np.testing.assert_array_equal(dyn.probs, learned)
    for b, static in zip(buckets, dyn.static_buckets, strict=True):
        np.testing.assert_array_equal(b, static)
    assert dyn.edges is None  # no loss of the new phase yet
