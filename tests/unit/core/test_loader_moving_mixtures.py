"""Mixtures that move inside a phase: proportion ramps and sequence-length warmup in the loader.

Loaders over two prepared streams whose sample lengths differ by ~10x. A ramp 0.9→0.1 / 0.1→0.9
tracks the integral of its step-wise target after every step (tokens: within one longest sample;
samples: within one sample), resumes exactly mid-ramp, honours a 0.001 share, and a warmup ramp
truncates each step's samples to its value at the step's start (a multiple of 8), the token counts
counting what is trained. The validate table shows both ramps.

From issue 22, items 1 and 2.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs

from curriculum_ds.commands.schedule_table import describe_schedule
from curriculum_ds.config import PhaseConfig, load_config
from curriculum_ds.config.ramps import value_at
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.kernels import blend_samples, blend_tokens

pytestmark = pytest.mark.usefixtures("no_token_reader")

RAMP = ([[0.0, 0.9], [1.0, 0.1]], [[0.0, 0.1], [1.0, 0.9]])


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("moving")
    short = make_dataset(root, "short", ragged_docs(300, seed=1, min_len=4, max_len=14))
    long = make_dataset(
        root, "long", ragged_docs(120, seed=2, min_len=70, max_len=130), max_seq_len=128
    )
    return short, long


def _phase(datasets, unit: str, *, max_seq_len: Any = 128, proportions=RAMP) -> PhaseConfig:
    streams = [
        {"local": str(p), "proportion": w} for p, w in zip(datasets, proportions, strict=True)
    ]
    loader = {"streams": streams, "max_seq_len": max_seq_len, "proportion_unit": unit}
    return PhaseConfig.model_validate({"name": "ramp", "duration": "1ep", "train_loader": loader})


def _run(loader: PhaseLoader, duration: int, gbs: int, unit: str, steps: int | None = None):
    """Steps until ``duration`` (tokens or samples) as the curriculum draws them; yields each
    step's batch, its start fraction and the cumulative counts and targets after it."""
    done, step = 0, 0
    while done < duration and (steps is None or step < steps):
        fraction = min(1.0, done / duration)
        batch = loader.next_global_batch(gbs, fraction=fraction)
        done += loader.batch_tokens(batch) if unit == "tokens" else len(batch)
        step += 1
        yield batch, fraction


@pytest.mark.parametrize("unit", ["tokens", "samples"])
def test_a_ramp_tracks_the_integral_of_its_target_after_every_step(datasets, unit):
    loader = PhaseLoader(_phase(datasets, unit), 0, seed=3)
    assert [float(t.mean()) for t in loader.num_tokens][1] / float(loader.num_tokens[0].mean()) > 9
    longest = max(int(t.max()) for t in loader.num_tokens)
    counted = np.zeros(2)
    integral = np.zeros(2)
    duration = 40_000 if unit == "tokens" else 1_500
    shares_seen = []
    for batch, fraction in _run(loader, duration, 16, unit):
        target = np.array([value_at(r, fraction) for r in RAMP])
        target /= target.sum()
        step = (
            loader.stream_tokens(batch)
            if unit == "tokens"
            else np.bincount(batch[:, 0], minlength=2)
        )
        integral += target * step.sum()
        counted += step
        bound = longest if unit == "tokens" else 1
        assert np.abs(counted - integral).max() <= bound, (fraction, counted, integral)
        shares_seen.append(step[0] / step.sum())
    # the mix really moved: stream 0 from ~0.9 of the step to ~0.1
    assert np.mean(shares_seen[:5]) > 0.75
    assert np.mean(shares_seen[-5:]) < 0.25


def test_a_resumed_loader_draws_the_same_batches_mid_ramp(datasets):
    phase = _phase(datasets, "tokens", max_seq_len=[[0.0, 16], [1.0, 128]])
    runs = list(_run(PhaseLoader(phase, 0, seed=9), 20_000, 8, "tokens"))
    first = PhaseLoader(phase, 0, seed=9)
    head = len(list(_run(first, 20_000, 8, "tokens", steps=len(runs) // 2)))
    state = first.state_dict()
    assert len(state["targets"]) == 2
    # through the checkpoint's typed loader state, as a resume reads it
    assert LoaderState.from_dict(state).to_dict() == state
    resumed = PhaseLoader(phase, 0, seed=9)
    resumed.load_state_dict(LoaderState.from_dict(state).to_dict())
    for batch, fraction in runs[head:]:  # the fractions of the uninterrupted run
        np.testing.assert_array_equal(resumed.next_global_batch(8, fraction=fraction), batch)
    assert 0 < head < len(runs)
    state["targets"] = [0.0]
    with pytest.raises(ValueError, match="targets"):
        PhaseLoader(phase, 0, seed=9).load_state_dict(state)


def test_warmup_truncates_each_step_to_its_start_value(datasets):
    warmup = [[0.0, 20], [0.5, 64], [1.0, 128]]
    loader = PhaseLoader(_phase(datasets, "tokens", max_seq_len=warmup), 0, seed=1)
    seen = set()
    for batch, fraction in _run(loader, 30_000, 16, "tokens"):
        seq_len = loader.seq_len
        expected = int(value_at(warmup, fraction)) // 8 * 8
        assert seq_len == max(8, expected)
        assert seq_len % 8 == 0
        seen.add(seq_len)
        tokens = loader.stream_tokens(batch)
        raw = [
            np.asarray(info.metrics["num_tokens"])[batch[batch[:, 0] == s, 1]]
            for s, info in enumerate(loader.infos)
        ]
        assert tokens.tolist() == [int(np.minimum(r, seq_len).sum()) for r in raw]
    assert min(seen) == 16
    assert max(seen) >= 120


def test_a_share_of_one_in_a_thousand_is_honoured_by_the_blend():
    p = np.array([0.6, 0.399, 0.001])
    n = 100_000
    streams = blend_samples(p, np.zeros(3, dtype=np.int64), 0, n)
    assert abs((streams == 2).sum() / n - 0.001) <= 0.0005
    lengths = [np.full(n, 10), np.full(n, 100), np.full(n, 100)]
    streams = blend_tokens(p, np.zeros(3, dtype=np.int64), lengths, n)
    placed = np.bincount(streams, minlength=3) * np.array([10, 100, 100])
    assert abs(placed[2] / placed.sum() - 0.001) <= 0.0005
    # a moving target with the rare stream: still honoured step by step from its base
    base = np.zeros(3)
    counts = np.zeros(3, dtype=np.int64)
    for _ in range(1000):
        got = blend_samples(p, counts, 0, 100, base=base)
        counts += np.bincount(got, minlength=3)
        base += p * 100
    assert abs(counts[2] - 100) <= 1


def test_a_zero_base_is_the_plain_rule():
    p = np.array([0.5, 0.3, 0.2])
    zeros = np.zeros(3, dtype=np.int64)
    np.testing.assert_array_equal(
        blend_samples(p, zeros, 0, 64), blend_samples(p, zeros, 0, 64, base=np.zeros(3))
    )
    lengths = [np.arange(1, 65) % 7 + 1 for _ in range(3)]
    np.testing.assert_array_equal(
        blend_tokens(p, zeros, lengths, 64), blend_tokens(p, zeros, lengths, 64, base=np.zeros(3))
    )
    with pytest.raises(ValueError, match="base"):
        blend_samples(p, zeros, 0, 1, base=np.zeros(2))


def test_the_validate_table_shows_the_ramps(datasets, tmp_path):
    streams = [{"local": str(p), "proportion": r} for p, r in zip(datasets, RAMP, strict=True)]
    loader = {"streams": streams, "proportion_unit": "tokens", "max_seq_len": [[0, 16], [1, 128]]}
    cfg = {
        "max_duration": "10000tok",
        "schedule": [{"name": "ramp", "duration": "10000tok", "train_loader": loader}],
    }
    (tmp_path / "ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 8, "curriculum": cfg})
    )
    row = describe_schedule(load_config(tmp_path / "ds.json")).splitlines()[2]
    assert "short: 0.9→0.1, long: 0.1→0.9" in row
    assert "16→128" in row


def test_the_validate_table_shows_where_a_ramp_moves(datasets, tmp_path):
    """An inner point of a ramp carries its fraction (``@0.85``), as a seq-len warmup does: the
    shipped anneal experiment's ramp_code arm reads ``short: 0.9→0.9@0.85→0.1``."""
    ramps = ([[0, 0.9], [0.85, 0.9], [1, 0.1]], [[0, 0.1], [0.85, 0.1], [1, 0.9]])
    streams = [{"local": str(p), "proportion": r} for p, r in zip(datasets, ramps, strict=True)]
    loader = {"streams": streams, "proportion_unit": "tokens", "max_seq_len": 128}
    cfg = {
        "max_duration": "10000tok",
        "schedule": [{"name": "ramp", "duration": "10000tok", "train_loader": loader}],
    }
    (tmp_path / "ds.json").write_text(
        json.dumps({"train_micro_batch_size_per_gpu": 8, "curriculum": cfg})
    )
    row = describe_schedule(load_config(tmp_path / "ds.json")).splitlines()[2]
    assert "short: 0.9→0.9@0.85→0.1, long: 0.1→0.1@0.85→0.9" in row
