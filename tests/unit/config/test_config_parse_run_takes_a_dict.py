"""``parse_run`` parses a ds_config object with the file's own checks and nothing else; a dict
given to the plugin API goes through it (no temporary file), and ``check_run`` is the check of the
model and data after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curriculum_ds.config import load_config, parse_run
from curriculum_ds.errors import ConfigError
from curriculum_ds.plugin.engine import load_run_config
from curriculum_ds.preflight import check_run

RAW = {
    "train_micro_batch_size_per_gpu": 2,
    "curriculum": {
        "max_duration": "100tok",
        "schedule": [
            {
                "name": "only",
                "duration": "100tok",
                "train_loader": {"streams": [{"local": "no/such/stream"}], "max_seq_len": 64},
            }
        ],
    },
}


def test_a_dict_parses_as_its_file_does(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(RAW))
    from_file = load_config(path)
    run = parse_run(RAW)
    assert run.path is None
    assert from_file.path == path
    assert run.curriculum == from_file.curriculum
    assert run.ds_config == from_file.ds_config
    assert load_run_config(RAW, check_data=False).curriculum == run.curriculum


def test_parse_run_reads_no_data_and_check_run_does() -> None:
    run = parse_run(RAW)  # the stream does not exist: not parse_run's concern
    check_run(run)  # nothing asked: nothing read
    with pytest.raises(Exception, match="no/such/stream"):
        check_run(run, check_data=True)


def test_a_dict_without_curriculum_is_one_line_naming_the_config() -> None:
    with pytest.raises(ConfigError) as err:
        parse_run({"train_micro_batch_size_per_gpu": 2})
    assert str(err.value) == (
        'curriculum: required field is missing (no "curriculum" in the config)'
    )
