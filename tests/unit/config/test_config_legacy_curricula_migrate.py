"""DeepSpeed's sequence-length curricula migrate to a ``max_seq_len`` ramp (issue 22, item 4).

Each of DeepSpeed's documented ``curriculum_learning`` examples (seqlen with ``fixed_linear``,
``fixed_root``, ``fixed_discrete``; the discrete one with sequence lengths for difficulties)
migrates to a config that ``validate`` accepts, and a run of the migrated phase (every sample as
long as its step's length, so each step consumes ``global_batch × length`` tokens) trains at
every step exactly what DeepSpeed's own ``CurriculumScheduler``, imported from the installed
package, gives that step, and as many steps. So do DeepSpeed's own test vectors, with their
small lengths and ``difficulty_step`` 2 (``seq_len_multiple``), or ``migrate`` refuses in one
line naming why and exits 1; it never exits 0 with another schedule (issue 32, item 7). What
cannot be translated is named in one line.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import make_dataset, one_error_line, ragged_docs

from curriculum_ds.cli import main as cli_main
from curriculum_ds.config import parse_curriculum
from curriculum_ds.config.deepspeed import curriculum_conflicts
from curriculum_ds.config.legacy import migrate_config
from curriculum_ds.errors import ConfigError

GLOBAL_BATCH = 32


def _legacy(schedule_type: str, schedule_config: dict[str, Any], lo: int = 8) -> dict[str, Any]:
    return {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "curriculum_learning": {
            "enabled": True,
            "curriculum_type": "seqlen",
            "min_difficulty": lo,
            "max_difficulty": 1024,
            "schedule_type": schedule_type,
            "schedule_config": schedule_config,
        },
    }


EXAMPLES = {  # DeepSpeed's curriculum-learning tutorial and config reference
    "fixed_linear": _legacy("fixed_linear", {"total_curriculum_step": 15000, "difficulty_step": 8}),
    "fixed_root": _legacy(
        "fixed_root", {"total_curriculum_step": 15000, "difficulty_step": 8, "root_degree": 2}
    ),
    "fixed_discrete": _legacy(
        "fixed_discrete", {"difficulty": [128, 512, 1024], "max_step": [500, 2000]}, lo=128
    ),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_ramp_trains_deepspeeds_length_at_every_step(name: str) -> None:
    from deepspeed.runtime.data_pipeline.curriculum_scheduler import CurriculumScheduler

    legacy = EXAMPLES[name]
    migrated, note = migrate_config(copy.deepcopy(legacy), total_steps=20_000)
    assert "curriculum_learning" not in migrated
    assert f"at the global batch {GLOBAL_BATCH}" in note
    cfg = parse_curriculum(migrated["curriculum"])
    warmup, full = cfg.schedule
    assert full.train_loader.max_seq_len == 1024
    scheduler = CurriculumScheduler(legacy["curriculum_learning"])
    step_size = legacy["curriculum_learning"]["schedule_config"].get("difficulty_step", 128)
    assert warmup.train_loader.seq_len_multiple == step_size
    assert f"seq_len_multiple {step_size}; replayed step by step" in note
    duration = warmup.duration.value
    consumed, step = 0, 0
    while consumed < duration:  # the migrated phase as the curriculum runs it
        step += 1
        ours = warmup.train_loader.seq_len_at(consumed / duration)
        theirs = scheduler.update_difficulty(step)  # DeepSpeed: update_difficulty(global_steps + 1)
        assert ours == theirs, (step, ours, theirs)
        consumed += GLOBAL_BATCH * ours
    assert consumed == duration  # the phase ends exactly at the curriculum's last step
    total = cfg.max_duration.value
    assert total == duration + (20_000 - step) * GLOBAL_BATCH * 1024


def test_migrate_writes_a_config_validate_accepts(tmp_path: Path) -> None:
    data = make_dataset(tmp_path, "train", ragged_docs(40, seed=1, min_len=10, max_len=40))
    src = tmp_path / "legacy.json"
    src.write_text(json.dumps(EXAMPLES["fixed_linear"]))
    out = tmp_path / "migrated.json"
    result = CliRunner().invoke(
        cli_main, ["migrate", str(src), "--out", str(out), "--data", str(data)]
    )
    assert result.exit_code == 0, result.output
    assert "15000 DeepSpeed steps became" in result.output
    check = CliRunner().invoke(cli_main, ["validate", str(out)])
    assert check.exit_code == 0, check.output
    assert "8→" in check.output  # the warmup ramp in the table


def test_the_refusal_prints_the_equivalent_section() -> None:
    legacy = copy.deepcopy(EXAMPLES["fixed_root"])
    (line,) = curriculum_conflicts(legacy).values()
    assert line.startswith("curriculum_learning: DeepSpeed's legacy curriculum beside")
    assert "\n" not in line
    head, section = line.split('"curriculum": ', 1)
    assert "`curriculum-ds migrate DS_CONFIG` writes the whole file" in head
    assert parse_curriculum(json.loads(section)).schedule[0].name == "seqlen_warmup"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda c: c["curriculum_learning"].__setitem__("schedule_type", "custom"),
            "curriculum_learning.schedule_type: 'custom' cannot be translated (one of "
            "fixed_linear, fixed_root, fixed_discrete)",
        ),
        (
            lambda c: c["curriculum_learning"].__setitem__("curriculum_type", "vocab"),
            "curriculum_learning.curriculum_type: 'vocab' cannot be translated",
        ),
        (
            lambda c: c.pop("curriculum_learning"),
            "curriculum_learning: the file has no DeepSpeed curriculum to migrate",
        ),
    ],
)
def test_what_cannot_be_translated_is_named(tmp_path: Path, edit: Any, expected: str) -> None:
    legacy = copy.deepcopy(EXAMPLES["fixed_linear"])
    edit(legacy)
    with pytest.raises(ConfigError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
        migrate_config(legacy)
    src = tmp_path / "legacy.json"
    src.write_text(json.dumps(legacy))
    result = CliRunner().invoke(cli_main, ["migrate", str(src)])
    assert one_error_line(result).startswith(f"Error: {expected}")


def test_a_data_efficiency_seqlen_curriculum_migrates_and_others_are_named() -> None:
    metric = dict(EXAMPLES["fixed_linear"]["curriculum_learning"])
    ds = {
        "train_batch_size": GLOBAL_BATCH,
        "data_efficiency": {
            "enabled": True,
            "data_sampling": {
                "enabled": True,
                "curriculum_learning": {
                    "enabled": True,
                    "curriculum_metrics": {"seqlen_truncate": metric},
                },
            },
        },
    }
    migrated, note = migrate_config(copy.deepcopy(ds))
    assert note.startswith(
        "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics.seqlen_truncate: "
    )
    sampling = migrated["data_efficiency"]["data_sampling"]
    assert sampling["curriculum_learning"] == {"enabled": False}
    ds["data_efficiency"]["data_sampling"]["curriculum_learning"]["curriculum_metrics"] = {
        "vocabularyrarity": metric
    }
    with pytest.raises(ConfigError, match="vocabularyrarity cannot be translated"):
        migrate_config(ds)


def _vector(kind: str, schedule_config: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    return {
        "train_batch_size": 2,
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "curriculum_learning": {
            "enabled": True,
            "curriculum_type": "seqlen",
            "min_difficulty": lo,
            "max_difficulty": hi,
            "schedule_type": kind,
            "schedule_config": schedule_config,
        },
    }


DEEPSPEED_VECTORS = {  # DeepSpeed's tests/unit/runtime/test_data_efficiency.py (train_batch_size 2)
    "fixed_linear": _vector(
        "fixed_linear", {"total_curriculum_step": 8, "difficulty_step": 2}, 2, 10
    ),
    "fixed_discrete": _vector(
        "fixed_discrete", {"difficulty": [1, 2, 3, 4, 5], "max_step": [2, 4, 6, 8]}, 1, 5
    ),
    "fixed_root_1": _vector(
        "fixed_root", {"total_curriculum_step": 8, "difficulty_step": 2, "root_degree": 1}, 2, 10
    ),
    "fixed_root_2": _vector(
        "fixed_root", {"total_curriculum_step": 8, "difficulty_step": 2, "root_degree": 2}, 2, 10
    ),
    # the discrete vector one token longer: its shortest length has a token to predict
    "fixed_discrete_2_to_6": _vector(
        "fixed_discrete", {"difficulty": [2, 3, 4, 5, 6], "max_step": [2, 4, 6, 8]}, 2, 6
    ),
}
STEPS = 10
"""DeepSpeed's tests train 10 steps (20 samples at train_batch_size 2)."""


def _migrate_cli(tmp_path: Path, legacy: dict[str, Any]) -> Any:
    src = tmp_path / "legacy.json"
    src.write_text(json.dumps(legacy))
    out = tmp_path / "migrated.json"
    args = ["migrate", str(src), "--out", str(out), "--total-steps", str(STEPS)]
    return CliRunner().invoke(cli_main, args), out


def _deepspeeds_lengths(legacy: dict[str, Any], steps: int = STEPS) -> list[int]:
    from deepspeed.runtime.data_pipeline.curriculum_scheduler import CurriculumScheduler

    scheduler = CurriculumScheduler(copy.deepcopy(legacy["curriculum_learning"]))
    return [int(scheduler.update_difficulty(k)) for k in range(1, steps + 1)]


def _trained_lengths(section: dict[str, Any]) -> list[int]:
    """Each step's length when the migrated schedule runs samples at least that long."""
    lengths = []
    for phase in parse_curriculum(section).schedule:
        duration, consumed = int(phase.duration.value), 0
        while consumed < duration:  # the curriculum's start fraction of the step in its phase
            lengths.append(phase.train_loader.seq_len_at(min(1.0, consumed / duration)))
            consumed += 2 * lengths[-1]
    return lengths


@pytest.mark.parametrize("name", list(DEEPSPEED_VECTORS))
def test_deepspeeds_test_vectors_migrate_exactly_or_are_refused(tmp_path: Path, name: str) -> None:
    legacy = DEEPSPEED_VECTORS[name]
    theirs = _deepspeeds_lengths(legacy)
    result, out = _migrate_cli(tmp_path, legacy)
    if min(theirs) < 2:  # a 1-token sequence has no next token: refused, nothing written
        assert result.exit_code == 1
        assert one_error_line(result) == (
            "Error: curriculum_learning: cannot reproduce DeepSpeed's schedule step for step: "
            "its length 1 at step 1 is below 2 tokens, the shortest sequence with a token to "
            "predict"
        )
        assert not out.exists()
        return
    assert result.exit_code == 0, result.output
    section = json.loads(out.read_text())["curriculum"]
    assert _trained_lengths(section) == theirs  # step for step, and as many steps
    warmup = section["schedule"][0]["train_loader"]
    step = legacy["curriculum_learning"]["schedule_config"].get("difficulty_step", 1)
    assert warmup["seq_len_multiple"] == step
    assert min(theirs) < 8  # below today's default multiple: it really starts there


def test_only_the_vector_with_a_one_token_length_is_refused() -> None:
    refused = [n for n, v in DEEPSPEED_VECTORS.items() if min(_deepspeeds_lengths(v)) < 2]
    assert refused == ["fixed_discrete"]
    assert _deepspeeds_lengths(DEEPSPEED_VECTORS["fixed_linear"]) == [
        2,
        4,
        4,
        6,
        6,
        8,
        8,
        10,
        10,
        10,
    ]


def test_a_discrete_schedule_rounds_to_the_gcd_of_its_lengths() -> None:
    # fixed_discrete has no difficulty_step: the multiple is the lengths' gcd, 12
    legacy = _vector("fixed_discrete", {"difficulty": [12, 36, 60], "max_step": [2, 4]}, 12, 60)
    theirs = _deepspeeds_lengths(legacy, 6)
    assert theirs == [12, 12, 36, 36, 60, 60]
    migrated, note = migrate_config(copy.deepcopy(legacy), total_steps=6)
    assert "5 DeepSpeed steps became" in note
    assert "seq_len_multiple 12;" in note
    assert _trained_lengths(migrated["curriculum"]) == theirs


def test_a_ramp_that_would_train_another_length_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # today's rounding (a multiple of 8, at least 8) replayed against DeepSpeed's lengths
    import curriculum_ds.config.legacy as legacy_module

    monkeypatch.setattr(legacy_module, "_seq_len_multiple", lambda step, lengths: 8)
    result, out = _migrate_cli(tmp_path, DEEPSPEED_VECTORS["fixed_linear"])
    assert result.exit_code == 1
    assert one_error_line(result) == (
        "Error: curriculum_learning: cannot reproduce DeepSpeed's schedule step for step: step 1 "
        "would train 8 tokens where DeepSpeed trains 2"
    )
    assert not out.exists()
