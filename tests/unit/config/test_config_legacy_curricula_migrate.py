"""DeepSpeed's sequence-length curricula migrate to a ``max_seq_len`` ramp (issue 22, item 4).

Each of DeepSpeed's documented ``curriculum_learning`` examples (seqlen with ``fixed_linear``,
``fixed_root``, ``fixed_discrete``; the discrete one with sequence lengths for difficulties)
migrates to a config that ``validate`` accepts, and a run of the migrated phase (every sample as
long as its step's length, so each step consumes ``global_batch × length`` tokens) trains every
step within one ``difficulty_step`` of what DeepSpeed's own ``CurriculumScheduler``, imported
from the installed package, gives that step. What cannot be translated is named in one line.
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
    assert "largest difference from DeepSpeed's length at a step's start: 0 tokens" in note
    cfg = parse_curriculum(migrated["curriculum"])
    warmup, full = cfg.schedule
    assert full.train_loader.max_seq_len == 1024
    scheduler = CurriculumScheduler(legacy["curriculum_learning"])
    step_size = legacy["curriculum_learning"]["schedule_config"].get("difficulty_step", 8)
    duration = warmup.duration.value
    consumed, step = 0, 0
    while consumed < duration:  # the migrated phase as the curriculum runs it
        step += 1
        ours = warmup.train_loader.seq_len_at(consumed / duration)
        theirs = scheduler.update_difficulty(step)  # DeepSpeed: update_difficulty(global_steps + 1)
        assert abs(ours - theirs) < step_size, (step, ours, theirs)
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
