"""``exact_match`` of a QA eval stream, with a fixed tiny model whose argmax is known.

The model predicts, after byte ``b``, the byte ``b + 1`` up to ``z`` and EOS after ``z``. A
record whose answer is ``c..z`` after a prompt ending in ``c - 1`` is answered exactly; the same
answers shuffled onto other prompts are not (their first token is wrong). The stream's loss
tokens are the answers' and their EOS, never the prompts'. The rank slices add up: the records
and hits of 2 ranks' evaluations are those of one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from curriculum_ds.config import parse_curriculum
from curriculum_ds.core.exact_match import answer_hits
from curriculum_ds.core.loss import IGNORE_INDEX
from curriculum_ds.core.schedule import PhaseSchedule
from curriculum_ds.data import prepare
from curriculum_ds.plugin.evaluation import Evaluator

VOCAB = 257
EOS = 256
Z = ord("z")


class SuccessorLM(torch.nn.Module):
    """Logits peaked at ``b + 1`` after byte ``b < z``, at EOS after ``z`` (and after EOS)."""

    def __init__(self) -> None:
        super().__init__()
        table = torch.full((VOCAB, VOCAB), -10.0)
        for b in range(VOCAB):
            table[b, b + 1 if b < Z else EOS] = 10.0
        self.register_buffer("table", table)
        self.calls = 0

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None) -> torch.Tensor:
        self.calls += 1
        return self.table[input_ids]


def _records(shuffled: bool) -> list[dict[str, str]]:
    starts = [ord("a") + k for k in range(12)]  # answers "a..z", "b..z", ... "l..z"
    answers = ["".join(map(chr, range(s, Z + 1))) for s in starts]
    if shuffled:  # each prompt gets its neighbour's answer: its first token is never predicted
        answers = answers[1:] + answers[:1]
    return [
        {"prompt": f"record {k}: {chr(s - 1)}", "answer": a}
        for k, (s, a) in enumerate(zip(starts, answers, strict=True))
    ]


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qa_eval")
    out = {}
    for name, shuffled in (("known", False), ("shuffled", True)):
        src = root / f"{name}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in _records(shuffled)))
        out[name] = prepare([src], root / name, max_seq_len=64, format="qa").out
    text = root / "text.jsonl"
    text.write_text(json.dumps({"text": "abcdefgh"}) + "\n")
    out["text"] = prepare([text], root / "text", max_seq_len=64).out
    return out


def _evaluate(streams: dict[str, Path], *, rank: int = 0, world: int = 1) -> dict[str, Any]:
    cfg = parse_curriculum(
        {
            "max_duration": "100tok",
            "schedule": [
                {
                    "name": "a",
                    "duration": "100tok",
                    "train_loader": {"streams": [{"local": str(streams["text"])}]},
                }
            ],
            "eval": {
                "streams": [{"local": str(p), "name": n} for n, p in streams.items()],
                "max_samples": 12,
            },
        }
    )
    assert cfg.eval is not None
    evaluator = Evaluator(
        cfg.eval,
        PhaseSchedule(cfg),
        max_seq_len=64,
        micro_batch_size=5,
        dp_rank=rank,
        dp_world_size=world,
    )
    row = evaluator.evaluate(SuccessorLM(), step=1, tokens=100, phase_idx=0, phase_name="a")
    return dict(row["streams"])


def test_known_answers_score_1_and_shuffled_answers_0(streams: dict[str, Path]) -> None:
    rows = _evaluate(streams)
    assert rows["known"]["exact_match"] == 1.0
    assert rows["shuffled"]["exact_match"] == 0.0
    assert "exact_match" not in rows["text"]  # not a QA stream
    # the loss-bearing tokens are the answers and their EOS
    answers = sum(len(r["answer"]) + 1 for r in _records(False))
    assert rows["known"]["tokens"] == rows["shuffled"]["tokens"] == answers
    assert rows["known"]["loss"] < 1e-6 < rows["shuffled"]["loss"]


def test_the_rank_slices_add_up_to_one_evaluation(streams: dict[str, Path]) -> None:
    """Without a process group each rank reports its own slice: shares weighted by records."""
    whole = _evaluate(streams)
    halves = [_evaluate(streams, rank=r, world=2) for r in range(2)]
    for name in ("known", "shuffled"):
        assert sum(h[name]["tokens"] for h in halves) == whole[name]["tokens"]
        assert [h[name]["exact_match"] for h in halves] == [whole[name]["exact_match"]] * 2


def test_answer_hits_counts_rows_with_loss_tokens_only() -> None:
    logits = torch.zeros(3, 4, 5)
    logits[:, :, 2] = 1.0  # argmax 2 everywhere
    labels = torch.tensor(
        [
            [9, 2, 2, 2],  # every loss token predicted: a hit
            [9, 9, 2, 3],  # the last one is not
            [IGNORE_INDEX] * 4,  # a placeholder row: no record
        ]
    )
    labels[1, 1] = IGNORE_INDEX  # a prompt position: not scored
    hits, records = answer_hits(logits, labels)
    assert hits.tolist() == [True, False, False]
    assert records.tolist() == [True, True, False]
