"""The pieces of ``curriculum_ds.hf`` that need no engine: which ``checkpoint-N`` a resume reads
(the newest holding the curriculum state; a folder without it is refused in one line), the state
file's round trip, the ``curriculum/...`` log values (the DeepSpeed monitors' tags with the
metrics row's values), and that only ``curriculum_ds.hf`` imports the HF Trainer.

From issue 21.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import curriculum_ds
from curriculum_ds.errors import ResumeError
from curriculum_ds.hf.callbacks import curriculum_logs
from curriculum_ds.hf.checkpoint import STATE_FILE, read_state, resume_folder, write_state


def test_resume_true_takes_the_newest_checkpoint_holding_the_curriculum_state(tmp_path):
    for step in (5, 10, 15):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (5, 10):  # checkpoint-15: killed between HF's save and ours
        write_state(tmp_path / f"checkpoint-{step}", {"global_step": step})
    assert resume_folder(tmp_path, True) == tmp_path / "checkpoint-10"
    assert resume_folder(tmp_path, str(tmp_path / "checkpoint-5")) == tmp_path / "checkpoint-5"
    with pytest.raises(ResumeError, match=f"holds no curriculum state \\({STATE_FILE}\\)") as exc:
        resume_folder(tmp_path, tmp_path / "checkpoint-15")
    assert "\n" not in str(exc.value)
    with pytest.raises(ResumeError, match="no checkpoint-N folder with curriculum state"):
        resume_folder(tmp_path / "checkpoint-15", True)


def test_the_state_file_round_trips_numpy_arrays_atomically(tmp_path):
    state = {"global_step": 3, "dynamic": {"window": np.arange(4.0)}}
    write_state(tmp_path, state)
    back = read_state(tmp_path)
    assert back["global_step"] == 3
    np.testing.assert_array_equal(back["dynamic"]["window"], np.arange(4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE]


def test_curriculum_logs_are_the_monitor_tags_of_the_rows():
    record = {
        "step": 7, "loss": 2.5, "lr": 1e-3, "tokens": 900, "phase": 1,
        "streams": {"web": {"tokens": 40, "loss": 2.0}, "code": {"tokens": 0, "loss": None}},
    }  # fmt: skip
    eval_row = {"step": 7, "loss": 3.0, "streams": {"val": {"loss": 3.0, "tokens": 10}}}
    logs = curriculum_logs(
        record, reweighting={"step": 7, "weights": [0.25, 0.75]}, eval_row=eval_row
    )  # type: ignore[arg-type]
    assert logs == {
        "curriculum/loss": 2.5, "curriculum/lr": 1e-3, "curriculum/tokens": 900.0,
        "curriculum/phase": 1.0, "curriculum/streams/web/loss": 2.0,
        "curriculum/streams/web/tokens": 40.0, "curriculum/streams/code/tokens": 0.0,
        "curriculum/bucket_probs/0": 0.25, "curriculum/bucket_probs/1": 0.75,
        "curriculum/eval/loss": 3.0, "curriculum/eval/val/loss": 3.0,
    }  # fmt: skip


def test_only_curriculum_ds_hf_imports_the_hf_trainer():
    """``import curriculum_ds`` stays cheap: no module outside ``hf/`` imports ``transformers``'
    Trainer (or its callbacks), and nothing outside ``hf/`` imports ``curriculum_ds.hf``."""
    package = Path(curriculum_ds.__file__).parent
    offenders = []
    for path in package.rglob("*.py"):
        if "hf" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n.startswith(("transformers.trainer", "curriculum_ds.hf")) for n in names):
                offenders.append(str(path.relative_to(package)))
            if any(n in ("transformers.Trainer", "transformers.TrainerCallback") for n in names):
                offenders.append(str(path.relative_to(package)))
    assert offenders == []


def test_a_streams_reweighting_is_logged_as_stream_weights_by_name():
    reweighting = {
        "step": 7, "phase": 0, "unit": "streams", "signal": "loss", "streams": ["web", "code"],
        "weights": [0.4, 0.6], "scores": None, "kept_previous": True,
    }  # fmt: skip
    logs = curriculum_logs(reweighting=reweighting)  # type: ignore[arg-type]
    assert logs == {"curriculum/stream_weights/web": 0.4, "curriculum/stream_weights/code": 0.6}
