"""``curriculum.eval`` on 2 CPU ranks (issue 11 item 2 acceptance).

* Evaluations happen after every step that crosses a multiple of ``interval`` and at every phase
  end, and their losses equal a single-process evaluation of the same checkpoint (the exported
  model, one sample at a time, plain ``cross_entropy``) to 1e-5, per stream and overall.
* A question-answer eval stream (7 records: rank 0 takes 4, rank 1 takes 3) bears loss on its
  answers only, and its ``exact_match`` equals that of the single process (teacher-forced argmax
  over each answer's tokens and EOS), counted over both ranks.
* A run with eval on draws the same training batches (``--trace-samples``) and trains to the same
  losses as one without.
* A run killed after step 7 (``latest`` at step 6) and resumed writes the same evals as the
  uninterrupted run.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import (
    make_dataset,
    make_qa_dataset,
    metrics,
    qa_records,
    ragged_docs,
    trace,
    two_phase_curriculum,
    write_ds_config,
)
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

TOTAL = 3000
FIRST = 1000
INTERVAL = 700
MAX_SAMPLES = 9


def _data(root: Path) -> dict[str, Path]:
    return {
        "root": root,
        "short": make_dataset(root, "short", ragged_docs(200, seed=1, min_len=10, max_len=40)),
        "long": make_dataset(root, "long", ragged_docs(200, seed=2, min_len=30, max_len=60)),
        # 9 of its samples are evaluated: rank 0 takes 5, rank 1 takes 4
        "val_web": make_dataset(root, "val_web", ragged_docs(40, seed=7, min_len=10, max_len=60)),
        # one sample: rank 1 has none and runs a placeholder forward
        "val_one": make_dataset(root, "val_one", ragged_docs(1, seed=8, min_len=40, max_len=50)),
        # QA records: only their answers bear loss; their exact_match is counted over ranks
        "val_qa": make_qa_dataset(root, "val_qa", qa_records(7, seed=9)),
    }


def _config(data: dict[str, Path], name: str, *, evaluation: bool) -> Path:
    # "short" (1000tok) then "mix" (2000tok, short/long 0.3/0.7)
    curriculum = {**two_phase_curriculum(data["short"], data["long"]), "seed": 5}
    if evaluation:
        curriculum["eval"] = {
            "streams": [
                {"local": str(data["val_web"]), "name": "web"},
                {"local": str(data["val_one"]), "name": "one"},
                {"local": str(data["val_qa"]), "name": "qa"},
            ],
            "interval": f"{INTERVAL}tok",
            "max_samples": MAX_SAMPLES,
        }
    return write_ds_config(data["root"] / f"{name}.json", curriculum)


@shared_runs
def _runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """Eval on and eval off, uninterrupted; and an eval-on run SIGKILLed after step 7 (``latest``
    step 6) and resumed, in the session's shared launched job (tests/shared_job.py): the runs and
    the kill in round 1, the resume in round 2."""
    data = _data(root)
    on, off, resumed = root / "on", root / "off", root / "resumed"
    cfg = _config(data, "resume", evaluation=True)
    outputs = yield [
        Run(_config(data, "on", evaluation=True), on, ("--trace-samples",)),
        Run(_config(data, "off", evaluation=False), off, ("--trace-samples",)),
        Run(cfg, resumed, ("--save-interval", "6", "--kill-after-step", "7")),
    ]
    killed = outputs[resumed]
    latest_after_kill = (resumed / "checkpoints" / "latest").read_text()
    yield [Run(cfg, resumed, ("--save-interval", "6", "--resume", "auto"))]
    return {
        "data": data,
        "on": on,
        "off": off,
        "resumed": resumed,
        "killed": killed,
        "latest_after_kill": latest_after_kill,
    }


@pytest.fixture(scope="module")
def runs(shared_job: Any) -> dict[str, Any]:
    return shared_job(_runs)


@pytest.fixture(scope="module")
def data(runs: dict[str, Any]) -> dict[str, Path]:
    return runs["data"]


def _due_steps(rows: list[dict[str, Any]]) -> list[int]:
    """The steps after which an eval is due, recomputed from metrics.jsonl's cumulative tokens."""
    due, before = [], 0
    for row in rows:
        after = row["tokens"]
        crossed = before // INTERVAL < after // INTERVAL
        if crossed or any(before < end <= after for end in (FIRST, TOTAL)):
            due.append(row["step"])
        before = after
    return due


def _single_process_eval(model: Any, local: Path, num: int) -> tuple[float, int, list[bool]]:
    """Sum of next-token losses (nats), loss tokens and, per QA record, whether every answer
    token is the argmax, of a stream's first ``num`` samples (a QA record's prompt bears no
    loss)."""
    from curriculum_ds.data import close_stream, open_stream

    ds = open_stream(local)
    total, count, hits = 0.0, 0, []
    try:
        with torch.no_grad():
            for i in range(min(num, ds.num_samples)):
                sample = ds[i]
                ids = torch.tensor(np.asarray(sample["input_ids"][:64]), dtype=torch.int64)[None]
                start = int(sample.get("prompt_len", 1)) - 1  # the first loss-bearing position
                logits = model(ids).logits[0, start:-1].double()
                total += float(F.cross_entropy(logits, ids[0, start + 1 :], reduction="sum"))
                count += ids.shape[1] - 1 - start
                hits.append(bool((logits.argmax(-1) == ids[0, start + 1 :]).all()))
    finally:
        close_stream(ds)
    return total, count, hits


def test_evals_are_due_at_intervals_and_phase_ends_and_match_one_process(
    data: dict[str, Path], runs: dict[str, Any], tmp_path: Path
) -> None:
    from transformers import GPT2LMHeadModel

    from curriculum_ds.checkpoint.export import export_checkpoint

    run = runs["on"]
    rows = metrics(run)
    evals = read_jsonl(run / "eval.jsonl")
    assert [e["step"] for e in evals] == _due_steps(rows)
    by_step = {r["step"]: r for r in rows}
    for e in evals:
        assert e["tokens"] == by_step[e["step"]]["tokens"]
        assert e["phase"] == by_step[e["step"]]["phase"]
        assert set(e["streams"]) == {"web", "one", "qa"}
        assert e["eval_tokens"] == sum(s["tokens"] for s in e["streams"].values())
    # the phase end of "short" has its own eval, with the phase it ended
    first_end = next(r for r in rows if r["tokens"] >= FIRST)
    assert by_step[first_end["step"]]["phase_name"] == "short"
    assert any(e["step"] == first_end["step"] and e["phase_name"] == "short" for e in evals)

    # the last eval (run end) against the final checkpoint, evaluated by one plain process
    last = evals[-1]
    assert last["step"] == rows[-1]["step"]
    exported = export_checkpoint(
        run / "checkpoints", tmp_path / "model", ds_config=data["root"] / "on.json"
    )
    model = GPT2LMHeadModel.from_pretrained(exported.out).eval()
    sums: dict[str, tuple[float, int, list[bool]]] = {
        "web": _single_process_eval(model, data["val_web"], MAX_SAMPLES),
        "one": _single_process_eval(model, data["val_one"], MAX_SAMPLES),
        "qa": _single_process_eval(model, data["val_qa"], MAX_SAMPLES),
    }
    for name, (total, count, _) in sums.items():
        assert last["streams"][name]["tokens"] == count
        assert last["streams"][name]["loss"] == pytest.approx(total / count, abs=1e-5)
    hits = sums["qa"][2]
    assert len(hits) == 7
    for e in evals:  # every evaluation reports it; the last one equals the single process
        assert 0.0 <= e["streams"]["qa"]["exact_match"] <= 1.0
        assert "exact_match" not in e["streams"]["web"]
    assert last["streams"]["qa"]["exact_match"] == pytest.approx(sum(hits) / len(hits), abs=1e-12)
    overall = sum(t for t, _, _ in sums.values()) / sum(c for _, c, _ in sums.values())
    assert last["loss"] == pytest.approx(overall, abs=1e-5)
    # training moved the eval loss
    assert evals[0]["loss"] > last["loss"]


def test_eval_on_draws_the_same_training_batches_as_eval_off(runs: dict[str, Any]) -> None:
    on, off = runs["on"], runs["off"]
    assert trace(on) == trace(off)
    assert [r["loss"] for r in metrics(on)] == pytest.approx(
        [r["loss"] for r in metrics(off)], rel=1e-12
    )
    assert not (off / "eval.jsonl").exists()


def test_a_resumed_run_writes_the_evals_of_the_uninterrupted_run(runs: dict[str, Any]) -> None:
    run = runs["resumed"]
    assert runs["killed"].returncode != 0
    assert runs["latest_after_kill"] == "global_step6"

    def losses(row: dict[str, Any]) -> list[float]:
        return [row["loss"], *(s["loss"] for s in row["streams"].values())]

    def rest(row: dict[str, Any]) -> str:
        kept = {k: v for k, v in row.items() if k not in ("eval_time_s", "loss", "streams")}
        tokens = {n: s["tokens"] for n, s in row["streams"].items()}
        return json.dumps([kept, tokens], sort_keys=True)

    resumed, full = read_jsonl(run / "eval.jsonl"), read_jsonl(runs["on"] / "eval.jsonl")
    assert [rest(r) for r in resumed] == [rest(r) for r in full]
    # the continuation trains as the uninterrupted run (README: ~1e-7 relative, often bit-exact)
    for mine, theirs in zip(resumed, full, strict=True):
        assert losses(mine) == pytest.approx(losses(theirs), rel=1e-6)


def test_the_report_of_a_real_run(runs: dict[str, Any]) -> None:
    from click.testing import CliRunner

    from curriculum_ds.cli import main

    run = runs["on"]
    result = CliRunner().invoke(main, ["report", str(run), "--png", str(run / "r.png")])
    assert result.exit_code == 0, result.output
    assert (run / "r.png").stat().st_size > 50_000
    rows, evals = metrics(run), read_jsonl(run / "eval.jsonl")
    for phase, name in enumerate(("short", "mix")):
        mine = [r for r in rows if r["phase"] == phase]
        tokens = mine[-1]["tokens"] - (rows[rows.index(mine[0]) - 1]["tokens"] if phase else 0)
        assert f'phase {phase} "{name}": {tokens:,} tokens, {len(mine)} steps' in result.output
        last = [e for e in evals if e["phase"] == phase][-1]
        web = f"eval {last['streams']['web']['loss']:.4f} (step {last['step']})"
        assert web in result.output
