"""``curriculum-ds score`` over 2 CPU ranks (issue 35, item 6), in one launched job.

The ranks each score a slice of every folder and rank 0 writes the column once: it equals the
one-process column to 1e-5 relative per sample. Ranks reading other data are refused in one
line (rank 0's) before anything is scored. A rank killed mid-score (SIGKILL) leaves the column
written before as it was. One launch (``score_ranks_script.py``) runs the three rounds.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs, run_launched

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "commands"))
from score_fixtures import tiny_gpt2

from curriculum_ds.commands.score import score
from curriculum_ds.data import read_stream_info
from curriculum_ds.distributed import free_port

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).with_name("score_ranks_script.py")


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("score_ranks")
    data = [
        make_dataset(root, "code", ragged_docs(23, seed=3, min_len=4, max_len=90)),
        make_dataset(root, "prose", ragged_docs(17, seed=4, min_len=4, max_len=50)),
    ]
    other = make_dataset(root, "other", ragged_docs(9, seed=5))
    model = tiny_gpt2(root / "m1")
    other_model = tiny_gpt2(root / "m2", n_positions=96)  # other weights: another column
    alone = [shutil.copytree(folder, root / f"alone_{folder.name}") for folder in data]
    score(alone, model, "ref", batch_size=16)  # the one-process oracle, other batches
    spec = root / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "data": [str(d) for d in data],
                "other": str(other),
                "model": str(model),
                "other_model": str(other_model),
                "out": str(root),
            }
        )
    )
    cmd = ["deepspeed", "--num_gpus", "2", "--master_port", str(free_port()), str(SCRIPT)]
    proc = run_launched([*cmd, str(spec)], cwd=root, check=False)
    return {"root": root, "data": data, "alone": alone, "proc": proc}


def test_two_ranks_write_the_one_process_column(job: dict[str, Any]) -> None:
    for rank in (0, 1):
        codes = json.loads((job["root"] / f"codes.{rank}.json").read_text())
        assert codes == {"whole": 0, "disagree": 1}, job["proc"].stderr[-3000:]
    for folder, alone in zip(job["data"], job["alone"], strict=True):
        got = read_stream_info(folder).metrics["ref"]
        want = read_stream_info(alone).metrics["ref"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
        assert np.all(got > 0)


def test_ranks_reading_other_data_are_refused_in_one_line_by_rank_0(job: dict[str, Any]) -> None:
    output = job["proc"].stdout + job["proc"].stderr
    lines = [line for line in output.splitlines() if "the ranks disagree on the data" in line]
    assert len(lines) == 1, output[-3000:]
    assert lines[0].startswith("Error: score: the ranks disagree on the data: rank 1's ")
    assert "(their index.json differ)" in lines[0]
    assert "ref2" not in read_stream_info(job["data"][0]).metrics  # nothing was written


def test_a_rank_killed_mid_score_leaves_the_column_as_it_was(job: dict[str, Any]) -> None:
    assert (job["root"] / "killed").is_file()  # rank 1 died inside round 3's scoring
    assert job["proc"].returncode != 0
    # round 3's other model never reached the column: still round 1's (checked above), and
    # no temporary file is left in the folders
    for folder, alone in zip(job["data"], job["alone"], strict=True):
        np.testing.assert_allclose(
            read_stream_info(folder).metrics["ref"], read_stream_info(alone).metrics["ref"], 1e-5
        )
        assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []
