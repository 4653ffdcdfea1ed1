"""Steering the mix by hand (``dynamic.method: "file"``) on 2 CPU gloo ranks, ZeRO-2.

Three streams at a natural mix of 0.4 / 0.3 / 0.3 in samples, the weights file read every 3
steps. The file does not exist at launch; an operator (``faulty_train --mix-file-at``: rank 0
edits it right after a given step finishes, so the edits land at known steps, no timing) writes
it after step 4 (books 0.8) and rewrites it after step 7 (code 0.6); run A's file is deleted
after step 10. In the session's shared launched job (``tests/shared_job.py``), in two rounds:

* the weights change at the boundary after each edit (steps 6 and 9) and apply from the next
  step's batch; the boundaries without a file (3, 12, 15) keep the previous weights, each
  problem in one line; the history holds both files' sha256;
* both ranks compute every boundary's row alike and end with bit-identical weights;
* run B, killed (SIGKILL) after step 10 and resumed with ``--resume auto`` from its step-8
  checkpoint with its weights file DELETED, replays step 9's decision from
  ``mixture_journal.jsonl`` and reads the (missing) file again past the journal's end: the same
  batches, weights, history and journal as A.

From issue 33 (item 6, acceptance: steering).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import history, make_dataset, metrics, ragged_docs, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.records.journal import JOURNAL_NAME
from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

NATURAL = {"code": 0.4, "web": 0.3, "books": 0.3}
EDITS = {4: {"code": 1, "web": 1, "books": 8}, 7: {"code": 6, "web": 3, "books": 1}}
EVERY = 3
KILL_AFTER = 10  # latest is then global_step8: step 9's read is replayed from the journal
WARNING = "keeping the previous weights"


def _curriculum(folders: dict[str, Path], mix_file: Path) -> dict[str, Any]:
    streams = [{"local": str(folders[n]), "proportion": p} for n, p in NATURAL.items()]
    return {
        "max_duration": "1000tok",  # ~16 steps of 8 short samples
        "seed": 3,
        "schedule": [
            {
                "name": "mix",
                "duration": "1000tok",
                "train_loader": {"streams": streams, "max_seq_len": 64},
            }
        ],
        "dynamic": {
            "enabled": True,
            "unit": "streams",
            "method": "file",
            "recompute_every_n_steps": EVERY,
            "file": {"path": str(mix_file)},
        },
    }


@shared_runs
def _runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """A and B's kill in round 1, B's resume (its file deleted) in round 2."""
    folders = {
        name: make_dataset(root, name, ragged_docs(120, seed=20 + i, min_len=4, max_len=10))
        for i, name in enumerate(NATURAL)
    }
    edits = {}
    for step, weights in EDITS.items():
        edits[step] = root / f"edit_after_step{step}.json"
        edits[step].write_text(json.dumps(weights))
    a, b = root / "A", root / "B"
    files = {a: root / "A_mix.json", b: root / "B_mix.json"}
    configs = {
        d: write_ds_config(
            root / f"{d.name}.json",
            _curriculum(folders, files[d]),
            optimizer={"type": "AdamW", "params": {"lr": 1e-3}},
            zero_optimization={"stage": 2},
        )
        for d in (a, b)
    }

    def steered(run_dir: Path) -> tuple[str, ...]:
        return tuple(f"--mix-file-at={step}:{src}:{files[run_dir]}" for step, src in edits.items())

    common = ("--save-interval", "4", "--trace-samples")
    deleted = (f"--mix-file-at={KILL_AFTER}:-:{files[a]}",)
    dumps = ("--dump-state", str(a / "dump"), "--dump-history", str(a / "ranks"))
    outputs = yield [
        Run(configs[a], a, (*common, *steered(a), *deleted, *dumps)),
        Run(configs[b], b, (*common, *steered(b), "--kill-after-step", str(KILL_AFTER))),
    ]
    killed = {
        "steps": [r["step"] for r in metrics(b)],
        "journal": read_jsonl(b / JOURNAL_NAME),
        "file_existed": files[b].is_file(),
    }
    files[b].unlink()  # the operator's file is gone before the resume
    resumed = yield [Run(configs[b], b, (*common, "--resume", "auto"))]
    return {
        "A": a,
        "B": b,
        "files": files,
        "edits": {s: hashlib.sha256(p.read_bytes()).hexdigest() for s, p in edits.items()},
        "killed": killed,
        "output_A": outputs[a].output,
        "output_B_resumed": resumed[b].output,
    }


@pytest.fixture(scope="module")
def runs(shared_job: Any) -> dict[str, Any]:
    return shared_job(_runs)


def _shares(rows: list[dict[str, Any]], steps: range) -> dict[str, float]:
    """Each stream's share of the samples of ``steps`` (the sample trace's global batches)."""
    counts = dict.fromkeys(NATURAL, 0)
    for row in rows:
        if row["step"] in steps:
            for name, _ in row["samples"]:
                counts[name] += 1
    total = sum(counts.values())
    return {name: n / total for name, n in counts.items()}


def _boundaries(run_dir: Path) -> list[int]:
    """The steps that read the file: every ``EVERY``-th of the run."""
    return list(range(EVERY, metrics(run_dir)[-1]["step"] + 1, EVERY))


def test_the_weights_change_at_the_boundary_after_each_edit(runs):
    rows = history(runs["A"])
    steps = [r["step"] for r in rows]
    assert steps == _boundaries(runs["A"])
    assert steps[:5] == [3, 6, 9, 12, 15]
    gone = len(steps) - 3  # the boundaries after the file was deleted
    assert {r["method"] for r in rows} == {"file"}
    assert all(r["streams"] == list(NATURAL) for r in rows)
    assert [bool(r.get("kept_previous")) for r in rows] == [True, False, False] + [True] * gone
    natural, first, second = list(NATURAL.values()), [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]
    assert [r["weights"] for r in rows] == [natural, first, second] + [second] * gone
    shas = [r["source"]["sha256"] for r in rows]
    assert shas == [None, runs["edits"][4], runs["edits"][7]] + [None] * gone
    assert [r.get("reason") for r in rows] == ["not found", None, None] + ["not found"] * gone
    assert {r["source"]["path"] for r in rows} == {str(runs["files"][runs["A"]])}
    # applied from the step after the boundary: books lead steps 7-9, code steps 10-12
    samples = trace(runs["A"])
    assert _shares(samples, range(7, 10))["books"] > 0.6
    assert _shares(samples, range(10, 13))["code"] > 0.45
    assert _shares(samples, range(10, 13))["books"] < 0.25
    assert _shares(samples, range(1, 7))["books"] < 0.5
    # one line per problem while it lasts: missing at launch (step 3), deleted (step 12)
    warnings = [line for line in runs["output_A"].splitlines() if WARNING in line]
    assert len(warnings) == 2, warnings
    assert "step 3: mix file" in warnings[0]
    assert "step 12: mix file" in warnings[1]


def test_the_journal_has_every_boundarys_decision_before_the_run_moved_on(runs):
    journal = read_jsonl(runs["A"] / JOURNAL_NAME)
    assert [r["step"] for r in journal] == _boundaries(runs["A"])
    assert [r["weights"] for r in journal] == [r["weights"] for r in history(runs["A"])]
    assert [r["sha256"] for r in journal] == [r["source"]["sha256"] for r in history(runs["A"])]
    # the killed run journaled steps 3-9 (killed after 10, before the boundary of step 12)
    assert [r["step"] for r in runs["killed"]["journal"]] == [3, 6, 9]


def test_both_ranks_hold_the_same_weights(runs):
    # every boundary's row, as each rank computed it (rank 0 alone writes the history)
    rows = [read_jsonl(runs["A"] / "ranks" / f"rank{r}_history.jsonl") for r in (0, 1)]
    assert rows[0] == rows[1] == history(runs["A"])
    dump = runs["A"] / "dump"
    rank0 = torch.load(dump / "rank0_dynamic.pt", weights_only=False)
    rank1 = torch.load(dump / "rank1_dynamic.pt", weights_only=False)
    assert rank0["method"] == "file"
    assert rank0["probs"].tobytes() == rank1["probs"].tobytes()
    assert rank0["probs"].tolist() == history(runs["A"])[-1]["weights"]
    assert rank0["file"] == rank1["file"]


def _without_path(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        row = {k: v for k, v in row.items() if k not in ("path", "time")}
        if "source" in row:
            row["source"] = {k: v for k, v in row["source"].items() if k != "path"}
        out.append(row)
    return out


def test_a_killed_run_resumed_with_the_file_deleted_replays_the_journal(runs):
    a, b = runs["A"], runs["B"]
    assert runs["killed"]["steps"] == list(range(1, KILL_AFTER + 1))
    assert runs["killed"]["file_existed"]
    assert not runs["files"][b].exists()
    assert (b / "checkpoints" / "latest").read_text() == f"global_step{metrics(a)[-1]['step']}"
    assert trace(b) == trace(a)
    assert _without_path(history(b)) == _without_path(history(a))
    assert _without_path(read_jsonl(b / JOURNAL_NAME)) == _without_path(
        read_jsonl(a / JOURNAL_NAME)
    )
    # step 9 came from the journal (the file was gone): no line; step 12 read it again
    warnings = [line for line in runs["output_B_resumed"].splitlines() if WARNING in line]
    assert len(warnings) == 1, warnings
    assert "step 12: mix file" in warnings[0]
