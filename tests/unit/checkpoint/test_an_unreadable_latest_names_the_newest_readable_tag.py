"""A ``latest`` naming an unreadable tag names the newest readable one (issue 31, item 6).

The break-in report's F8: ``latest`` rewritten by an outside copy to name a half-written tag
(its model states file cut short) while the previous whole tag is still there. The one-line
refusal also names the newest readable tag beside it and the exact ``--resume`` option, and that
option resumes from it. "Newest" is by the step number of the tag's name (global_step10 after
global_step9), and a tag that is unreadable too, or carries a code payload, is passed over.
(The reference loop prints it for a real ZeRO-2 tag:
tests/integration/test_checkpoint_failures_are_one_line.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from crafted_checkpoints import MODEL_STATES, crafted_tag

from curriculum_ds.checkpoint.files import locate_checkpoint, open_tag, resume_target
from curriculum_ds.errors import ResumeError


def half_written(ckpts: Path, tag: str) -> Path:
    """A whole tag ``tag`` with its model states cut to 3/5 (a kill mid-copy), named by latest."""
    folder = crafted_tag(ckpts, ckpts / "MARKER", payload_in="none", tag=tag)
    states = folder / MODEL_STATES
    states.write_bytes(states.read_bytes()[: states.stat().st_size * 3 // 5])
    return folder


def refusal(ckpts: Path) -> str:
    with pytest.raises(ResumeError) as err:
        open_tag(*locate_checkpoint(ckpts))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_the_refusal_names_the_previous_whole_tag_and_its_resume_option(tmp_path):
    ckpts = tmp_path / "checkpoints"
    crafted_tag(ckpts, ckpts / "MARKER", payload_in="none", tag="global_step3")
    half = half_written(ckpts, "global_step4")
    message = refusal(ckpts)
    assert message.startswith(f"{half / MODEL_STATES}: cannot be read (")
    assert message.endswith(
        f"; the newest readable tag there is global_step3: `--resume {ckpts / 'global_step3'}` "
        "continues from it"
    )
    # the option it names resumes from that tag
    option = message.rsplit("`--resume ", 1)[1].split("`")[0]
    assert resume_target(option, tmp_path / "run") == (ckpts, "global_step3")
    assert open_tag(ckpts, "global_step3").global_steps == 2


def test_newest_is_by_step_number_and_unreadable_tags_are_passed_over(tmp_path):
    ckpts = tmp_path / "checkpoints"
    for step in (9, 10):
        crafted_tag(ckpts, ckpts / "MARKER", payload_in="none", tag=f"global_step{step}")
    crafted_tag(ckpts, ckpts / "MARKER", payload_in="optimizer_states", tag="global_step11")
    half_written(ckpts, "global_step11x")  # ends in no step number: older than any step
    half_written(ckpts, "global_step12")
    assert refusal(ckpts).endswith(
        f"; the newest readable tag there is global_step10: `--resume {ckpts / 'global_step10'}` "
        "continues from it"
    )
    assert not (ckpts / "MARKER").exists()  # global_step11 was tried by the safe loader only


def test_a_latest_naming_a_missing_tag_names_it_too(tmp_path):
    ckpts = tmp_path / "checkpoints"
    crafted_tag(ckpts, ckpts / "MARKER", payload_in="none", tag="global_step3")
    (ckpts / "latest").write_text("global_step9")
    assert refusal(ckpts) == (
        f"{ckpts / 'latest'} names 'global_step9', which is not a folder there; the newest "
        f"readable tag there is global_step3: `--resume {ckpts / 'global_step3'}` continues "
        "from it"
    )


def test_no_other_readable_tag_is_said(tmp_path):
    ckpts = tmp_path / "checkpoints"
    half_written(ckpts, "global_step2")
    half_written(ckpts, "global_step4")
    assert refusal(ckpts).endswith("; no other tag there is readable")
