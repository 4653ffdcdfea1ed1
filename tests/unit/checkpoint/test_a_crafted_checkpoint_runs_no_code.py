"""Reading a checkpoint never runs code (issue 31, item 1), in one process.

The break-in report's reproduction (F1): a tag whose model states file carries a ``__reduce__``
payload (``os.system("touch MARKER")``), and a ZeRO-2 tag with whole model states whose optimizer
states file carries it (tests/crafted_checkpoints.py). ``validate --resume-from``, ``export``
and the reference loop's ``--resume auto`` (its ``main``: the refusal comes before DeepSpeed
starts) and ``report`` refuse both in one line naming the file and the global. The marker
never appears. The safe loader
itself reads the numpy arrays a curriculum state holds and DeepSpeed's optimizer types, and
tells a file that could run code from one that is merely unreadable. (The plugin's
``load_checkpoint``: tests/unit/plugin/test_load_checkpoint_runs_no_code.py; the HF Trainer's
resume: tests/unit/hf/test_trainer_refuses_bad_inputs.py; real ZeRO-2 tags through the launched
loop: tests/integration/test_checkpoint_failures_are_one_line.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from crafted_checkpoints import MODEL_STATES, OPTIM_STATES, CodePayload, crafted_tag
from helpers import fixed_docs, make_dataset, one_error_line, write_ds_config

from curriculum_ds import train
from curriculum_ds.checkpoint import safe_load
from curriculum_ds.cli import main as cli_main
from curriculum_ds.errors import ResumeError, UnsafeCheckpointError

PAYLOADS = {"model_states": MODEL_STATES, "optimizer_states": OPTIM_STATES}
"""Where the payload is -> the file a refusal names."""


@pytest.fixture(scope="module")
def ds_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("crafted")
    data = make_dataset(root, "d", fixed_docs(16, 16), max_seq_len=16)
    curriculum = {
        "max_duration": "256tok",
        "schedule": [
            {
                "name": "a",
                "duration": "256tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 16},
            }
        ],
    }
    return write_ds_config(root / "ds.json", curriculum, zero_optimization={"stage": 2})


def refusal(line: str, tag: Path, payload_in: str) -> None:
    """``line`` is the refusal of ``tag``'s ``payload_in`` file, naming the global."""
    assert f"{tag / PAYLOADS[payload_in]}: refused: it needs the global posix.system," in line
    assert "unpickling it could run code (docs/security.md)" in line


@pytest.mark.parametrize("payload_in", PAYLOADS)
def test_validate_resume_from_refuses_it(tmp_path, ds_config, payload_in):
    marker = tmp_path / "MARKER"
    tag = crafted_tag(tmp_path / "checkpoints", marker, payload_in=payload_in)
    result = CliRunner().invoke(
        cli_main, ["validate", str(ds_config), "--resume-from", str(tmp_path / "checkpoints")]
    )
    refusal(one_error_line(result), tag, payload_in)
    assert not marker.exists()


@pytest.mark.parametrize("payload_in", PAYLOADS)
def test_export_refuses_it_and_writes_nothing(tmp_path, payload_in):
    marker = tmp_path / "MARKER"
    tag = crafted_tag(tmp_path / "checkpoints", marker, payload_in=payload_in)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli_main, ["export", str(tmp_path / "checkpoints"), str(out)])
    refusal(one_error_line(result), tag, payload_in)
    assert not marker.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]  # no OUT, no temp


@pytest.mark.parametrize("payload_in", PAYLOADS)
def test_the_reference_loop_refuses_it_before_deepspeed_starts(
    tmp_path, ds_config, payload_in, capsys, monkeypatch
):
    monkeypatch.setenv("LOCAL_RANK", "0")  # main sets it: undone after the test
    marker = tmp_path / "MARKER"
    run_dir = tmp_path / "run"
    tag = crafted_tag(run_dir / "checkpoints", marker, payload_in=payload_in)
    argv = ["--deepspeed_config", str(ds_config), "--run-dir", str(run_dir), "--no-progress"]
    assert train.main([*argv, "--resume", "auto"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("curriculum_ds: error: ")
    refusal(err, tag, payload_in)
    assert not marker.exists()


@pytest.mark.parametrize("payload_in", PAYLOADS)
def test_report_refuses_it(tmp_path, payload_in):
    """``report`` looks at the tag's curriculum state and checks every other file of it as a
    resume would: a tag that carries code is refused by whatever looks at it first."""
    marker = tmp_path / "MARKER"
    run_dir = tmp_path / "run"
    tag = crafted_tag(run_dir / "checkpoints", marker, payload_in=payload_in)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "tokens": 32, "phase": 0}) + "\n")
    result = CliRunner().invoke(cli_main, ["report", str(run_dir)])
    refusal(one_error_line(result), tag, payload_in)
    assert not marker.exists()
    assert not (run_dir / "report.png").exists()  # refused before anything is written


def test_the_safe_loader_reads_a_curriculum_state_and_deepspeeds_optimizer_types(tmp_path):
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    window = {
        "losses": np.linspace(0.0, 1.0, 5),
        "buckets": np.arange(5, dtype=np.int64),
        "counts": np.arange(3, dtype=np.uint32),
        "seen": np.array([True, False]),
        "weights": np.ones(2, dtype=np.float32),
    }
    path = tmp_path / "state.pt"
    torch.save({"curriculum": {"dynamic": window, "global_step": 3}}, path)
    back = safe_load.load(path)["curriculum"]
    assert back["global_step"] == 3
    for key, value in window.items():
        np.testing.assert_array_equal(back["dynamic"][key], value)
        assert back["dynamic"][key].dtype == value.dtype
    optim = {
        "loss_scaler": LossScaler(1.0),
        "zero_stage": ZeroStageEnum.gradients,
        "param_slice_mappings": [{"w": fragment_address(numel=4, start=0)}],
    }
    torch.save(optim, path)
    back = safe_load.load(path)
    assert back["loss_scaler"].cur_scale == 1.0
    assert back["zero_stage"] is ZeroStageEnum.gradients
    assert back["param_slice_mappings"][0]["w"] == fragment_address(numel=4, start=0)


@pytest.mark.parametrize(
    ("content", "refused_global"),
    [
        ({"x": CodePayload(Path("MARKER"))}, "posix.system"),
        ({"x": np.array([None, 1], dtype=object)}, "numpy.dtypes.ObjectDType"),
        ({"x": torch.nn.Linear(1, 1)}, "torch.nn.modules.linear.Linear"),
    ],
    ids=["os.system", "object array", "a whole module"],
)
def test_anything_else_a_pickle_names_is_refused_in_one_line(
    tmp_path, monkeypatch, content, refused_global
):
    monkeypatch.chdir(tmp_path)  # the payload's MARKER would land here
    path = tmp_path / "f.pt"
    torch.save(content, path)
    with pytest.raises(UnsafeCheckpointError) as err:
        safe_load.load(path)
    assert str(err.value) == (
        f"{path}: refused: it needs the global {refused_global}, which no checkpoint of "
        "curriculum_ds or DeepSpeed holds; unpickling it could run code (docs/security.md)"
    )
    assert not (tmp_path / "MARKER").exists()


def test_a_file_that_is_not_a_checkpoint_is_unreadable_not_unsafe(tmp_path):
    path = tmp_path / "f.pt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ResumeError) as err:
        safe_load.load(path)
    assert not isinstance(err.value, UnsafeCheckpointError)
    assert str(err.value).startswith(f"{path}: cannot be read (not a checkpoint file ")
    assert "\n" not in str(err.value)
