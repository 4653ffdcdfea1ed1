"""``curriculum-ds score --num-gpus N [--hostfile H]``: the launcher command, and what is refused
before any rank starts (issue 35, item 6). The ranks themselves run in
tests/integration/test_score_over_two_ranks.py (one launched job)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import one_error_line

from curriculum_ds.cli import main
from curriculum_ds.commands.score_ranks import Ranks, data_digest, score_command
from curriculum_ds.errors import ConfigError, DataError


def test_the_launcher_command_runs_the_score_module_on_every_rank(tmp_path: Path) -> None:
    cmd = score_command(
        [tmp_path / "a", tmp_path / "b"],
        tmp_path / "m",
        "ref_loss",
        num_gpus=8,
        hostfile=tmp_path / "hosts",
        batch_size=32,
        overwrite=True,
        master_port=29611,
    )
    assert Path(cmd[0]).name == "deepspeed"
    assert cmd[1:] == [
        "--num_gpus",
        "8",
        "--hostfile",
        str(tmp_path / "hosts"),
        "--master_port",
        "29611",
        "--module",
        "curriculum_ds.commands.score",
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--model",
        str(tmp_path / "m"),
        "--column",
        "ref_loss",
        "--batch-size",
        "32",
        "--overwrite",
    ]
    with pytest.raises(ConfigError, match=r"^score: --num-gpus must be >= 1, got 0$"):
        score_command([tmp_path], tmp_path, "c", num_gpus=0)


def test_a_bad_column_or_folder_is_one_line_before_any_rank_starts(tmp_path: Path) -> None:
    args = ["score", str(tmp_path), "--model", str(tmp_path), "--num-gpus", "2"]
    line = one_error_line(CliRunner().invoke(main, [*args, "--column", "num_tokens"]))
    assert line.startswith('Error: score: --column "num_tokens" is one of prepare\'s own columns')
    line = one_error_line(
        CliRunner().invoke(main, [*args[:1], str(tmp_path / "nope"), *args[2:], "--column", "c"])
    )
    assert line == f"Error: score: {tmp_path / 'nope'} is not a folder"


class _Gathered(Ranks):
    """Ranks whose all_gather hands back what the other ranks would have sent."""

    def __init__(self, others: list[object]) -> None:
        super().__init__(0, 1 + len(others))
        self.others = others

    def _gather(self, entry: object) -> list[object]:
        return [entry, *self.others]


def test_ranks_agree_on_the_first_refusal_and_on_the_data(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, text in ((a, '{"shards": [1]}'), (b, '{"shards": [2]}')):
        folder.mkdir()
        (folder / "index.json").write_text(text)
    _Gathered([(None, None, [(str(a), data_digest(a))])]).agree([a])  # the same data: fine
    refused = ("ConfigError", "score: --model m is not a folder (no download ever)", None)
    with pytest.raises(ConfigError, match=r"^score: --model m is not a folder"):
        _Gathered([refused]).agree([a])  # rank 1's refusal is every rank's
    with pytest.raises(DataError, match=r"^score: the ranks disagree on the data: rank 1's "):
        _Gathered([(None, None, [(str(b), data_digest(b))])]).agree([a])
    with pytest.raises(DataError, match=r"rank 1 has 2 DATA folders, rank 0 has 1"):
        _Gathered([(None, None, [("x", "1"), ("y", "2")])]).agree([a])
