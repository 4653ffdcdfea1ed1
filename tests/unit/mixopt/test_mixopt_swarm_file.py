"""``mixopt run``'s swarm file and mixtures, in process: the checks, the draws, the run configs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from swarm_files import tiny_swarm

from curriculum_ds.ablate.experiment import arm_config, load_experiment
from curriculum_ds.cli import main
from curriculum_ds.data import read_stream_info
from curriculum_ds.errors import ConfigError
from curriculum_ds.mixopt.candidates import DirichletKnobs, swarm_mixture
from curriculum_ds.mixopt.swarm_file import load_swarm, run_name
from curriculum_ds.mixopt.swarm_run import (
    check_unchanged_swarm,
    fit_swarm_runs,
    swarm_target,
    validate_experiment,
)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("swarm")
    tiny_swarm(root)
    return root


def test_the_prior_is_each_streams_natural_token_share(data_root: Path) -> None:
    swarm = load_swarm(tiny_swarm(data_root))
    tokens = [read_stream_info(data_root / s).num_tokens for s in ("a", "b")]
    assert swarm.streams == ("a", "b")
    assert swarm.tokens.tolist() == tokens
    np.testing.assert_allclose(swarm.prior, np.array(tokens) / sum(tokens), rtol=0, atol=1e-15)
    assert swarm.experiment.eval_streams == ("val_a", "val_b")
    assert swarm.experiment.seeds == (3,)
    assert swarm.experiment.max_duration == "2000tok"
    np.testing.assert_allclose(swarm.target_weights, [0.5, 0.5])


def test_mixture_i_depends_only_on_the_seed_and_i(data_root: Path) -> None:
    four = load_swarm(tiny_swarm(data_root, num_runs=4))
    six = load_swarm(tiny_swarm(data_root, num_runs=6))
    assert np.array_equal(six.mixtures[:4], four.mixtures)
    for i in range(6):
        expected = swarm_mixture(six.prior, 3, i, DirichletKnobs())
        assert np.array_equal(six.mixtures[i], expected)
    np.testing.assert_allclose(six.mixtures.sum(axis=1), 1.0, atol=1e-12)
    other = load_swarm(tiny_swarm(data_root, seed=4))
    assert not np.array_equal(other.mixtures, four.mixtures)


def test_a_run_config_is_tokens_and_leaves_a_zero_weight_stream_out(data_root: Path) -> None:
    # a tiny concentration makes sparse mixtures: some run gives one stream all of it
    swarm = load_swarm(
        tiny_swarm(
            data_root, num_runs=12, knobs={"min_concentration": 0.01, "max_concentration": 0.02}
        )
    )
    sparse = [i for i in range(12) if (swarm.mixtures[i] == 0).any()]
    assert sparse, swarm.mixtures
    for i in range(12):
        config = arm_config(swarm.experiment, run_name(i), 3)
        loader = config["curriculum"]["schedule"][0]["train_loader"]
        assert loader["proportion_unit"] == "tokens"
        shares = {Path(s["local"]).name: s["proportion"] for s in loader["streams"]}
        expected = {n: w for n, w in zip(swarm.streams, swarm.mixtures[i], strict=True) if w > 0}
        assert shares == expected
        assert config["curriculum"]["eval"] == swarm.experiment.base["curriculum"]["eval"]
        assert config["curriculum"]["seed"] == 3


def test_the_target_is_the_mean_one_streams_or_a_weighted_sum(data_root: Path) -> None:
    row = {"streams": {"val_a": 2.0, "val_b": 4.0}}
    assert swarm_target(load_swarm(tiny_swarm(data_root)), row) == 3.0
    one = load_swarm(tiny_swarm(data_root, target={"stream": "val_b"}))
    assert swarm_target(one, row) == 4.0
    weighted = load_swarm(tiny_swarm(data_root, target={"weights": {"val_a": 3, "val_b": 1}}))
    assert swarm_target(weighted, row) == 2.5


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"num_runs": 2}, "num_runs: 2 is below the number of streams + 1 (3)"),
        ({"prior": {"a": 0.5, "c": 0.5}}, "prior: 'c' is not a stream of the base config (a, b)"),
        ({"target": {"stream": "val_c"}}, "target.stream: 'val_c' is not an eval stream"),
        ({"num_runs": "4"}, "num_runs: Input should be a valid integer"),
        ({"knobs": {"temperature": 0}}, "knobs.temperature: Input should be greater than 0"),
        ({"runs": 4}, "runs: unknown key"),
        ({"constraints": {"min_weight": 0.6}}, "constraints: "),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_written(
    data_root: Path, tmp_path: Path, spec: dict[str, object], message: str
) -> None:
    path = tiny_swarm(data_root, **spec)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["mixopt", "run", str(path), "--out", str(out)])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert message in lines[0]
    assert not out.exists()


def test_runs_already_run_refuse_a_changed_swarm_but_new_runs_may_be_added(
    data_root: Path, tmp_path: Path
) -> None:
    swarm = load_swarm(tiny_swarm(data_root))
    for i in range(2):  # as ablate's runner leaves a started run's config
        folder = tmp_path / "runs" / run_name(i) / "seed-3"
        folder.mkdir(parents=True)
        config = arm_config(swarm.experiment, run_name(i), 3)
        (folder / "ds_config.json").write_text(json.dumps(config))
    check_unchanged_swarm(load_swarm(tiny_swarm(data_root, num_runs=9)), tmp_path)
    check_unchanged_swarm(load_swarm(tiny_swarm(data_root, target={"stream": "val_a"})), tmp_path)
    for change in ({"seed": 4}, {"knobs": {"temperature": 0.9}}, {"prior": {"a": 1, "b": 1}}):
        with pytest.raises(ConfigError) as refused:
            check_unchanged_swarm(load_swarm(tiny_swarm(data_root, **change)), tmp_path)
        text = str(refused.value)
        assert "\n" not in text
        assert "the swarm changed for runs that already ran" in text
        assert 'arm "run-000' in text
        assert "ds_config.json)" in text
        assert "new name" not in text


def test_the_fit_of_a_swarms_rows_writes_a_ready_train_loader(
    data_root: Path, tmp_path: Path
) -> None:
    swarm = load_swarm(tiny_swarm(data_root, num_runs=8))
    rows = []
    for i, w in enumerate(swarm.mixtures):  # losses falling with each stream's share
        losses = {"val_a": 3.0 - w[0], "val_b": 3.0 - 0.5 * w[1]}
        rows.append(
            {
                "run": run_name(i),
                "mixture": dict(zip(("a", "b"), w, strict=True)),
                "losses": losses,
            }
        )
    result, table = fit_swarm_runs(swarm, rows, tmp_path)
    proposal = json.loads((tmp_path / "proposal.json").read_text())
    loader = proposal["train_loader"]
    assert loader["proportion_unit"] == "tokens"
    assert {s["local"] for s in loader["streams"]} <= {str(data_root / "a"), str(data_root / "b")}
    assert proposal["prior"] == pytest.approx(
        dict(zip(("a", "b"), swarm.prior, strict=True)), abs=1e-12
    )
    assert not any("prior is uniform" in note for note in proposal["notes"])
    assert (tmp_path / "fit.json").is_file()
    assert (tmp_path / "mixopt.png").is_file()
    assert result.proposal.mixture[0] > swarm.prior[0]  # val_a gains more from a
    assert "a" in table


def test_validate_is_a_fair_ablate_experiment_at_the_target_tokens(
    data_root: Path, tmp_path: Path
) -> None:
    swarm = load_swarm(tiny_swarm(data_root, constraints={"target_tokens": 3000}))
    proposal = np.array([0.25, 0.75])
    path = validate_experiment(swarm, proposal, [1, 2, 3], tmp_path)
    experiment = load_experiment(path)  # ablate's own checks, as `ablate` runs it
    assert list(experiment.arms) == ["proposal", "natural", "uniform"]
    assert experiment.reference == "natural"
    assert experiment.seeds == (1, 2, 3)
    assert experiment.max_duration == "3000tok"
    assert experiment.eval_streams == ("val_a", "val_b")
    for arm, shares in (("proposal", proposal), ("natural", swarm.prior), ("uniform", [0.5, 0.5])):
        loader = arm_config(experiment, arm, 1)["curriculum"]["schedule"][0]["train_loader"]
        assert loader["proportion_unit"] == "tokens"
        assert [s["proportion"] for s in loader["streams"]] == list(shares)
