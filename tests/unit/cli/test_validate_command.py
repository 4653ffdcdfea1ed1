"""`curriculum-ds validate ds.json [--resume-from CKPT]` (issue 4 items 1 and 6), in-process.

A bad config: one line naming the JSON path (and the phase), exit 1, no traceback. A good one:
the schedule table (phases, durations, datamixes, estimated steps), exit 0. With
``--resume-from``: the verdict of the resume rules on a checkpoint's curriculum state, without
training (the checkpoints here hold only what ``read_curriculum_state`` reads: the
``curriculum`` client state in ``mp_rank_00_model_states.pt``;
test_kill_and_resume_reproduce_the_run.py checks the same verdicts on real DeepSpeed
checkpoints).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from helpers import make_dataset, one_error_line, ragged_docs, write_ds_config

from curriculum_ds.checkpoint.state import CurriculumState
from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import parse_curriculum


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("validate")
    return {
        "short": make_dataset(root, "short", ragged_docs(40, seed=1, min_len=10, max_len=40)),
        "long": make_dataset(root, "long", ragged_docs(40, seed=2, min_len=40, max_len=90)),
    }


def _curriculum(data: dict[str, Path]) -> dict[str, Any]:
    return {
        "max_duration": "3000tok",
        "seed": 3,
        "schedule": [
            {
                "name": "short",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(data["short"])}], "max_seq_len": 64},
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(data["short"]), "proportion": 0.3},
                        {"local": str(data["long"]), "proportion": 0.7},
                    ],
                    "max_seq_len": 96,
                },
            },
        ],
    }


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli_main, ["validate", *args])


def test_validate_good_config_prints_the_schedule(data, tmp_path):
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(data))
    result = _invoke(str(cfg), "--num-gpus", "2")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:4] == ["phase", "name", "duration", "ends"]
    rows = [line.split() for line in lines[2:4]]
    assert rows[0][:4] == ["0", "short", "1000tok", "1000tok"]
    assert rows[1][:4] == ["1", "mix", "2000tok", "3000tok"]
    assert "short: 0.3, long: 0.7" in lines[3]
    assert rows[0][-1].isdigit()
    assert int(rows[0][-1]) > 0
    assert "max_duration 3000tok" in lines[-1]
    assert "global batch 8" in lines[-1]


def _edit(path: list[Any], value: Any):
    def apply(c: dict[str, Any]) -> None:
        target = c
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


BAD = [
    ("unknown key", _edit(["max_tokens"], 5), "curriculum.max_tokens"),
    (
        "unit mismatch",
        _edit(["schedule", 1, "duration"], "1ep"),
        'curriculum.schedule[1] ("mix").duration',
    ),
    ("sum mismatch", _edit(["schedule", 1, "duration"], "1500tok"), "curriculum.max_duration"),
    (
        "bad duration",
        _edit(["schedule", 0, "duration"], "-5tok"),
        'curriculum.schedule[0] ("short").duration',
    ),
    ("duplicate name", _edit(["schedule", 1, "name"], "short"), "curriculum.schedule[1]"),
    (
        "missing stream",
        _edit(["schedule", 1, "train_loader", "streams", 1, "local"], "/nonexistent/x"),
        'curriculum.schedule[1] ("mix").train_loader.streams[1]',
    ),
    (
        "zero proportion",
        _edit(["schedule", 1, "train_loader", "streams", 0, "proportion"], 0),
        'curriculum.schedule[1] ("mix").train_loader.streams[0].proportion',
    ),
    (
        "floor too big",
        _edit(["dynamic"], {"enabled": True, "num_buckets": 4, "floor": 0.3}),
        "curriculum.dynamic.floor",
    ),
    (
        "zero temperature",
        _edit(["dynamic"], {"enabled": True, "temperature": 0}),
        "curriculum.dynamic.temperature",
    ),
    (
        "overflowing proportion",
        _edit(["schedule", 1, "train_loader", "streams", 1, "proportion"], 1e308),
        'curriculum.schedule[1] ("mix").train_loader.streams[1].proportion: must be <= 1e+15',
    ),
    (
        "absurd max_seq_len",
        _edit(["schedule", 1, "train_loader", "max_seq_len"], 10**12),
        'curriculum.schedule[1] ("mix").train_loader.max_seq_len: must be <= 1048576',
    ),
]


@pytest.mark.parametrize(("what", "edit", "where"), BAD, ids=[b[0] for b in BAD])
def test_validate_bad_config_one_line_exit_1(data, tmp_path, what, edit, where):
    curriculum = _curriculum(data)
    edit(curriculum)
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    line = one_error_line(_invoke(str(cfg)))
    assert where in line, (what, line)


def test_validate_micro_batch_too_large_one_line(data, tmp_path):
    cfg = write_ds_config(
        tmp_path / "ds.json", _curriculum(data), train_micro_batch_size_per_gpu=10**6
    )
    line = one_error_line(_invoke(str(cfg)))
    assert line.startswith(
        "Error: train_micro_batch_size_per_gpu: 1000000 samples × max_seq_len 96"
    )
    assert "more than 16,777,216 (2^24)" in line


def test_validate_unreadable_file_one_line(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text("{not json")
    one_error_line(_invoke(str(bad)))
    one_error_line(_invoke(str(tmp_path / "missing.json")))
    bad.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2}))  # no curriculum section
    assert "curriculum" in one_error_line(_invoke(str(bad)))


# ------------------------------------------------------------------------------ --resume-from


def _fake_checkpoint(
    root: Path, curriculum: dict[str, Any] | None, progress: int, step: int
) -> Path:
    """A checkpoints folder whose `latest` tag holds the curriculum state after `progress` tok."""
    tag = root / f"global_step{step}"
    tag.mkdir(parents=True)
    state: dict[str, Any] = {"global_steps": step}
    if curriculum is not None:
        state["curriculum"] = CurriculumState.at(
            parse_curriculum(curriculum),
            progress,
            global_step=step,
            consumed_tokens=progress,
            consumed_samples=8 * step,
        ).to_dict()
    torch.save(state, tag / "mp_rank_00_model_states.pt")
    (root / "latest").write_text(tag.name)
    return root


def _verdict(
    data,
    tmp_path,
    saved_curriculum: dict[str, Any] | None,
    new: dict[str, Any],
    progress: int = 1800,
    step: int = 9,
) -> Any:
    ckpt = _fake_checkpoint(tmp_path / "ckpt", saved_curriculum, progress, step)
    cfg = write_ds_config(tmp_path / "new.json", new)
    return _invoke(str(cfg), "--resume-from", str(ckpt))


def test_resume_from_unchanged_is_ok(data, tmp_path):
    c = _curriculum(data)
    result = _verdict(data, tmp_path, c, c)
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert "OK" in last
    assert "step 9" in last
    assert "phase 1 ('mix')" in last


@pytest.mark.parametrize(
    ("what", "edit", "where"),
    [
        (
            "completed proportion",
            _edit(["schedule", 0, "train_loader", "streams", 0, "proportion"], 2.0),
            'curriculum.schedule[0] ("short").train_loader.streams[0].proportion',
        ),
        (
            "completed stream",
            _edit(["schedule", 0, "train_loader", "streams", 0, "local"], "LONG"),
            'curriculum.schedule[0] ("short").train_loader.streams[0].local',
        ),
        (
            "current data",
            _edit(["schedule", 1, "train_loader", "streams", 1, "proportion"], 0.5),
            'curriculum.schedule[1] ("mix").train_loader.streams[1].proportion',
        ),
        (
            "current below consumed",
            lambda c: (
                c["schedule"][1].update(duration="500tok"),
                c.update(max_duration="1500tok"),
            ),
            'curriculum.schedule[1] ("mix").duration',
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_resume_from_refused_edit_one_line(data, tmp_path, what, edit, where):
    old = _curriculum(data)
    new = copy.deepcopy(old)
    edit(new)
    new_s = json.dumps(new).replace('"LONG"', json.dumps(str(data["long"])))
    line = one_error_line(_verdict(data, tmp_path, old, json.loads(new_s)))
    assert where in line, (what, line)


def test_resume_from_accepted_edits(data, tmp_path):
    old = _curriculum(data)
    new = copy.deepcopy(old)
    new["schedule"][1]["duration"] = "2500tok"  # current phase raised
    new["schedule"].append(
        {
            "name": "extra",
            "duration": "500tok",
            "train_loader": {"streams": [{"local": str(data["long"])}]},
        }
    )
    new["max_duration"] = "4000tok"
    result = _verdict(data, tmp_path, old, new)
    assert result.exit_code == 0, result.output
    assert "OK" in result.output
    assert "phase 1 ('mix') at 800" in result.output


def test_resume_from_boundary_checkpoint_starts_next_phase(data, tmp_path):
    c = _curriculum(data)
    result = _verdict(data, tmp_path, c, c, progress=1000, step=5)
    assert result.exit_code == 0, result.output
    assert "phase 1 ('mix') from its start" in result.output


def test_resume_from_checkpoint_without_curriculum(data, tmp_path):
    c = _curriculum(data)
    result = _verdict(data, tmp_path, None, c, step=7)
    assert result.exit_code == 0, result.output
    assert "no curriculum state" in result.output
    assert "phase 0 ('short')" in result.output


def test_resume_from_not_a_checkpoint_one_line(data, tmp_path):
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(data))
    (tmp_path / "empty").mkdir()
    line = one_error_line(_invoke(str(cfg), "--resume-from", str(tmp_path / "empty")))
    assert "not a DeepSpeed checkpoint folder" in line
