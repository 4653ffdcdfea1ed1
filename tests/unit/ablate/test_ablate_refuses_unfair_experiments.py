"""``curriculum-ds ablate`` refuses, one line each and before anything is written under
``--out``, every experiment whose comparison would be unfair or impossible (issue 19 item 2):
an arm that does not validate (naming the arm and the field), unequal ``max_duration``,
unequal or missing ``curriculum.eval``, a ``reference`` that is not an arm, fewer than 2 seeds;
and an experiment changed for an arm that already ran (naming the arm). New arms and seeds are
accepted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import one_error_line

from curriculum_ds.ablate.experiment import arm_config, load_experiment
from curriculum_ds.ablate.runs import RunKey, check_unchanged, run_dir
from curriculum_ds.cli import main
from curriculum_ds.errors import ConfigError


@pytest.fixture
def data_root(tiny_experiment_path: Path) -> Path:
    return tiny_experiment_path.parent


def _experiment(root: Path, tmp_path: Path, **changes: Any) -> Path:
    """The tiny experiment with top-level keys replaced (None: removed), written to tmp_path."""
    spec = json.loads((root / "experiment.json").read_text())
    spec["base"] = str(root / "base.json")
    for key, value in changes.items():
        if value is None:
            spec.pop(key)
        else:
            spec[key] = value
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(spec))
    return path


def _refusal(experiment: Path, out: Path) -> str:
    result = CliRunner().invoke(main, ["ablate", str(experiment), "--out", str(out)])
    line = one_error_line(result)
    assert not out.exists(), "a refused experiment must write nothing under --out"
    return line


def _with_arm(root: Path, tmp_path: Path, patch: dict[str, Any]) -> Path:
    return _experiment(root, tmp_path, arms={"mixed": {}, "odd": patch})


def test_an_arm_that_does_not_validate_is_named_with_its_field(data_root, tmp_path):
    exp = _with_arm(data_root, tmp_path, {"curriculum": {"loss_weighting": "per-sample"}})
    line = _refusal(exp, tmp_path / "out")
    assert line.startswith('Error: arm "odd": curriculum.loss_weighting'), line


def test_unequal_max_duration_is_refused(data_root, tmp_path):
    patch = {"curriculum": {"max_duration": "2400tok", "schedule": [
        {"name": "mix", "duration": "2400tok", "train_loader": {
            "streams": [{"local": str(data_root / "a")}], "max_seq_len": 64}}]}}  # fmt: skip
    line = _refusal(_with_arm(data_root, tmp_path, patch), tmp_path / "out")
    assert 'arm "odd": curriculum.max_duration: 2400tok' in line, line
    assert "equal tokens" in line


def test_missing_eval_is_refused(data_root, tmp_path):
    line = _refusal(_with_arm(data_root, tmp_path, {"curriculum": {"eval": None}}), tmp_path / "o")
    assert 'arm "odd": curriculum.eval: required by ablate' in line, line


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"max_samples": 6}, "curriculum.eval.max_samples"),
        ({"streams": [{"local": "VAL_A"}]}, "curriculum.eval.streams"),
    ],
)
def test_unequal_eval_is_refused(data_root, tmp_path, patch, field):
    if "streams" in patch:  # only val_a: a stream fewer than the reference's
        patch = {"streams": [{"local": str(data_root / "val_a")}]}
    line = _refusal(_with_arm(data_root, tmp_path, {"curriculum": {"eval": patch}}), tmp_path / "o")
    assert f'arm "odd": {field}' in line, line
    assert "differs from the reference" in line


def test_a_reference_that_is_not_an_arm_is_refused(data_root, tmp_path):
    line = _refusal(_experiment(data_root, tmp_path, reference="stratified"), tmp_path / "out")
    assert 'reference: "stratified" is not an arm (arms: mixed, phases)' in line, line


@pytest.mark.parametrize("seeds", [[1], []])
def test_fewer_than_two_seeds_are_refused(data_root, tmp_path, seeds):
    line = _refusal(_experiment(data_root, tmp_path, seeds=seeds), tmp_path / "out")
    assert f"seeds: at least 2 seeds are needed for a comparison, got {len(seeds)}" in line, line


def test_repeated_seeds_and_a_single_arm_are_refused(data_root, tmp_path):
    line = _refusal(_experiment(data_root, tmp_path, seeds=[3, 3]), tmp_path / "out")
    assert "seeds: each seed once, 3 is repeated" in line, line
    line = _refusal(_experiment(data_root, tmp_path, arms={"mixed": {}}), tmp_path / "out")
    assert "arms: at least 2 arms are needed for a comparison, got 1" in line, line


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("a\x00b", '"a\\u0000b"'),
        ("L" * 300, '"' + "L" * 80 + "…" + "L" * 80 + '" (300 characters)'),
        ("L" * 65, '"' + "L" * 65 + '"'),
        ("..", '".."'),
        ("a/b", '"a/b"'),
        ("é", '"é"'),
    ],
)
def test_an_arm_name_that_cannot_name_a_folder_is_one_line(data_root, tmp_path, name, shown):
    exp = _experiment(data_root, tmp_path, arms={"mixed": {}, name: {}})
    line = _refusal(exp, tmp_path / "out")
    assert line == (
        f"Error: {exp}: arms: {shown} is not an arm name (it names the arm's run folder: 1 to 64 "
        'characters of A-Z a-z 0-9 . _ -, not "." or "..")'
    )


def test_a_64_character_arm_name_is_accepted(data_root, tmp_path):
    exp = _experiment(data_root, tmp_path, arms={"mixed": {}, "a.b_c-" + "L" * 58: {}})
    assert len(load_experiment(exp).arms) == 2


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        ({"csv_monitor": {"enabled": True, "output_path": "/tmp/x", "job_name": "j"}},
         "csv_monitor.output_path"),
        ({"tensorboard": {"output_path": "elsewhere"}}, "tensorboard.output_path"),
        ({"wandb": {"output_path": "elsewhere"}}, "wandb.output_path"),
        ({"zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}},
         "zero_optimization.offload_optimizer.nvme_path"),
        ({"flops_profiler": {"enabled": True, "output_file": "/tmp/f.txt"}},
         "flops_profiler.output_file"),
        ({"checkpoint": {"save_dir": "/elsewhere"}}, "checkpoint.save_dir"),
    ],
)  # fmt: skip
def test_an_arm_may_not_set_where_deepspeed_writes(data_root, tmp_path, patch, key):
    line = _refusal(_with_arm(data_root, tmp_path, patch), tmp_path / "out")
    assert line == (
        f'Error: arm "odd": {key}: an arm may not set where DeepSpeed writes (every run writes '
        "under --out); set it in the base config"
    )


def test_a_base_monitor_path_is_moved_into_each_run(data_root, tmp_path):
    base = json.loads((data_root / "base.json").read_text())
    base["csv_monitor"] = {
        "enabled": True,
        "output_path": str(tmp_path / "shared"),
        "job_name": "j",
    }
    (tmp_path / "base.json").write_text(json.dumps(base))
    exp = _experiment(data_root, tmp_path, base=str(tmp_path / "base.json"))
    experiment = load_experiment(exp)
    assert experiment.base["csv_monitor"]["output_path"] == str(tmp_path / "shared")
    # without an output_path the reference loop writes under the run's own --run-dir/monitors/
    assert arm_config(experiment, "phases", 1)["csv_monitor"] == {"enabled": True, "job_name": "j"}


def test_an_out_folder_the_system_refuses_is_one_line(data_root, tmp_path):
    exp = _experiment(data_root, tmp_path)
    (tmp_path / "afile").write_text("x")
    for out, reason in ((tmp_path / "afile" / "o", "created (Not a directory)"),
                        (tmp_path / ("o" * 300), "read (File name too long)")):  # fmt: skip
        result = CliRunner().invoke(main, ["ablate", str(exp), "--out", str(out)])
        line = one_error_line(result)
        assert line.startswith('Error: --out "'), line
        assert line.endswith(f": cannot be {reason}"), line


def test_an_arm_may_not_set_the_seed(data_root, tmp_path):
    exp = _with_arm(data_root, tmp_path, {"curriculum": {"seed": 9}})
    assert 'arm "odd": curriculum.seed: set by the experiment' in _refusal(exp, tmp_path / "o")


def _ran(experiment: Path, out: Path, arm: str, seed: int) -> Path:
    """What a started run of ``arm``/``seed`` leaves: its run directory with its ds_config."""
    directory = run_dir(out, RunKey(arm, seed))
    directory.mkdir(parents=True)
    config = arm_config(load_experiment(experiment), arm, seed)
    (directory / "ds_config.json").write_text(json.dumps(config))
    return directory


def test_an_arm_changed_after_it_ran_is_refused_by_name(data_root, tmp_path):
    exp = _experiment(data_root, tmp_path)
    out = tmp_path / "out"
    _ran(exp, out, "phases", 2)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    spec = json.loads(exp.read_text())
    spec["arms"]["phases"]["curriculum"]["schedule"][0]["duration"] = "600tok"
    spec["arms"]["phases"]["curriculum"]["schedule"][1]["duration"] = "1400tok"
    exp.write_text(json.dumps(spec))
    result = CliRunner().invoke(main, ["ablate", str(exp), "--out", str(out)])
    line = one_error_line(result)
    assert line.startswith('Error: arm "phases": changed since it ran '), line
    assert "curriculum.schedule[0].duration differs" in line, line
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing written


def test_new_arms_and_seeds_may_be_added(data_root, tmp_path):
    exp = _experiment(data_root, tmp_path)
    out = tmp_path / "out"
    _ran(exp, out, "mixed", 1)
    _ran(exp, out, "phases", 1)
    spec = json.loads(exp.read_text())
    spec["seeds"] = [1, 2, 3]
    spec["arms"]["late_b"] = {"gradient_clipping": 1.0}
    exp.write_text(json.dumps(spec))
    check_unchanged(load_experiment(exp), out)  # no error
    spec["arms"]["mixed"] = {"gradient_accumulation_steps": 1}
    exp.write_text(json.dumps(spec))
    changed = load_experiment(exp)
    with pytest.raises(ConfigError, match='arm "mixed": changed since it ran'):
        check_unchanged(changed, out)
