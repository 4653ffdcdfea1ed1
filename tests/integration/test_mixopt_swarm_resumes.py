"""``curriculum-ds mixopt run``: a tiny swarm killed in its third run resumes to the same proposal.

One module fixture (issue 34's resumability acceptance): a 4-run swarm over streams ``a``/``b``
(``swarm_files.tiny_swarm``: 2000 tokens per run, eval streams ``val_a``/``val_b``), each run a
world of one (``helpers.world_of_one_command``: the rank as a plain Python process, without
DeepSpeed's runner; micro-batches of 4 on one rank, the global batch of 2 ranks × 2). The subject
is mixopt run's bookkeeping through ablate's runner; the ranks and the launchers are exercised by
the tests of ``curriculum-ds launch`` and by test_kill_and_resume_reproduce_the_run.

1. The first invocation runs ``run-0000`` and ``run-0001``, then ``run-0002``'s rank is SIGKILLed
   after step 3 (``faulty_train --kill-after-step 3``, injected by the command hook; its last
   checkpoint is step 2): mixopt run stops with one line naming the run.
2. The second invocation runs nothing finished, resumes ``run-0002`` from its checkpoint, runs
   ``run-0003``, fits and proposes.
3. The uninterrupted twin: in the second invocation's launch of ``run-0003``, before that run
   (``many_runs``: one launch, two runs), ``run-0002``'s config runs uninterrupted, with ablate's
   arguments, into the run folder of a second ``--out``; that folder then gets copies of the
   finished ``run-0000``, ``run-0001`` and ``run-0003``, and a third invocation there launches
   nothing (every run finished) and fits: the uninterrupted invocation's proposal.

Five launches of a world of one in all.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import launched_env, unlink_stale_shared_memory, world_of_one_command
from swarm_files import tiny_swarm

from curriculum_ds.ablate.runs import CommandHook
from curriculum_ds.errors import CurriculumError
from curriculum_ds.mixopt.swarm_run import mixopt_run
from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

KILL_AFTER = 3
"""``run-0002`` is killed after this step; with ``--save-interval 2`` it resumes at step 2."""


def _launches_nothing(arm: str, seed: int, cmd: list[str]) -> list[str]:
    raise AssertionError(f"{arm} seed {seed} launched: every run had finished")


def _kill_run_2(arm: str, seed: int, cmd: list[str]) -> list[str]:
    unlink_stale_shared_memory()
    if arm != "run-0002":
        return world_of_one_command(cmd)
    cmd = list(cmd)
    cmd[cmd.index("curriculum_ds.train")] = "faulty_train"  # the tests' wrapper of the loop
    return world_of_one_command([*cmd, "--kill-after-step", str(KILL_AFTER)])


def _with_twin(twin: Path, config: Path) -> CommandHook:
    """The second invocation's hook: ``run-0003`` runs in a process that first runs ``config``
    uninterrupted into ``twin`` (its output in ``twin.log.*``), then ablate's run."""

    def hook(arm: str, seed: int, cmd: list[str]) -> list[str]:
        unlink_stale_shared_memory()
        if arm != "run-0003":
            return world_of_one_command(cmd)
        at = cmd.index("curriculum_ds.train")
        args = cmd[at + 1 :]
        twin_argv = [*args[: args.index("--run-dir")], "--run-dir", str(twin)]
        twin_argv[twin_argv.index("--deepspeed_config") + 1] = str(config)
        twin_argv += args[args.index("--run-dir") + 2 :]  # ablate's --resume, --save-interval...
        spec = twin.parent / "many_runs_twin.json"
        runs = [
            {"argv": twin_argv, "log": str(twin.parent / "twin.log"), "may_fail": False},
            {"argv": args, "log": None, "may_fail": False},
        ]
        spec.write_text(json.dumps(runs, indent=1))
        return world_of_one_command([*cmd[:at], "many_runs", "--runs", str(spec)])

    return hook


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mixopt_run")
    swarm = tiny_swarm(root / "data", micro_batch_size=4)
    out, twin = root / "out", root / "twin"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", launched_env()["PYTHONPATH"])  # faulty_train and this checkout
        with pytest.raises(CurriculumError) as killed:
            mixopt_run(swarm, out, num_gpus=1, save_interval=2, command_hook=_kill_run_2)
        latest = (out / "runs/run-0002/seed-3/checkpoints/latest").read_text().strip()
        finished_first = sorted(p.parent.parent.name for p in out.glob("runs/*/seed-3/result.json"))
        twin_run = twin / "runs/run-0002/seed-3"
        twin_run.mkdir(parents=True)
        config = shutil.copy(out / "runs/run-0002/seed-3/ds_config.json", twin_run)
        hook = _with_twin(twin_run, Path(config))
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):  # click.echo's lines
            mixopt_run(swarm, out, num_gpus=1, save_interval=2, command_hook=hook)
        for name in ("run-0000", "run-0001", "run-0003"):
            shutil.copytree(out / "runs" / name, twin / "runs" / name)
        twin_printed = io.StringIO()
        with contextlib.redirect_stdout(twin_printed):
            twin_table = mixopt_run(swarm, twin, num_gpus=1, command_hook=_launches_nothing)
    code = (twin_run.parent / "twin.log.rank0.code").read_text()  # the world of one's one rank
    assert code == "0", (twin_run.parent / "twin.log.rank0").read_text()[-3000:]
    return {
        "out": out,
        "twin": twin,
        "killed": str(killed.value),
        "latest_at_kill": latest,
        "finished_first": finished_first,
        "second": printed.getvalue(),
        "twin_table": twin_table,
        "twin_printed": twin_printed.getvalue(),
    }


def test_the_kill_stops_mixopt_run_with_one_line_after_two_finished_runs(story):
    assert "\n" not in story["killed"]
    assert story["killed"].startswith("run run-0002 seed 3 failed (exit code ")
    assert story["finished_first"] == ["run-0000", "run-0001"]
    assert story["latest_at_kill"] == "global_step2"


def test_the_next_invocation_runs_nothing_finished_and_resumes_the_third(story):
    lines = [line for line in story["second"].splitlines() if line.startswith("[")]
    assert lines[0].startswith("[1/4] run-0000 seed 3: finished earlier, target ")
    assert lines[1].startswith("[2/4] run-0001 seed 3: finished earlier, target ")
    assert lines[2].startswith("[3/4] run-0002 seed 3: resuming from its last checkpoint")
    assert lines[3].startswith("[3/4] run-0002 seed 3: done in ")
    assert " target " in lines[3]
    assert "ETA" in lines[3]
    assert lines[4].startswith("[4/4] run-0003 seed 3: starting")
    launches = {
        name: json.loads((story["out"] / "runs" / name / "seed-3/ablate.json").read_text())
        for name in ("run-0000", "run-0001", "run-0002", "run-0003")
    }
    assert {name: s["launches"] for name, s in launches.items()} == {
        "run-0000": 1,
        "run-0001": 1,
        "run-0002": 2,
        "run-0003": 1,
    }
    log = (story["out"] / "runs/run-0002/seed-3/train.log").read_text()
    assert "resum" in log.split("faulty_train")[-1]


def test_the_resumed_swarm_proposes_what_the_uninterrupted_one_does(story):
    assert "proposal" in story["twin_table"]
    lines = story["twin_printed"].splitlines()
    assert len(lines) == 4
    assert all(": finished earlier, target " in line for line in lines)
    resumed = json.loads((story["out"] / "proposal.json").read_text())
    twin = json.loads((story["twin"] / "proposal.json").read_text())
    for name, share in twin["mixture"].items():
        assert resumed["mixture"][name] == pytest.approx(share, abs=1e-12)
    assert resumed["target"]["value"] == pytest.approx(twin["target"]["value"], abs=1e-12)
    rows = read_jsonl(story["out"] / "swarm.jsonl")
    twin_rows = read_jsonl(story["twin"] / "swarm.jsonl")
    assert [r["run"] for r in rows] == ["run-0000", "run-0001", "run-0002", "run-0003"]
    for row, other in zip(rows, twin_rows, strict=True):
        assert row["mixture"] == other["mixture"]
        for name, loss in other["losses"].items():
            assert row["losses"][name] == pytest.approx(loss, abs=1e-12)
    assert resumed["train_loader"]["proportion_unit"] == "tokens"
