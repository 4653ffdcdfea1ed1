"""Several streams on one folder, reopened after close, and close_stream releasing descriptors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prepared_mds import TEXT_A, write

from curriculum_ds.data import close_stream, open_stream, prepare, read_stream_info


def test_several_streams_on_one_folder_and_reopen_after_delete(tmp_path: Path) -> None:
    src = write(tmp_path / "d.txt", TEXT_A * 20)
    prepare([src], tmp_path / "ds", max_seq_len=32)
    n = read_stream_info(tmp_path / "ds").num_samples
    first = open_stream(tmp_path / "ds")
    second = open_stream(tmp_path / "ds")  # a phase that reuses a stream, while the old one lives
    assert first.num_samples == second.num_samples == n
    for i in (0, n // 2, n - 1):
        np.testing.assert_array_equal(first[i]["input_ids"], second[i]["input_ids"])
    expected = second[n - 1]["input_ids"]
    close_stream(first)
    close_stream(second)
    for _ in range(3):  # the next phase's loader, built after the previous one was dropped
        again = open_stream(tmp_path / "ds")
        np.testing.assert_array_equal(again[n - 1]["input_ids"], expected)
        close_stream(again)


def test_close_stream_releases_descriptors(tmp_path: Path) -> None:
    prepare([write(tmp_path / "d.txt", TEXT_A * 5)], tmp_path / "ds", max_seq_len=32)

    def num_fds() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    close_stream(open_stream(tmp_path / "ds"))  # warm-up: imports, the first shared objects
    before = num_fds()
    for _ in range(5):
        ds = open_stream(tmp_path / "ds")
        assert ds[0]["num_tokens"] > 0
        close_stream(ds)
    assert num_fds() <= before
