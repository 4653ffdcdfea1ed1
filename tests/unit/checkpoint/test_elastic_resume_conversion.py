"""The decisions of curriculum_ds.checkpoint.universal without ranks: when a
checkpoint is converted to DeepSpeed's universal format, and a failed conversion is one line that
leaves nothing behind. (The conversions themselves run on real ranks in
tests/integration/test_elastic_resume.py.)

From issue 13, item 1.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from curriculum_ds.checkpoint import universal
from curriculum_ds.checkpoint.files import open_tag
from curriculum_ds.errors import ResumeError


def _tag(root: Path, *, dp_world_size: int, optim: bool) -> Path:
    tag = root / "checkpoints" / "global_step4"
    tag.mkdir(parents=True)
    torch.save(
        {"dp_world_size": dp_world_size, "curriculum": None}, tag / "mp_rank_00_model_states.pt"
    )
    if optim:  # a torch file the safe loader reads, but no ZeRO shard DeepSpeed can convert
        torch.save({"not": "a ZeRO shard"}, tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    return tag


def _engine(dp_world_size: int) -> SimpleNamespace:
    return SimpleNamespace(dp_world_size=dp_world_size, seq_dp_world_size=dp_world_size)


def test_reads_the_recorded_world_size(tmp_path):
    assert universal.saved_dp_world_size(_tag(tmp_path, dp_world_size=2, optim=True)) == 2


@pytest.mark.parametrize(
    ("saved", "current", "optim"),
    [(2, 2, True), (2, 1, False)],  # same world size; ZeRO-0 (no optimizer shards)
)
def test_loads_as_it_is_without_conversion(tmp_path, saved, current, optim):
    tag = _tag(tmp_path, dp_world_size=saved, optim=optim)
    assert universal.prepare(_engine(current), open_tag(tag.parent, tag.name)) is None
    assert sorted(p.name for p in tag.parent.iterdir()) == ["global_step4"]


def test_a_failed_conversion_is_one_line_and_leaves_nothing(tmp_path):
    tag = _tag(tmp_path, dp_world_size=2, optim=True)
    before = sorted(p.name for p in tag.iterdir())
    with pytest.raises(ResumeError) as err:
        universal.prepare(_engine(1), open_tag(tag.parent, tag.name))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tag}: written on 2 data-parallel ranks, this run has 1")
    assert "cannot convert it to its universal format" in msg
    assert sorted(p.name for p in tag.parent.iterdir()) == ["global_step4"]  # no temp, no copy
    assert sorted(p.name for p in tag.iterdir()) == before  # the original is untouched


def test_universal_load_switches_the_flag_for_one_load_only():
    seen = []
    config = SimpleNamespace(load_universal_checkpoint=False)

    def load_checkpoint(load_dir, tag):
        seen.append((load_dir, tag, config.load_universal_checkpoint))
        return load_dir, {"curriculum": None}

    engine = SimpleNamespace(_config=config, load_checkpoint=load_checkpoint)
    assert universal.load(engine, Path("/ck"), "global_step4_universal")[0] == "/ck"
    assert seen == [("/ck", "global_step4_universal", True)]
    assert config.load_universal_checkpoint is False


def test_a_conversion_older_than_its_tag_is_redone(tmp_path, monkeypatch):
    tag = _tag(tmp_path, dp_world_size=2, optim=True)
    stale = tag.parent / "global_step4_universal"
    (stale / "zero").mkdir(parents=True)
    converted = []
    monkeypatch.setattr(universal, "_convert", lambda src, dst: converted.append(dst))
    os.utime(stale, ns=(0, 0))  # converted before the tag was (re)written
    assert universal.prepare(_engine(1), open_tag(tag.parent, tag.name)) == stale.name
    assert converted == [stale]
    (stale / "zero").mkdir(parents=True)  # a fresh conversion is reused as it is
    converted.clear()
    assert universal.prepare(_engine(1), open_tag(tag.parent, tag.name)) == stale.name
    assert converted == []
