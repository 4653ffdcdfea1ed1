"""Re-weighting reaches the loader in one place: ``PhaseLoader.apply`` (issue 30, item 3).

An in-process curriculum (conftest's engine) over two real streams, with each unit: every phase
start and every recompute hands the loader one ``MixtureUpdate`` through ``apply``, which is the
only caller of the loader's setters; the history rows are those updates' records, and the
held-out losses reach the re-weighting (``observe_eval``).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs, write_ds_config
from tiny_models import ByteLM

import curriculum_ds
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.plugin.engine import load_run_config

STEPS, RECOMPUTE = 6, 2


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("one_place")
    return (
        make_dataset(root, "a", ragged_docs(90, seed=1, min_len=8, max_len=30)),
        make_dataset(root, "b", ragged_docs(90, seed=2, min_len=8, max_len=30)),
    )


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Every ``apply`` with its update, and every setter call with the function that made it."""
    seen: list[tuple[str, Any]] = []
    apply, set_buckets, set_proportions = (
        PhaseLoader.apply, PhaseLoader.set_buckets, PhaseLoader.set_proportions
    )  # fmt: skip

    def spy_apply(self: PhaseLoader, update: Any) -> None:
        seen.append(("apply", update))
        apply(self, update)

    def spy(name: str, setter: Any) -> Any:
        def wrapped(self: PhaseLoader, value: Any) -> None:
            seen.append((name, inspect.stack()[1].function))
            setter(self, value)

        return wrapped

    monkeypatch.setattr(PhaseLoader, "apply", spy_apply)
    monkeypatch.setattr(PhaseLoader, "set_buckets", spy("set_buckets", set_buckets))
    monkeypatch.setattr(PhaseLoader, "set_proportions", spy("set_proportions", set_proportions))
    return seen


def _curriculum(streams: tuple[Path, Path], unit: str, fake_engine: Any) -> Any:
    locals_ = [{"local": str(p), "name": p.name, "proportion": 0.5} for p in streams]
    section = {
        "max_duration": "100000tok",
        "seed": 3,
        "schedule": [
            {"name": "only", "duration": "100000tok",
             "train_loader": {"streams": locals_, "max_seq_len": 32}},
        ],
        "dynamic": {
            "enabled": True, "unit": unit, "num_buckets": 2, "window": 64, "floor": 0.1,
            "recompute_every_n_steps": RECOMPUTE,
        },
        "eval": {"streams": [{"local": str(p), "name": p.name} for p in streams], "max_samples": 4},
    }  # fmt: skip
    cfg = write_ds_config(streams[0].parent / f"ds_{unit}.json", section)
    engine = type(fake_engine)(ByteLM(), gas=2)
    return curriculum_ds.attach(engine, load_run_config(cfg, check_data=False), check_data=False)


@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_every_update_reaches_the_loader_through_apply(streams, unit, fake_engine, calls):
    curriculum = _curriculum(streams, unit, fake_engine)
    evals: list[tuple[int, dict[str, float]]] = []
    observe_eval = curriculum.dynamic.observe_eval
    curriculum.dynamic.observe_eval = lambda step, losses: (
        evals.append((step, dict(losses))),
        observe_eval(step, losses),
    )
    history = []
    for step in curriculum:
        for mb in step.micro_batches:
            step.backward(curriculum.engine(mb.input_ids), mb)
        record = step.finish()
        if record.history is not None:
            history.append(record.history)
        if curriculum.global_step == STEPS:
            row = curriculum.evaluate()
            break
    bucket_probs = curriculum.loader.bucket_probs.copy()
    curriculum.close()

    applied = [update for kind, update in calls if kind == "apply"]
    setters = [(kind, caller) for kind, caller in calls if kind != "apply"]
    # one update at the phase start, one per recompute; the setters only ever called by apply
    assert len(applied) == 1 + STEPS // RECOMPUTE
    assert applied[0].record is None
    assert [u.record for u in applied[1:]] == [
        {k: v for k, v in h.items() if k not in ("step", "phase", "phase_name")} for h in history
    ]
    assert setters
    assert all(caller == "apply" for _, caller in setters)
    if unit == "buckets":
        assert {kind for kind, _ in setters} == {"set_buckets"}
        assert all(u.bucket_probs is not None for u in applied)
        np.testing.assert_array_equal(bucket_probs, history[-1]["weights"])
    else:
        assert {kind for kind, _ in setters} == {"set_proportions"}
        np.testing.assert_array_equal(applied[-1].proportions, history[-1]["weights"])
    # the held-out losses reached the re-weighting, by eval stream name
    assert evals == [(STEPS, {n: s["loss"] for n, s in row["streams"].items()})]


def test_the_plugin_calls_no_loader_setter():
    """Only ``PhaseLoader.apply`` calls ``set_buckets`` / ``set_proportions`` (source check)."""
    plugin = Path(curriculum_ds.__file__).parent / "plugin"
    callers = [
        f"{path.name}:{i}"
        for path in sorted(plugin.glob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if ".set_buckets(" in line or ".set_proportions(" in line
    ]
    assert callers == []
