"""``CurriculumTrainer.evaluate()`` returns and logs each QA eval stream's exact match.

The method is called on a stand-in for the trainer (its ``feed.curriculum`` and ``log``): the
eval row's ``streams.<name>.exact_match`` becomes ``eval_<name>_exact_match`` beside the losses;
a stream without it (not QA records) has none.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from curriculum_ds.hf.trainer import CurriculumTrainer


def test_evaluate_returns_the_exact_match_of_qa_streams() -> None:
    row = {
        "step": 4,
        "tokens": 100,
        "phase": 0,
        "phase_name": "a",
        "loss": 2.0,
        "eval_tokens": 30,
        "streams": {
            "web": {"loss": 2.5, "tokens": 20},
            "facts_qa": {"loss": 1.0, "tokens": 10, "exact_match": 0.25},
        },
        "eval_time_s": 0.1,
    }
    logged: list[dict[str, Any]] = []
    trainer = SimpleNamespace(
        eval_dataset=None,
        feed=SimpleNamespace(curriculum=SimpleNamespace(evaluate=lambda: row)),
        log=logged.append,
    )
    metrics = CurriculumTrainer.evaluate(trainer)  # type: ignore[arg-type]
    assert metrics == {
        "eval_loss": 2.0,
        "eval_web_loss": 2.5,
        "eval_facts_qa_loss": 1.0,
        "eval_facts_qa_exact_match": 0.25,
    }
    assert logged[0]["eval_facts_qa_exact_match"] == 0.25
    assert logged[0]["curriculum/eval/facts_qa/exact_match"] == 0.25
