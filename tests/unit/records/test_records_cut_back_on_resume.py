"""A resumed run's records hold one row per step: the JSONL files, DeepSpeed's CSV monitor (one
header, atomic) and TensorBoard (``purge_step``), read back with real writers and readers; and the
readers keep the last row per step of a run dir written before the cuts existed.

From issue 24, item 3.
"""

from __future__ import annotations

import csv
import json
import re

import pytest
from monitor_readers import read_csv_monitor

from curriculum_ds.records.jsonl import (
    JsonlWriter,
    RunLog,
    last_row_per_step,
    read_jsonl,
    truncate_jsonl,
    truncate_records,
)
from curriculum_ds.records.monitors import CurriculumMonitor, resume_monitors, truncate_csv


def _metrics(step, loss):
    return {"step": step, "loss": loss, "lr": 1e-3, "tokens": 10 * step, "phase": 0, "streams": {}}


def test_truncate_records_cuts_every_record_file_and_a_user_file(tmp_path):
    names = ["metrics.jsonl", "eval.jsonl", "curriculum_history.jsonl", "sample_trace.jsonl"]
    for name in [*names, "mine.jsonl"]:
        w = JsonlWriter(tmp_path / name)
        for step in range(1, 7):
            w.write({"step": step})
        w.close()
    (tmp_path / "metrics.jsonl").open("a").write('{"step": 7, "lo')  # a partial last line
    done = truncate_records(tmp_path, 4, extra=["mine.jsonl"])
    assert sorted(p.name for p in done) == sorted([*names, "mine.jsonl"])
    for name in [*names, "mine.jsonl"]:
        assert [r["step"] for r in read_jsonl(tmp_path / name)] == [1, 2, 3, 4], name
    assert not list(tmp_path.glob("*.tmp"))
    # RunLog of a resumed run cuts the same files (absent ones stay absent)
    (tmp_path / "sample_trace.jsonl").unlink()
    RunLog(tmp_path, resumed_step=2, history=True, trace=False, evaluation=True).close()
    assert [r["step"] for r in read_jsonl(tmp_path / "eval.jsonl")] == [1, 2]
    assert not (tmp_path / "sample_trace.jsonl").exists()


def test_truncate_csv_keeps_one_header_and_the_rows_up_to_the_cut(tmp_path):
    path = tmp_path / "curriculum_loss.csv"
    path.write_text("step,loss\n1,0.5\n2,0.4\n3,0.3\nstep,loss\n3,0.31\n4,0.2\n")
    assert truncate_csv(path, 2)
    assert path.read_text().splitlines() == ["step,loss", "1,0.5", "2,0.4"]
    headless = tmp_path / "x.csv"
    headless.write_text("1,2\n5,6\n")
    assert not truncate_csv(headless, 3)
    assert headless.read_text().splitlines() == ["1,2"]


def _master(tmp_path, monkeypatch):
    import deepspeed.comm
    from deepspeed.monitor.config import get_monitor_config
    from deepspeed.monitor.monitor import MonitorMaster

    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda *a, **k: 0)
    config = get_monitor_config(
        {
            "tensorboard": {"enabled": True, "output_path": str(tmp_path / "tb"), "job_name": "j"},
            "csv_monitor": {"enabled": True, "output_path": str(tmp_path / "csv"), "job_name": "j"},
        }
    )
    return MonitorMaster(config)


def _write_run(master, steps, loss_offset):
    monitor = CurriculumMonitor.for_engine(type("Engine", (), {"monitor": master})())
    assert monitor is not None
    for step in steps:
        master.write_events([("Train/Samples/lr", 1e-3, 8 * step)])  # DeepSpeed's own, x=samples
        monitor.write_step(_metrics(step, loss_offset + step))
    master.tb_monitor.summary_writer.flush()


def test_a_resume_leaves_one_row_per_step_in_csv_and_tensorboard(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing import event_accumulator

    first = _master(tmp_path, monkeypatch)
    _write_run(first, range(1, 6), 0.0)  # killed after step 5; the checkpoint is step 3
    first.tb_monitor.summary_writer.close()
    resumed = _master(tmp_path, monkeypatch)  # a new process: DeepSpeed's monitor anew
    resume_monitors(resumed, 3, 24)
    _write_run(resumed, range(4, 7), 100.0)
    resumed.tb_monitor.summary_writer.close()

    csv_dir = tmp_path / "csv" / "j"
    with open(csv_dir / "curriculum_loss.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["step", "loss"]
    assert [int(r[0]) for r in rows[1:]] == [1, 2, 3, 4, 5, 6]  # one header, one row per step
    series = read_csv_monitor(csv_dir)
    assert series["curriculum_loss"] == {1: 1.0, 2: 2.0, 3: 3.0, 4: 104.0, 5: 105.0, 6: 106.0}
    assert sorted(series["Train_Samples_lr"]) == [8, 16, 24, 32, 40, 48]  # cut at samples 24
    for path in csv_dir.glob("*.csv"):
        assert path.read_text().count("step,") == 1, path.name

    acc = event_accumulator.EventAccumulator(
        str(tmp_path / "tb" / "j"), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    events = acc.Scalars("curriculum/loss")
    assert [e.step for e in events] == [1, 2, 3, 4, 5, 6]
    assert [e.value for e in events] == pytest.approx([1, 2, 3, 104, 105, 106])


def test_resume_monitors_without_writers_is_a_no_op():
    resume_monitors(None, 3, 24)
    resume_monitors(type("M", (), {"enabled": False})(), 3, 24)


def test_last_row_per_step_keeps_the_last_written():
    rows = [{"step": 1, "v": 1}, {"step": 2, "v": 2}, {"step": 3, "v": 3}, {"step": 2, "v": 20}]
    rows += [{"step": 3, "v": 30}, {"v": 0}, {"step": 4, "v": 4}]
    assert last_row_per_step(rows) == [
        {"step": 1, "v": 1},
        {"step": 2, "v": 20},
        {"step": 3, "v": 30},
        {"step": 4, "v": 4},
    ]


def _duplicated_run_dir(tmp_path):
    """A run dir of a resume before the cuts: steps 3-4 written twice (the second time wins)."""
    rows = [
        {**_metrics(s, 5.0 - s), "phase_name": "a", "samples": 8 * s, "skipped": False}
        for s in (1, 2, 3, 4)
    ]
    rows += [{**r, "loss": r["loss"] - 0.5} for r in rows[2:]]
    rows += [{**_metrics(5, 0.1), "phase_name": "a", "samples": 40, "skipped": False}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hist = [{"step": s, "phase": 0, "weights": [0.5, 0.5]} for s in (2, 4)]
    hist += [{"step": 4, "phase": 0, "weights": [0.25, 0.75]}]
    (tmp_path / "curriculum_history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hist))
    return tmp_path


def test_report_and_curve_read_one_row_per_step(tmp_path):
    from curriculum_ds.commands.curve import load_curve
    from curriculum_ds.commands.report import load_report

    run_dir = _duplicated_run_dir(tmp_path)
    report = load_report(run_dir)
    assert [r["step"] for r in report.metrics] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in report.metrics] == [4.0, 3.0, 1.5, 0.5, 0.1]
    assert [r["step"] for r in report.history] == [2, 4]
    curve = load_curve(run_dir)
    assert curve.steps == [2, 4]
    assert curve.weights == [[0.5, 0.5], [0.25, 0.75]]


def test_a_corrupt_line_before_the_last_is_named_and_a_cut_back_keeps_the_lines_after_it(
    tmp_path,
):
    """A crash leaves at most a partial last line; a corrupt line with complete lines after it
    (a failed write the run went past, an edit) was read as the end of the file, silently
    dropping every later row from curve and report. Readers now refuse it, naming the line; a
    resume's cut-back drops that line only. Blank lines are skipped."""
    from curriculum_ds.errors import DataError

    path = tmp_path / "curriculum_history.jsonl"
    path.write_text('{"step": 1}\n\n{"step": 2, "wei\n{"step": 3}\n[4]\n{"step": 5}\n{"step": 6, ')
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))} line 3: not a JSON object"):
        read_jsonl(path)
    assert [r["step"] for r in read_jsonl(path, skip_corrupt=True)] == [1, 3, 5]
    truncate_jsonl(path, 5)
    assert [r["step"] for r in read_jsonl(path)] == [1, 3, 5]
    # a corrupt or partial LAST line stays a crash's: ignored
    path.write_text('{"step": 1}\n{"step": 2}\n\x00\x00garbage\n')
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]
