"""Case C05 (../shared/cases/README.md): re-weighting must not collapse or breach the floor.

4 buckets, scores [1, 1, 1, 5], temperature 0.1, floor 0.05 → [0.05, 0.05, 0.05, 0.85] (±1e-6),
sum 1. Clamping then renormalising would give 0.0435 < floor. Temperature 0.001 gives the same
weights with no NaN/inf. Temperature 0, or floor × num_buckets > 1 (0.3 × 4), is refused when the
config is validated, naming the field.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from curriculum_ds.cli import main
from curriculum_ds.config import parse_curriculum
from curriculum_ds.dynamic import bucket_probs
from curriculum_ds.errors import ConfigError

SCORES = [1.0, 1.0, 1.0, 5.0]
EXPECTED = [0.05, 0.05, 0.05, 0.85]


@pytest.mark.parametrize("temperature", [0.1, 0.001])
def test_floor_holds_without_collapse(temperature):
    probs = bucket_probs(SCORES, temperature=temperature, floor=0.05)
    assert np.all(np.isfinite(probs))
    np.testing.assert_allclose(probs, EXPECTED, rtol=0, atol=1e-6)
    assert abs(probs.sum() - 1.0) <= 1e-12
    assert probs.min() >= 0.05


def test_clamp_then_renormalise_would_breach_the_floor():
    # the common mistake, for the record: the formula above is not it
    z = np.exp((np.array(SCORES) - 5.0) / 0.1)
    clamped = np.maximum(z / z.sum(), 0.05)
    renormalised = clamped / clamped.sum()
    assert renormalised[0] == pytest.approx(0.0435, abs=1e-4)
    assert renormalised[0] < 0.05


@pytest.mark.parametrize("temperature", [1e-6, 1e-300, 5e-324])
def test_tiny_temperatures_stay_finite(temperature):
    probs = bucket_probs(SCORES, temperature=temperature, floor=0.05)
    np.testing.assert_allclose(probs, EXPECTED, rtol=0, atol=1e-12)


def _curriculum(dynamic):
    return {
        "max_duration": "100tok",
        "schedule": [
            {"name": "a", "duration": "100tok", "train_loader": {"streams": [{"local": "data"}]}}
        ],
        "dynamic": {"enabled": True, **dynamic},
    }


@pytest.mark.parametrize(
    ("dynamic", "match"),
    [
        ({"temperature": 0}, r"^curriculum\.dynamic\.temperature: must be > 0, got 0"),
        ({"temperature": -0.5}, r"^curriculum\.dynamic\.temperature: must be > 0"),
        (
            {"floor": 0.3, "num_buckets": 4},
            r"^curriculum\.dynamic\.floor: 0\.3 × num_buckets 4 = 1\.2 > 1",
        ),
        ({"floor": 0}, r"^curriculum\.dynamic\.floor: must be > 0"),
        ({"num_buckets": 1}, r"^curriculum\.dynamic\.num_buckets: must be >= 2"),
        ({"num_buckets": 65}, r"^curriculum\.dynamic\.num_buckets: must be <= 64"),
    ],
)
def test_config_refuses_bad_values_naming_the_field(dynamic, match):
    with pytest.raises(ConfigError, match=match):
        parse_curriculum(_curriculum(dynamic))


def test_floor_of_exactly_one_over_buckets_is_accepted():
    cfg = parse_curriculum(_curriculum({"floor": 0.25, "num_buckets": 4}))
    assert cfg.dynamic.floor == 0.25


@pytest.mark.parametrize(
    ("floor", "num_buckets"), [(0.33333333333334, 3), (0.25000000000000006, 4)]
)
def test_floor_the_config_accepts_is_accepted_by_the_run(floor, num_buckets):
    """A floor that rounds just above 1/B passes the config's slack: the run's own bucket_probs
    must take it too (it raised at the first recompute), giving uniform weights."""
    cfg = parse_curriculum(_curriculum({"floor": floor, "num_buckets": num_buckets}))
    probs = bucket_probs(
        np.linspace(1.0, 5.0, num_buckets), temperature=cfg.dynamic.temperature, floor=floor
    )
    assert probs.min() >= floor
    assert abs(probs.sum() - 1.0) <= 1e-12
    np.testing.assert_allclose(probs, 1.0 / num_buckets, rtol=1e-12)


def test_validate_command_prints_one_line(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(
        json.dumps(
            {"train_micro_batch_size_per_gpu": 1, "curriculum": _curriculum({"temperature": 0})}
        )
    )
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 1
    assert "curriculum.dynamic.temperature: must be > 0" in result.output
    assert "Traceback" not in result.output
