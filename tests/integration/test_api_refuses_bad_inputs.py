"""Bad inputs to the public API (the breaker pass's findings) are refused before they do harm.

One process (``python refusal_scenarios.py``, a world of one) trains a small ``torch.nn.Module``
with dynamic re-weighting on and feeds the API bad inputs (see refusal_scenarios.py): each is one
line naming what is wrong, raised before anything goes backward or any counter moves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import make_dataset, ragged_docs, two_phase_curriculum, write_ds_config
from userloop_launch import run_script

SCRIPT = Path(__file__).resolve().parent / "refusal_scenarios.py"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("refusals")
    short = make_dataset(root, "short", ragged_docs(120, seed=1, min_len=10, max_len=40))
    long = make_dataset(root, "long", ragged_docs(120, seed=2, min_len=30, max_len=63))
    cfg = write_ds_config(
        root / "ds.json", two_phase_curriculum(short, long, static_metric="num_tokens")
    )
    out = root / "results.json"
    run_script(
        SCRIPT, "--config", str(cfg), "--work", str(root / "run"), "--out", str(out), cwd=root
    )
    return json.loads(out.read_text())


def _line(error: dict[str, Any], kind: str, *fragments: str) -> str:
    assert error["type"] == kind, error
    message = error["message"]
    assert message, error
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_bad_backward_inputs_are_refused_before_anything_goes_backward(results):
    r = results["bad_backward_inputs"]
    _line(r["aux_float"], "ValueError", "aux_loss must be a one-element tensor", "float")
    _line(r["aux_vector"], "ValueError", "aux_loss must be a one-element tensor")
    _line(r["detached_logits"], "ValueError", "logits does not require grad")
    _line(r["logits_2d"], "ValueError", "logits must be (batch, seq_len, vocab)")
    assert r["grads_unchanged"]
    assert r["engine_micro_steps_unchanged"]
    assert r["then_finished_step"] == 1


@pytest.mark.parametrize(
    "case",
    [
        "loader_num_samples",
        "loader_without_samplers",
        "loader_stream_counts",
        "dynamic_without_probs",
        "dynamic_window",
    ],
)
def test_a_malformed_state_is_refused_by_load_state_dict(results, case):
    message = _line(results["malformed_state"][case], "ResumeError")
    assert message.startswith("checkpoint curriculum state: ")


def test_refused_states_change_nothing(results):
    assert results["malformed_state"]["counters_unchanged"]
    assert results["malformed_state"]["next_batch_unchanged"]


def test_a_checkpoint_without_curriculum_restarts_the_schedule_keeping_the_step(results):
    r = results["no_curriculum_checkpoint"]
    assert r["counters"] == [7, 0, 0, "0", 0]  # step, tokens, samples, progress, phase
    assert r["next_samples_are_a_fresh_runs_first"]


def test_another_models_checkpoint_is_one_line_and_leaves_the_engine(results):
    _line(
        results["foreign_model"]["load_checkpoint"],
        "ResumeError",
        "DeepSpeed cannot load this checkpoint into this engine",
        "size mismatch for",  # what differs, not only torch's first line
    )
    assert results["foreign_model"]["params_unchanged"]


def test_a_config_without_optimizer_is_refused_by_initialize(results):
    _line(results["no_optimizer"], "ConfigError", "optimizer: the ds_config has no optimizer")


def test_the_loops_own_engine_step_is_refused(results):
    _line(
        results["engine_step_in_loop"],
        "StepError",
        "engine.step() ran 2 time(s) for 1 micro-batch(es) sent backward",
        "do not call them in the loop",
    )
