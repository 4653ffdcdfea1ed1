"""A three-phase ``curriculum`` section, its saved state and edits of it, for the resume rules."""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from typing import Any

import pytest

from curriculum_ds.checkpoint.rules import check_resume
from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.config import CurriculumConfig, parse_curriculum
from curriculum_ds.errors import ResumeError

SavedCurriculum = dict[str, Any]


def saved_curriculum(cfg: CurriculumConfig, progress: int | Fraction, **counters: int) -> Any:
    return CurriculumState.at(cfg, progress, **counters).to_dict()


def loader_state(phase_idx: int, num_samples: int) -> dict[str, Any]:
    """A well-formed saved loader state of a one-stream phase (``PhaseLoader.state_dict``)."""
    return {
        "phase_idx": phase_idx,
        "num_samples": num_samples,
        "stream_counts": [num_samples],
        "samplers": [{"seed": 0, "num_draws": num_samples}],
    }


def dynamic_state(probs: Any, window: int, phase_idx: int = 0) -> dict[str, Any]:
    """A well-formed saved re-weighting state (``BucketReweighter.state_dict``), empty window."""
    return {
        "phase_idx": phase_idx,
        "probs": probs,
        "window": {"capacity": window, "values": [], "num_non_finite": 0},
        "last_loss": [],
        "buckets": None,
        "edges": None,
        "num_recomputes": 0,
    }


def section() -> dict[str, Any]:
    """short 1000tok → mix 2000tok → cool 1000tok (4000tok)."""
    return {
        "max_duration": "4000tok",
        "seed": 1234,
        "schedule": [
            {
                "name": "short",
                "duration": "1000tok",
                "train_loader": {
                    "streams": [
                        {"local": "data/short", "proportion": 0.3},
                        {"local": "data/long", "proportion": 0.7},
                    ],
                    "max_seq_len": 256,
                },
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": "data/short", "proportion": 0.3},
                        {"local": "data/long", "proportion": 0.7},
                    ],
                    "max_seq_len": 1024,
                },
            },
            {
                "name": "cool",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": "data/long"}], "max_seq_len": 1024},
            },
        ],
    }


def save(cfg: CurriculumConfig, progress: int | Fraction, **extra: Any) -> SavedCurriculum:
    saved = saved_curriculum(
        cfg, progress, global_step=7, consumed_tokens=int(progress), consumed_samples=21
    )
    saved.update(extra)  # type: ignore[typeddict-item]
    # what comes back from a checkpoint went through a serialiser: keep it JSON-only
    return json.loads(json.dumps(saved))  # type: ignore[no-any-return,unused-ignore]


def edited(edit: Any) -> CurriculumConfig:
    raw = copy.deepcopy(section())
    edit(raw)
    return parse_curriculum(raw)


def set_durations(raw: dict[str, Any], *durations: int, keep: int | None = None) -> None:
    """Set the phases' durations (dropping phases after the first ``keep``) and max_duration."""
    if keep is not None:
        del raw["schedule"][keep:]
    for phase, d in zip(raw["schedule"], durations, strict=False):
        phase["duration"] = f"{d}tok"
    raw["max_duration"] = f"{sum(durations)}tok"


BASE = parse_curriculum(section())
MID_MIX = save(BASE, 1500)  # "short" complete, "mix" in progress with 500tok consumed


def refused(cfg: CurriculumConfig, saved: SavedCurriculum, expected: str) -> None:
    with pytest.raises(ResumeError, match=f"^{re.escape(expected)}$"):
        check_resume(cfg, saved)
