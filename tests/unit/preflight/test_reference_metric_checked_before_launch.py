"""``dynamic.signal: "excess_loss"``: the ``reference_metric`` column checked before launch.

`validate` (and ``load_config(check_data=True)``, the check of ``initialize`` and ``launch``)
refuses, in one line naming the stream's JSON path and the column, a train stream of any phase
without the column, or with a non-finite value in it (naming the sample and the value), for the
bucket and the stream unit alike; it accepts the column when every stream has it. With
``unit: "streams"`` the ``static_metric`` (used only to bucket) is not checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import make_dataset, one_error_line, ragged_docs, two_phase_curriculum, write_ds_config

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import load_config
from curriculum_ds.data import read_stream_info, write_metric_column
from curriculum_ds.errors import ConfigError

LONG_PATH = 'schedule[1] ("mix").train_loader.streams[1]'


def _data(root: Path, *, long_column: bool = True) -> tuple[Path, Path]:
    """Two streams with a ``ref_loss`` column (``long`` without it unless ``long_column``)."""
    short = make_dataset(root, "short", ragged_docs(20, seed=1))
    long = make_dataset(root, "long", ragged_docs(20, seed=2))
    for folder in (short, long) if long_column else (short,):
        n = read_stream_info(folder).num_samples
        write_metric_column(folder, "ref_loss", np.linspace(1.0, 3.0, n))
    return short, long


def _curriculum(short: Path, long: Path, unit: str, **dynamic: Any) -> dict[str, Any]:
    cur = two_phase_curriculum(short, long)
    cur["dynamic"] = {
        "enabled": True,
        "unit": unit,
        "signal": "excess_loss",
        "reference_metric": "ref_loss",
        **({"num_buckets": 2} if unit == "buckets" else {}),
        **dynamic,
    }
    return cur


def _validate(tmp_path: Path, curriculum: dict[str, Any]) -> Any:
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    return CliRunner().invoke(cli_main, ["validate", str(cfg)])


def _bytes(*folders: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for f in folders for p in f.rglob("*") if p.is_file()}


@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_a_stream_without_the_reference_column_is_one_line(tmp_path: Path, unit: str) -> None:
    short, long = _data(tmp_path, long_column=False)
    before = _bytes(short, long)
    line = one_error_line(_validate(tmp_path, _curriculum(short, long, unit)))
    assert line == (
        f'Error: curriculum.dynamic.reference_metric: stream "{long}" ({LONG_PATH}) has no '
        'metric column "ref_loss" (it has: compression_ratio, num_tokens, token_entropy); write '
        "it with `curriculum-ds score DATA... --model REFERENCE_MODEL --column ref_loss`"
    )
    assert _bytes(short, long) == before
    # the same check on the path of initialize and launch
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(short, long, unit))
    with pytest.raises(ConfigError, match=r'^curriculum\.dynamic\.reference_metric: stream "'):
        load_config(cfg, check_data=True)


@pytest.mark.parametrize("value", [float("nan"), float("-inf")], ids=["nan", "-inf"])
@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_a_non_finite_reference_value_names_the_sample(
    tmp_path: Path, unit: str, value: float
) -> None:
    short, long = _data(tmp_path)
    column = np.array(read_stream_info(long).metrics["ref_loss"])
    column[3] = value
    write_metric_column(long, "ref_loss", column)
    line = one_error_line(_validate(tmp_path, _curriculum(short, long, unit)))
    assert line == (
        f'Error: curriculum.dynamic.reference_metric: stream "{long}" ({LONG_PATH}): metric '
        f'column "ref_loss" of metrics.npz is {value} at sample 3; every value must be finite '
        "(re-run `curriculum-ds score`)"
    )


@pytest.mark.parametrize("unit", ["buckets", "streams"])
def test_the_reference_column_in_every_stream_is_accepted(tmp_path: Path, unit: str) -> None:
    short, long = _data(tmp_path)
    result = _validate(tmp_path, _curriculum(short, long, unit))
    assert result.exit_code == 0, result.output
    cfg = write_ds_config(tmp_path / "ds.json", _curriculum(short, long, unit))
    load_config(cfg, check_data=True)


def test_the_streams_unit_does_not_check_the_static_metric(tmp_path: Path) -> None:
    short, long = _data(tmp_path)
    streams = _validate(tmp_path, _curriculum(short, long, "streams", static_metric="no_such"))
    assert streams.exit_code == 0, streams.output
    line = one_error_line(
        _validate(tmp_path, _curriculum(short, long, "buckets", static_metric="no_such"))
    )
    assert line.startswith('Error: curriculum.dynamic.static_metric: stream "')
    assert 'has no metric column "no_such"' in line


def test_every_stream_without_the_column_is_counted_in_the_one_line(tmp_path: Path) -> None:
    # a user who forgot to score at all: the line says it is not only the first stream
    short, long = _data(tmp_path, long_column=False)
    unscored = tmp_path / "unscored"
    unscored.mkdir()
    plain = make_dataset(unscored, "plain", ragged_docs(20, seed=4))
    curriculum = _curriculum(short, long, "streams")
    curriculum["schedule"][-1]["train_loader"]["streams"].append(
        {"local": str(plain), "proportion": 0.2}
    )
    line = one_error_line(_validate(tmp_path, curriculum))
    assert f'stream "{long}" ({LONG_PATH}) (and 1 other stream(s)) has no metric column' in line
