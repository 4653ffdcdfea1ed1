"""The valid ``curriculum`` section the config tests edit, and the DeepSpeed file around it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from curriculum_ds.config import parse_curriculum
from curriculum_ds.errors import ConfigError


def base_section() -> dict[str, Any]:
    return {
        "max_duration": "3000tok",
        "loss_weighting": "token",
        "seed": 1234,
        "schedule": [
            {
                "name": "short",
                "duration": "1000tok",
                "train_loader": {
                    "streams": [{"local": "data/short", "proportion": 1.0}],
                    "max_seq_len": 256,
                },
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": "data/short", "proportion": 0.3},
                        {"local": "data/long", "proportion": 0.7},
                    ],
                    "max_seq_len": 1024,
                },
            },
        ],
        "dynamic": {"enabled": True, "num_buckets": 4, "temperature": 1.0, "floor": 0.02},
    }


def value_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``node`` (object keys and list indices), parents first."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += value_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += value_paths(value, (*prefix, i))
    return out


def refused(edit: Any) -> str:
    """Apply ``edit`` to a copy of the base section; return the ConfigError message (one line
    per problem, none blank)."""
    section = copy.deepcopy(base_section())
    edit(section)
    with pytest.raises(ConfigError) as info:
        parse_curriculum(section)
    message = str(info.value)
    assert all(line.strip() for line in message.split("\n"))
    assert "Traceback" not in message
    assert not message.startswith("(")
    return message


def write_config(tmp_path: Path, ds: dict[str, Any] | str, name: str = "ds.json") -> Path:
    path = tmp_path / name
    path.write_text(ds if isinstance(ds, str) else json.dumps(ds, indent=2))
    return path


def ds_with(section: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"train_micro_batch_size_per_gpu": 4, **extra, "curriculum": section}
