"""curriculum_ds.records.monitors: the events of a step, a recompute and an eval row, written
through DeepSpeed's real ``MonitorMaster`` (TensorBoard, CSV, offline W&B) and read back.

The only stand-in: ``deepspeed.comm.get_rank`` answers 0 (the monitors ask it; no process group
runs in a unit test). W&B runs offline under ``tmp_path`` (no network).
"""

from __future__ import annotations

import pytest
from monitor_readers import assert_monitors_hold
from stream_history import WEIGHTS, history_row

from curriculum_ds.records.monitors import (
    CurriculumMonitor,
    bucket_events,
    eval_events,
    step_events,
)

RECORDS = [
    {
        "step": 1,
        "phase": 0,
        "tokens": 120,
        "loss": 5.123456789,
        "lr": 1e-4,
        "streams": {
            "web": {"samples": 3, "tokens": 80, "loss": 5.25},
            "code": {"samples": 1, "tokens": 40, "loss": 4.87},
        },
    },
    {
        "step": 2,
        "phase": 1,
        "tokens": 250,
        "loss": None,  # a skipped step: no loss event
        "lr": 2e-4,
        "streams": {
            "web": {"samples": 4, "tokens": 130, "loss": None},
            "code": {"samples": 0, "tokens": 0, "loss": None},
        },
    },
]
HISTORY = {"step": 2, "phase": 1, "weights": [0.125, 0.375, 0.5]}
EVAL = {
    "step": 2,
    "tokens": 250,
    "phase": 1,
    "loss": 3.5,
    "streams": {"web": {"loss": 3.25, "tokens": 64}, "code": {"loss": 3.75, "tokens": 64}},
}
EXPECTED = {
    "curriculum/loss": {1: 5.123456789},
    "curriculum/lr": {1: 1e-4, 2: 2e-4},
    "curriculum/tokens": {1: 120.0, 2: 250.0},
    "curriculum/phase": {1: 0.0, 2: 1.0},
    "curriculum/streams/web/loss": {1: 5.25},
    "curriculum/streams/web/tokens": {1: 80.0, 2: 130.0},
    "curriculum/streams/code/loss": {1: 4.87},
    "curriculum/streams/code/tokens": {1: 40.0, 2: 0.0},
    "curriculum/bucket_probs/0": {2: 0.125},
    "curriculum/bucket_probs/1": {2: 0.375},
    "curriculum/bucket_probs/2": {2: 0.5},
    "curriculum/eval/loss": {2: 3.5},
    "curriculum/eval/web/loss": {2: 3.25},
    "curriculum/eval/code/loss": {2: 3.75},
}


def _series(events):
    out = {}
    for tag, value, step in events:
        out.setdefault(tag, {})[step] = value
    return out


def test_events_of_steps_recomputes_and_evals_have_the_documented_tags():
    events = [e for r in RECORDS for e in step_events(r)] + bucket_events(HISTORY)
    events += eval_events(EVAL)
    assert _series(events) == EXPECTED
    assert eval_events({"step": 3, "loss": None, "streams": {"a": {"loss": None}}}) == []


def test_a_rows_data_wait_is_a_monitor_event():
    """Issue 23 item 2: ``curriculum/data_wait_s`` at the row's step."""
    events = step_events({**RECORDS[0], "data_wait_s": 0.0125, "prefetched": 2})
    assert ("curriculum/data_wait_s", 0.0125, 1) in events
    assert not [e for e in events if "prefetched" in e[0]]


def test_no_writer_without_an_enabled_monitor():
    class Engine:
        monitor = type("M", (), {"enabled": False})()

    assert CurriculumMonitor.for_engine(Engine()) is None
    assert CurriculumMonitor.for_engine(object()) is None


def test_tensorboard_csv_and_offline_wandb_hold_the_values(tmp_path, monkeypatch):
    import deepspeed.comm
    from deepspeed.monitor.config import get_monitor_config
    from deepspeed.monitor.monitor import MonitorMaster

    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda *a, **k: 0)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = get_monitor_config(
        {
            "tensorboard": {"enabled": True, "output_path": str(tmp_path / "tb"), "job_name": "j"},
            "csv_monitor": {"enabled": True, "output_path": str(tmp_path / "csv"), "job_name": "j"},
            "wandb": {"enabled": True, "project": "curriculum-test"},
        }
    )
    master = MonitorMaster(config)
    engine = type("Engine", (), {"monitor": master})()
    monitor = CurriculumMonitor.for_engine(engine)
    assert monitor is not None
    try:
        for record in RECORDS:
            # what DeepSpeed's engine.step writes on its own, x = global samples (> the step):
            # W&B must not drop the curriculum rows logged after it
            master.write_events([("Train/Samples/lr", record["lr"], 8 * record["step"])])
            monitor.write_step(record)
        monitor.write_buckets(HISTORY)
        monitor.write_eval(EVAL)
    finally:
        import wandb

        wandb.finish()

    tb = assert_monitors_hold(
        EXPECTED,
        tensorboard=tmp_path / "tb" / "j",
        csv_dir=tmp_path / "csv" / "j",
        wandb_dir=tmp_path,
    )
    assert tb["Train/Samples/lr"] == pytest.approx({8: 1e-4, 16: 2e-4})


def test_a_streams_recompute_gives_stream_weights_by_name():
    """``dynamic.unit: "streams"``: ``curriculum/stream_weights/<name>`` per stream of the row's
    phase, kept weights included; no ``bucket_probs``."""
    events = [e for step in WEIGHTS for e in bucket_events(history_row(step))]  # type: ignore[arg-type]
    assert _series(events) == {
        "curriculum/stream_weights/docstrings": {10: 0.21, 20: 0.3},
        "curriculum/stream_weights/code": {10: 0.24, 20: 0.3, 30: 0.5, 40: 0.35},
        "curriculum/stream_weights/noise": {10: 0.55, 20: 0.4},
        "curriculum/stream_weights/prose": {30: 0.5, 40: 0.65},
    }
    # an old row without unit, and a buckets row, keep their bucket tags
    assert bucket_events({**HISTORY, "unit": "buckets"}) == bucket_events(HISTORY)  # type: ignore[typeddict-item]


def test_a_doremi_recompute_also_gives_its_average_and_loss_weights_by_name():
    row = {"step": 12, "phase": 0, "phase_name": "mix", "unit": "streams", "method": "doremi",
           "streams": ["code", "noise"], "weights": [0.7, 0.3], "average_weights": [0.6, 0.4],
           "loss_weights": [0.8, 0.2], "num_non_finite": 0, "scores": [1.0, 0.0]}  # fmt: skip
    assert _series(bucket_events(row)) == {  # type: ignore[arg-type]
        "curriculum/stream_weights/code": {12: 0.7},
        "curriculum/stream_weights/noise": {12: 0.3},
        "curriculum/average_weights/code": {12: 0.6},
        "curriculum/average_weights/noise": {12: 0.4},
        "curriculum/loss_weights/code": {12: 0.8},
        "curriculum/loss_weights/noise": {12: 0.2},
    }
