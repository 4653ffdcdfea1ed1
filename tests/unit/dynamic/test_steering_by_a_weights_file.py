"""``dynamic.method: "file"``: an operator's weights file, read at boundaries, journaled, replayed.

In one process (no process group: rank 0 decides in place): the file's weights normalised over
the phase's streams, every bad read keeping the previous weights with one line, the journal
written before an update is handed out, a resume replaying it for the steps it re-runs (the
file deleted) and reading the file again past its end, a fresh start emptying it, and the
method's saved state.

From issue 33 (item 6).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from curriculum_ds.config import DynamicConfig
from curriculum_ds.dynamic import FileReweighter, PhaseView, make_reweighter, parse_dynamic_state
from curriculum_ds.dynamic.state import StreamFileState
from curriculum_ds.dynamic.steering import read_weights
from curriculum_ds.errors import ConfigError, CurriculumError
from curriculum_ds.records.journal import JOURNAL_NAME, MixtureJournal
from curriculum_ds.records.jsonl import read_jsonl

STREAMS = ("code", "web", "books")
NATURAL = np.array([0.5, 0.3, 0.2])
EVERY = 2


def _cfg(path: Path) -> DynamicConfig:
    return DynamicConfig(
        enabled=True,
        unit="streams",
        method="file",
        file={"path": str(path)},
        recompute_every_n_steps=EVERY,
    )


def _view(run_dir: Path | None, *, phase_idx: int = 0, streams: tuple[str, ...] = STREAMS):
    k = len(streams)
    return PhaseView(
        phase_idx=phase_idx,
        stream_names=streams,
        proportions=NATURAL[:k] / NATURAL[:k].sum(),
        num_samples=(10,) * k,
        metrics=({},) * k,
        run_dir=run_dir,
    )


def _started(tmp_path: Path, saved: Any = None) -> FileReweighter:
    method = make_reweighter(_cfg(tmp_path / "mix.json"))
    assert isinstance(method, FileReweighter)
    assert method.start_phase(_view(tmp_path / "run"), saved).proportions is None
    return method


def _write(path: Path, weights: Any) -> str:
    text = weights if isinstance(weights, str) else json.dumps(weights)
    path.write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def _journal(tmp_path: Path) -> list[dict[str, Any]]:
    return read_jsonl(tmp_path / "run" / JOURNAL_NAME)


def _decision(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "time"}


# -------------------------------------------------------------------------- reading the file
def test_the_files_weights_are_normalised_over_the_phases_streams(tmp_path):
    path = tmp_path / "mix.json"
    sha = _write(path, {"books": 1, "code": 6, "web": 3.0})  # another key order than the phase's
    read = read_weights(path, STREAMS)
    assert read.reason is None
    assert read.sha256 == sha
    assert read.weights is not None
    assert read.weights.tolist() == [6 / 10, 3 / 10, 1 / 10]
    assert read.weights.dtype == np.float64
    # a sum that is no round number: each weight divided by the float64 sum
    _write(path, {"code": 1e-3, "web": 7.25, "books": 1 / 3})
    total = np.float64(1e-3) + np.float64(7.25) + np.float64(1 / 3)
    weights = read_weights(path, STREAMS).weights
    assert weights is not None
    assert weights.tolist() == [1e-3 / total, 7.25 / total, (1 / 3) / total]
    assert abs(weights.sum() - 1.0) <= 1e-15


BAD = {
    "missing": (None, "not found"),
    "folder": ("<folder>", "cannot be read"),
    "not_json": ('{"code": 1, "web": ', "not JSON (line 1 column 20: Expecting value)"),
    "not_utf8": (b"\xff\xfe{", "not UTF-8 text"),
    "a_list": ("[0.5, 0.3, 0.2]", "not a JSON object of stream name → weight (a list)"),
    "missing_stream": ({"code": 1, "web": 1}, 'no weight for stream(s) "books"'),
    "unknown_stream": (
        {"code": 1, "web": 1, "books": 1, "news": 1},
        '"news": not a stream of the phase ("code", "web", "books")',
    ),
    "zero": ({"code": 1, "web": 0, "books": 1}, 'weight of "web" is 0: every weight must be a'),
    "negative": ({"code": 1, "web": 1, "books": -2}, 'weight of "books" is -2: every weight'),
    "string": ({"code": "1", "web": 1, "books": 1}, 'weight of "code" is "1": every weight'),
    "bool": ({"code": True, "web": 1, "books": 1}, 'weight of "code" is true: every weight'),
    "null": ({"code": None, "web": 1, "books": 1}, 'weight of "code" is null: every weight'),
    "nan": ('{"code": NaN, "web": 1, "books": 1}', 'weight of "code" is NaN: every weight'),
    "infinite": ('{"code": 1e999, "web": 1, "books": 1}', 'weight of "code" is Infinity'),
    "sum_overflows": ({"code": 1e308, "web": 1e308, "books": 1}, "the weights sum to inf"),
}


def _put(path: Path, content: Any) -> None:
    """Put ``content`` at ``path``: None deletes it, "<folder>" makes a folder there."""
    if content is None:
        path.unlink(missing_ok=True)
    elif content == "<folder>":
        path.unlink(missing_ok=True)
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        _write(path, content)


@pytest.mark.parametrize("case", BAD)
def test_a_bad_read_keeps_the_previous_weights_with_one_line(tmp_path, capsys, case):
    content, reason = BAD[case]
    method = _started(tmp_path)
    path = tmp_path / "mix.json"
    good = _write(path, {"code": 1, "web": 1, "books": 2})
    applied = method.maybe_recompute(EVERY)
    assert applied is not None
    assert applied.proportions is not None
    assert applied.proportions.tolist() == [0.25, 0.25, 0.5]
    capsys.readouterr()
    _put(path, content)
    kept = method.maybe_recompute(2 * EVERY)
    assert kept is not None
    assert kept.proportions is None
    assert kept.record is not None
    assert kept.record["kept_previous"] is True
    assert kept.record["reason"].startswith(reason), kept.record["reason"]
    assert kept.record["weights"] == [0.25, 0.25, 0.5]
    assert method.probs.tolist() == [0.25, 0.25, 0.5]
    assert method.sha256 == good
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"curriculum_ds: warning: step {2 * EVERY}: mix file {path}: {kept.record['reason']}; "
        "keeping the previous weights"
    ]
    row = _journal(tmp_path)[-1]
    assert row["step"] == 2 * EVERY
    assert row["kept_previous"] is True
    assert row["reason"] == kept.record["reason"]
    assert row["weights"] == [0.25, 0.25, 0.5]
    unreadable = case in ("missing", "folder")
    assert (row["sha256"] is None) == unreadable
    assert kept.record["source"] == {"path": str(path), "sha256": row["sha256"]}


def test_a_missing_file_at_the_start_keeps_the_phases_proportions_until_it_appears(
    tmp_path, capsys
):
    method = _started(tmp_path)
    first, second = method.maybe_recompute(EVERY), method.maybe_recompute(2 * EVERY)
    assert first is not None
    assert second is not None
    assert first.record
    assert second.record
    assert first.record["weights"] == second.record["weights"] == NATURAL.tolist()
    assert first.record["kept_previous"]
    assert second.record["reason"] == "not found"
    assert len(capsys.readouterr().err.splitlines()) == 1  # once while the same problem lasts
    sha = _write(tmp_path / "mix.json", {"code": 2, "web": 1, "books": 1})
    third = method.maybe_recompute(3 * EVERY)
    assert third is not None
    assert third.proportions is not None
    assert third.proportions.tolist() == [0.5, 0.25, 0.25]
    assert third.record == {
        "method": "file",
        "unit": "streams",
        "streams": list(STREAMS),
        "weights": [0.5, 0.25, 0.25],
        "scores": None,
        "source": {"path": str(tmp_path / "mix.json"), "sha256": sha},
    }
    (tmp_path / "mix.json").unlink()
    method.maybe_recompute(4 * EVERY)
    assert len(capsys.readouterr().err.splitlines()) == 1  # missing again: a new line


def test_only_boundaries_read_the_file(tmp_path):
    method = _started(tmp_path)
    _write(tmp_path / "mix.json", {"code": 1, "web": 1, "books": 1})
    assert [method.maybe_recompute(s) is None for s in (1, 3, 5)] == [True] * 3
    assert _journal(tmp_path) == []
    assert method.maybe_recompute(EVERY) is not None
    assert [r["step"] for r in _journal(tmp_path)] == [EVERY]
    assert method.num_recomputes == 1


# ------------------------------------------------------------------------------- the journal
def _steer(method: FileReweighter, path: Path, edits: dict[int, Any], steps: range) -> list[Any]:
    """Run ``method`` over ``steps``, editing the file after the steps in ``edits`` (None:
    delete); returns each boundary's (proportions, record)."""
    out = []
    for step in steps:
        update = method.maybe_recompute(step)
        if update is not None:
            proportions = None if update.proportions is None else update.proportions.tolist()
            out.append((step, proportions, update.record))
        if step in edits:
            _put(path, edits[step])  # None: delete the file
    return out


def test_a_resume_replays_the_journal_with_the_file_deleted_then_reads_it_again(tmp_path):
    path = tmp_path / "mix.json"
    edits = {3: {"code": 1, "web": 1, "books": 8}, 5: {"code": 6, "web": 3, "books": 1}}
    # after the kill point: the file deleted after step 10, a new one after step 13
    later: dict[int, Any] = {10: None, 13: {"code": 1, "web": 2, "books": 1}}

    def fresh(run: str) -> FileReweighter:
        method = make_reweighter(_cfg(path))
        assert isinstance(method, FileReweighter)
        method.start_phase(_view(tmp_path / run), None)
        return method

    uninterrupted = _steer(fresh("A"), path, edits | later, range(1, 17))
    journal = [_decision(r) for r in read_jsonl(tmp_path / "A" / JOURNAL_NAME)]
    assert [r["step"] for r in journal] == [2, 4, 6, 8, 10, 12, 14, 16]
    kept = [r["kept_previous"] for r in journal]
    assert kept == [True, False, False, False, False, True, False, False]
    assert len({r["sha256"] for r in journal if not r["kept_previous"]}) == 3

    path.unlink()
    killed = fresh("B")
    _steer(killed, path, edits, range(1, 9))
    saved = parse_dynamic_state(killed.state().to_dict())  # the checkpoint of step 8
    _steer(killed, path, {}, range(9, 11))  # killed after step 10, before its checkpoint
    path.unlink()  # the file deleted before the resume
    resumed = make_reweighter(_cfg(path))
    assert isinstance(resumed, FileReweighter)
    resumed.start_phase(_view(tmp_path / "B"), saved)
    continued = _steer(resumed, path, later, range(9, 17))
    # step 10 replayed from the journal (the file is gone), 12-16 read again: the whole run's
    assert continued == [u for u in uninterrupted if u[0] >= 9]
    assert continued[0][1] == [0.6, 0.3, 0.1]
    # a replayed step is not journaled twice; the steps past its end were read and appended
    assert [_decision(r) for r in read_jsonl(tmp_path / "B" / JOURNAL_NAME)] == journal


def test_a_fresh_start_empties_the_journal_of_a_used_run_dir(tmp_path):
    _write(tmp_path / "mix.json", {"code": 1, "web": 1, "books": 1})
    first = _started(tmp_path)
    first.maybe_recompute(EVERY)
    _write(tmp_path / "mix.json", {"code": 3, "web": 1, "books": 1})
    again = _started(tmp_path)  # no saved state: a fresh start, nothing replayed
    assert _journal(tmp_path) == []  # emptied at the start, before any boundary
    update = again.maybe_recompute(EVERY)
    assert update is not None
    assert update.proportions is not None
    assert update.proportions.tolist() == [0.6, 0.2, 0.2]
    assert [r["weights"] for r in _journal(tmp_path)] == [[0.6, 0.2, 0.2]]


def test_a_crash_mid_line_is_cut_off_before_the_next_append(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    whole = {"step": 2, "phase": 0, "weights": [1.0], "kept_previous": False}
    (run / JOURNAL_NAME).write_text(json.dumps(whole) + '\n{"step": 4, "pha')
    journal = MixtureJournal.open(run, fresh=False)
    assert journal.entries == {2: whole}
    journal.append({"step": 4, "phase": 0})
    assert read_jsonl(run / JOURNAL_NAME) == [whole, {"step": 4, "phase": 0}]


def test_a_journal_line_of_other_streams_is_read_again_with_one_line(tmp_path, capsys):
    killed = _started(tmp_path)
    _write(tmp_path / "mix.json", {"code": 1, "web": 1, "books": 1})
    killed.maybe_recompute(EVERY)
    state = killed.state()
    _write(tmp_path / "mix.json", {"code": 1, "web": 3})
    resumed = make_reweighter(_cfg(tmp_path / "mix.json"))
    resumed.start_phase(_view(tmp_path / "run", phase_idx=1, streams=("code", "web")), state)
    capsys.readouterr()
    update = resumed.maybe_recompute(EVERY)  # the journal's step-2 line is of phase 0
    assert update is not None
    assert update.proportions is not None
    assert update.proportions.tolist() == [0.25, 0.75]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "written for another phase; reading" in err[0]
    assert _journal(tmp_path)[-1]["weights"] == [0.25, 0.75]  # the last line of a step counts


def test_an_unwritable_journal_stops_the_update_before_it_is_applied(tmp_path):
    (tmp_path / "run").write_text("a file where the run dir should be")
    method = make_reweighter(_cfg(tmp_path / "mix.json"))
    with pytest.raises(CurriculumError, match="run"):  # the journal opens at the phase start
        method.start_phase(_view(tmp_path / "run"), None)
    ok = _started(tmp_path / "ok")
    _write(tmp_path / "ok" / "mix.json", {"code": 1, "web": 1, "books": 1})
    journal = tmp_path / "ok" / "run" / JOURNAL_NAME
    journal.unlink()
    journal.mkdir()  # a journal that cannot be appended (a folder: refused to root as well)
    with pytest.raises(CurriculumError, match=JOURNAL_NAME):
        ok.maybe_recompute(EVERY)
    assert ok.probs.tolist() == NATURAL.tolist()  # nothing applied without its journal line


def test_a_run_without_a_run_dir_is_one_line(tmp_path):
    method = make_reweighter(_cfg(tmp_path / "mix.json"))
    with pytest.raises(ConfigError, match=r"^curriculum.dynamic.method: \"file\" journals every"):
        method.start_phase(_view(None), None)


# --------------------------------------------------------------------------------- the state
def test_the_state_round_trips_and_restores_the_weights_inside_the_phase(tmp_path):
    method = _started(tmp_path)
    sha = _write(tmp_path / "mix.json", {"code": 1, "web": 2, "books": 1})
    method.maybe_recompute(EVERY)
    saved = method.state().to_dict()
    assert saved == {
        "unit": "streams",
        "method": "file",
        "phase_idx": 0,
        "probs": saved["probs"],
        "num_recomputes": 1,
        "method_keys": {"path": str(tmp_path / "mix.json")},
        "file": {"path": str(tmp_path / "mix.json"), "sha256": sha},
    }
    assert saved["probs"].tolist() == [0.25, 0.5, 0.25]
    state = parse_dynamic_state(saved)
    assert isinstance(state, StreamFileState)
    assert state.window_capacity is None
    assert state.to_dict()["file"] == saved["file"]
    assert state.probs.tolist() == saved["probs"].tolist()
    same_phase = make_reweighter(_cfg(tmp_path / "mix.json"))
    same_phase.start_phase(_view(tmp_path / "run"), state)
    assert (same_phase.probs.tolist(), same_phase.sha256) == ([0.25, 0.5, 0.25], sha)
    assert same_phase.num_recomputes == 1
    next_phase = make_reweighter(_cfg(tmp_path / "mix.json"))
    next_phase.start_phase(_view(tmp_path / "run", phase_idx=1), state)  # only the count
    assert (next_phase.probs.tolist(), next_phase.sha256) == (NATURAL.tolist(), None)
    assert next_phase.num_recomputes == 1


def test_a_malformed_file_state_is_one_line_naming_the_key():
    with pytest.raises(CurriculumError, match=r"dynamic\.file"):
        parse_dynamic_state(
            {"unit": "streams", "method": "file", "probs": [1.0], "num_recomputes": 0}
        )
