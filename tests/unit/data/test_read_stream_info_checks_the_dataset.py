"""read_stream_info: prepared and plain MDS datasets, old meta, and every broken part named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from prepared_mds import read_all, write

from curriculum_ds.data import open_stream, prepare, read_stream_info
from curriculum_ds.errors import DataError


def test_meta_records_max_token_id_and_old_meta_stays_readable(tmp_path: Path) -> None:
    src = write(tmp_path / "a.txt", "hello world")
    prepare([src], tmp_path / "ds", max_seq_len=4)
    meta_path = tmp_path / "ds" / "curriculum_meta.json"
    meta = json.loads(meta_path.read_text())
    rows = read_all(tmp_path / "ds")
    assert meta["max_token_id"] == max(int(r["input_ids"].max()) for r in rows) == 256  # EOS
    info = read_stream_info(tmp_path / "ds")
    assert (info.min_token_id, info.max_token_id) == (None, 256)
    del meta["max_token_id"]  # a dataset prepared before the field existed
    meta_path.write_text(json.dumps(meta))
    assert read_stream_info(tmp_path / "ds").max_token_id is None
    meta_path.write_text(json.dumps({**meta, "max_token_id": "256"}))
    with pytest.raises(DataError, match=r"field 'max_token_id' must be an integer$"):
        read_stream_info(tmp_path / "ds")


def write_plain_mds(out: Path, lengths: list[int], *, with_ids: bool = True) -> None:
    from streaming import MDSWriter

    cols = {"input_ids": "ndarray:int32", "label": "int"} if with_ids else {"text": "str"}
    with MDSWriter(out=str(out), columns=cols, progress_bar=False) as writer:
        for n in lengths:
            if with_ids:
                writer.write({"input_ids": np.arange(n, dtype=np.int32), "label": n % 3})
            else:
                writer.write({"text": "x" * n})


def test_read_stream_info_plain_mds(tmp_path: Path) -> None:
    lengths = [3, 1, 7, 12, 5]
    write_plain_mds(tmp_path / "plain", lengths)
    info = read_stream_info(tmp_path / "plain")
    assert info.num_samples == 5
    assert info.num_tokens == sum(lengths)
    assert info.vocab_size is None
    assert info.eos_id is None
    assert info.max_seq_len is None
    assert list(info.metrics) == ["num_tokens"]
    assert info.metrics["num_tokens"].dtype == np.int64
    np.testing.assert_array_equal(info.metrics["num_tokens"], lengths)
    assert (info.min_token_id, info.max_token_id) == (0, 11)  # foreign data is read whole


def test_read_stream_info_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^dataset folder not found: .*nope$"):
        read_stream_info(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"^not an MDS dataset \(no index\.json\): .*empty$"):
        read_stream_info(tmp_path / "empty")
    write(tmp_path / "noshards" / "index.json", '{"shards": [], "version": 2}')
    with pytest.raises(DataError, match=r"^MDS index lists no shards: .*noshards"):
        read_stream_info(tmp_path / "noshards")
    write(tmp_path / "badjson" / "index.json", "{")
    with pytest.raises(DataError, match=r"^cannot read MDS index .*badjson"):
        read_stream_info(tmp_path / "badjson")
    write_plain_mds(tmp_path / "text_only", [2, 3], with_ids=False)
    with pytest.raises(DataError, match=r"shards\[0\] has no 'input_ids' column"):
        read_stream_info(tmp_path / "text_only")

    src = write(tmp_path / "a.txt", "hello world")
    prepare([src], tmp_path / "ds", max_seq_len=4)
    meta_path = tmp_path / "ds" / "curriculum_meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "num_samples": 99}))
    with pytest.raises(DataError, match=r"num_samples 99 disagrees with index\.json \(3\)"):
        read_stream_info(tmp_path / "ds")
    meta_path.write_text(json.dumps({**meta, "format": "other/9"}))
    with pytest.raises(DataError, match=r"format must be 'curriculum_ds/1', got 'other/9'"):
        read_stream_info(tmp_path / "ds")
    meta_path.write_text(json.dumps(meta))
    (tmp_path / "ds" / "metrics.npz").unlink()
    with pytest.raises(DataError, match=r"^cannot read .*metrics\.npz"):
        read_stream_info(tmp_path / "ds")
    (tmp_path / "ds" / "shard.00000.mds").unlink()
    with pytest.raises(DataError, match=r"shard file missing: shard\.00000\.mds$"):
        read_stream_info(tmp_path / "ds")
    with pytest.raises(DataError, match=r"shard file missing"):
        open_stream(tmp_path / "ds")
