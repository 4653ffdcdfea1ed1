"""Resume rules (issue 4 item 6): a phase completed at the checkpoint cannot change."""

from __future__ import annotations

from typing import Any

from resume_sections import BASE, MID_MIX, edited, refused, save, set_durations

from curriculum_ds.checkpoint.rules import check_resume


def test_completed_phase_duration_edit_refused() -> None:
    cfg = edited(lambda r: set_durations(r, 900, 2100, 1000))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").duration: phase "short" is complete and cannot change '
        '(checkpoint has "1000tok", config has "900tok")',
    )


def test_completed_phase_stream_edit_refused() -> None:
    cfg = edited(
        lambda r: r["schedule"][0]["train_loader"]["streams"][1].__setitem__("local", "data/code")
    )
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.streams[1].local: phase "short" is '
        'complete and cannot change (checkpoint has "data/long", config has "data/code")',
    )


def test_completed_phase_stream_added_refused() -> None:
    cfg = edited(
        lambda r: r["schedule"][0]["train_loader"]["streams"].append({"local": "data/code"})
    )
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.streams: phase "short" is complete and '
        "cannot change (checkpoint has 2 items, config has 3 items)",
    )


def test_completed_phase_proportion_edit_refused() -> None:
    cfg = edited(
        lambda r: r["schedule"][0]["train_loader"]["streams"][0].__setitem__("proportion", 0.5)
    )
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.streams[0].proportion: phase "short" is '
        "complete and cannot change (checkpoint has 0.3, config has 0.5)",
    )


def test_completed_phase_max_seq_len_edit_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0]["train_loader"].__setitem__("max_seq_len", 512))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.max_seq_len: phase "short" is complete '
        "and cannot change (checkpoint has 256, config has 512)",
    )


def test_completed_phase_epoch_size_set_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0]["train_loader"].__setitem__("epoch_size", 100))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.epoch_size: phase "short" is complete '
        "and cannot change (checkpoint has null, config has 100)",
    )


def test_completed_phase_rename_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0].__setitem__("name", "warmup"))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("warmup").name: phase "short" is complete and cannot change '
        '(checkpoint has "short", config has "warmup")',
    )


def test_explicit_default_is_not_a_change() -> None:
    # writing out a default (name, max_seq_len) is the same phase
    def explicit(r: dict[str, Any]) -> None:
        r["schedule"][0]["train_loader"]["streams"][0]["name"] = "short"
        r["schedule"][2]["train_loader"]["epoch_size"] = None
        r["schedule"][0]["train_loader"]["seq_len_multiple"] = 8  # issue 32's key, at default
        r["schedule"][0]["train_loader"]["document_masking"] = True  # issue 32's, at default

    assert "seq_len_multiple" not in MID_MIX["phases"][0]["train_loader"]
    assert "document_masking" not in MID_MIX["phases"][0]["train_loader"]
    assert check_resume(edited(explicit), MID_MIX).phase_idx == 1


def test_completed_phase_seq_len_multiple_edit_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0]["train_loader"].__setitem__("seq_len_multiple", 16))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.seq_len_multiple: phase "short" is '
        "complete and cannot change (checkpoint has no value, config has 16)",
    )


def test_completed_phase_document_masking_turned_off_refused() -> None:
    cfg = edited(lambda r: r["schedule"][0]["train_loader"].__setitem__("document_masking", False))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule[0] ("short").train_loader.document_masking: phase "short" is '
        "complete and cannot change (checkpoint has no value, config has false)",
    )


def test_schedule_shorter_than_the_completed_phases_refused() -> None:
    saved = save(BASE, 3500)  # short, mix complete; cool in progress
    cfg = edited(lambda r: set_durations(r, 1000, keep=1))
    refused(
        cfg,
        saved,
        'curriculum.schedule: the checkpoint has completed 2 phase(s) ("short", "mix") but the '
        "config has only 1; completed phases cannot be removed",
    )


def test_current_phase_removed_refused() -> None:
    cfg = edited(lambda r: set_durations(r, 1000, keep=1))
    refused(
        cfg,
        MID_MIX,
        'curriculum.schedule: phase "mix" (schedule[1]) was in progress at the checkpoint '
        "(500tok consumed) but the config has only 1 phase(s)",
    )
