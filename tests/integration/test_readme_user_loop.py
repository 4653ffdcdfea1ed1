"""The user-loop script of ``docs/own-loop.md`` ("A complete script") runs as printed.

The script moved there from the README. The fenced block after the
``<!-- my_loop.py: ... -->`` comment is written to ``my_loop.py`` and launched as the page says
(``deepspeed --num_gpus 2 my_loop.py --deepspeed_config ds.json --run-dir ...``) on 2 CPU gloo
ranks over a 2-phase token schedule (1000 + 2000 tokens, global batch 8). Its ``metrics.jsonl``
must be the schedule: every step's token count equals the global batch the schedule draws
(replayed here with the phase loaders, swapping at the first step whose cumulative count reaches
1000), the run ends at the first step reaching 3000, and the script's checkpoint cadence left
``latest`` on the last step. A second launch of the same command resumes from that checkpoint and
trains nothing more.

From issues 10 and 18.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from helpers import REPO, make_dataset, ragged_docs, two_phase_curriculum, write_ds_config
from userloop_launch import launch_script

from curriculum_ds.config import load_config
from curriculum_ds.loader import PhaseLoader
from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

OWN_LOOP_PAGE = "docs/own-loop.md"
MARKER = "<!-- my_loop.py: tests/integration/test_readme_user_loop.py runs the next block"
GLOBAL_BATCH = 2 * 2 * 2  # micro-batch 2 x GAS 2 x 2 ranks
SAVE_INTERVAL = 5
BOUNDARY, MAX_DURATION = 1000, 3000


def documented_script() -> str:
    """The ```python block right after the marker comment of docs/own-loop.md, as printed."""
    text = (REPO / OWN_LOOP_PAGE).read_text()
    assert text.count(MARKER) == 1, f"the user-loop marker comment of {OWN_LOOP_PAGE} is missing"
    after = text[text.index(MARKER) :]
    match = re.match(r"<!--[^\n]*-->\n```python\n(.*?)\n```\n", after, re.DOTALL)
    assert match is not None, "no ```python block right after the marker"
    return match.group(1) + "\n"


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("readme_loop")
    script = root / "my_loop.py"
    script.write_text(documented_script())
    short = make_dataset(root, "short", ragged_docs(200, seed=1, min_len=10, max_len=40))
    long = make_dataset(root, "long", ragged_docs(200, seed=2, min_len=30, max_len=63))
    cfg = write_ds_config(root / "ds.json", two_phase_curriculum(short, long))
    args = ("--run-dir", "runs/mine", "--save-interval", str(SAVE_INTERVAL))
    first = launch_script(script, cfg, *args)
    rows = read_jsonl(root / "runs/mine/metrics.jsonl")
    again = launch_script(script, cfg, *args)
    return root, cfg, rows, first, again


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


def test_readme_block_is_the_script_with_the_documented_loop():
    script = documented_script()
    compile(script, "my_loop.py", "exec")
    for line in (
        "engine, curriculum = curriculum_ds.initialize(model=model, config=args.deepspeed_config)",
        "curriculum.load_checkpoint(ckpt_dir)",
        "for step in curriculum:",
        "for mb in step.micro_batches:",
        "logits = engine(mb.input_ids, attention_mask=mb.attention_mask)",
        "step.backward(logits, mb)",
        "record = step.finish()",
        "curriculum.save_checkpoint(ckpt_dir)",
        "parser.parse_known_args()",
    ):
        assert line in script
    assert "transformers" not in script  # the model is the script's own torch.nn.Module


def test_readme_loop_covers_the_schedule_with_the_exact_phase_swap(readme_run):
    _, cfg, rows, first, _ = readme_run
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
    assert f"done: step {num_steps}, {cumulative[-1]} tokens" in first.stdout
    assert "'--local_rank=1'" in first.stdout + first.stderr  # appended by the launcher


def test_readme_loop_checkpoints_and_resumes(readme_run):
    root, _, rows, _, again = readme_run
    num_steps = len(rows)
    ckpt = root / "runs/mine/checkpoints"
    tags = sorted(p.name for p in ckpt.glob("global_step*"))
    saved = {s for s in range(1, num_steps + 1) if s % SAVE_INTERVAL == 0} | {num_steps}
    assert tags == sorted(f"global_step{s}" for s in saved)
    assert (ckpt / "latest").read_text() == f"global_step{num_steps}"
    # the same command again: load_checkpoint restores the finished schedule, nothing is drawn
    assert read_jsonl(root / "runs/mine/metrics.jsonl") == rows
    assert f"done: step {num_steps}, {rows[-1]['tokens']} tokens" in again.stdout
