"""The experiments shipped in configs/experiments/ (issue 19 item 5) are fair comparisons: every
arm's curriculum validates, all arms train on the same tokens and are evaluated on the same
streams, with ≥ 3 seeds and a reference arm. (Their data is the demo's, not built here: the
data checks run when ``curriculum-ds ablate`` starts.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curriculum_ds.ablate.experiment import merge_patch
from curriculum_ds.config import parse_curriculum

EXPERIMENTS = Path(__file__).resolve().parents[3] / "configs" / "experiments"


@pytest.mark.parametrize("name", ["anneal", "phases"])
def test_shipped_experiment_arms_are_comparable(name):
    spec = json.loads((EXPERIMENTS / f"{name}.json").read_text())
    base = json.loads((EXPERIMENTS / spec["base"]).read_text())
    assert spec["reference"] in spec["arms"]
    assert len(spec["seeds"]) >= 3
    assert len(set(spec["seeds"])) == len(spec["seeds"])
    arms = {
        arm: parse_curriculum(merge_patch(base, p)["curriculum"]) for arm, p in spec["arms"].items()
    }
    durations = {str(c.max_duration) for c in arms.values()}
    assert len(durations) == 1
    evals = {
        json.dumps(c.eval.model_dump(mode="json", exclude={"interval"})) for c in arms.values()
    }
    assert len(evals) == 1
    streams = {s.local for c in arms.values() for p in c.schedule for s in p.train_loader.streams}
    assert all(local.startswith("demo_run/data/train/") for local in streams)
