"""A dataset folder reads nothing outside itself (issue 31, item 2).

``index.json`` shard names are plain file names (no ``/`` or ``\\``, not ``.``/``..``, not
absolute), for local and remote streams alike; a shard that is a symbolic link or not a regular
file is refused. Each refusal is one line naming the shard.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from prepared_mds import TEXT_A, write

from curriculum_ds.data import prepare, read_stream_info, sync_stream_metadata
from curriculum_ds.data.index import is_plain_file_name
from curriculum_ds.data.remote import _drop_stale_shards
from curriculum_ds.errors import DataError


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("names")
    prepare([write(root / "a.txt", TEXT_A * 4)], root / "ds", max_seq_len=16)
    return root / "ds"


def _copy_with_basename(prepared: Path, out: Path, basename: str) -> Path:
    shutil.copytree(prepared, out)
    index = json.loads((out / "index.json").read_text())
    index["shards"][0]["raw_data"]["basename"] = basename
    (out / "index.json").write_text(json.dumps(index))
    return out


def test_plain_file_names_only() -> None:
    assert is_plain_file_name("shard.00000.mds")
    assert is_plain_file_name("..shard")  # dots inside a name are fine
    for name in ("", ".", "..", "../x.mds", "/etc/passwd", "a/b", "a\\b", "x\0y", "sub/"):
        assert not is_plain_file_name(name), name


@pytest.mark.parametrize(
    "basename", ["../outside.mds", "ABSOLUTE", "..", "sub\\shard.mds", "sub/shard.mds"]
)
def test_a_shard_name_with_a_path_is_refused_naming_the_shard(
    prepared: Path, tmp_path: Path, basename: str
) -> None:
    outside = tmp_path / "outside.mds"
    shutil.copy(prepared / "shard.00000.mds", outside)  # a readable file, as in the break-in
    name = str(outside) if basename == "ABSOLUTE" else basename
    ds = _copy_with_basename(prepared, tmp_path / "trav", name)
    with pytest.raises(DataError) as caught:
        read_stream_info(ds)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"MDS index {ds / 'index.json'}: shards[0].raw_data.basename ")
    assert "must be a plain file name inside the dataset folder" in message
    assert repr(name) in message


def test_a_remote_index_naming_a_path_is_refused_and_deletes_nothing_outside(
    prepared: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim.mds"
    victim.write_bytes(b"keep me")
    remote = _copy_with_basename(prepared, tmp_path / "remote", "../victim.mds")
    with pytest.raises(DataError, match=r"shards\[0\]\.raw_data\.basename must be a plain file"):
        sync_stream_metadata(tmp_path / "cache", str(remote))
    # an earlier index in a cache folder that named a path: its shards are not removed
    _drop_stale_shards(tmp_path / "cache", (remote / "index.json").read_bytes())
    index = json.loads((remote / "index.json").read_text())
    index["shards"][0]["raw_data"]["basename"] = str(victim)
    _drop_stale_shards(tmp_path / "cache", json.dumps(index).encode())
    assert victim.read_bytes() == b"keep me"


def test_a_symlinked_or_special_shard_is_refused(prepared: Path, tmp_path: Path) -> None:
    linked = tmp_path / "linked"
    shutil.copytree(prepared, linked)
    shard = linked / "shard.00000.mds"
    real = tmp_path / "real.mds"
    shard.rename(real)
    shard.symlink_to(real)  # same bytes, but outside the folder
    with pytest.raises(DataError, match=r"shard file shard\.00000\.mds is a symbolic link$"):
        read_stream_info(linked)
    shard.unlink()
    os.mkfifo(shard)
    with pytest.raises(DataError, match=r"shard file shard\.00000\.mds is not a regular file$"):
        read_stream_info(linked)
    shard.unlink()
    shard.mkdir()
    with pytest.raises(DataError, match=r"shard file shard\.00000\.mds is not a regular file$"):
        read_stream_info(linked)
