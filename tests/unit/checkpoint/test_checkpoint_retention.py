"""``--keep-last N`` keeps the newest N tags, never the one ``latest`` names,
and a prune killed mid-delete leaves a folder that resumes (curriculum_ds.checkpoint.retention).

From issue 14, item 5.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import curriculum_ds.checkpoint.retention as retention
from curriculum_ds.checkpoint.files import locate_checkpoint
from curriculum_ds.checkpoint.retention import TRASH_PREFIX, checkpoint_tags, prune_checkpoints


def _checkpoints(root: Path, steps: list[int], latest: int | None) -> Path:
    ckpts = root / "checkpoints"
    for step in steps:
        tag = ckpts / f"global_step{step}"
        tag.mkdir(parents=True)
        (tag / "mp_rank_00_model_states.pt").write_bytes(b"x" * 10)
        (tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"y" * 10)
    if latest is not None:
        (ckpts / "latest").write_text(f"global_step{latest}")
    (ckpts / "zero_to_fp32.py").write_text("# DeepSpeed's script\n")
    return ckpts


def test_tags_are_ordered_by_step_not_by_name(tmp_path):
    ckpts = _checkpoints(tmp_path, [10, 9, 100, 2], latest=100)
    (ckpts / f"{TRASH_PREFIX}global_step1-7").mkdir()
    assert checkpoint_tags(ckpts) == [
        "global_step2",
        "global_step9",
        "global_step10",
        "global_step100",
    ]


def test_keeps_the_newest_n_tags(tmp_path):
    ckpts = _checkpoints(tmp_path, list(range(1, 11)), latest=10)
    assert prune_checkpoints(ckpts, keep_last=2) == [f"global_step{s}" for s in range(1, 9)]
    assert checkpoint_tags(ckpts) == ["global_step9", "global_step10"]
    assert (ckpts / "latest").read_text() == "global_step10"
    assert (ckpts / "zero_to_fp32.py").is_file()  # other files are left alone
    assert not list(ckpts.glob(TRASH_PREFIX + "*"))


def test_never_deletes_the_tag_latest_names(tmp_path):
    # resumed from step 3 while newer tags of an earlier attempt remain
    ckpts = _checkpoints(tmp_path, [1, 2, 3, 4, 5], latest=3)
    prune_checkpoints(ckpts, keep_last=1)
    assert checkpoint_tags(ckpts) == ["global_step3"]
    ckpts2 = _checkpoints(tmp_path / "b", [1, 2, 3, 4, 5], latest=3)
    prune_checkpoints(ckpts2, keep_last=2)
    assert checkpoint_tags(ckpts2) == ["global_step3", "global_step5"]


@pytest.mark.parametrize("latest", [None, 7])
def test_without_a_valid_latest_nothing_is_deleted(tmp_path, latest):
    ckpts = _checkpoints(tmp_path, [1, 2, 3], latest=latest)
    assert prune_checkpoints(ckpts, keep_last=1) == []
    assert len(checkpoint_tags(ckpts)) == 3


def test_a_prune_killed_mid_delete_leaves_a_resumable_folder_and_its_trash_goes_next_time(
    tmp_path, monkeypatch
):
    ckpts = _checkpoints(tmp_path, [1, 2, 3], latest=3)

    class Killed(BaseException):
        pass

    def killed_mid_delete(path: Path) -> None:
        next(path.iterdir()).unlink()  # part of the trash removed, then the process dies
        raise Killed

    monkeypatch.setattr(retention, "_remove_trash", killed_mid_delete)
    with pytest.raises(Killed):
        prune_checkpoints(ckpts, keep_last=1)
    # the tag being deleted is already out of the way: whole tags and a valid `latest` remain
    assert checkpoint_tags(ckpts) == ["global_step2", "global_step3"]
    assert [p.name for p in ckpts.glob(TRASH_PREFIX + "*")] == [
        f"{TRASH_PREFIX}global_step1-{os.getpid()}"
    ]
    assert locate_checkpoint(ckpts) == (ckpts, "global_step3")
    monkeypatch.undo()
    assert prune_checkpoints(ckpts, keep_last=1) == ["global_step2"]
    assert checkpoint_tags(ckpts) == ["global_step3"]
    assert not list(ckpts.glob(TRASH_PREFIX + "*"))


def test_keep_last_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="keep_last must be >= 1, got 0"):
        prune_checkpoints(tmp_path, keep_last=0)


def test_a_missing_folder_is_nothing_to_prune(tmp_path):
    assert prune_checkpoints(tmp_path / "none", keep_last=2) == []
    assert checkpoint_tags(tmp_path / "none") == []


def test_a_deleted_tags_universal_copy_goes_with_it(tmp_path):
    # an elastic resume from step 1 converted it (curriculum_ds.checkpoint.universal)
    ckpts = _checkpoints(tmp_path, [1, 2, 3], latest=3)
    for step in (1, 3):
        (ckpts / f"global_step{step}_universal" / "zero").mkdir(parents=True)
    assert prune_checkpoints(ckpts, keep_last=1) == ["global_step1", "global_step2"]
    assert not (ckpts / "global_step1_universal").exists()
    assert (ckpts / "global_step3_universal" / "zero").is_dir()  # its tag is kept
    assert checkpoint_tags(ckpts) == ["global_step3"]  # a universal copy is not a tag
    assert not list(ckpts.glob(TRASH_PREFIX + "*"))
