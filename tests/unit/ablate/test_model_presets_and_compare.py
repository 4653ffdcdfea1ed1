"""Model presets (an experiment's ``model``: ``proxy``, ``proxy_10x``) and ``ablate-compare``.

* ``proxy`` is the default GPT-2 (2 layers, width 128); ``proxy_10x`` has 6 layers, width 256:
  about 10.5 times the parameters. An experiment naming a preset launches every run with
  ``--model-preset``, and a run that ran at another size is refused on resume.
* ``ablate-compare`` prints each arm's paired delta at both sizes with its interval and whether
  the signs agree; Spearman's ρ only with ≥ 4 arms; unreadable summaries are one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from curriculum_ds.ablate import ablate
from curriculum_ds.ablate.compare import compare_summaries, render_comparison
from curriculum_ds.ablate.experiment import load_experiment
from curriculum_ds.ablate.runs import check_unchanged
from curriculum_ds.cli import main
from curriculum_ds.config import parse_curriculum
from curriculum_ds.default_model import MODEL_PRESETS, build_model
from curriculum_ds.errors import ConfigError

_LOOP = """
import json, sys
from pathlib import Path
run = Path(sys.argv[sys.argv.index("--run-dir") + 1])
(run / "metrics.jsonl").write_text(json.dumps({"step": 3, "tokens": 2100}) + "\\n")
streams = {"val_a": {"loss": 2.0}, "val_b": {"loss": 2.5}, "val_qa": {"loss": 3.0,
           "exact_match": 0.5}}
row = {"step": 3, "tokens": 2100, "loss": 2.4, "streams": streams}
(run / "eval.jsonl").write_text(json.dumps(row) + "\\n")
"""


def test_proxy_10x_is_about_ten_times_the_proxy(tiny_experiment_path: Path) -> None:
    data = tiny_experiment_path.parent
    cfg = parse_curriculum(
        {
            "max_duration": "100tok",
            "schedule": [
                {
                    "name": "a",
                    "duration": "100tok",
                    "train_loader": {"streams": [{"local": str(data / "a")}]},
                }
            ],
        }
    )
    sizes = {}
    for name, preset in MODEL_PRESETS.items():
        model = build_model(None, cfg, 256, name)
        assert (model.config.n_layer, model.config.n_embd) == (preset.n_layer, preset.n_embd)
        sizes[name] = sum(p.numel() for p in model.parameters())
    assert sizes == {"proxy": 462_464, "proxy_10x": 4_870_400}  # docs/ablate.md's figures
    with pytest.raises(ConfigError, match="model preset 'huge': expected one of proxy, proxy_10x"):
        build_model(None, cfg, 256, "huge")


def test_an_experiment_at_proxy_10x_launches_every_run_with_the_preset(
    tiny_experiment_path: Path, tmp_path: Path
) -> None:
    spec = json.loads(tiny_experiment_path.read_text())
    base = tiny_experiment_path.parent / spec["base"]
    path = tmp_path / "large.json"
    path.write_text(json.dumps({**spec, "base": str(base), "model": "proxy_10x"}))
    experiment = load_experiment(path)
    assert (experiment.model, experiment.model_preset) == (None, "proxy_10x")
    launched: list[list[str]] = []

    def hook(arm: str, seed: int, cmd: list[str]) -> list[str]:
        launched.append(cmd)
        return [sys.executable, "-c", _LOOP, *cmd[cmd.index("--run-dir") :]]

    out = tmp_path / "out"
    table = ablate(path, out, num_gpus=1, command_hook=hook)
    assert len(launched) == 4
    for cmd in launched:
        assert cmd[cmd.index("--model-preset") + 1] == "proxy_10x"
    assert "val_qa exact_match ↑" in table
    # the same folder with the default size: the runs were made at another one
    path.write_text(json.dumps({**spec, "base": str(base)}))
    with pytest.raises(ConfigError, match="changed since it ran \\(model differs"):
        check_unchanged(load_experiment(path), out)


def _summary(arms: dict[str, float], ci: float = 0.01) -> dict[str, Any]:
    def stat(mean: float) -> dict[str, Any]:
        return {"mean": mean, "ci95": ci, "per_seed": {}}

    return {
        "reference": "ref",
        "seeds": [1, 2],
        "arms": {
            arm: {
                "n": 2,
                "loss": {"mean": 3.0 + d, "ci95": ci},
                "streams": {"web": {"mean": 3.0 + d, "ci95": ci}},
                "exact_match": {"qa": {"mean": 0.5 - d, "ci95": ci}},
                "delta": {
                    "loss": stat(d),
                    "streams": {"web": stat(d)},
                    "exact_match": {"qa": stat(-d)},
                },
            }
            for arm, d in arms.items()
        },
    }


def test_compare_prints_both_deltas_and_whether_signs_agree() -> None:
    small = _summary({"ref": 0.0, "b": -0.05})
    large = _summary({"ref": 0.0, "b": 0.02})
    comparison = compare_summaries(small, large)
    titles = [q["title"] for q in comparison["quantities"]]
    assert titles == [
        "eval loss (all tokens)",
        "eval loss web",
        "exact_match qa (higher is better)",
    ]
    row = comparison["quantities"][0]["rows"][0]
    assert (row["arm"], row["small"]["mean"], row["large"]["mean"]) == ("b", -0.05, 0.02)
    assert row["agree"] is False
    assert all(q["spearman"] is None for q in comparison["quantities"])
    text = render_comparison(comparison, "small", "large")
    assert "| b | -0.0500 ± 0.0100 * | +0.0200 ± 0.0100 * | no |" in text
    assert "No rank correlation: 2 arms (it needs ≥ 4)." in text


def test_compare_ranks_arms_when_there_are_four() -> None:
    small = _summary({"ref": 0.0, "b": -0.05, "c": 0.03, "d": 0.01})
    large = _summary({"ref": 0.0, "b": -0.04, "c": 0.05, "d": 0.02})
    comparison = compare_summaries(small, large)
    assert comparison["quantities"][0]["spearman"] == pytest.approx(1.0)
    assert [r["agree"] for r in comparison["quantities"][0]["rows"]] == [True, True, True]
    assert "Spearman's ρ of the arms' mean deltas (reference 0): +1.000" in render_comparison(
        comparison, "s", "l"
    )


def test_the_cli_compares_and_refuses_in_one_line(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    (small / "summary.json").write_text(json.dumps(_summary({"ref": 0.0, "b": -0.05})))
    result = CliRunner().invoke(main, ["ablate-compare", str(small), str(large)])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "large/summary.json: cannot read an ablate summary" in result.output
    (large / "summary.json").write_text(json.dumps(_summary({"ref": 0.0, "b": -0.01})))
    result = CliRunner().invoke(main, ["ablate-compare", str(small), str(large)])
    assert result.exit_code == 0, result.output
    assert "| arm | Δ at small | Δ at large | signs agree |" in result.output
