"""Case C01 (../shared/cases/README.md), checkpoint part: resume continues, no global RNG touched.

* Reading a real checkpoint's curriculum state and restoring a :class:`PhaseLoader` and the
  dynamic re-weighting from it leaves ``numpy``'s, ``random``'s and ``torch``'s global RNGs
  exactly where they were; the checkpoint holds no RNG state.
* With dynamic re-weighting on, a 2-rank run killed after a checkpoint and resumed restores the
  bucket weights and the window contents of the checkpoint: the state it saves again at the next
  checkpoint, its weight history and its final per-rank state equal the uninterrupted run's.

The real runs are shared with test_kill_and_resume_reproduce_the_run.py (:func:`resume_scenario`).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from helpers import history
from test_kill_and_resume_reproduce_the_run import resume_scenario

from curriculum_ds.checkpoint.files import read_curriculum_state
from curriculum_ds.config import load_config
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import BucketReweighter
from curriculum_ds.dynamic.state import parse_dynamic_state

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return resume_scenario(tmp_path_factory)


def _seed_all() -> None:
    np.random.seed(0)  # noqa: NPY002 - the global RNG is exactly what this case checks
    random.seed(0)
    torch.manual_seed(0)


def _draw_all() -> tuple[float, float, float]:
    return (np.random.rand(), random.random(), float(torch.rand(1)))  # noqa: NPY002


def _restore(cfg_path, ckpt) -> tuple[PhaseLoader, BucketReweighter, dict[str, Any]]:
    """What the trainer does with a checkpoint taken inside a phase, without DeepSpeed."""
    cfg = load_config(cfg_path).curriculum
    _, saved = read_curriculum_state(ckpt)
    assert saved is not None
    phase_idx = saved["loader"]["phase_idx"]
    loader = PhaseLoader(
        cfg.schedule[phase_idx], phase_idx, seed=cfg.seed, num_buckets=cfg.dynamic.num_buckets
    )
    dynamic = BucketReweighter(cfg.dynamic)
    loader.apply(dynamic.start_phase(loader.view(), parse_dynamic_state(saved["dynamic"])))
    loader.load_state_dict(saved["loader"])
    return loader, dynamic, saved


def _assert_same_state(got: Any, expected: Any, where: str = "state") -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict), where
        assert got.keys() == expected.keys(), where
        for key in expected:
            _assert_same_state(got[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected), where
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            _assert_same_state(g, e, f"{where}[{i}]")
    elif isinstance(expected, np.ndarray | torch.Tensor) or isinstance(
        got, np.ndarray | torch.Tensor
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected), err_msg=where)
    else:
        assert got == expected or (got != got and expected != expected), where  # NaN == NaN


def test_loading_a_checkpoint_leaves_global_rngs_alone(scenario):
    _seed_all()
    expected = _draw_all()
    assert expected[0] == 0.5488135039273248

    ckpt = scenario["A"] / "checkpoints" / "global_step3"
    _seed_all()
    loader, dynamic, _ = _restore(scenario["cfg"], ckpt)
    loader.next_global_batch(8, dynamic.probs)  # drawing after the restore touches none either
    assert _draw_all() == expected

    # and seeding after loading gives the documented first draws
    _restore(scenario["cfg"], ckpt)
    _seed_all()
    assert _draw_all() == expected


def test_checkpoint_holds_no_global_rng_state(scenario):
    ckpt = scenario["A"] / "checkpoints" / "global_step3"
    _, saved = read_curriculum_state(ckpt)

    def keys(obj: Any, prefix: str = "") -> list[str]:
        if isinstance(obj, dict):
            return [
                k for key, v in obj.items() for k in [f"{prefix}{key}", *keys(v, f"{prefix}{key}.")]
            ]
        return []

    def rng_like(name: str) -> bool:
        name = name.lower()
        return "rng" in name or "random_state" in name or "generator" in name

    names = keys(saved)
    assert not [k for k in names if rng_like(k)], names
    raw = torch.load(
        next(ckpt.glob("*mp_rank_00_model_states.pt")), map_location="cpu", weights_only=False
    )
    assert not [k for k in keys(raw) if rng_like(k)]


def test_restore_reproduces_the_saved_weights_and_window(scenario):
    ckpt = scenario["A"] / "checkpoints" / "global_step3"  # between two recomputes (every 2 steps)
    _, dynamic, saved = _restore(scenario["cfg"], ckpt)
    np.testing.assert_array_equal(dynamic.probs, np.asarray(saved["dynamic"]["probs"]))
    np.testing.assert_array_equal(
        dynamic.window.values(), np.asarray(saved["dynamic"]["window"]["values"])
    )
    _assert_same_state(dynamic.state().to_dict(), saved["dynamic"], "dynamic")
    assert not np.allclose(dynamic.probs, 1 / len(dynamic.probs))  # re-weighting was active


def test_resumed_run_restores_weights_and_window(scenario):
    # B's step-6 checkpoint was written by the run resumed from step 3: its re-weighting state
    # (weights, window, latest losses, buckets, sampler counters) equals the uninterrupted run's
    _, a6 = read_curriculum_state(scenario["A"] / "checkpoints" / "global_step6")
    _, b6 = read_curriculum_state(scenario["B"] / "checkpoints" / "global_step6")
    _assert_same_state(b6["dynamic"], a6["dynamic"], "dynamic")
    _assert_same_state(b6["loader"], a6["loader"], "loader")
    # the weight history and the final per-rank state are the uninterrupted run's
    keys = ("step", "phase", "weights", "window_size")
    assert [{k: r.get(k) for k in keys} for r in history(scenario["B"])] == [
        {k: r.get(k) for k in keys} for r in history(scenario["A"])
    ]
    for rank in (0, 1):
        a = torch.load(scenario["A"] / "dump" / f"rank{rank}_dynamic.pt", weights_only=False)
        b = torch.load(scenario["B"] / "dump" / f"rank{rank}_dynamic.pt", weights_only=False)
        _assert_same_state(b, a, f"rank{rank}")
