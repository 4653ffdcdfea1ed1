"""The user-loop script of ``docs/own-loop.md`` ("A complete script") runs as printed.

The fenced block after the ``<!-- my_loop.py: ... -->`` comment is written to ``my_loop.py`` and
launched as the page says (``curriculum-ds launch ds.json --num-gpus 2 --script my_loop.py --
--run-dir ...``) on 2 CPU gloo ranks over a 2-phase token schedule (1000 + 2000 tokens, global
batch 8). It is the ten-line loop on ``curriculum_ds.RunDir``. One module fixture launches it
three times:

1. SIGTERM to the launcher once step 1 is logged: every rank stops after the step in progress
   with its checkpoint, the launcher exits 0 and no process of the script is left after 30 s;
2. the same command again resumes from that checkpoint and runs to the end: its
   ``metrics.jsonl`` must be the schedule (every step's token count equals the global batch the
   schedule draws, replayed here with the phase loaders, swapping at the first step whose
   cumulative count reaches 1000; the run ends at the first step reaching 3000) and the
   script's checkpoint cadence left ``latest`` on the last step;
3. the same command once more trains nothing.

Two runs of the session's shared launched job (``tests/shared_job.py``, after the three
launches, which the module's ``@shared_runs`` generator makes) are the reference loop on the same
config and the same model (``--model-factory my_loop:build_model``, imported from the config's
folder as in a launch of its own): its ``metrics.jsonl`` equals the stopped-and-resumed
script's row for row (losses to 1e-6); and the reference loop on a model in nanoGPT's
convention (``--model-factory nanogpt_model:build``, tests/integration/nanogpt_model.py).

From issues 10, 18 and 24.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    REPO,
    make_dataset,
    metrics,
    ragged_docs,
    two_phase_curriculum,
    write_ds_config,
)
from shared_job import Outputs, Run, shared_runs
from userloop_launch import front_door, processes_running

from curriculum_ds.config import load_config
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

OWN_LOOP_PAGE = "docs/own-loop.md"
MARKER = "<!-- my_loop.py: tests/integration/test_readme_user_loop.py runs the next block"
GLOBAL_BATCH = 2 * 2 * 2  # micro-batch 2 x GAS 2 x 2 ranks
SAVE_INTERVAL = 5
BOUNDARY, MAX_DURATION = 1000, 3000
NOT_COMPARED = {"tokens_per_s", "data_wait_s", "prefetched"}
"""Wall-clock fields of a metrics row: the rest equals the reference loop's."""


def documented_script() -> str:
    """The ```python block right after the marker comment of docs/own-loop.md, as printed."""
    text = (REPO / OWN_LOOP_PAGE).read_text()
    assert text.count(MARKER) == 1, f"the user-loop marker comment of {OWN_LOOP_PAGE} is missing"
    after = text[text.index(MARKER) :]
    match = re.match(r"<!--[^\n]*-->\n```python\n(.*?)\n```\n", after, re.DOTALL)
    assert match is not None, "no ```python block right after the marker"
    return match.group(1) + "\n"


@shared_runs
def _runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    """The script's three launches through the front door (launches of their own), then the
    reference loop on its model and on a nanoGPT one in the session's shared job."""
    script = root / "my_loop.py"
    script.write_text(documented_script())
    short = make_dataset(root, "short", ragged_docs(200, seed=1, min_len=10, max_len=40))
    long = make_dataset(root, "long", ragged_docs(200, seed=2, min_len=30, max_len=63))
    # DeepSpeed's own FusedAdam (not the tests' torch_adam): the resume must continue its C++
    # kernel's running beta^t too (checkpoint/adam_powers.py), as a user's default config has it
    adam = {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": False}}
    cfg = write_ds_config(root / "ds.json", two_phase_curriculum(short, long), optimizer=adam)
    run = root / "runs/mine"
    args = ("--run-dir", "runs/mine", "--save-interval", str(SAVE_INTERVAL))
    stopped = front_door(script, cfg, *args, sigterm_after_step=1, metrics=run / "metrics.jsonl")
    deadline = time.monotonic() + 30
    while (left := processes_running(script)) and time.monotonic() < deadline:
        time.sleep(0.5)
    after_stop = {
        "latest": (run / "checkpoints" / "latest").read_text(),
        "steps": [r["step"] for r in metrics(run)],
        "left": left,
    }
    first = front_door(script, cfg, *args)
    rows = metrics(run)
    again = front_door(script, cfg, *args)
    reference, nanogpt = root / "reference", root / "nanogpt"
    # my_loop imports from the config's folder, as it would in a launch of its own (many_runs.py)
    outputs = yield [
        Run(cfg, reference, ("--model-factory", "my_loop:build_model")),
        Run(cfg, nanogpt, ("--model-factory", "nanogpt_model:build")),
    ]
    return {
        "root": root,
        "cfg": cfg,
        "rows": rows,
        "stopped": stopped,
        "after_stop": after_stop,
        "first": first,
        "again": again,
        "reference": metrics(reference),
        "nanogpt": (metrics(nanogpt), outputs[nanogpt]),
    }


@pytest.fixture(scope="module")
def readme_run(shared_job) -> dict[str, Any]:
    return shared_job(_runs)  # type: ignore[no-any-return]


def expected_step_tokens(cfg: Path, num_steps: int) -> list[tuple[str, int]]:
    """(phase name, non-padding tokens) of every step, replayed from the schedule's loaders."""
    run = load_config(cfg)
    boundaries = [BOUNDARY, MAX_DURATION]
    loaders: dict[int, PhaseLoader] = {}
    out, progress = [], 0
    try:
        for _ in range(num_steps):
            phase_idx = next(i for i, b in enumerate(boundaries) if progress < b)
            if phase_idx not in loaders:
                loaders[phase_idx] = PhaseLoader(
                    run.curriculum.schedule[phase_idx], phase_idx, seed=run.curriculum.seed
                )
            loader = loaders[phase_idx]
            tokens = loader.batch_tokens(loader.next_global_batch(GLOBAL_BATCH))
            out.append((run.curriculum.schedule[phase_idx].name, tokens))
            progress += tokens
    finally:
        for loader in loaders.values():
            loader.close()
    return out


def test_readme_block_is_the_ten_line_loop_on_run_dir():
    script = documented_script()
    compile(script, "my_loop.py", "exec")
    for line in (
        "engine, curriculum = curriculum_ds.initialize(model=model, config=args.deepspeed_config)",
        "with curriculum_ds.RunDir(args.run_dir, curriculum, save_interval=args.save_interval) as",
        "for step in run:",
        "for mb in step.micro_batches:",
        "logits = engine(mb.input_ids, **mb.forward_kwargs())",
        "step.backward(logits, mb)",
        "run.finish(step)",
        "parser.parse_known_args()",
    ):
        assert line in script
    assert "transformers" not in script  # the model is the script's own torch.nn.Module
    loop = script[script.index("engine, curriculum =") : script.index("run.finish(step)")]
    assert len(loop.splitlines()) + 1 <= 10  # initialize to finish: the loop in ten lines


def test_sigterm_to_the_launcher_checkpoints_the_step_and_exits_0(readme_run):
    code, out = readme_run["stopped"]
    assert code == 0, out[-3000:]
    steps, num_steps = readme_run["after_stop"]["steps"], len(readme_run["rows"])
    assert 1 <= steps[-1] < num_steps, steps  # stopped early, at a step boundary
    assert steps == list(range(1, steps[-1] + 1))
    assert readme_run["after_stop"]["latest"] == f"global_step{steps[-1]}"
    assert f"SIGTERM: stopped after step {steps[-1]}" in out
    assert f"stopped (SIGTERM) at step {steps[-1]}" in out
    assert "--script" not in out.splitlines()[0]  # the deepspeed command it printed and ran
    assert readme_run["after_stop"]["left"] == []  # no rank left running after 30 s


def test_readme_loop_covers_the_schedule_with_the_exact_phase_swap(readme_run):
    cfg, rows = readme_run["cfg"], readme_run["rows"]
    code, first = readme_run["first"]
    assert code == 0, first[-3000:]
    num_steps = len(rows)
    assert [r["step"] for r in rows] == list(range(1, num_steps + 1))
    expected = expected_step_tokens(cfg, num_steps)
    assert [(r["phase_name"], r["step_tokens"]) for r in rows] == expected
    cumulative = [r["tokens"] for r in rows]
    assert cumulative == [sum(t for _, t in expected[: i + 1]) for i in range(num_steps)]
    # phase "short" ends at the first step whose cumulative count reaches 1000
    last_short = max(i for i, r in enumerate(rows) if r["phase_name"] == "short")
    assert cumulative[last_short] >= BOUNDARY > cumulative[last_short - 1]
    assert rows[last_short + 1]["phase_name"] == "mix"
    assert [r["phase"] for r in rows] == [0] * (last_short + 1) + [1] * (num_steps - last_short - 1)
    # the run ends at the first step reaching max_duration
    assert cumulative[-1] >= MAX_DURATION > cumulative[-2]
    assert rows[-1]["samples"] == num_steps * GLOBAL_BATCH
    assert all(r["valid_tokens"] == r["step_tokens"] - GLOBAL_BATCH for r in rows)
    assert all(math.isfinite(r["loss"]) and r["step_applied"] for r in rows)
    assert sum(r["loss"] for r in rows[-3:]) < sum(r["loss"] for r in rows[:3])
    stopped_at = readme_run["after_stop"]["steps"][-1]
    done = f"finished at step {num_steps} ({num_steps - stopped_at} this run), {cumulative[-1]:,}"
    assert done in first
    assert "'--local_rank=1'" in first  # appended by the launcher


def test_readme_loop_checkpoints_and_resumes(readme_run):
    root, rows = readme_run["root"], readme_run["rows"]
    code, again = readme_run["again"]
    assert code == 0, again[-3000:]
    num_steps = len(rows)
    ckpt = root / "runs/mine/checkpoints"
    tags = sorted(p.name for p in ckpt.glob("global_step*"))
    saved = {s for s in range(1, num_steps + 1) if s % SAVE_INTERVAL == 0} | {num_steps}
    saved |= {readme_run["after_stop"]["steps"][-1]}  # the SIGTERM's checkpoint
    assert tags == sorted(f"global_step{s}" for s in saved)
    assert (ckpt / "latest").read_text() == f"global_step{num_steps}"
    # the same command again: the finished schedule is restored, nothing is drawn
    assert read_jsonl(root / "runs/mine/metrics.jsonl") == rows
    assert f"finished at step {num_steps} (0 this run), {rows[-1]['tokens']:,} tokens" in again


def _same_row(script_row: Any, reference_row: Any, rel_tol: float, path: str = "") -> None:
    """Equal, floats to ``rel_tol`` relative, wall-clock fields left out."""
    if isinstance(reference_row, dict):
        assert set(script_row) == set(reference_row), path
        for key in reference_row:
            if key not in NOT_COMPARED:
                _same_row(script_row[key], reference_row[key], rel_tol, f"{path}.{key}")
    elif isinstance(reference_row, float):
        assert math.isclose(script_row, reference_row, rel_tol=rel_tol, abs_tol=1e-12), path
    else:
        assert script_row == reference_row, path


def test_stopped_and_resumed_script_equals_the_reference_loop(readme_run):
    rows, reference = readme_run["rows"], readme_run["reference"]
    stopped_at = readme_run["after_stop"]["steps"][-1]
    assert 1 <= stopped_at < len(rows)  # rows on both sides of the resume
    assert len(rows) == len(reference)
    for script_row, reference_row in zip(rows, reference, strict=True):
        # before and after the SIGTERM's checkpoint: the same rows (1e-6; after the resume
        # it took DeepSpeed's FusedAdam's running beta^t replayed, issue 24 item 4: 1.1e-6
        # without it)
        _same_row(script_row, reference_row, 1e-6, f"step {reference_row['step']}")


def test_a_nanogpt_convention_model_trains_under_model_factory(readme_run):
    rows, output = readme_run["nanogpt"]
    assert output.returncode == 0
    assert [r["step"] for r in rows] == [r["step"] for r in readme_run["reference"]]
    assert [r["tokens"] for r in rows] == [r["tokens"] for r in readme_run["reference"]]
    assert all(math.isfinite(r["loss"]) and r["step_applied"] for r in rows)
    assert sum(r["loss"] for r in rows[-3:]) < sum(r["loss"] for r in rows[:3])
