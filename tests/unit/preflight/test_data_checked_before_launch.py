"""`curriculum-ds validate` checks the data before launch: intact shards and token ids in range.

What mosaicml-streaming would only report inside the training ranks (a truncated or corrupt
shard, a token id past the embedding, foreign data with no vocab_size and no ``--model``) is one
line naming the stream (JSON path, phase) and the shard file or the id, exit 1, and the data
folders are left untouched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import one_error_line, ragged_docs, two_phase_curriculum, write_ds_config

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import load_config
from curriculum_ds.data import prepare, verify_stream
from curriculum_ds.errors import ConfigError, DataError


def _prepared(root: Path, name: str, *, num_docs: int = 30, size_limit: int | None = None) -> Path:
    src = root / f"{name}.jsonl"
    src.parent.mkdir(parents=True, exist_ok=True)
    docs = ragged_docs(num_docs, seed=len(name), min_len=10, max_len=90)
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    prepare([src], root / name, max_seq_len=64, size_limit=size_limit)
    return root / name


def _foreign(
    root: Path,
    name: str,
    ids: list[list[int]],
    *,
    hashes: list[str] | None = None,
    compression: str | None = None,
) -> Path:
    """An MDS dataset written by mosaicml-streaming directly: no curriculum_meta.json."""
    from streaming import MDSWriter

    out = root / name
    with MDSWriter(
        out=str(out),
        columns={"input_ids": "ndarray:int32"},
        hashes=hashes,
        compression=compression,
        size_limit=256,
        progress_bar=False,
    ) as writer:
        for sample in ids:
            writer.write({"input_ids": np.asarray(sample, dtype=np.int32)})
    return out


def _model(root: Path, vocab_size: Any) -> Path:
    """A local HF model folder as far as validate reads it: config.json's vocab_size."""
    folder = root / f"model_{vocab_size}"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"model_type": "gpt2", "vocab_size": vocab_size})
    )
    return folder


def _validate(tmp_path: Path, first: Path, second: Path, *args: str) -> Any:
    cfg = write_ds_config(tmp_path / "ds.json", two_phase_curriculum(first, second))
    return CliRunner().invoke(cli_main, ["validate", str(cfg), *args])


def _listing(*folders: Path) -> dict[str, int]:
    return {
        str(p): p.stat().st_size for folder in folders for p in folder.rglob("*") if p.is_file()
    }


def _shard(folder: Path, k: int) -> Path:
    return (
        folder
        / json.loads((folder / "index.json").read_text())["shards"][k]["raw_data"]["basename"]
    )


def _drop_hashes(folder: Path) -> None:
    """Forget the shard hashes prepare records, as in a dataset written without them: the
    header and decoding checks below are what catches corruption then."""
    index = json.loads((folder / "index.json").read_text())
    for shard in index["shards"]:
        shard["raw_data"]["hashes"] = {}
    (folder / "index.json").write_text(json.dumps(index))


LONG = 'curriculum.schedule[1] ("mix").train_loader.streams[1].local'
SHORT = 'curriculum.schedule[0] ("short").train_loader.streams[0].local'


# ------------------------------------------------------------------------------ shards


def test_validate_refuses_a_truncated_shard(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long", size_limit=1024)
    shard = _shard(long, 1)
    shard.write_bytes(shard.read_bytes()[:-7])  # a copy that stopped early
    before = _listing(short, long)
    line = one_error_line(_validate(tmp_path, short, long))
    assert line.startswith(f"Error: {LONG}: ")
    assert f"{long}" in line
    assert f"shard file {shard.name} has " in line
    assert "(truncated or corrupt)" in line
    assert _listing(short, long) == before


def test_validate_refuses_a_shard_with_corrupt_offsets(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long", size_limit=1024)
    _drop_hashes(long)
    shard = _shard(long, 0)
    data = bytearray(shard.read_bytes())
    data[8:12] = (7).to_bytes(4, "little")  # the second sample's offset, same file size
    shard.write_bytes(bytes(data))
    line = one_error_line(_validate(tmp_path, short, long))
    assert line == (
        f"Error: {LONG}: {json.dumps(str(long))} is not a readable MDS dataset: MDS dataset "
        f"{long}: shard file {shard.name}: corrupt sample offsets (truncated or overwritten)"
    )


def test_validate_refuses_an_undecodable_sample(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    _drop_hashes(long)
    shard = _shard(long, 0)
    data = bytearray(shard.read_bytes())
    first = int.from_bytes(data[4:8], "little")  # sample 0 starts with its input_ids size
    data[first : first + 4] = b"\xff\xff\xff\x7f"
    shard.write_bytes(bytes(data))
    line = one_error_line(_validate(tmp_path, short, long))
    assert line.startswith(f"Error: {LONG}: ")
    assert f"shard file {shard.name}: sample 0 cannot be decoded (" in line


def test_validate_refuses_a_shard_failing_its_recorded_hash(tmp_path: Path) -> None:
    ids = [list(range(n)) for n in range(1, 40)]
    short = _foreign(tmp_path, "short", ids, hashes=["sha1", "xxh64"])
    long = _foreign(tmp_path, "long", ids)
    model = _model(tmp_path, 100)
    assert _validate(tmp_path, short, long, "--model", str(model)).exit_code == 0
    shard = _shard(short, 2)
    data = bytearray(shard.read_bytes())
    data[-2] ^= 0x01  # a flipped bit inside the last sample's ids: same size, header intact
    shard.write_bytes(bytes(data))
    line = one_error_line(_validate(tmp_path, short, long, "--model", str(model)))
    assert line.startswith(f"Error: {SHORT}: ")
    assert line.endswith(
        f"shard file {shard.name} fails its sha1 hash recorded in index.json (corrupt)"
    )
    verify_stream(short)  # without hashes (the launch-time check) the flip is invisible


def test_validate_refuses_a_corrupt_compressed_shard(tmp_path: Path) -> None:
    ids = [list(range(n)) for n in range(1, 40)]
    short = _prepared(tmp_path, "short")
    long = _foreign(tmp_path, "long", ids, compression="zstd")
    assert verify_stream(long) == (0, 38)  # read from the compressed files alone
    packed = sorted(long.glob("*.zstd"))[0]
    data = bytearray(packed.read_bytes())
    data[12:20] = bytes(8)
    packed.write_bytes(bytes(data))
    line = one_error_line(_validate(tmp_path, short, long))
    assert line.startswith(f"Error: {LONG}: ")
    assert f"shard file {packed.name} cannot be decompressed (" in line


# ------------------------------------------------------------------------------ token ids


def test_validate_refuses_token_ids_past_the_models_vocab(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")  # byte tokens: ids up to EOS 256
    long = _prepared(tmp_path, "long")
    ok = _validate(tmp_path, short, long, "--model", str(_model(tmp_path, 257)))
    assert ok.exit_code == 0, ok.output
    model = _model(tmp_path, 200)
    line = one_error_line(_validate(tmp_path, short, long, "--model", str(model)))
    assert line == (
        f"Error: {SHORT}: {json.dumps(str(short))} holds token id 256, out of range for "
        f"vocab_size 200 (of --model {model}); ids must be < vocab_size"
    )


def test_validate_refuses_foreign_ids_past_the_recorded_vocab(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")  # vocab_size 257: the default model's embedding
    long = _foreign(tmp_path, "long", [[5, 6, 7], [999, 3], [1, 2]])
    line = one_error_line(_validate(tmp_path, short, long))
    assert line == (
        f"Error: {LONG}: {json.dumps(str(long))} holds token id 999, out of range for "
        "vocab_size 257 (recorded by `curriculum-ds prepare`, the default model's); "
        "ids must be < vocab_size"
    )
    negative = _foreign(tmp_path, "negative", [[5, -3, 7]])
    line = one_error_line(_validate(tmp_path, short, negative))
    assert line.endswith(f"{json.dumps(str(negative))} holds token id -3; token ids must be >= 0")


def test_validate_samples_token_ids_of_old_metadata(tmp_path: Path) -> None:
    short = _prepared(tmp_path, "short")
    long = _prepared(tmp_path, "long")
    meta_path = long / "curriculum_meta.json"
    meta = json.loads(meta_path.read_text())
    # a dataset prepared before max_token_id was recorded, whose vocab_size does not fit its ids
    del meta["max_token_id"]
    meta_path.write_text(json.dumps({**meta, "vocab_size": 100}))
    (short / "curriculum_meta.json").write_text(
        json.dumps({**json.loads((short / "curriculum_meta.json").read_text()), "vocab_size": 100})
    )
    line = one_error_line(_validate(tmp_path, short, long))
    assert line.startswith(f"Error: {SHORT}: {json.dumps(str(short))} holds token id ")
    assert "out of range for vocab_size 100 (recorded by `curriculum-ds prepare`" in line
    # the probe alone finds it too: the first and last samples end with EOS 256
    probe = verify_stream(long)
    assert probe is not None
    assert probe[0] >= 0
    assert probe[1] == 256


# ------------------------------------------------------------------------------ vocab_size


def test_validate_foreign_data_without_vocab_size_needs_model(tmp_path: Path) -> None:
    ids = [list(range(n)) for n in range(1, 20)]
    short = _foreign(tmp_path, "short", ids)
    long = _foreign(tmp_path, "long", ids)
    line = one_error_line(_validate(tmp_path, short, long))
    assert line == (
        f"Error: {SHORT}: {json.dumps(str(short))} has no vocab_size (no stream of the schedule "
        "was made by `curriculum-ds prepare`); pass --model DIR, the local HF model folder the "
        "run will use"
    )
    result = _validate(tmp_path, short, long, "--model", str(_model(tmp_path, 64)))
    assert result.exit_code == 0, result.output
    assert "max_duration 3000tok" in result.output
    # the same verdict from load_config; train's check (which does not know --model) passes
    cfg = tmp_path / "ds.json"
    with pytest.raises(ConfigError, match=r"has no vocab_size .*; pass --model DIR"):
        load_config(cfg, check_data=True, strict=True)
    load_config(cfg, check_data=True)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root / "absent", "not a local model folder (no download at run time)"),
        (lambda root: root, "no config.json in the model folder"),
        (lambda root: _model(root, None), "config.json has no positive integer vocab_size"),
    ],
    ids=["absent", "no config", "no vocab_size"],
)
def test_validate_bad_model_folder_one_line(tmp_path: Path, make: Any, message: str) -> None:
    short = _prepared(tmp_path / "data", "short")
    long = _prepared(tmp_path / "data", "long")
    (tmp_path / "m").mkdir()
    model = make(tmp_path / "m")
    line = one_error_line(_validate(tmp_path, short, long, "--model", str(model)))
    assert line.startswith(f"Error: --model {model}: {message}")


def test_verify_stream_errors_name_the_shard_file(tmp_path: Path) -> None:
    long = _prepared(tmp_path, "long", size_limit=1024)
    shard = _shard(long, 0)
    shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(
        DataError,
        match=rf"^MDS dataset .*long: shard file {shard.name} has \d+ bytes but index\.json "
        rf"records \d+ \(truncated or corrupt\)$",
    ):
        verify_stream(long)
    with pytest.raises(ValueError, match="num_probe_samples must be >= 1"):
        verify_stream(long, num_probe_samples=0)
