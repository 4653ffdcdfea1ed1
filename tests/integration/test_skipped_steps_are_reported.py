"""A run whose steps have no loss-bearing tokens says so at its end (the reference loop's summary).

A step without a single loss-bearing token anywhere (every shifted label is -100) is skipped: no
loss, no update, its samples consumed. The run must not finish as if it had trained: the summary
counts the skipped steps and a warning on stderr says how many of the run's steps were skipped,
or that all were. The end-to-end run draws only one-token samples (no next token to predict), as
in ``test_steps_without_loss_tokens.py``, in a single process without ``--no-progress`` and with
its output captured: the log line (a file or pipe gets lines, not a progress bar) must show a
skipped step instead of failing on its missing loss.
"""

from __future__ import annotations

import pytest
from helpers import make_dataset, metrics, run_train_module, write_ds_config

import curriculum_ds.data.writer as data_module
from curriculum_ds.train import skipped_steps_warning

CAUSE = (
    "no loss-bearing tokens (every label is -100 after the shift), so they did not update the model"
)


def test_skipped_steps_warning_counts_some_and_says_all() -> None:
    assert skipped_steps_warning(0, 0) is None
    assert skipped_steps_warning(0, 7) is None
    assert skipped_steps_warning(2, 3) == (
        f"curriculum_ds: warning: 2 of 3 optimizer steps of this run were skipped because they "
        f"had {CAUSE}"
    )
    assert skipped_steps_warning(1, 1000) == (
        f"curriculum_ds: warning: 1 of 1000 optimizer steps of this run were skipped because "
        f"they had {CAUSE}"
    )
    assert skipped_steps_warning(4, 4) == (
        f"curriculum_ds: warning: ALL 4 optimizer steps of this run were skipped: they had "
        f"{CAUSE}; check the data's labels (e.g. samples of one token, or a mask that covers "
        "everything)"
    )
    for bad in ((3, 2), (-1, 2), (0, -1)):
        with pytest.raises(ValueError, match="need 0 <= num_skipped <= num_steps"):
            skipped_steps_warning(*bad)


@pytest.mark.distributed
def test_a_run_whose_every_step_is_skipped_warns_at_its_end(tmp_path) -> None:
    with pytest.MonkeyPatch.context() as mp:  # cut every document into one-token samples
        mp.setattr(
            data_module, "split_document", lambda ids, *_: [ids[i : i + 1] for i in range(ids.size)]
        )
        ones = make_dataset(tmp_path, "ones", ["one token per sample"], max_seq_len=2, min_tokens=1)
    loader = {"streams": [{"local": str(ones)}], "max_seq_len": 32}
    curriculum = {
        "max_duration": "1000tok",
        "seed": 3,
        "schedule": [{"name": "empty", "duration": "1000tok", "train_loader": loader}],
    }
    cfg = write_ds_config(
        tmp_path / "ds.json",
        curriculum,
        train_micro_batch_size_per_gpu=1,
        gradient_accumulation_steps=2,
    )
    run_dir = tmp_path / "run"
    proc = run_train_module(
        "--deepspeed_config", str(cfg), "--run-dir", str(run_dir), "--max-steps", "3", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["skipped"] for r in rows] == [True, True, True]
    assert [r["valid_tokens"] for r in rows] == [0, 0, 0]
    assert "finished at step 3 (3 this run)" in proc.stdout
    assert "  skipped:     3 of 3 steps (no loss-bearing tokens; `skipped` in metrics.jsonl)" in (
        proc.stdout.splitlines()
    )
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("curriculum_ds: warning:")]
    assert warnings == [skipped_steps_warning(3, 3)]
    assert "ALL 3 optimizer steps of this run were skipped" in warnings[0]
    # stderr is not a terminal here: no progress bar, one log line per interval on stdout (the
    # first step's included), which shows a skipped step instead of failing on its missing loss
    log_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("curriculum_ds: step ")]
    assert log_lines, proc.stdout
    assert "| loss skipped |" in log_lines[0]
