"""check_streams: each stream is a readable MDS dataset, with the metric and one vocabulary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from config_sections import base_section, ds_with, write_config

from curriculum_ds.config import check_streams, load_config, parse_curriculum
from curriculum_ds.errors import ConfigError


def write_mds(path: Path, lengths: list[int]) -> Path:
    from streaming import MDSWriter

    with MDSWriter(out=str(path), columns={"input_ids": "ndarray:int32"}) as writer:
        for n in lengths:
            writer.write({"input_ids": np.arange(n, dtype=np.int32)})
    return path


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path as the working directory, with tiny MDS datasets data/short and data/long."""
    monkeypatch.chdir(tmp_path)
    write_mds(tmp_path / "data" / "short", [5, 7, 9])
    write_mds(tmp_path / "data" / "long", [40, 50])
    return tmp_path


def test_check_streams_accepts_mds_datasets(data_dir: Path) -> None:
    cfg = parse_curriculum(base_section())
    check_streams(cfg)  # num_tokens is present in any MDS dataset with input_ids
    path = write_config(data_dir, ds_with(base_section()))
    assert load_config(path, check_data=True).curriculum == cfg


def test_missing_stream_dir(data_dir: Path) -> None:
    section = base_section()
    section["schedule"][1]["train_loader"]["streams"][1]["local"] = "data/missing"
    cfg = parse_curriculum(section)
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/missing" does not exist$'
        ),
    ):
        check_streams(cfg)
    path = write_config(data_dir, ds_with(section))
    load_config(path)  # without check_data the files are not looked at
    with pytest.raises(ConfigError, match=r'"data/missing" does not exist$'):
        load_config(path, check_data=True)


def test_not_an_mds_dir(data_dir: Path) -> None:
    (data_dir / "plain").mkdir()
    (data_dir / "plain" / "a.txt").write_text("hello")
    section = base_section()
    section["schedule"][0]["train_loader"]["streams"][0]["local"] = "plain"
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[0\] \("short"\)\.train_loader\.streams\[0\]\.local: '
            r'"plain" is not an MDS dataset \(no index\.json'
        ),
    ):
        check_streams(parse_curriculum(section))


def test_stream_path_is_a_file(data_dir: Path) -> None:
    (data_dir / "file").write_text("x")
    section = base_section()
    section["schedule"][0]["train_loader"]["streams"][0]["local"] = "file"
    with pytest.raises(ConfigError, match=r'\.streams\[0\]\.local: "file" is not a directory$'):
        check_streams(parse_curriculum(section))


def test_corrupt_index(data_dir: Path) -> None:
    (data_dir / "data" / "long" / "index.json").write_text("{not json")
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/long" is not a readable MDS dataset: '
        ),
    ) as info:
        check_streams(parse_curriculum(base_section()))
    assert "\n" not in str(info.value)


def test_static_metric_must_exist_when_dynamic(data_dir: Path) -> None:
    section = base_section()
    section["dynamic"]["static_metric"] = "token_entropy"
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.dynamic\.static_metric: stream "data/short" \(schedule\[0\] '
            r'\("short"\)\.train_loader\.streams\[0\]\) \(and 1 other stream\(s\)\) has no metric '
            r'column "token_entropy"'
        ),
    ):
        check_streams(parse_curriculum(section))
    section["dynamic"]["enabled"] = False
    check_streams(parse_curriculum(section))


def test_streams_must_share_one_vocabulary(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import curriculum_ds.preflight.streams as preflight_module  # where the data checks look it up

    class Info:
        def __init__(self, vocab_size: int | None) -> None:
            self.num_samples = 3
            self.vocab_size = vocab_size
            self.metrics = {"num_tokens": np.array([5, 7, 9])}

    vocab = {"data/short": 256, "data/long": 50257}
    monkeypatch.setattr(
        preflight_module, "read_stream_info_checked", lambda local: Info(vocab[local])
    )
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: "data/long" '
            r'was tokenized with vocab_size 50257 but "data/short" \(schedule\[0\] \("short"\)'
            r"\.train_loader\.streams\[0\]\) with 256; all streams must share one tokenizer$"
        ),
    ):
        check_streams(parse_curriculum(base_section()))
    vocab["data/long"] = None  # type: ignore[assignment]  # unknown tokenizer: not compared
    check_streams(parse_curriculum(base_section()))


def _model_dir(root: Path, vocab_size: int) -> Path:
    folder = root / f"model{vocab_size}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"vocab_size": vocab_size}))
    return folder


def test_check_streams_vocab_size_from_model_or_strict(data_dir: Path) -> None:
    # data/short and data/long are foreign MDS data (no vocab_size), ids 0..8 and 0..49
    cfg = parse_curriculum(base_section())
    check_streams(cfg)  # train's check: it does not know --model, so nothing to compare
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[0\] \("short"\)\.train_loader\.streams\[0\]\.local: '
            r'"data/short" has no vocab_size \(no stream of the schedule was made by '
            r"`curriculum-ds prepare`\); pass --model DIR, the local HF model folder the run will "
            r"use$"
        ),
    ):
        check_streams(cfg, strict=True)
    check_streams(cfg, model=_model_dir(data_dir, 50), strict=True)
    model = _model_dir(data_dir, 49)
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/long" holds token id 49, out of range for vocab_size 49 \(of --model '
            rf"{re.escape(str(model))}\); ids must be < vocab_size$"
        ),
    ):
        check_streams(cfg, model=model)
    path = write_config(data_dir, ds_with(base_section()))
    with pytest.raises(ConfigError, match=r'"data/long" holds token id 49'):
        load_config(path, check_data=True, model=model)


def test_check_streams_recorded_token_range(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import curriculum_ds.preflight.streams as preflight_module  # where the data checks look it up

    class Info:
        def __init__(self, max_token_id: int | None) -> None:
            self.vocab_size = 256
            self.max_token_id = max_token_id
            self.metrics = {"num_tokens": np.array([5, 7, 9])}

    recorded = {"data/short": 255, "data/long": 300}
    monkeypatch.setattr(
        preflight_module, "read_stream_info_checked", lambda local: Info(recorded[local])
    )
    with pytest.raises(
        ConfigError,
        match=(
            r'^curriculum\.schedule\[1\] \("mix"\)\.train_loader\.streams\[1\]\.local: '
            r'"data/long" holds token id 300, out of range for vocab_size 256 \(recorded by '
            r"`curriculum-ds prepare`\); ids must be < vocab_size$"
        ),
    ):
        check_streams(parse_curriculum(base_section()))  # even without strict: its own vocab
    recorded["data/long"] = 255
    check_streams(parse_curriculum(base_section()), strict=True)
