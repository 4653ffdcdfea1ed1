"""`curriculum-ds mixopt fit RESULTS.csv --mixtures MIX.csv ... --out DIR`, in-process.

A good call writes fit.json, proposal.json (a ready train_loader in tokens), mixopt.png and, with
--predict, predictions.csv (the first column of the mixtures to predict, then one predicted loss
per loss column); a bad one is one line, exit 1, and nothing written."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import one_error_line
from mixopt_swarms import REGMIX

from curriculum_ds.cli import main as cli_main
from curriculum_ds.mixopt.crossval import rank_quality

TRAIN = [str(REGMIX / "train_pile_loss_1m.csv"), "--mixtures", str(REGMIX / "train_mixture_1m.csv")]
FAST = ["--candidates", "3000", "--top-k", "16", "--bootstrap", "3"]


def test_fit_writes_the_proposal_and_the_predictions(tmp_path: Path) -> None:
    out = tmp_path / "fit"
    test_mix = REGMIX / "test_mixture_1m.csv"
    args = [*TRAIN, "--predict", str(test_mix), "--out", str(out), *FAST]
    result = CliRunner().invoke(cli_main, ["mixopt", "fit", *args])
    assert result.exit_code == 0, result.output
    assert "no --prior: the prior is uniform" in result.output
    assert "no --tokens: no repetition cap" in result.output
    fit = json.loads((out / "fit.json").read_text())
    assert fit["regressor"] == "log_linear"
    assert fit["num_runs"] == 512
    assert 0.7 < fit["cv_spearman_mean"] < 1.0
    proposal = json.loads((out / "proposal.json").read_text())
    loader = proposal["train_loader"]
    assert loader["proportion_unit"] == "tokens"
    shares = [s["proportion"] for s in loader["streams"]]
    assert min(shares) > 0
    assert sum(shares) == pytest.approx(1.0, abs=1e-12)
    assert proposal["target"]["low"] <= proposal["target"]["high"]
    assert proposal["target"]["value"] < proposal["target"]["at_prior"]
    assert (out / "mixopt.png").stat().st_size > 10_000
    with (out / "predictions.csv").open() as fh:
        rows = list(csv.reader(fh))
    observed = list(csv.reader((REGMIX / "test_pile_loss_1m.csv").open()))
    assert rows[0] == observed[0]  # index, then the results' loss columns
    assert [r[0] for r in rows[1:]] == [r[0] for r in observed[1:]]
    predicted = np.array([[float(v) for v in r[1:]] for r in rows[1:]])
    truth = np.array([[float(v) for v in r[1:]] for r in observed[1:]])
    rhos = [rank_quality(predicted[:, s], truth[:, s]).spearman for s in range(truth.shape[1])]
    assert np.mean(rhos) >= 0.83


def test_fit_with_lightgbm_prior_and_repetition_cap(tmp_path: Path) -> None:
    head = tmp_path / "results.csv"
    mix = tmp_path / "mix.csv"
    lines = (REGMIX / "train_pile_loss_1m.csv").open().readlines()[:81]  # 80 runs, 2 losses
    head.write_text("".join(",".join(line.split(",")[:3]).strip() + "\n" for line in lines))
    mix.write_text((REGMIX / "train_mixture_1m.csv").read_text())
    streams = (REGMIX / "train_mixture_1m.csv").open().readline().strip().split(",")[1:]
    (tmp_path / "prior.json").write_text(json.dumps({s: 1 + i for i, s in enumerate(streams)}))
    (tmp_path / "tokens.json").write_text(json.dumps({s: 1e6 for s in streams}))
    out = tmp_path / "fit"
    args = [str(head), "--mixtures", str(mix), "--regressor", "lightgbm", "--out", str(out)]
    args += ["--prior", str(tmp_path / "prior.json"), "--tokens", str(tmp_path / "tokens.json")]
    args += ["--max-repetition", "2", "--target-tokens", "1e7", "--threads", "1", *FAST]
    result = CliRunner().invoke(cli_main, ["mixopt", "fit", *args])
    assert result.exit_code == 0, result.output
    proposal = json.loads((out / "proposal.json").read_text())
    assert proposal["regressor"] == "lightgbm"
    assert proposal["notes"] == []
    assert max(proposal["mixture"].values()) <= 0.2 + 1e-12  # 2 passes over 1e6 of 1e7 tokens
    assert proposal["prior"][streams[-1]] == pytest.approx(17 / 153)


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    off = tmp_path / "off.csv"
    off.write_text("index,a,b\n1,0.5,0.3\n2,0.5,0.5\n")
    prior = tmp_path / "prior.json"
    prior.write_text(json.dumps({"train_the_pile_arxiv": 1, "wikipedia": 1}))
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("index,a,b\n1,0.5,0.5\n")
    return {
        "regressor": ([*TRAIN, "--regressor", "gp"], "regressor: 'gp' is not one of log_linear"),
        "sum": ([*TRAIN[:2], str(off)], r"run '1''s shares sum to 0.8, not 1 within 0.01"),
        "prior": ([*TRAIN, "--prior", str(prior)], "'wikipedia' is not a stream of the mixtures"),
        "min_weight": ([*TRAIN, "--min-weight", "0.1"], "min_weight: 0.1 × 17 streams = 1.7 > 1"),
        "negative": ([*TRAIN, "--min-weight", "-1"], "--min-weight: Input should be greater than"),
        "cap": (
            [*TRAIN, "--max-repetition", "2"],
            "max_repetition needs constraints.target_tokens",
        ),
        "predict": ([*TRAIN, "--predict", str(wrong)], "lacks stream 'train_the_pile_arxiv'"),
        "missing": ([str(tmp_path / "none.csv"), *TRAIN[1:]], "RESULTS .*none.csv: cannot be read"),
    }


@pytest.mark.parametrize(
    "case", ["regressor", "sum", "prior", "min_weight", "negative", "cap", "predict", "missing"]
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, case: str) -> None:
    args, message = _bad_inputs(tmp_path)[case]
    out = tmp_path / "out"
    result = CliRunner().invoke(cli_main, ["mixopt", "fit", *args, "--out", str(out)])
    line = one_error_line(result)
    assert re.search(message, line), line
    assert not out.exists()
