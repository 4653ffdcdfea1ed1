"""``curriculum-ds curve RUN_DIR [--png FILE]``; a history survives a crash.

From issue 6, item 7.
"""

from __future__ import annotations

import json

import matplotlib.image as mpimg
import numpy as np
import pytest
from click.testing import CliRunner

from curriculum_ds.cli import main
from curriculum_ds.commands.curve import PHASE_START_NOTE, load_curve, render_png, render_table
from curriculum_ds.errors import DataError
from curriculum_ds.records.jsonl import JsonlWriter, read_jsonl, truncate_jsonl


def _write_run(
    run_dir, *, num_steps=40, every=4, boundary=17, partial_line=True, with_metrics=True
):
    run_dir.mkdir(parents=True, exist_ok=True)
    names = ["short", "mix"]
    if with_metrics:
        writer = JsonlWriter(run_dir / "metrics.jsonl")
        for step in range(1, num_steps + 1):
            phase = int(step >= boundary)
            writer.write({"step": step, "phase": phase, "phase_name": names[phase], "loss": 1.0})
        writer.close()
    writer = JsonlWriter(run_dir / "curriculum_history.jsonl")
    rng = np.random.default_rng(0)
    for step in range(every, num_steps + 1, every):
        phase = int(step >= boundary)
        z = np.exp(rng.normal(size=4))
        weights = (0.05 + 0.8 * z / z.sum()).tolist()
        writer.write(
            {
                "step": step,
                "phase": phase,
                "phase_name": names[phase],
                "weights": weights,
                "scores": [1.0] * 4,
                "floor": 0.05,
                "temperature": 0.5,
            }
        )
    writer.close()
    if partial_line:  # a crash in the middle of a write
        with open(run_dir / "curriculum_history.jsonl", "a", encoding="utf-8") as f:
            f.write('{"step": 44, "phase": 1, "weights": [0.1, 0.')
    return run_dir


def test_curve_command_prints_a_table_and_writes_a_png(tmp_path):
    run = _write_run(tmp_path / "run")
    png = tmp_path / "out" / "weights.png"
    result = CliRunner().invoke(main, ["curve", str(run), "--png", str(png)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("bucket weights (4 buckets")
    assert "floor 0.05" in lines[0]
    assert lines[1].split() == ["step", "phase", "b0", "b1", "b2", "b3"]
    rows = [ln.split() for ln in lines[3:] if ln.strip() and ln.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == list(range(4, 41, 4))  # the partial line is left out
    assert rows[0][1] == "short"
    assert rows[-1][1] == "mix"
    for r in rows:
        assert abs(sum(float(w) for w in r[2:]) - 1) < 0.003  # 3 decimals each
    assert "phases: short from step 1, mix from step 17" in result.output
    assert PHASE_START_NOTE in result.output  # issue 14 item 8: the weights at a phase start
    assert f"plot: {png}" in result.output
    image = mpimg.imread(png)
    assert image.shape[2] in (3, 4)
    assert image.shape[:2] == (550, 1100)  # 10 x 5 inches at 110 dpi
    assert image[..., :3].std() > 0.05  # not a blank canvas


def test_png_marks_the_phase_boundary(tmp_path):
    run = _write_run(tmp_path / "run")
    curve = load_curve(run)
    assert curve.phase_starts == [(1, "short"), (17, "mix")]
    png = render_png(curve, tmp_path / "c.png")
    image = mpimg.imread(png)[..., :3]
    # the second phase is shaded grey: the plot area right of the boundary is darker than left
    h, w, _ = image.shape
    row = image[int(h * 0.55)]
    grey = np.all(np.abs(row - row[:, :1]) < 0.02, axis=1) & (row[:, 0] > 0.9) & (row[:, 0] < 0.97)
    assert grey.sum() > 0.2 * w


def test_default_png_goes_into_the_run_folder(tmp_path):
    run = _write_run(tmp_path / "run")
    result = CliRunner().invoke(main, ["curve", str(run)])
    assert result.exit_code == 0, result.output
    assert (run / "curriculum_curve.png").is_file()


def test_partial_last_line_is_ignored_and_a_resume_truncates_it(tmp_path):
    run = _write_run(tmp_path / "run")
    path = run / "curriculum_history.jsonl"
    assert not path.read_text().endswith("\n")
    records = read_jsonl(path)
    assert [r["step"] for r in records] == list(range(4, 41, 4))
    # a resume from the checkpoint of step 24 keeps lines up to it and drops the partial one
    truncate_jsonl(path, 24)
    text = path.read_text()
    assert text.endswith("\n")
    assert [json.loads(line)["step"] for line in text.splitlines()] == [4, 8, 12, 16, 20, 24]
    # and the writer of the resumed run appends after complete lines only
    writer = JsonlWriter(path)
    writer.write({"step": 28, "phase": 1, "weights": [0.25] * 4})
    writer.close()
    assert [r["step"] for r in read_jsonl(path)] == [4, 8, 12, 16, 20, 24, 28]


def test_history_without_metrics_takes_phases_from_itself(tmp_path):
    run = _write_run(tmp_path / "run", with_metrics=False, partial_line=False)
    curve = load_curve(run)
    assert curve.phase_starts == [(1, "short"), (20, "mix")]  # first recompute in "mix": 20
    assert curve.last_step == 40
    assert render_png(curve, tmp_path / "x.png").is_file()


def test_table_is_thinned_but_keeps_first_and_last(tmp_path):
    run = _write_run(tmp_path / "run", num_steps=400, every=1, boundary=100)
    table = render_table(load_curve(run), max_rows=12)
    steps = [int(ln.split()[0]) for ln in table.splitlines() if ln.split()[0].isdigit()]
    assert steps[0] == 1
    assert steps[-1] == 400
    assert len(steps) <= 13


def test_missing_or_empty_history_is_one_clean_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    result = CliRunner().invoke(main, ["curve", str(run)])
    assert result.exit_code == 1
    assert "no curriculum history (was curriculum.dynamic.enabled true?)" in result.output
    assert "Traceback" not in result.output
    (run / "curriculum_history.jsonl").write_text('{"step": 3, "weig')  # only a partial line
    with pytest.raises(DataError, match="the history is empty"):
        load_curve(run)


@pytest.mark.parametrize(
    ("bad", "shown"), [(float("nan"), "nan"), (float("inf"), "inf"), (None, "None")]
)
def test_a_non_finite_weight_is_refused_naming_the_step_and_bucket(tmp_path, bad, shown):
    """A NaN (or inf, or missing) weight means a corrupt history: refused, never plotted."""
    run = _write_run(tmp_path / "run", partial_line=False)
    path = run / "curriculum_history.jsonl"
    records = read_jsonl(path)
    records[2]["weights"][1] = bad  # line 3: step 12, bucket 1
    # json writes NaN/Infinity (as training would); read_jsonl reads them back as floats
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [r["step"] for r in read_jsonl(path)][2] == 12
    expected = (
        f"{path}: line 3 (step 12): weight of bucket 1 is {shown}; "
        "bucket weights must be finite numbers"
    )
    with pytest.raises(DataError) as info:
        load_curve(run)
    assert str(info.value) == expected
    png = tmp_path / "w.png"
    result = CliRunner().invoke(main, ["curve", str(run), "--png", str(png)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"Error: {expected}"]  # click's one line
    assert not png.exists()


def test_bucket_count_changing_at_a_phase_boundary_is_tabled_and_plotted(tmp_path):
    """The resume rules let num_buckets change when a new phase starts: 4 buckets, then 6."""
    run = tmp_path / "run"
    run.mkdir()
    writer = JsonlWriter(run / "curriculum_history.jsonl")
    for step, weights in [(4, [0.25] * 4), (8, [0.4, 0.3, 0.2, 0.1]), (12, [1 / 6] * 6)]:
        phase = int(step >= 12)
        writer.write({"step": step, "phase": phase, "phase_name": f"p{phase}", "weights": weights})
    writer.close()
    curve = load_curve(run)
    table = render_table(curve).splitlines()
    assert table[0].startswith("bucket weights (4 → 6 buckets")
    assert table[1].split() == ["step", "phase", "b0", "b1", "b2", "b3", "b4", "b5"]
    assert table[3].split() == ["4", "p0", "0.250", "0.250", "0.250", "0.250", "-", "-"]
    assert table[5].split() == ["12", "p1"] + ["0.167"] * 6
    png = render_png(curve, tmp_path / "c.png")
    assert mpimg.imread(png)[..., :3].std() > 0.05
