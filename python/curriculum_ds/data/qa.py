"""Question-answer records for ``prepare --format qa``: a prompt, an answer, its loss-bearing part.

A QA input is JSONL: one object per line with a ``prompt`` and an ``answer`` string. Each record
becomes one sample: the prompt's tokens, then the answer's, then EOS (when the tokenizer has
one). The sample's ``prompt_len`` (:data:`PROMPT_LEN_COLUMN`, an MDS column and a
``metrics.npz`` column) counts its prompt tokens: in training and in evaluation the labels of
those positions are ignored (no loss), so only the answer's tokens and its EOS bear loss
(:meth:`curriculum_ds.core.microbatch.MicroBatch.with_prompts`), while the durations count every
input token of the sample, as for any other stream.

The prompt and the answer are tokenized separately (a BPE merge across their boundary never
happens): the answer's tokens are the same whatever the prompt. A record is refused in one line
naming ``path:line`` when its prompt or answer is missing, not a string or empty, or when the
answer (with its EOS) does not fit in ``max_seq_len`` after the prompt. Deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from curriculum_ds.data.jsonl_reading import field_text
from curriculum_ds.errors import DataError

__all__ = ["PROMPT_LEN_COLUMN", "QA_FIELDS", "QA_FORMAT", "qa_samples"]

QA_FORMAT = "qa"
"""The ``--format`` of question-answer records."""

PROMPT_LEN_COLUMN = "prompt_len"
"""The per-sample column of a QA stream: its prompt's tokens (int, ``>= 1``), the positions whose
labels bear no loss."""

QA_FIELDS = ("prompt", "answer")
"""The string fields of a QA record."""

_ENCODE_BATCH = 256  # records per encode_documents call (bounded memory)


def _record_texts(where: str, obj: dict[str, Any]) -> tuple[str, str]:
    prompt, answer = (field_text(obj, where, name) for name in QA_FIELDS)
    for name, text in zip(QA_FIELDS, (prompt, answer), strict=True):
        if not text:
            raise DataError(
                f"{where}: field {name!r} is empty: a QA record needs a prompt and an answer"
            )
    return prompt, answer


def qa_samples(
    records: Iterator[tuple[str, dict[str, Any]]], tok: Any, max_seq_len: int
) -> Iterator[tuple[np.ndarray, int]]:
    """Each record's sample and its prompt length, in order.

    Args:
        records: ``(where, object)`` of each JSONL line (``where`` is ``path:line``).
        tok: the tokenizer (:class:`~curriculum_ds.data.tokenizers.Tokenizer`).
        max_seq_len: the longest sample, in tokens.

    Yields:
        ``(ids, prompt_len)``: int32 ``(prompt_len + answer tokens [+ EOS],)`` and the prompt's
        token count (``>= 1``).

    Raises:
        DataError: one line naming ``path:line``: a missing, non-string or empty ``prompt`` or
            ``answer``, a prompt that tokenizes to nothing, or an answer longer than
            ``max_seq_len`` minus the prompt.
    """
    eos = tok.eos_id
    batch: list[tuple[str, str, str]] = []

    def flush() -> Iterator[tuple[np.ndarray, int]]:
        texts = [t for _, prompt, answer in batch for t in (prompt, answer)]
        encoded = tok.encode_documents(texts)
        for k, (where, _, _) in enumerate(batch):
            prompt_ids, answer_ids = encoded[2 * k], encoded[2 * k + 1]
            if eos is not None:
                prompt_ids = prompt_ids[:-1]  # the EOS goes after the answer only
            if prompt_ids.size == 0:
                raise DataError(f"{where}: field 'prompt' has no tokens")
            room = max_seq_len - prompt_ids.size
            if answer_ids.size > room:
                raise DataError(
                    f"{where}: the answer takes {answer_ids.size} tokens"
                    + (" with its EOS" if eos is not None else "")
                    + f" but max_seq_len {max_seq_len} minus the prompt's {prompt_ids.size} "
                    f"leaves {max(room, 0)}; raise --max-seq-len or shorten the record"
                )
            ids = np.concatenate([prompt_ids, answer_ids]).astype(np.int32, copy=False)
            yield ids, int(prompt_ids.size)
        batch.clear()

    for where, obj in records:
        batch.append((where, *_record_texts(where, obj)))
        if len(batch) == _ENCODE_BATCH:
            yield from flush()
    if batch:
        yield from flush()
