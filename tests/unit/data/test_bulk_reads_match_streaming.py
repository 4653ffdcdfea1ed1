"""Issue 23 item 4: a micro-batch read in bulk from the mapped shards is streaming's samples.

``PhaseLoader.fetch`` and ``micro_batches`` read through :class:`curriculum_ds.data.bulk.BulkReader`
(one Rust call per micro-batch); the samples must be byte-identical (values and dtype) to
``StreamingDataset.__getitem__``, on plain, packed and remote (S3) streams, truncation included;
so are a packed row's document starts (document masking, issue 32).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import make_dataset, ragged_docs
from object_store import s3_server, upload_folder

from curriculum_ds.config import PhaseConfig
from curriculum_ds.core.loader import PhaseLoader, collate
from curriculum_ds.data import prepare, sync_stream_metadata


def _phase(local: Path, remote: str | None = None, max_seq_len: int = 64) -> PhaseConfig:
    stream: dict[str, Any] = {"local": str(local)}
    if remote is not None:
        stream["remote"] = remote
    loader = {"streams": [stream], "max_seq_len": max_seq_len}
    return PhaseConfig.model_validate({"name": "p", "duration": "1ep", "train_loader": loader})


def _check(loader: PhaseLoader) -> None:
    """Bulk reads of every sample equal streaming's, in fetch and in micro_batches."""
    n = loader.infos[0].num_samples
    pairs = np.stack([np.zeros(n, np.int64), np.random.default_rng(0).permutation(n)], axis=1)
    assert loader.reader.bulk is not None
    assert loader.reader.bulk.read(pairs, loader.seq_len) is not None
    if loader.reader.masks_documents:  # the starts are read in bulk too
        assert loader.reader.starts_bulk is not None
        assert loader.reader.starts_bulk.read(pairs, loader.seq_len) is not None
    ds = loader.reader.datasets[0]
    for limit in (loader.seq_len, 5):
        loader.seq_len = limit
        bulk = loader.fetch(pairs)
        for (_, i), got in zip(pairs.tolist(), bulk, strict=True):
            want = np.asarray(ds[i]["input_ids"])[:limit]
            assert got.dtype == want.dtype
            assert got.tobytes() == want.tobytes()
        whole = pairs[: len(pairs) // 8 * 8]
        mbs = loader.micro_batches(whole, dp_rank=0, dp_world_size=1, micro_batch_size=8)
        for k, mb in enumerate(mbs):
            pairs_k = whole[8 * k : 8 * k + 8]
            ref = collate(loader.reader.fetch_each(pairs_k, loader.seq_len), mb.positions)
            if loader.reader.masks_documents:  # packed rows: their starts as streaming decodes them
                starts = [np.asarray(ds[i]["doc_starts"]) for i in pairs_k[:, 1].tolist()]
                counts = np.array([len(x) for x in starts], dtype=np.int64)
                ref = ref.with_documents(np.concatenate(starts), counts)
                assert mb.position_ids is not None
                assert torch.equal(mb.position_ids, ref.position_ids)
            else:
                assert mb.position_ids is None
            for a, b in ((mb.input_ids, ref.input_ids), (mb.labels, ref.labels)):
                assert a.dtype == b.dtype
                assert torch.equal(a, b)
            assert torch.equal(mb.attention_mask, ref.attention_mask)


@pytest.mark.parametrize("pack", [False, True])
def test_plain_and_packed_streams(tmp_path: Path, pack: bool) -> None:
    docs = ragged_docs(120, seed=4, max_len=90)
    local = make_dataset(tmp_path, "d", docs, max_seq_len=64, pack=pack)
    loader = PhaseLoader(_phase(local), 0, seed=1)
    try:
        _check(loader)
    finally:
        loader.close()


def test_a_remote_stream_once_its_shards_are_downloaded(tmp_path: Path, monkeypatch) -> None:
    src = tmp_path / "web.jsonl"
    src.write_text("".join(f'{{"text": "{d}"}}\n' for d in ragged_docs(150, seed=3, max_len=60)))
    prepare([src], tmp_path / "web", max_seq_len=64, min_tokens=2, size_limit=8192)
    with s3_server(monkeypatch) as server:
        url = upload_folder(server, tmp_path / "web", "s3://bucket/data/web")
        sync_stream_metadata(tmp_path / "cache", url)
        loader = PhaseLoader(_phase(tmp_path / "cache", url), 0, seed=1)
        try:
            n = loader.infos[0].num_samples
            pairs = np.stack([np.zeros(n, np.int64), np.arange(n)], axis=1)
            assert loader.reader.bulk is not None
            assert loader.reader.bulk.read(pairs, 64) is None  # not cached: streaming downloads
            loader.fetch(pairs)
            _check(loader)
        finally:
            loader.close()
