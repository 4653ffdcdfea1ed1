"""A shard changed on disk under the bulk reader is one DownloadError, never a SIGBUS (issue 31, 3).

In-process, through the loader's own reader: the shard is truncated in place (``truncate -s
1000``) after the reader mapped it, and the next reads (``fetch`` and ``micro_batches``) raise
one line naming the stream and the shard; a reader opened on a shard that no longer has the size
``index.json`` records refuses it the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs

from curriculum_ds.config import PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.errors import DownloadError


def _phase(local: Path) -> PhaseConfig:
    loader: dict[str, Any] = {"streams": [{"local": str(local), "name": "web"}], "max_seq_len": 64}
    return PhaseConfig.model_validate({"name": "p", "duration": "1ep", "train_loader": loader})


def _all_pairs(loader: PhaseLoader) -> np.ndarray:
    n = loader.infos[0].num_samples
    return np.stack([np.zeros(n, np.int64), np.arange(n, dtype=np.int64)], axis=1)


def test_a_shard_truncated_after_mapping_is_one_error_and_no_crash(tmp_path: Path) -> None:
    local = make_dataset(tmp_path, "d", ragged_docs(150, seed=2, max_len=90))
    shard = local / "shard.00000.mds"
    assert shard.stat().st_size > 3 * 4096  # whole pages are cut off the mapping
    loader = PhaseLoader(_phase(local), 0, seed=1)
    try:
        pairs = _all_pairs(loader)
        assert len(loader.fetch(pairs[:4])) == 4  # mapped, read
        os.truncate(shard, 1000)
        expected = (
            rf"^stream 'web': shard {shard} changed while the run was reading it "
            r"\(it has 1000 bytes, \d+ when the run opened it\); restore it and resume with "
            r"--resume auto$"
        )
        with pytest.raises(DownloadError, match=expected):
            loader.fetch(pairs)
        with pytest.raises(DownloadError, match=expected):
            loader.micro_batches(pairs[-8:], dp_rank=0, dp_world_size=1, micro_batch_size=8)
    finally:
        loader.close()


def test_a_shard_of_another_size_than_recorded_is_refused_at_its_first_read(
    tmp_path: Path,
) -> None:
    local = make_dataset(tmp_path, "d", ragged_docs(150, seed=2, max_len=90))
    shard = local / "shard.00000.mds"
    size = shard.stat().st_size
    loader = PhaseLoader(_phase(local), 0, seed=1)  # checked the size, mapped nothing yet
    try:
        with shard.open("ab") as f:
            f.write(b"\0" * 10)
        with pytest.raises(
            DownloadError,
            match=rf"shard {shard} changed .*\(it has {size + 10} bytes, index\.json records "
            rf"{size}\)",
        ):
            loader.fetch(_all_pairs(loader)[:2])
    finally:
        loader.close()
