"""Properties: the byte tokenizer round-trips any text; split_document cuts exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from prepared_mds import BYTE

from curriculum_ds.data import split_document


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trip(text: str) -> None:
    ids = BYTE.encode(text)
    assert ids.dtype == np.int32
    assert ids[-1] == BYTE.eos_id
    assert ids.min() >= 0
    assert ids.max() < BYTE.vocab_size
    assert BYTE.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 300),
    max_seq_len=st.integers(1, 64),
    min_tokens=st.integers(1, 64),
)
def test_split_document_properties(n: int, max_seq_len: int, min_tokens: int) -> None:
    assume(min_tokens <= max_seq_len)  # prepare() refuses the rest
    ids = np.arange(n, dtype=np.int32)
    pieces = split_document(ids, max_seq_len, min_tokens)
    assert all(p.size == max_seq_len for p in pieces[:-1])
    joined = np.concatenate(pieces) if pieces else ids[:0]
    np.testing.assert_array_equal(joined, ids[: joined.size])
    assert n - joined.size < min_tokens
    if pieces:
        assert min_tokens <= pieces[-1].size <= max_seq_len
