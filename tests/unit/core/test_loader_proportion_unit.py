"""``train_loader.proportion_unit`` — stream mixes exact in samples or tokens.

Loaders over tiny datasets prepared by ``prepare`` (real MDS shards and metric columns): the
``"tokens"`` mix of two streams whose mean sample lengths differ by ~10× stays within one sample's
tokens of its target after every slot, resumes exactly, and ``"samples"`` draws exactly what the
per-slot numpy loop it replaces drew.

From issue 12, item 4.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs

from curriculum_ds.commands.schedule_table import describe_schedule, mix_shares
from curriculum_ds.config import PhaseConfig, load_config
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.data import read_stream_info
from curriculum_ds.kernels import blend_samples, blend_tokens

BATCH_SIZES = (16, 1, 7, 64, 3, 32)


# loaders without a streaming reader in this module (see ``conftest.no_token_reader``)
pytestmark = pytest.mark.usefixtures("no_token_reader")

# name: (documents, seed, shortest and longest document in bytes, prepare's max_seq_len)
STREAMS = {"short": (90, 1, 4, 14, 64), "long": (40, 2, 70, 130, 128)}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Two prepared streams whose mean sample lengths differ by ~10x (short, long)."""
    root = tmp_path_factory.mktemp("mix")
    return tuple(
        make_dataset(root, name, ragged_docs(n, seed=seed, min_len=lo, max_len=hi), max_seq_len=m)
        for name, (n, seed, lo, hi, m) in STREAMS.items()
    )


def _phase(datasets, unit: str | None, proportions=(0.3, 0.7), max_seq_len: int = 128) -> Any:
    loader: dict[str, Any] = {
        "streams": [
            {"local": str(p), "proportion": w} for p, w in zip(datasets, proportions, strict=True)
        ],
        "max_seq_len": max_seq_len,
    }
    if unit is not None:
        loader["proportion_unit"] = unit
    return PhaseConfig.model_validate({"name": "p", "duration": "1ep", "train_loader": loader})


def _draws(loader: PhaseLoader, rounds: int = 6) -> Iterator[np.ndarray]:
    """Global batches of varied sizes, each drawn when the previous one has been looked at."""
    for n in BATCH_SIZES * rounds:
        yield loader.next_global_batch(n)


def test_token_shares_stay_within_one_sample_after_every_slot(datasets):
    loader = PhaseLoader(_phase(datasets, "tokens"), 0, seed=5)
    means = [float(t.mean()) for t in loader.num_tokens]
    assert means[1] / means[0] >= 9  # the two streams' sample lengths differ by ~10x
    longest = [int(t.max()) for t in loader.num_tokens]
    target = np.array([0.3, 0.7])
    placed = np.zeros(2, dtype=np.int64)
    slots = np.zeros(2, dtype=np.int64)
    for batch in _draws(loader):
        for stream, index in batch:
            placed[stream] += loader.num_tokens[stream][index]
            slots[stream] += 1
            error = placed - target * placed.sum()
            # a stream is never more than one of its own samples above its share, and so (two
            # streams) never more than one of the other's below it
            assert error[0] <= longest[0], (placed, slots)
            assert error[1] <= longest[1], (placed, slots)
            assert -error[0] <= longest[1], (placed, slots)
            assert -error[1] <= longest[0], (placed, slots)
        # the per-stream token counts of the step agree with what the loader counted
        assert loader.placed_tokens.tolist() == placed.tolist()
        assert loader.stream_counts.tolist() == slots.tolist()
    # in samples the mix is far from 0.3 / 0.7: the short stream fills most slots
    assert slots[0] / slots.sum() > 0.7
    assert abs(placed[0] / placed.sum() - 0.3) < 0.01
    loader.close()


def test_samples_mix_is_exact_in_samples_not_tokens(datasets):
    loader = PhaseLoader(_phase(datasets, None), 0, seed=5)
    assert loader.proportion_unit == "samples"
    counts = np.zeros(2, dtype=np.int64)
    for batch in _draws(loader):
        for stream, _ in batch:
            counts[stream] += 1
            k = counts.sum()
            assert np.all(np.abs(counts - np.array([0.3, 0.7]) * k) < 1)
    loader.close()


def _old_loop(proportions: np.ndarray, counts: np.ndarray, start: int, n: int) -> np.ndarray:
    """``next_global_batch``'s per-slot numpy loop before the blend kernel (the old order)."""
    counts = counts.copy()
    out = np.empty(n, dtype=np.int64)
    for slot in range(n):
        stream = int(np.argmax(proportions * (start + slot + 1) - counts))
        counts[stream] += 1
        out[slot] = stream
    return out


@pytest.mark.parametrize("seed", range(8))
def test_blend_samples_is_the_old_numpy_loop(seed):
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.01, 5, size=rng.integers(1, 7))
    weights[rng.integers(0, weights.size)] = weights[0]  # ties
    proportions = weights / weights.sum()
    counts = np.zeros(weights.size, dtype=np.int64)
    start = 0
    for n in (1, 5, 1000, 1024, 33):
        expected = _old_loop(proportions, counts, start, n)
        got = blend_samples(proportions, counts, start, n)
        assert got.tolist() == expected.tolist()
        counts += np.bincount(got, minlength=weights.size)
        start += n


def test_blend_tokens_refuses_a_stream_that_runs_out():
    with pytest.raises(ValueError, match="stream 0 has no next sample left"):
        blend_tokens([1.0, 0.0], [0, 0], [[5], [1, 1, 1]], 2)
    assert blend_tokens([0.5, 0.5], [0, 0], [[5, 5, 5], [10, 10, 10]], 3).tolist() == [0, 1, 0]


@pytest.mark.parametrize("unit", ["samples", "tokens"])
@pytest.mark.parametrize("num_buckets", [1, 3])
def test_resume_continues_exactly(datasets, unit, num_buckets):
    probs = np.full(num_buckets, 1.0 / num_buckets) if num_buckets > 1 else None

    def loader() -> PhaseLoader:
        made = PhaseLoader(_phase(datasets, unit), 2, seed=11, num_buckets=num_buckets)
        if num_buckets > 1:
            made.set_buckets([np.arange(i.num_samples) % num_buckets for i in made.infos])
        return made

    first = loader()
    for n in BATCH_SIZES:
        first.next_global_batch(n, probs)
    saved = json.loads(json.dumps(first.state_dict()))  # through JSON, like a checkpoint
    assert ("stream_tokens" in saved) == (unit == "tokens")
    resumed = loader()
    resumed.load_state_dict(saved)
    for n in BATCH_SIZES * 3:
        assert (
            first.next_global_batch(n, probs).tolist()
            == resumed.next_global_batch(n, probs).tolist()
        )
    assert json.dumps(first.state_dict()) == json.dumps(resumed.state_dict())
    # the order is a pure function of (seed, counters): a fresh loader draws the same again
    again, fresh = loader(), loader()
    assert [b.tolist() for b in _draws(again, 1)] == [b.tolist() for b in _draws(fresh, 1)]


def test_states_of_the_other_unit_are_refused(datasets):
    # order version 1: the state of a checkpoint from before order_version existed
    samples = PhaseLoader(_phase(datasets, "samples"), 0, seed=1, order_version=1)
    tokens = PhaseLoader(_phase(datasets, "tokens"), 0, seed=1, order_version=1)
    samples.next_global_batch(8)
    tokens.next_global_batch(8)
    # a checkpoint from before proportion_unit existed has no such key: it is a samples state
    old = samples.state_dict()
    assert set(old) == {"phase_idx", "num_samples", "stream_counts", "samplers"}
    with pytest.raises(ValueError, match="'samples', this phase in 'tokens'"):
        tokens.load_state_dict(old)
    with pytest.raises(ValueError, match="'tokens', this phase in 'samples'"):
        samples.load_state_dict(tokens.state_dict())
    bad = tokens.state_dict()
    bad["pending"][1] = [10**6]
    with pytest.raises(ValueError, match="pending samples of stream 1"):
        tokens.load_state_dict(bad)


def test_mix_shares_estimate():
    samples, tokens = mix_shares([1, 1], [10.0, 100.0], "tokens")
    assert tokens == [0.5, 0.5]
    assert samples == pytest.approx([10 / 11, 1 / 11])
    samples, tokens = mix_shares([1, 3], [10.0, 150.0], "samples")
    assert samples == [0.25, 0.75]
    assert tokens == pytest.approx([2.5 / 115, 112.5 / 115])
    assert mix_shares([1], [0.0], "samples") is None


def test_validate_table_shows_the_realised_shares(datasets, tmp_path):
    short, long = datasets
    streams = [{"local": str(short), "proportion": 1}, {"local": str(long), "proportion": 1}]
    phases = [
        {"name": name, "duration": "10000tok", "train_loader": {"streams": streams, **extra}}
        for name, extra in (("s", {}), ("t", {"proportion_unit": "tokens"}))
    ]
    cfg = {"max_duration": "20000tok", "schedule": phases}
    (tmp_path / "ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 8, "curriculum": cfg})
    )
    text = describe_schedule(load_config(tmp_path / "ds.json"))
    infos = [read_stream_info(p) for p in datasets]
    samples, _ = mix_shares(
        [1, 1], [float(i.metrics["num_tokens"].mean()) for i in infos], "tokens"
    )
    assert (
        f"phase 1 (t) mix in tokens; ~realised shares, samples / tokens: short "
        f"{100 * samples[0]:.3g}% / 50%, long {100 * samples[1]:.3g}% / 50%"
    ) in text.splitlines()
    assert "phase 0 (s) mix in samples; ~realised shares, samples / tokens: short 50% / " in text
    # ~steps: a global batch of 8 holds 8 / sum(share / mean) tokens in the tokens phase
    mean = sum(
        a * float(i.metrics["num_tokens"].mean()) for a, i in zip(samples, infos, strict=True)
    )
    assert text.splitlines()[3].split()[-1] == str(math.ceil(10000 / (8 * mean)))
