"""DoReMi's bad input is refused by ``curriculum-ds validate`` in one line, before any launch.

``method: "doremi"`` without ``reference_metric`` (its signal is the excess loss over that
column), a step size η ≤ 0, a smoothing ε outside [0, 1), and ε = 0 with ``apply:
"sampling"`` (a weight may reach 0, which the sampler refuses): each one line naming the key,
exit 1, no traceback. (The config model's own refusals of every method are in
``test_config_mixing_methods.py``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import one_error_line, write_ds_config

from curriculum_ds.cli import main
from curriculum_ds.config.mixers import DoReMiConfig


def _validate(tmp_path: Path, **dynamic: Any) -> str:
    curriculum = {
        "max_duration": "1000tok",
        "schedule": [
            {
                "name": "proxy",
                "duration": "1000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(tmp_path / "a"), "proportion": 0.5},
                        {"local": str(tmp_path / "b"), "proportion": 0.5},
                    ]
                },
            }
        ],
        "dynamic": {"enabled": True, "method": "doremi", "unit": "streams", **dynamic},
    }
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    return one_error_line(CliRunner().invoke(main, ["validate", str(cfg)]))


def test_doremi_without_a_reference_metric(tmp_path):
    assert _validate(tmp_path) == (
        'Error: curriculum.dynamic.reference_metric: signal "excess_loss" needs the metric '
        "column of the reference model's losses (`curriculum-ds score ... --column NAME`)"
    )


@pytest.mark.parametrize("eta", [0, -0.5])
def test_a_step_size_not_above_zero(tmp_path, eta):
    line = _validate(tmp_path, reference_metric="ref_loss", doremi={"eta": eta})
    assert line == f"Error: curriculum.dynamic.doremi.eta: must be > 0, got {eta}"


@pytest.mark.parametrize(("eps", "bound"), [(-1e-4, ">= 0"), (1.0, "< 1")])
def test_a_smoothing_outside_zero_one(tmp_path, eps, bound):
    line = _validate(tmp_path, reference_metric="ref_loss", doremi={"epsilon": eps})
    assert line == f"Error: curriculum.dynamic.doremi.epsilon: must be {bound}, got {eps}"


def test_no_smoothing_with_the_sampler(tmp_path):
    line = _validate(tmp_path, reference_metric="ref_loss", doremi={"epsilon": 0})
    assert line == (
        'Error: curriculum.dynamic.doremi.epsilon: must be > 0 with apply "sampling": without '
        "smoothing a weight can reach 0, and the sampler needs every stream's weight > 0 (use "
        'apply "loss" for epsilon 0)'
    )
    # with the loss weights a weight of 0 is a stream whose loss weighs nothing: allowed
    assert DoReMiConfig(epsilon=0, apply="loss").epsilon == 0
