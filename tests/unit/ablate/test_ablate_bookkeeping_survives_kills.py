"""Ablate's own files survive a kill (issue 31 item 5): ``result.json``, ``ablate.json`` and
``results.jsonl`` are replaced atomically; an unreadable ``result.json`` (0 bytes: a kill or a
full disk under an older version) counts as not written and is rebuilt from the run's records,
so the rerun continues; ``wall_s`` counts every launch, a launch cut off by a SIGKILL of ablate
included. A base config's monitor ``output_path`` is moved into each run (one line says so).

The launches here run a stand-in for the reference loop (the command hook replaces the
launcher command with a small Python script writing the two record files a finished run
leaves), through the real launcher code (:func:`curriculum_ds.commands.launch.run_command`); the
real loop's records are the launched test's (test_ablate_runs_arms_and_seeds.py).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

from curriculum_ds.ablate import ablate
from curriculum_ds.ablate.experiment import load_experiment
from curriculum_ds.ablate.runs import RunKey, launch_state, run_dir, run_experiment

_LOOP = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    run = Path(sys.argv[sys.argv.index("--run-dir") + 1])
    print("ablate.json at start:", (run / "ablate.json").read_text(), flush=True)
    seed = int(run.name.removeprefix("seed-"))
    loss = 2.0 + seed / 10 + (0.5 if run.parent.name == "phases" else 0.0)
    metrics = [{"step": s, "tokens": 700 * s} for s in (1, 2, 3)]
    evals = [{"step": 3, "tokens": 2100, "loss": loss,
              "streams": {"val_a": {"loss": loss - 0.1}, "val_b": {"loss": loss + 0.1}}}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in metrics))
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in evals))
    """
)


def _stand_in(arm: str, seed: int, cmd: list[str]) -> list[str]:
    return [sys.executable, "-c", _LOOP, *cmd[cmd.index("--run-dir") :]]


def _no_launch(arm: str, seed: int, cmd: list[str]) -> list[str]:
    raise AssertionError(f"{arm} seed {seed} launched again")


def _with_a_base_monitor_path(experiment_path: Path, tmp_path: Path) -> Path:
    """The experiment with a csv_monitor output_path in its base config, written to tmp_path."""
    base = json.loads((experiment_path.parent / "base.json").read_text())
    base["csv_monitor"] = {"enabled": True, "output_path": str(tmp_path / "shared")}
    (tmp_path / "base.json").write_text(json.dumps(base))
    spec = json.loads(experiment_path.read_text())
    (tmp_path / "experiment.json").write_text(json.dumps({**spec, "base": "base.json"}))
    return tmp_path / "experiment.json"


def test_a_rerun_with_an_empty_result_json_continues(tiny_experiment_path, tmp_path, capsys):
    experiment_path = _with_a_base_monitor_path(tiny_experiment_path, tmp_path)
    out = tmp_path / "out"
    table = ablate(experiment_path, out, num_gpus=1, command_hook=_stand_in)
    assert "| mixed (reference) | 2 |" in table
    said = [line for line in capsys.readouterr().out.splitlines() if "output_path" in line]
    assert said == [
        f"base config: csv_monitor.output_path replaced by each run's own folder ({out}/runs/"
        "ARM/seed-S/monitors/), as every arm and seed would write into one"
    ]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["arm"], r["seed"]) for r in rows] == [
        ("mixed", 1), ("phases", 1), ("mixed", 2), ("phases", 2)
    ]  # fmt: skip
    experiment = load_experiment(experiment_path)
    for r in rows:
        directory = run_dir(out, RunKey(r["arm"], r["seed"]))
        state = json.loads((directory / "ablate.json").read_text())
        assert state["launches"] == 1
        assert "running" not in state
        assert r["wall_s"] == state["wall_s"] > 0
        # the start was on disk before the launch ran
        log = (directory / "train.log").read_text()
        assert '"running": ' in log.split("ablate.json at start:")[1].splitlines()[0]
        assert not list(directory.glob(".*.tmp"))  # no temporary file left behind
        config = json.loads((directory / "ds_config.json").read_text())
        assert config["csv_monitor"] == {"enabled": True}  # its monitors: under the run dir
    phases_1 = run_dir(out, RunKey("phases", 1))
    kept = (phases_1 / "result.json").read_text()
    (phases_1 / "result.json").write_text("")  # what a kill mid-write left before this change
    (run_dir(out, RunKey("mixed", 2)) / "result.json").unlink()
    (run_dir(out, RunKey("mixed", 2)) / "ablate.json").write_text("{")
    capsys.readouterr()
    again = run_experiment(experiment, out, num_gpus=1, command_hook=_no_launch)
    # rebuilt from the records, with the recorded wall time (unknown: its ablate.json is cut)
    assert again == [rows[0], rows[1], {**rows[2], "wall_s": 0.0}, rows[3]]
    assert (phases_1 / "result.json").read_text() == kept
    assert capsys.readouterr().out.count("finished earlier") == 4


def test_wall_s_counts_a_launch_cut_off_by_a_sigkill(tmp_path):
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "ablate.json").write_text(
        json.dumps({"model": None, "wall_s": 2.0, "launches": 1, "running": 1000.0})
    )
    (directory / "train.log").write_text("the killed launch's output\n")
    os.utime(directory / "train.log", (1007.5, 1007.5))  # its last write
    state = launch_state(directory, None)
    assert state == {"model": None, "wall_s": 9.5, "launches": 2}
    # an older ablate.json (no launch count) and a missing one
    (directory / "ablate.json").write_text(json.dumps({"model": "m", "wall_s": 3.0}))
    assert launch_state(directory, "m") == {"model": "m", "wall_s": 3.0}
    (directory / "ablate.json").unlink()
    assert launch_state(directory, "m") == {"model": "m", "wall_s": 0.0}
