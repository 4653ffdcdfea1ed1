"""RegMix's CSV layout is read as published: files joined on the first column, rows renormalised
within 1e-2 of 1 and refused further off, in one line naming the file and the run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mixopt_swarms import REGMIX

from curriculum_ds.errors import DataError
from curriculum_ds.mixopt.tables import read_mixtures, read_stream_json, read_swarm_csv


def test_regmix_runs_are_joined_and_renormalised() -> None:
    swarm = read_swarm_csv(REGMIX / "train_pile_loss_1m.csv", REGMIX / "train_mixture_1m.csv")
    assert swarm.mixtures.shape == (512, 17)
    assert swarm.losses.shape == (512, 13)
    np.testing.assert_allclose(swarm.mixtures.sum(axis=1), 1.0, atol=1e-12)
    assert swarm.streams[0] == "train_the_pile_arxiv"
    assert swarm.loss_names[0] == "metric/the_pile_arxiv_val_loss"
    test = read_swarm_csv(REGMIX / "test_pile_loss_1B.csv", REGMIX / "test_mixture_1B.csv")
    assert len(test.keys) == 64
    assert test.keys[:3] == ("0", "1", "2")


def test_rows_off_by_more_than_1e_2_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "mix.csv"
    path.write_text("index,a,b\n1,0.5,0.505\n2,0.3,0.695\n")
    table = read_mixtures(path)
    np.testing.assert_allclose(table.values.sum(axis=1), 1.0, atol=1e-15)
    np.testing.assert_allclose(table.values[0], [0.5 / 1.005, 0.505 / 1.005])
    path.write_text("index,a,b\n1,0.5,0.5\n2,0.3,0.6\n")
    with pytest.raises(DataError, match=r"run '2''s shares sum to 0\.9, not 1 within 0\.01"):
        read_mixtures(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("index,a,b\n1,0.5,x\n", r"row 2, column 'b': 'x' is not a finite number"),
        ("index,a,b\n1,0.5,0.5\n1,0.4,0.6\n", r"key column 'index' has duplicate values"),
        ("index,a,b\n1,0.5\n", r"row 2 has 2 cells, the header 3"),
        ("index,a,b\n1,-0.1,1.1\n", r"column 'a': a share is negative"),
        ("index\n1\n", r"needs a header and one row per run"),
    ],
)
def test_malformed_csv_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mix.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=message) as info:
        read_mixtures(path)
    assert "\n" not in str(info.value)


def test_stream_json_names_every_stream(tmp_path: Path) -> None:
    path = tmp_path / "prior.json"
    path.write_text(json.dumps({"a": 2, "b": 1.5}))
    np.testing.assert_array_equal(read_stream_json(path, "--prior", ("b", "a")), [1.5, 2.0])
    path.write_text(json.dumps({"a": 2}))
    with pytest.raises(DataError, match=r"--prior .*: stream 'b' is missing"):
        read_stream_json(path, "--prior", ("a", "b"))
    path.write_text(json.dumps({"a": 2, "b": 1, "c": 1}))
    with pytest.raises(DataError, match=r"'c' is not a stream of the mixtures file"):
        read_stream_json(path, "--prior", ("a", "b"))
    path.write_text(json.dumps({"a": 0, "b": 1}))
    with pytest.raises(DataError, match=r"'a': 0 must be a finite number > 0"):
        read_stream_json(path, "--tokens", ("a", "b"))
