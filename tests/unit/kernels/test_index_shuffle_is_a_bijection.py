"""Order version 2's index shuffle: a bijection of [0, n) for any u64 n, keyed, with an inverse.

A full check for drawn n up to 10^6 (a few sizes, as each costs one pass over n), an inverse
round-trip on drawn positions for n up to 10^12 and up to 2^64 - 1, and the stream order walking
epochs of it from cursors (what a resume restores).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum_ds.kernels import IndexShuffle, stream_order

SEEDS = st.integers(0, 2**64 - 1)


@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 10**6), seed=SEEDS, epoch=st.integers(0, 2**64 - 1))
def test_a_drawn_domain_is_permuted_whole(n: int, seed: int, epoch: int) -> None:
    image = IndexShuffle(n, seed, 7, epoch).permute_range(0, n)
    assert image.dtype == np.int64
    assert np.array_equal(np.sort(image), np.arange(n))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 65, 1000])
def test_small_domains_are_permuted_whole(n: int) -> None:
    shuffle = IndexShuffle(n, 1, 0, 0)
    image = shuffle.permute_range(0, n)
    assert sorted(image.tolist()) == list(range(n))
    assert [shuffle.inverse(int(j)) for j in image] == list(range(n))


@settings(max_examples=25, deadline=None)
@given(
    n=st.one_of(st.integers(1, 10**12), st.integers(1, 2**64 - 1)),
    seed=SEEDS,
    picks=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=32),
)
def test_the_inverse_round_trips_at_any_size(n: int, seed: int, picks: list[int]) -> None:
    shuffle = IndexShuffle(n, seed, 3, 1)
    for pick in picks:
        i = pick % n
        j = shuffle.permute(i)
        assert 0 <= j < n
        assert shuffle.inverse(j) == i


def test_keys_give_other_orders_and_the_same_key_the_same() -> None:
    def order(seed: int, stream: int, epoch: int) -> list[int]:
        return IndexShuffle(10_000, seed, stream, epoch).permute_range(0, 10_000).tolist()

    assert order(1, 0, 0) == order(1, 0, 0)
    assert len({tuple(order(*key)) for key in [(1, 0, 0), (2, 0, 0), (1, 1, 0), (1, 0, 1)]}) == 4
    # a shuffle, not a rotation: few fixed points (about 1 expected)
    assert sum(i == j for i, j in enumerate(order(1, 0, 0))) < 10


def test_positions_out_of_range_are_refused() -> None:
    shuffle = IndexShuffle(10, 1, 0, 0)
    with pytest.raises(ValueError, match=r"i = 10 is not in \[0, 10\)"):
        shuffle.permute(10)
    with pytest.raises(ValueError, match=r"j = 11 is not in \[0, 10\)"):
        shuffle.inverse(11)
    with pytest.raises(ValueError, match="n must be in"):
        IndexShuffle(2**64, 1, 0, 0)


def test_stream_order_walks_each_streams_epochs_from_its_cursor() -> None:
    sizes, seeds = np.array([3, 4]), np.array([11, 12])
    streams = np.array([0, 1, 0, 0, 0, 1, 0, 1, 1, 1])
    drawn = stream_order(streams, np.zeros(2, dtype=np.int64), sizes, seeds)
    epochs = {
        (s, e): IndexShuffle(int(sizes[s]), int(seeds[s]), s, e).permute_range(0, int(sizes[s]))
        for s in (0, 1)
        for e in (0, 1)
    }
    for s in (0, 1):
        want = np.concatenate([epochs[s, 0], epochs[s, 1]])[: int((streams == s).sum())]
        assert drawn[streams == s].tolist() == want.tolist()
    # from cursors: the same continuation (a resume restores the cursors only)
    rest = stream_order(streams[4:], np.array([3, 1]), sizes, seeds)
    assert rest.tolist() == drawn[4:].tolist()
    with pytest.raises(ValueError, match="not a stream with samples"):
        stream_order(np.array([0]), np.zeros(2, dtype=np.int64), np.array([0, 4]), seeds)
