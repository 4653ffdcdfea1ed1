"""Misuse of the public API is one CurriculumError line and changes nothing.

One process (``python misuse_scenarios.py``: ``curriculum_ds.initialize`` makes a world of one)
trains a small ``torch.nn.Module`` over a 2-phase schedule (GAS 2) and misuses the API on the way
(see misuse_scenarios.py). For each misuse: the exception is a ``StepError`` or ``ResumeError``
(both ``CurriculumError``), its message is one line that says what went wrong, no file under the
run folder changed, no counter moved, and the loop carries on afterwards. A checkpoint whose
completed phase was edited is refused naming that phase and field, and leaves the engine's
weights as they were; the same checkpoint under the original config loads.

From issue 10.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import make_dataset, ragged_docs, two_phase_curriculum, write_ds_config
from userloop_launch import run_script

SCRIPT = Path(__file__).resolve().parent / "misuse_scenarios.py"
EDITED_MAX_SEQ_LEN = 48


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("misuse")
    short = make_dataset(root, "short", ragged_docs(120, seed=1, min_len=10, max_len=40))
    long = make_dataset(root, "long", ragged_docs(120, seed=2, min_len=30, max_len=63))
    curriculum = two_phase_curriculum(short, long)
    cfg = write_ds_config(root / "ds.json", curriculum)
    curriculum["schedule"][0]["train_loader"]["max_seq_len"] = EDITED_MAX_SEQ_LEN
    edited = write_ds_config(root / "ds_edited.json", curriculum)
    out = root / "results.json"
    args = ["--config", str(cfg), "--edited", str(edited), "--work", str(root / "run")]
    run_script(SCRIPT, *args, "--out", str(out), cwd=root)
    return json.loads(out.read_text())


def _one_line_error(error: dict[str, Any], kind: str, *fragments: str) -> str:
    assert error["type"] == kind, error
    assert "CurriculumError" in error["bases"]
    message = error["message"]
    assert "\n" not in message
    assert message.strip() == message
    assert message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_scenarios_ran_in_a_world_of_one_with_two_micro_batches(results):
    assert results["world_size"] == 1
    assert results["num_micro_batches"] == 2
    phases = results["run"]["phases"]
    assert phases[0] == "short"
    assert phases[-1] == "mix"


def test_finish_before_every_micro_batch_went_backward(results):
    case = results["finish_early"]
    _one_line_error(case["finish"], "StepError", "step 1", "finish() before micro-batch(es) 1 of 2")
    # mid-step, nothing else may happen either
    _one_line_error(case["next"], "StepError", "step 1 was not finished")
    _one_line_error(case["state_dict"], "StepError", "state_dict during step 1")
    _one_line_error(case["save_checkpoint"], "StepError", "save_checkpoint during step 1")
    _one_line_error(case["evaluate"], "StepError", "evaluate during step 1")
    assert case["files_unchanged"]
    assert case["counters_unchanged"]
    assert case["counters"][:3] == [0, 0, 0]  # global_step, consumed tokens and samples
    assert case["then_finished_step"] == 1  # the missing backward, then finish: the loop goes on
    _one_line_error(
        case["evaluate_without_eval"], "StepError", "the config has no curriculum.eval section"
    )
    assert case["eval_due_without_eval"] is False


def test_a_micro_batch_sent_backward_twice(results):
    case = results["backward_twice"]
    _one_line_error(
        case["backward"], "StepError", "step 2", "micro-batch 0 was already sent backward"
    )
    assert case["files_unchanged"]
    assert case["counters_unchanged"]
    # refused before the engine saw anything: no gradient accumulated, no micro-step counted
    assert case["grads_accumulated"]  # the first backward of micro-batch 0 left gradients
    assert case["grads_unchanged"]
    assert case["engine_micro_steps_unchanged"]
    assert case["then_finished_step"] == 2


def test_iterating_past_the_end(results):
    case = results["past_end"]
    final = results["run"]["final_step"]
    for how in ("next", "for"):
        _one_line_error(case[how], "StepError", "schedule is complete", f"at step {final}")
    assert case["files_unchanged"]
    assert case["counters_unchanged"]


def test_load_checkpoint_refuses_an_edited_completed_phase(results):
    case = results["edited_phase"]
    message = _one_line_error(
        case["load_checkpoint"],
        "ResumeError",
        'schedule[0] ("short")',
        "max_seq_len",
        "is complete and cannot change",
    )
    assert str(EDITED_MAX_SEQ_LEN) in message
    assert "64" in message
    assert case["files_unchanged"]
    # the engine keeps its own weights (not the checkpoint's), the curriculum its start
    assert case["params_unchanged"]
    assert case["params_differ_from_checkpoint"]
    assert case["counters"][:3] == [0, 0, 0]


def test_the_same_checkpoint_loads_under_the_original_config(results):
    run, case = results["run"], results["resume_controls"]
    assert case["loaded"] == f"global_step{run['step']}"
    assert case["global_step"] == run["step"]
    assert case["params_are_the_checkpoints"]
    assert case["next_samples"] == run["next_samples"]
    # the README's checkpoint-it-yourself round trip: state_dict / load_state_dict
    assert case["manual_global_step"] == run["step"]
    assert case["manual_next_samples"] == run["next_samples"]
