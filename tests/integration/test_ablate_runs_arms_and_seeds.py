"""``curriculum-ds ablate``: a tiny ablation, 2 arms × 2 seeds, each run a world of one (issue 19).

One module fixture runs the whole story once (5 launches of the reference loop, one of them
also running the uninterrupted twin):

1. the first invocation launches ``mixed`` seed 1 to its end, then ``phases`` seed 1, whose rank
   is SIGKILLed after step 5 (``faulty_train --kill-after-step 5``, injected by ablate's
   command hook; its ``latest`` checkpoint is step 4): ablate stops with one line naming it;
2. the second invocation resumes that run from its checkpoint and runs the other two;
3. a third invocation runs nothing, after ``phases`` seed 1's ``result.json`` was emptied (it is
   rebuilt from the run's records);
4. the killed run's config is run once more, uninterrupted, in a run directory of its own: in the
   second invocation's launched job of ``mixed`` seed 2, before that run (``many_runs``).

ablate runs every run with ``num_gpus=1``, and the command hooks start the one rank as a plain
Python process (``helpers.world_of_one_command``: ``python -u -m curriculum_ds.train ...``, a
world of one), without DeepSpeed's runner and node launcher: the subject here is ablate's
bookkeeping (its runs, kill, resume, results, summary and table), not the ranks; those
launchers are exercised by the tests of ``curriculum-ds launch`` and by every launched test, and
a resume on 2 ranks equal to the uninterrupted run by test_kill_and_resume_reproduce_the_run.

The tests assert on what these left behind: ``summary.json`` equals a recomputation from
``results.jsonl`` with numpy/scipy to 1e-9, the third invocation launched nothing and took
< 30 s, and the resumed run's final eval equals the uninterrupted twin's to 1e-6.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import (
    launched_env,
    tiny_experiment,
    unlink_stale_shared_memory,
    world_of_one_command,
)
from scipy import stats

from curriculum_ds.ablate import ablate
from curriculum_ds.ablate.runs import CommandHook
from curriculum_ds.cli import main
from curriculum_ds.errors import CurriculumError
from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

KILL_AFTER = 5
"""``phases`` seed 1 is killed after this step; with ``--save-interval 2`` it resumes at step 4."""


def _kill_phases_seed_1(arm: str, seed: int, cmd: list[str]) -> list[str]:
    unlink_stale_shared_memory()  # what an earlier killed job left would collide
    if (arm, seed) != ("phases", 1):
        return world_of_one_command(cmd)
    cmd = list(cmd)
    cmd[cmd.index("curriculum_ds.train")] = "faulty_train"  # the tests' wrapper of the loop
    return world_of_one_command([*cmd, "--kill-after-step", str(KILL_AFTER)])


def _second_invocation(twin: Path, twin_config: Path) -> CommandHook:
    """The second invocation's hook: ``mixed`` seed 2 runs in a process that first runs the
    uninterrupted twin of ``phases`` seed 1 (``many_runs``: the twin's output in ``twin.log.*``,
    then ablate's run with its own argv and output), saving the twin a launch of its own."""

    def hook(arm: str, seed: int, cmd: list[str]) -> list[str]:
        unlink_stale_shared_memory()
        if (arm, seed) != ("mixed", 2):
            return world_of_one_command(cmd)
        at = cmd.index("curriculum_ds.train")
        twin_argv = ["--deepspeed_config", str(twin_config), "--run-dir", str(twin)]
        spec = twin.parent / "many_runs_twin.json"
        runs = [
            {
                "argv": [*twin_argv, "--no-progress", "--save-interval", "2"],
                "log": str(twin.parent / "twin.log"),
                "may_fail": False,
            },
            {"argv": cmd[at + 1 :], "log": None, "may_fail": False},
        ]
        spec.write_text(json.dumps(runs, indent=1))
        return world_of_one_command([*cmd[:at], "many_runs", "--runs", str(spec)])

    return hook


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("ablate")
    # micro-batches of 4 on one rank: the global batch of 2 ranks × 2, the same steps
    experiment = tiny_experiment(root / "data", micro_batch_size=4)
    out = root / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", launched_env()["PYTHONPATH"])  # faulty_train and this checkout
        with pytest.raises(CurriculumError) as killed:
            ablate(experiment, out, num_gpus=1, save_interval=2, command_hook=_kill_phases_seed_1)
        latest = (out / "runs/phases/seed-1/checkpoints/latest").read_text().strip()
        twin = root / "twin"
        hook = _second_invocation(twin, out / "runs/phases/seed-1/ds_config.json")
        second = ablate(experiment, out, num_gpus=1, save_interval=2, command_hook=hook)
        result_json = out / "runs/phases/seed-1/result.json"
        result_kept = result_json.read_text()
        result_json.write_text("")  # what a kill mid-write left before writes were atomic
        start = time.perf_counter()
        third = CliRunner().invoke(main, ["ablate", str(experiment), "--out", str(out)])
        third_s = time.perf_counter() - start
    code = (root / "twin.log.rank0.code").read_text()  # the world of one's one rank
    assert code == "0", (root / "twin.log.rank0").read_text()[-3000:]
    return {
        "out": out,
        "killed": str(killed.value),
        "latest_at_kill": latest,
        "second": second,
        "third": third,
        "third_s": third_s,
        "result_kept": result_kept,
        "twin": twin,
    }


def test_a_killed_run_stops_ablate_with_one_line_and_resumes_exactly(story):
    assert "\n" not in story["killed"]
    assert story["killed"].startswith("run phases seed 1 failed (exit code ")
    assert "resumes it" in story["killed"]
    assert story["latest_at_kill"] == "global_step4"
    log = (story["out"] / "runs/phases/seed-1/train.log").read_text()
    assert "resum" in log.split("faulty_train")[-1]  # the second launch started from step 4
    resumed = read_jsonl(story["out"] / "runs/phases/seed-1/eval.jsonl")
    twin = read_jsonl(story["twin"] / "eval.jsonl")
    assert [r["step"] for r in resumed] == [r["step"] for r in twin]
    assert resumed[-1]["loss"] == pytest.approx(twin[-1]["loss"], abs=1e-6)
    for name, s in twin[-1]["streams"].items():
        assert resumed[-1]["streams"][name]["loss"] == pytest.approx(s["loss"], abs=1e-6)
    row = next(
        r
        for r in read_jsonl(story["out"] / "results.jsonl")
        if (r["arm"], r["seed"]) == ("phases", 1)
    )
    assert row["loss"] == pytest.approx(twin[-1]["loss"], abs=1e-6)
    state = json.loads((story["out"] / "runs/phases/seed-1/ablate.json").read_text())
    assert state["launches"] == 2  # the killed launch and the resumed one
    assert row["wall_s"] == state["wall_s"]


def test_results_have_one_row_per_run_with_the_contract_fields(story):
    rows = read_jsonl(story["out"] / "results.jsonl")
    assert [(r["arm"], r["seed"]) for r in rows] == [
        ("mixed", 1), ("phases", 1), ("mixed", 2), ("phases", 2)
    ]  # fmt: skip
    for r in rows:
        assert set(r) == {
            "arm", "seed", "tokens", "steps", "wall_s", "loss", "streams", "exact_match"
        }  # fmt: skip
        assert r["tokens"] >= 2000
        assert r["steps"] > 0
        assert r["wall_s"] > 0
        assert set(r["streams"]) == {"val_a", "val_b", "val_qa"}
        evals = read_jsonl(story["out"] / f"runs/{r['arm']}/seed-{r['seed']}/eval.jsonl")
        assert r["loss"] == evals[-1]["loss"]
        # the QA stream's exact match, and only its (a share of its 6 records)
        assert r["exact_match"] == {"val_qa": evals[-1]["streams"]["val_qa"]["exact_match"]}
        assert r["exact_match"]["val_qa"] in {k / 6 for k in range(7)}
        assert "exact_match" not in evals[-1]["streams"]["val_a"]


def _ci(x: np.ndarray) -> float:
    return float(stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x)))


def test_summary_equals_a_recomputation_from_results(story):
    rows = read_jsonl(story["out"] / "results.jsonl")
    summary = json.loads((story["out"] / "summary.json").read_text())
    assert summary["reference"] == "mixed"
    by = {(r["arm"], r["seed"]): r for r in rows}
    get = {"loss": lambda r: r["loss"]}
    get |= {n: (lambda r, n=n: r["streams"][n]) for n in ("val_a", "val_b", "val_qa")}
    get |= {"em": lambda r: r["exact_match"]["val_qa"]}
    for arm in ("mixed", "phases"):
        got = summary["arms"][arm]
        assert got["n"] == 2
        for what, f in get.items():
            x = np.array([f(by[(arm, s)]) for s in (1, 2)])
            d = x - np.array([f(by[("mixed", s)]) for s in (1, 2)])
            key, name = {"loss": ("loss", None), "em": ("exact_match", "val_qa")}.get(
                what, ("streams", what)
            )
            stat = got[key] if name is None else got[key][name]
            delta = got["delta"][key] if name is None else got["delta"][key][name]
            assert stat["mean"] == pytest.approx(x.mean(), abs=1e-9)
            assert stat["ci95"] == pytest.approx(_ci(x), abs=1e-9)
            assert delta["mean"] == pytest.approx(d.mean(), abs=1e-9)
            assert delta["ci95"] == pytest.approx(_ci(d), abs=1e-9)
            assert delta["per_seed"] == pytest.approx({"1": d[0], "2": d[1]}, abs=1e-9)


def test_the_second_invocation_prints_the_table_and_writes_the_picture(story):
    table = (story["out"] / "summary.md").read_text()
    assert story["second"] == table
    assert table.startswith(
        "| arm | n | eval loss | Δ loss | val_a | Δ val_a | val_b | Δ val_b | val_qa | Δ val_qa "
        "| val_qa exact_match ↑ | Δ val_qa exact_match |"
    )
    assert "higher is better" in table
    assert "| mixed (reference) | 2 |" in table
    assert "\n| phases | 2 |" in table
    png = story["out"] / "ablation.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_third_invocation_runs_nothing_and_is_quick(story):
    result = story["third"]
    assert result.exit_code == 0, result.output
    assert result.output.count("finished earlier") == 4
    assert "starting" not in result.output
    assert "resuming" not in result.output
    assert story["third_s"] < 30
    # the 0-byte result.json was rebuilt from the run's records, as it was
    rebuilt = (story["out"] / "runs/phases/seed-1/result.json").read_text()
    assert json.loads(rebuilt) == json.loads(story["result_kept"])
    assert (story["out"] / "summary.md").read_text() in result.output
