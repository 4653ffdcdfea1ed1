"""Remote streams (issue 12 part 3): ``remote`` beside ``local``, against a real S3 server.

A moto S3 server on localhost (tests/object_store.py) and a plain folder are the remotes. The
loader reads the same tokens as from the local copy, downloads only through mosaicml-streaming
(checked against the recorded sha1), and every failure is one line naming the stream: a stopped
server and a deleted shard at ``validate``, a shard lost or corrupt mid-run at ``fetch``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import one_error_line, ragged_docs, write_ds_config
from object_store import delete_object, s3_server, upload_folder

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import PhaseConfig, parse_curriculum
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.data import prepare, sync_stream_metadata
from curriculum_ds.data.remote import hash_algorithm, list_remote
from curriculum_ds.errors import ConfigError, DataError, DownloadError
from curriculum_ds.preflight import check_streams


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return _sharded(tmp_path_factory.mktemp("remote_src"), ragged_docs(150, seed=3, max_len=60))


def _sharded(root: Path, docs: list[str]) -> Path:
    """A prepared dataset ``root/web`` of several shards (8 KiB each)."""
    src = root / "web.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    prepare([src], root / "web", max_seq_len=64, min_tokens=2, size_limit=8192)
    return root / "web"


def _shards(folder: Path) -> list[str]:
    index = json.loads((folder / "index.json").read_text())
    return [s["raw_data"]["basename"] for s in index["shards"]]


def _phase(local: Path, remote: str | None) -> PhaseConfig:
    stream: dict[str, Any] = {"local": str(local)}
    if remote is not None:
        stream["remote"] = remote
    return PhaseConfig.model_validate(
        {"name": "p", "duration": "1ep", "train_loader": {"streams": [stream], "max_seq_len": 64}}
    )


def _all_tokens(phase: PhaseConfig) -> list[np.ndarray]:
    loader = PhaseLoader(phase, 0, seed=7)
    try:
        n = loader.infos[0].num_samples
        return loader.fetch(np.stack([np.zeros(n, np.int64), np.arange(n)], axis=1))
    finally:
        loader.close()


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_a_plain_folder_remote_reads_the_local_tokens(dataset, tmp_path):
    cache = tmp_path / "cache" / "web"
    local_tokens = _all_tokens(_phase(dataset, None))
    assert _same(_all_tokens(_phase(cache, str(dataset))), local_tokens)
    # the cache got the index, the sidecars, the tokenizer's files (export copies them) and
    # (through streaming) every shard read
    assert {
        "index.json",
        "curriculum_meta.json",
        "metrics.npz",
        "tokenizer.json",
        "tokenizer_config.json",
    } <= {p.name for p in cache.iterdir()}
    assert all((cache / name).is_file() for name in _shards(dataset))
    assert len(_shards(dataset)) >= 2


def test_an_s3_remote_reads_the_local_tokens_and_checks_sha1(dataset, tmp_path, monkeypatch):
    with s3_server(monkeypatch) as server:
        url = upload_folder(server, dataset, "s3://bucket/data/web")
        index = sync_stream_metadata(tmp_path / "cache", url)
        assert hash_algorithm(index) == "sha1"  # what prepare records; streaming checks it
        for name in ("tokenizer.json", "tokenizer_config.json"):  # what export copies
            assert (tmp_path / "cache" / name).read_bytes() == (dataset / name).read_bytes()
        tokens = _all_tokens(_phase(tmp_path / "cache", url))
        assert _same(tokens, _all_tokens(_phase(dataset, None)))

        # a shard of the right size but other bytes fails its hash when downloaded
        bad = tmp_path / "bad"
        shutil.copytree(dataset, bad)
        first = bad / _shards(bad)[0]
        data = bytearray(first.read_bytes())
        data[-1] ^= 0xFF
        first.write_bytes(bytes(data))
        url = upload_folder(server, bad, "s3://bucket/bad/web")
        with pytest.raises(DownloadError, match=r"stream 'web' \(remote s3://bucket/bad/web.*"):
            _all_tokens(_phase(tmp_path / "cache_bad" / "web", url))
        # streaming keeps a shard that failed its hash; the loader removes it from the cache
        assert not (tmp_path / "cache_bad" / "web" / first.name).exists()


def test_a_shard_lost_mid_run_is_one_line_naming_the_stream(dataset, tmp_path):
    remote = tmp_path / "remote" / "web"
    shutil.copytree(dataset, remote)
    loader = PhaseLoader(_phase(tmp_path / "cache" / "web", str(remote)), 0, seed=7)
    try:
        last = loader.infos[0].num_samples - 1
        (remote / _shards(remote)[-1]).unlink()  # after the loader started, before its download
        with pytest.raises(DownloadError) as info:
            loader.fetch(np.array([[0, last]], dtype=np.int64))
    finally:
        loader.close()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"stream 'web' (remote {remote}, cache ")
    assert f"cannot read sample {last}" in message


def _validate_line(tmp_path: Path, local: Path, remote: str) -> str:
    curriculum = {
        "max_duration": "500tok",
        "schedule": [
            {
                "name": "only",
                "duration": "500tok",
                "train_loader": {
                    "streams": [{"local": str(local), "remote": remote, "name": "web"}],
                    "max_seq_len": 64,
                },
            }
        ],
    }
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    return one_error_line(CliRunner().invoke(cli_main, ["validate", str(cfg)]))


def test_validate_names_the_stream_when_the_s3_server_is_down(dataset, tmp_path, monkeypatch):
    with s3_server(monkeypatch) as server:
        url = upload_folder(server, dataset, "s3://bucket/web")
        cfg_ok = write_ds_config(
            tmp_path / "ok.json",
            {
                "max_duration": "500tok",
                "schedule": [
                    {
                        "name": "only",
                        "duration": "500tok",
                        "train_loader": {
                            "streams": [{"local": str(tmp_path / "c" / "web"), "remote": url}],
                            "max_seq_len": 64,
                        },
                    }
                ],
            },
        )
        result = CliRunner().invoke(cli_main, ["validate", str(cfg_ok)])
        assert result.exit_code == 0, result.output
        server.stop()
        line = _validate_line(tmp_path, tmp_path / "c" / "web", url)
    assert line.startswith(
        'Error: curriculum.schedule[0] ("only").train_loader.streams[0].remote: '
        'stream "web" (s3://bucket/web): remote s3://bucket/web cannot be listed: '
        "Could not connect to the endpoint URL"
    ), line


def test_validate_names_the_stream_when_a_shard_is_deleted(dataset, tmp_path, monkeypatch):
    missing = _shards(dataset)[1]
    with s3_server(monkeypatch) as server:
        url = upload_folder(server, dataset, "s3://bucket/web")
        delete_object(server, f"{url}/{missing}")
        line = _validate_line(tmp_path, tmp_path / "c" / "web", url)
    assert line == (
        'Error: curriculum.schedule[0] ("only").train_loader.streams[0].remote: '
        f'stream "web" (s3://bucket/web): remote s3://bucket/web: shard file {missing} '
        "(shards[1]) is missing"
    )
    folder = tmp_path / "folder"
    shutil.copytree(dataset, folder)
    (folder / missing).unlink()
    line = _validate_line(tmp_path, tmp_path / "c2" / "web", str(folder))
    assert line.endswith(f"remote {folder}: shard file {missing} (shards[1]) is missing"), line
    nowhere = tmp_path / "nowhere"
    line = _validate_line(tmp_path, tmp_path / "c3" / "web", str(nowhere))
    assert f'stream "web" ({nowhere}): remote {nowhere} cannot be listed: ' in line, line


def test_a_changed_remote_index_refreshes_the_cache(dataset, tmp_path):
    remote = tmp_path / "remote"
    shutil.copytree(dataset, remote)
    cache = tmp_path / "cache"
    assert _all_tokens(_phase(cache, str(remote)))
    cached = cache / _shards(remote)[0]
    assert cached.is_file()
    shutil.rmtree(remote)
    other = _sharded(tmp_path, ragged_docs(60, seed=9))
    shutil.copytree(other, remote)
    sync_stream_metadata(cache, str(remote))
    assert not cached.exists() or cached.read_bytes() == (other / cached.name).read_bytes()
    assert _same(_all_tokens(_phase(cache, str(remote))), _all_tokens(_phase(other, None)))


@pytest.mark.parametrize(
    ("remote", "message"),
    [
        ("http://host/x", "scheme 'http' is not supported"),
        ("s3:///prefix", "names no bucket"),
    ],
)
def test_a_bad_remote_is_refused_naming_the_field(remote, message):
    curriculum = {
        "max_duration": "1ep",
        "schedule": [
            {
                "name": "p",
                "duration": "1ep",
                "train_loader": {"streams": [{"local": "cache", "remote": remote}]},
            }
        ],
    }
    with pytest.raises(ConfigError, match=r"schedule\[0\].*streams\[0\]\.remote: " + message):
        parse_curriculum(curriculum)


def test_a_local_stream_dumps_as_before_and_a_remote_one_keeps_it():
    # the checkpoints' phase dumps (the resume rules' identity of a phase's data)
    assert (
        "remote"
        not in _phase(Path("a"), None).model_dump(mode="json")["train_loader"]["streams"][0]
    )
    dumped = _phase(Path("a"), "s3://b/p").model_dump(mode="json")
    assert dumped["train_loader"]["streams"][0]["remote"] == "s3://b/p"
    assert PhaseConfig.model_validate(dumped) == _phase(Path("a"), "s3://b/p")


def test_sync_refuses_a_remote_without_index(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"has no index.json \(not an MDS dataset\)"):
        sync_stream_metadata(tmp_path / "cache", str(tmp_path / "empty"))


def test_prepare_uploads_to_an_empty_s3_prefix_only(tmp_path, monkeypatch):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in ragged_docs(40, seed=4)))
    args = [str(src), "--max-seq-len", "64", "--out"]
    local = tmp_path / "local"
    assert CliRunner().invoke(cli_main, ["prepare", *args, str(local)]).exit_code == 0
    with s3_server(monkeypatch) as server:
        server.client().create_bucket(Bucket="out")
        result = CliRunner().invoke(cli_main, ["prepare", *args, "s3://out/web"])
        assert result.exit_code == 0, result.output
        assert result.output.splitlines()[0].endswith("to s3://out/web")  # then the padding line
        files = list_remote("s3://out/web")
        assert files == {p.name: p.stat().st_size for p in local.iterdir()}
        tokens = _all_tokens(_phase(tmp_path / "cache", "s3://out/web"))
        assert _same(tokens, _all_tokens(_phase(local, None)))
        line = one_error_line(CliRunner().invoke(cli_main, ["prepare", *args, "s3://out/web"]))
        assert line == (
            f"Error: remote s3://out/web: not empty ({len(files)} file(s), e.g. "
            "curriculum_meta.json); prepare writes only to an empty prefix"
        )
        line = one_error_line(CliRunner().invoke(cli_main, ["prepare", *args, "s3://nobucket/x"]))
        assert line.startswith("Error: remote s3://nobucket/x cannot be listed: "), line
    line = one_error_line(CliRunner().invoke(cli_main, ["prepare", *args, "http://host/x"]))
    assert line == "Error: remote http://host/x: expected s3://bucket/prefix or gs://bucket/prefix"


def test_a_second_sync_keeps_the_stamped_sidecars(dataset, tmp_path):
    cache = tmp_path / "cache"
    sync_stream_metadata(cache, str(dataset))
    inode = (cache / "metrics.npz").stat().st_ino
    sync_stream_metadata(cache, str(dataset))
    assert (cache / "metrics.npz").stat().st_ino == inode  # not downloaded again
    (cache / ".curriculum_ds_synced").unlink()  # e.g. another process still downloading
    sync_stream_metadata(cache, str(dataset))
    assert (cache / "metrics.npz").stat().st_ino != inode


def test_one_cache_folder_for_two_remotes_is_refused(dataset, tmp_path):
    def phase(name: str, remote: str) -> dict[str, Any]:
        stream = {"local": str(tmp_path / "cache"), "remote": remote, "name": "web"}
        return {"name": name, "duration": "1ep", "train_loader": {"streams": [stream]}}

    cfg = parse_curriculum(
        {
            "max_duration": "2ep",
            "schedule": [phase("a", str(dataset)), phase("b", "s3://x/2")],
        }
    )
    with pytest.raises(ConfigError) as info:
        check_streams(cfg)
    assert str(info.value) == (
        'curriculum.schedule[1] ("b").train_loader.streams[0].remote: "s3://x/2", but '
        'schedule[0] ("a").train_loader.streams[0] reads the same local '
        f'"{tmp_path / "cache"}" from "{dataset}"; a cache folder belongs to one remote'
    )


def test_a_loader_without_preflight_names_the_stream_it_cannot_sync(tmp_path):
    nowhere = tmp_path / "nowhere"
    with pytest.raises(DownloadError) as info:
        PhaseLoader(_phase(tmp_path / "cache" / "web", str(nowhere)), 0, seed=7)
    assert str(info.value).startswith(f"stream 'web': remote {nowhere} cannot be listed: ")
