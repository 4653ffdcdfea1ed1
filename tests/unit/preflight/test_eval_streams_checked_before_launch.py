"""``curriculum.eval`` is checked before any rank trains: one line naming the field.

An interval in another unit than the schedule's, an eval stream that is missing, not an MDS
dataset, or has a truncated shard, and an eval ``max_seq_len`` past the model's positions.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import make_dataset, one_error_line, ragged_docs, two_phase_curriculum, write_ds_config

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import load_config, parse_curriculum
from curriculum_ds.errors import ConfigError


@pytest.fixture(scope="module")
def val(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("val")
    return make_dataset(root, "val_web", ragged_docs(60, seed=4, min_len=30, max_len=200))


def _with_eval(two_streams: tuple[Path, Path], **section: Any) -> dict[str, Any]:
    return {**two_phase_curriculum(*two_streams), "eval": section}


def _validate(tmp_path: Path, curriculum: dict[str, Any]) -> str:
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    return one_error_line(CliRunner().invoke(cli_main, ["validate", str(cfg)]))


def test_a_valid_eval_section_loads_with_its_data(
    tmp_path: Path, two_streams: tuple[Path, Path], val: Path
) -> None:
    curriculum = _with_eval(
        two_streams, streams=[{"local": str(val), "name": "web"}], interval="500tok"
    )
    run = load_config(write_ds_config(tmp_path / "ds.json", curriculum), check_data=True)
    assert run.curriculum.eval is not None
    assert run.curriculum.eval.streams[0].name == "web"
    assert str(run.curriculum.eval.interval) == "500tok"
    assert run.curriculum.eval.max_samples == 512
    shown = CliRunner().invoke(cli_main, ["validate", str(tmp_path / "ds.json")])
    assert shown.exit_code == 0, shown.output
    assert (
        "eval: 1 held-out stream(s) (web), every 500tok and at each phase end, the first 512 "
        "samples of each" in shown.output
    )
    # the name defaults to the folder's, as for train streams
    section = parse_curriculum(_with_eval(two_streams, streams=[{"local": str(val)}]))
    assert section.eval is not None
    assert section.eval.streams[0].name == "val_web"
    assert section.eval.interval is None  # phase ends only


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            {"interval": "0.5ep"},
            'curriculum.eval.interval: unit "ep" differs from max_duration\'s "tok"',
        ),
        ({"interval": "500"}, 'curriculum.eval.interval: expected "<int>tok" or "<number>ep"'),
        ({"max_samples": 0}, "curriculum.eval.max_samples: "),
        ({"proportion": 1.0}, "curriculum.eval.proportion: unknown key"),
    ],
)
def test_bad_eval_fields_are_one_line(
    tmp_path: Path, two_streams: tuple[Path, Path], val: Path, section: Any, expected: str
) -> None:
    curriculum = _with_eval(two_streams, streams=[{"local": str(val)}], **section)
    assert expected in _validate(tmp_path, curriculum)
    with pytest.raises(ConfigError, match=r"^curriculum\.eval\."):
        parse_curriculum(curriculum)


def test_a_missing_eval_stream_is_refused(tmp_path: Path, two_streams: tuple[Path, Path]) -> None:
    curriculum = _with_eval(two_streams, streams=[{"local": str(tmp_path / "nope")}])
    line = _validate(tmp_path, curriculum)
    nope = tmp_path / "nope"
    assert line == f'Error: curriculum.eval.streams[0].local: "{nope}" does not exist'


def test_a_folder_that_is_not_mds_is_refused(
    tmp_path: Path, two_streams: tuple[Path, Path]
) -> None:
    (tmp_path / "plain").mkdir()
    curriculum = _with_eval(two_streams, streams=[{"local": str(tmp_path / "plain")}])
    assert "curriculum.eval.streams[0].local: " in _validate(tmp_path, curriculum)
    assert "is not an MDS dataset (no index.json" in _validate(tmp_path, curriculum)


def test_a_truncated_eval_shard_is_refused_before_launch(
    tmp_path: Path, two_streams: tuple[Path, Path], val: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(val, broken)
    shard = sorted(broken.glob("shard.*.mds"))[-1]
    shard.write_bytes(shard.read_bytes()[:-5])
    curriculum = _with_eval(
        two_streams, streams=[{"local": str(val), "name": "ok"}, {"local": str(broken)}]
    )
    line = _validate(tmp_path, curriculum)
    assert line.startswith("Error: curriculum.eval.streams[1].local: ")
    assert "is not a readable MDS dataset" in line
    assert "(truncated or corrupt)" in line


def test_an_eval_max_seq_len_past_the_models_positions_is_refused(
    two_streams: tuple[Path, Path], val: Path
) -> None:
    from curriculum_ds.preflight import check_model_context

    class Model:
        max_seq_len = 64

    section = parse_curriculum(
        _with_eval(two_streams, streams=[{"local": str(val)}], max_seq_len=128)
    )
    with pytest.raises(
        ConfigError, match=r"^curriculum.eval.max_seq_len: 128 exceeds the model's 64 positions"
    ):
        check_model_context(section, Model())


def test_a_remote_eval_stream_is_checked_at_its_remote(
    tmp_path: Path, two_streams: tuple[Path, Path], val: Path
) -> None:
    cache = tmp_path / "cache"
    ok = _with_eval(two_streams, streams=[{"local": str(cache), "remote": str(val)}])
    run = load_config(write_ds_config(tmp_path / "ok.json", ok), check_data=True)
    assert run.curriculum.eval is not None
    assert run.curriculum.eval.streams[0].remote == str(val)
    assert (cache / "index.json").is_file()  # its metadata synced into the cache
    bad = _with_eval(
        two_streams, streams=[{"local": str(cache), "remote": str(tmp_path / "nowhere")}]
    )
    assert _validate(tmp_path, bad).startswith("Error: curriculum.eval.streams[0].remote: ")
    scheme = _with_eval(two_streams, streams=[{"local": str(cache), "remote": "ftp://b/p"}])
    assert "curriculum.eval.streams[0].remote: scheme 'ftp' is not supported" in _validate(
        tmp_path, scheme
    )
