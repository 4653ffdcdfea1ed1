"""The steps of a packed phase carry document-masked micro-batches, prefetched or not.

Issue 32 (item 6): what a loop gets from ``for step in curriculum`` (read on the training thread
or ahead on the prefetch thread) is what the phase loader reads: ``position_ids`` restarting
per document, the label of each document's first token ignored, and the step's
``valid_tokens`` one fewer per document boundary; with ``document_masking: false`` today's
micro-batches (no ``position_ids``, every token bearing its loss).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import make_dataset, ragged_docs
from tiny_models import ByteLM

import curriculum_ds
from curriculum_ds.core.loss import IGNORE_INDEX

MICRO, GAS, ROW = 2, 2, 32


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = ragged_docs(120, seed=7, min_len=4, max_len=20)
    return make_dataset(tmp_path_factory.mktemp("packed"), "p", docs, max_seq_len=ROW, pack=True)


def _steps(engine: Any, packed: Path, prefetch: int, **loader: Any) -> list[tuple[Any, Any]]:
    config = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": GAS,
        "curriculum": {
            "max_duration": "384tok",
            "prefetch_micro_batches": prefetch,
            "schedule": [
                {
                    "name": "a",
                    "duration": "384tok",
                    "train_loader": {
                        "streams": [{"local": str(packed)}],
                        "max_seq_len": ROW,
                        **loader,
                    },
                }
            ],
        },
    }
    curriculum = curriculum_ds.attach(engine, config, check_data=False)
    out = []
    try:
        for step in curriculum:
            mbs = list(step.micro_batches)
            for mb in mbs:
                logits = engine(mb.input_ids, **mb.forward_kwargs())
                step.backward(logits, mb)
            out.append((mbs, step.finish()))
    finally:
        curriculum.close()
    return out


class PositionsLM(ByteLM):
    """A byte-level LM whose forward takes ``position_ids`` as a HF model's does."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: Any = None, position_ids: Any = None
    ) -> torch.Tensor:  # type: ignore[override]
        return super().forward(input_ids, attention_mask)


@pytest.fixture
def engine(fake_engine: Any) -> Any:
    """conftest's FakeEngine (micro-batch 2, GAS 2) over a byte-vocabulary model."""
    return type(fake_engine)(PositionsLM(), gas=GAS)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_every_micro_batch_of_a_packed_step_is_masked(
    engine: Any, packed: Path, prefetch: int
) -> None:
    steps = _steps(engine, packed, prefetch)
    assert len(steps) == 3  # 384 tokens in steps of 4 full rows
    for mbs, record in steps:
        boundaries = 0
        for mb in mbs:
            assert mb.position_ids is not None
            starts = (mb.position_ids == 0) & mb.attention_mask.bool()
            starts[:, 0] = False  # the row's first token is never a label
            boundaries += int(starts.sum())
            assert (mb.labels[starts] == IGNORE_INDEX).all()
            assert torch.equal(mb.labels[~starts & mb.attention_mask.bool()],
                               mb.input_ids[~starts & mb.attention_mask.bool()])  # fmt: skip
        assert boundaries > 0
        assert record["valid_tokens"] == record["step_tokens"] - MICRO * GAS - boundaries


def test_document_masking_false_gives_todays_steps(engine: Any, packed: Path) -> None:
    steps = _steps(engine, packed, 2, document_masking=False)
    for mbs, record in steps:
        assert all(mb.position_ids is None for mb in mbs)
        assert record["valid_tokens"] == record["step_tokens"] - MICRO * GAS
    assert np.isfinite([r["loss"] for _, r in steps]).all()
