"""Every DeepSpeed checkpoint load or save failure is one line naming the
checkpoint, exit code 1, never a traceback (``python -m curriculum_ds.train``, one process,
ZeRO-2 so that the optimizer state is a file of its own).

A run writes ``global_step1`` and ``global_step2``; copies of it are then damaged and resumed
with ``--resume auto``: ``latest`` naming a tag that is not there, an empty ``latest``, the
model states truncated, the optimizer states missing or truncated, and (issue 31) the model or
optimizer states rewritten with a code payload (tests/crafted_checkpoints.py: refused in one line
naming the file and the global, before DeepSpeed starts; the payload never runs). A ``latest``
naming a tag that is missing or cannot be read also names ``global_step1`` and the ``--resume``
option that continues from it (issue 31, item 6). And a run whose checkpoints folder cannot be
created fails at its first save with one line, ``latest`` never written. The failing runs share
one process (``helpers.launch_many(launcher=False)``: each a whole ``curriculum_ds.train.main``,
as ``python -m curriculum_ds.train`` runs it).

A shard truncated in place mid-run (``truncate -s 1000`` after step 3, the phase in progress,
through faulty_train's ``--truncate-shard``) is one line naming the stream and the shard, exit
code 1, ``latest`` left at the step-3 tag; with the shard restored, ``--resume auto`` continues
with the uninterrupted run's losses (both runs join the same job; the resume is one more process).

From issue 13, item 4, and issue 31, items 1, 3 and 6.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from crafted_checkpoints import MODEL_STATES, OPTIM_STATES, inject_payload
from helpers import (
    fixed_docs,
    launch_many,
    make_dataset,
    metrics,
    run_train_module,
    write_ds_config,
)
from run_records import RESUME_REL_TOL

pytestmark = pytest.mark.distributed


def _run(cfg: Path, run_dir: Path, *extra: str) -> Any:
    return run_train_module(
        "--deepspeed_config", str(cfg), "--run-dir", str(run_dir), *extra, cwd=cfg.parent
    )


def _one_error_line(proc: Any) -> str:
    assert proc.returncode == 1, proc.output[-3000:]
    output = proc.output
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("curriculum_ds: error: ")]
    assert len(errors) == 1, output[-3000:]
    return errors[0].removeprefix("curriculum_ds: error: ")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ckpt_failures")
    data = make_dataset(root, "d", fixed_docs(32, 32), max_seq_len=32)
    curriculum = {
        "max_duration": "2048tok",
        "schedule": [
            {
                "name": "a",
                "duration": "2048tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 32},
            }
        ],
    }
    cfg = write_ds_config(root / "ds.json", curriculum, zero_optimization={"stage": 2})
    run_dir = root / "base"
    proc = _run(cfg, run_dir, "--max-steps", "2", "--save-interval", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / "checkpoints" / "latest").read_text() == "global_step2"
    return cfg, run_dir


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


NEWEST_READABLE = (
    "; the newest readable tag there is {tag}: `--resume {ck}/{tag}` continues from it"
)
"""What a refusal of the tag ``latest`` names adds (issue 31, item 6)."""


def _marker(ck: Path) -> Path:
    return ck.parent / "MARKER"  # what a payload would create


DAMAGE: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "latest names a missing tag",
        lambda ck: (ck / "latest").write_text("global_step9"),
        "{ck}/latest names 'global_step9', which is not a folder there",
    ),
    (
        "latest is empty",
        lambda ck: (ck / "latest").write_text(""),
        "{ck}/latest names '', which is not a folder there",
    ),
    (
        "model states truncated",
        lambda ck: _truncate(ck / "global_step2" / "mp_rank_00_model_states.pt"),
        "{ck}/global_step2/mp_rank_00_model_states.pt: cannot be read (",
    ),
    (
        "optimizer states missing",
        lambda ck: (ck / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").unlink(),
        "{ck}/global_step2: DeepSpeed cannot load this checkpoint into this engine (",
    ),
    (
        "optimizer states truncated",
        lambda ck: _truncate(ck / "global_step2" / OPTIM_STATES),
        "{ck}/global_step2/" + OPTIM_STATES + ": cannot be read (",
    ),
    (
        "model states carry a code payload",
        lambda ck: inject_payload(ck / "global_step2" / MODEL_STATES, _marker(ck)),
        "{ck}/global_step2/" + MODEL_STATES + ": refused: it needs the global posix.system, ",
    ),
    (
        "optimizer states carry a code payload",
        lambda ck: inject_payload(ck / "global_step2" / OPTIM_STATES, _marker(ck)),
        "{ck}/global_step2/" + OPTIM_STATES + ": refused: it needs the global posix.system, ",
    ),
]


@pytest.fixture(scope="module")
def failures(base: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every failing run of this module in one process (``helpers.launch_many`` without the
    launcher, a world of one, as ``python -m curriculum_ds.train``): a copy of the base run
    damaged by each of DAMAGE and resumed (``--resume auto``), and a run whose checkpoints
    folder is a file (``"save"``). Returns ``{name: (checkpoints folder or run dir, output)}``.
    """
    cfg, run_dir = base
    root = tmp_path_factory.mktemp("damaged")
    runs, where = [], {}
    for what, damage, _ in DAMAGE:
        copy = root / what.replace(" ", "_") / "run"
        shutil.copytree(run_dir, copy)
        damage(copy / "checkpoints")
        runs.append((cfg, copy, ("--resume", "auto")))
        where[what] = copy / "checkpoints"
    save = root / "save" / "run"
    save.mkdir(parents=True)
    (save / "checkpoints").write_text("a file where the checkpoints folder goes")
    runs.append((cfg, save, ("--max-steps", "1")))
    where["save"] = save
    # issue 31, item 3: an uninterrupted run, then the same run with its shard truncated
    shard_cfg, shard = _shard_run_config(cfg, root)
    for name, extra in (
        ("shard reference", ()),
        ("shard truncated", ("--truncate-shard", f"3:{shard}")),
    ):
        run = root / name.replace(" ", "_")
        runs.append((shard_cfg, run, ("--max-steps", "6", "--save-interval", "3", *extra)))
        where[name] = run
    outputs = launch_many(
        runs, num_gpus=1, launcher=False, may_fail=frozenset(run for _, run, _ in runs)
    )
    return {name: (path, outputs[runs[i][1]]) for i, (name, path) in enumerate(where.items())}


def _shard_run_config(cfg: Path, root: Path) -> tuple[Path, Path]:
    """The base run's config over a copy of its data (``dcopy``), and that copy's shard file."""
    import json

    config = json.loads(cfg.read_text())
    local = Path(config["curriculum"]["schedule"][0]["train_loader"]["streams"][0]["local"])
    data = shutil.copytree(local, root / "dcopy")
    config["curriculum"]["schedule"][0]["train_loader"]["streams"][0]["local"] = str(data)
    shard_cfg = root / "ds_shard.json"
    shard_cfg.write_text(json.dumps(config))
    shard = data / "shard.00000.mds"
    shutil.copy(shard, root / "shard.00000.mds.orig")
    assert shard.stat().st_size > 4096  # the truncation cuts whole mapped pages off
    return shard_cfg, shard


def test_a_shard_truncated_mid_run_is_one_line_and_the_resume_continues_exactly(
    failures: dict[str, Any],
) -> None:
    reference, ref_proc = failures["shard reference"]
    run_dir, proc = failures["shard truncated"]
    assert ref_proc.returncode == 0, ref_proc.output[-3000:]
    root = run_dir.parent
    shard = root / "dcopy" / "shard.00000.mds"
    error = _one_error_line(proc)
    assert error.startswith(
        f"stream 'dcopy': shard {shard} changed while the run was reading it ("
    ), error
    assert "Bus error" not in proc.output
    assert (run_dir / "checkpoints" / "latest").read_text() == "global_step3"
    assert shard.stat().st_size == 1000
    shutil.copy(root / "shard.00000.mds.orig", shard)
    resumed = _run(root / "ds_shard.json", run_dir, "--max-steps", "6", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    resumed_rows, reference_rows = metrics(run_dir), metrics(reference)
    assert [r["step"] for r in resumed_rows] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in reference_rows] == [1, 2, 3, 4, 5, 6]
    for got, want in zip(resumed_rows, reference_rows, strict=True):
        assert math.isclose(got["loss"], want["loss"], rel_tol=RESUME_REL_TOL, abs_tol=0.0)
        assert got["tokens"] == want["tokens"]


@pytest.mark.parametrize(
    ("what", "line"), [(d[0], d[2]) for d in DAMAGE], ids=[d[0] for d in DAMAGE]
)
def test_a_damaged_checkpoint_is_one_line(failures: dict[str, Any], what: str, line: str) -> None:
    ckpts, proc = failures[what]
    error = _one_error_line(proc)
    assert error.startswith(line.format(ck=ckpts)), error
    # the tag our reads refuse: the newest readable other one is named (DeepSpeed's own load
    # failure, of a missing optimizer file, names none)
    newest = {
        "latest names a missing tag": "global_step2",
        "latest is empty": "global_step2",
        "optimizer states missing": None,
    }.get(what, "global_step1")
    if newest is not None:
        assert error.endswith(NEWEST_READABLE.format(ck=ckpts, tag=newest)), error
    assert not _marker(ckpts).exists()


def test_a_save_that_fails_is_one_line_and_moves_no_latest(failures: dict[str, Any]) -> None:
    run_dir, proc = failures["save"]
    error = _one_error_line(proc)
    assert error.startswith(
        f"{run_dir / 'checkpoints' / 'global_step1'}: DeepSpeed could not write this checkpoint ("
    ), error
    assert error.endswith("; `latest` still names the previous one")
