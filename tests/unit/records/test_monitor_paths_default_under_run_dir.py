"""A monitor without an ``output_path`` writes under ``--run-dir/monitors/`` (issue 24, item 5).

The trial user had to edit ``output_path`` in the ds_config for every run (DeepSpeed's default
is the working directory). The reference loop now defaults ``tensorboard`` and ``csv_monitor`` to
``RUN_DIR/monitors/{tensorboard,csv}/<job_name>`` and W&B's ``WANDB_DIR`` to
``RUN_DIR/monitors``; an explicit ``output_path`` (or ``WANDB_DIR``) is kept.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from helpers import make_dataset, ragged_docs, two_phase_curriculum, write_ds_config

from curriculum_ds.records.monitors import MONITORS_DIR, default_monitor_paths

MONITORS = {
    "tensorboard": {"enabled": True, "job_name": "j"},
    "csv_monitor": {"enabled": True, "output_path": "", "job_name": "j"},
    "wandb": {"enabled": True, "project": "p"},
}


def test_absent_output_paths_default_under_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env: dict[str, str] = {}
    ds = {"train_micro_batch_size_per_gpu": 2, **MONITORS}
    out = default_monitor_paths(ds, run_dir, env)
    assert out["tensorboard"] == {
        "enabled": True,
        "job_name": "j",
        "output_path": str(run_dir / "monitors" / "tensorboard"),
    }
    assert out["csv_monitor"]["output_path"] == str(run_dir / "monitors" / "csv")
    assert out["wandb"] == {"enabled": True, "project": "p"}  # DeepSpeed's wandb has no path
    assert env == {"WANDB_DIR": str(run_dir / MONITORS_DIR)}
    assert (run_dir / MONITORS_DIR).is_dir()
    assert ds["tensorboard"] == MONITORS["tensorboard"]  # the input is not modified
    assert "output_path" not in ds["tensorboard"]


def test_explicit_paths_and_disabled_monitors_are_kept(tmp_path: Path) -> None:
    env = {"WANDB_DIR": "/elsewhere"}
    ds = {
        "tensorboard": {"enabled": True, "output_path": "mine/tb"},
        "csv_monitor": {"enabled": False},
        "wandb": {"enabled": True},
    }
    assert default_monitor_paths(ds, tmp_path / "run", env) == ds
    assert env == {"WANDB_DIR": "/elsewhere"}
    assert default_monitor_paths({"wandb": {"enabled": False}}, tmp_path / "run", {}) == {
        "wandb": {"enabled": False}
    }
    assert not (tmp_path / "run").exists()


def test_deepspeeds_writers_write_under_the_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import deepspeed.comm
    from deepspeed.monitor.config import get_monitor_config
    from deepspeed.monitor.monitor import MonitorMaster

    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda *a, **k: 0)
    run_dir = tmp_path / "run"
    ds = default_monitor_paths(
        {k: MONITORS[k] for k in ("tensorboard", "csv_monitor")}, run_dir, {}
    )
    master = MonitorMaster(get_monitor_config(ds))
    master.write_events([("curriculum/loss", 1.5, 1)])
    master.tb_monitor.summary_writer.flush()
    assert list((run_dir / "monitors" / "tensorboard" / "j").glob("events.out.tfevents.*"))
    assert (run_dir / "monitors" / "csv" / "j" / "curriculum_loss.csv").is_file()


def test_the_reference_loop_hands_deepspeed_the_defaulted_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import curriculum_ds
    from curriculum_ds.config import load_config
    from curriculum_ds.train.loop import train

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def initialize(*, model: Any, config: Any) -> Any:
        seen.update(config.ds_config)
        raise Stop

    monkeypatch.setattr(curriculum_ds, "initialize", initialize)
    cfg = write_ds_config(
        tmp_path / "ds.json",
        two_phase_curriculum(
            make_dataset(tmp_path, "short", ragged_docs(40, seed=1)),
            make_dataset(tmp_path, "long", ragged_docs(40, seed=2)),
        ),
        csv_monitor={"enabled": True, "job_name": "j"},
        tensorboard={"enabled": True, "output_path": str(tmp_path / "mine"), "job_name": "j"},
    )
    run_dir = tmp_path / "run"
    args = argparse.Namespace(model=None, model_factory=None, run_dir=run_dir)
    with pytest.raises(Stop):
        train(args, load_config(cfg, check_data=False), None)
    assert seen["csv_monitor"]["output_path"] == str(run_dir / "monitors" / "csv")
    assert seen["tensorboard"]["output_path"] == str(tmp_path / "mine")
