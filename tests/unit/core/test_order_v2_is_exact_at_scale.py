"""Order version 2's global order: exact shares at every step, the same at any data-parallel size.

Simulated in-process with the loader's own kernels (``blend_samples``, the deficit rule the loader
runs, and :class:`~curriculum_ds.core.stream_order.PermutedOrder`, its version-2 order): over 10^7
samples with weights from 0.5 down to 10^-6, every stream's count stays within one sample of its
target after every step, and the 10^-6 stream is drawn about once per 10^6 samples. The rank
slices of a real loader's global batch (each rank's ``micro_batches``) concatenate back to it at
1, 2, 8 and 4,096 ranks, and a version-2 loader resumes from its cursors alone.

From issue 35, items 3-4.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs

from curriculum_ds.config import PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.sample_reader import SampleReader
from curriculum_ds.core.stream_order import PermutedOrder
from curriculum_ds.kernels import IndexShuffle, blend_samples

pytestmark = pytest.mark.usefixtures("no_token_reader")

WEIGHTS = np.array([0.5, 0.3, 0.15, 0.04, 0.009, 9.99e-4, 1e-6])


def test_counts_stay_within_one_sample_of_target_over_ten_million_samples() -> None:
    proportions = WEIGHTS / WEIGHTS.sum()
    sizes = [10**9, 3 * 10**8, 10**7, 12345, 1000, 7, 10**10]  # epochs wrap in the small ones
    order = PermutedOrder(sizes, seeds=list(range(len(sizes))))
    counts = np.zeros(len(sizes), dtype=np.int64)
    drawn, batch, worst = 0, 4096, 0.0
    while drawn < 10**7:
        streams = blend_samples(proportions, counts, drawn, batch)
        samples = order.take(streams)
        assert (samples < np.array(sizes)[streams]).all()
        counts += np.bincount(streams, minlength=len(sizes))
        drawn += batch
        worst = max(worst, float(np.abs(counts - proportions * drawn).max()))
    assert worst <= 1.0  # reached exactly on a tie (stream 1 after 102,400 samples)
    assert counts.sum() == drawn == 10_002_432
    assert counts[-1] == round(proportions[-1] * drawn)  # the 10^-6 stream: drawn, ~10 times
    assert 9 <= counts[-1] <= 11
    assert order.cursors.tolist() == counts.tolist()


def test_moving_weights_are_tracked_within_one_sample_of_their_integral() -> None:
    rng = np.random.default_rng(5)
    counts, targets = np.zeros(4, dtype=np.int64), np.zeros(4)
    for _ in range(2000):
        shares = rng.dirichlet(np.ones(4)) + np.array([0, 0, 0, 1e-6])
        shares /= shares.sum()
        streams = blend_samples(shares, counts, 0, 512, base=targets)
        counts += np.bincount(streams, minlength=4)
        targets = targets + shares * 512
        assert np.abs(counts - targets).max() < 1.0


@pytest.fixture(scope="module")
def loader_config(tmp_path_factory: pytest.TempPathFactory) -> PhaseConfig:
    root = tmp_path_factory.mktemp("v2")
    paths = [
        make_dataset(root, name, ragged_docs(n, seed=seed, min_len=4, max_len=40), max_seq_len=64)
        for name, n, seed in (("a", 70, 1), ("b", 30, 2))
    ]
    streams = [{"local": str(p), "proportion": w} for p, w in zip(paths, (0.7, 0.3), strict=True)]
    return PhaseConfig.model_validate(
        {"name": "p", "duration": "1ep", "train_loader": {"streams": streams, "max_seq_len": 64}}
    )


@pytest.mark.parametrize("dp", [1, 2, 8, 4096])
def test_rank_slices_concatenate_to_the_global_batch(loader_config: PhaseConfig, dp: int) -> None:
    loader = PhaseLoader(loader_config, 0, seed=3)
    assert loader.order_version == 2
    batch = loader.next_global_batch(8192)
    # each rank's micro-batches, read as their pairs (no shard read)
    reader = SimpleNamespace(micro_batch=lambda pairs, positions, seq_len: pairs)
    slices = [
        np.concatenate(
            SampleReader.micro_batches(
                reader,  # type: ignore[arg-type]
                batch,
                64,
                dp_rank=rank,
                dp_world_size=dp,
                micro_batch_size=2,
            )
        )
        for rank in range(dp)
    ]
    assert np.array_equal(np.concatenate(slices), batch)
    loader.close()


def test_a_version_2_loader_draws_each_streams_permutation_and_resumes_from_cursors(
    loader_config: PhaseConfig,
) -> None:
    first = PhaseLoader(loader_config, 0, seed=3)
    batches = [first.next_global_batch(n) for n in (16, 5, 64)]
    drawn = np.concatenate(batches)
    for stream, size in enumerate(first.stream_sizes):  # epochs of the stream's IndexShuffle
        mine = drawn[drawn[:, 0] == stream, 1]
        seed = int(first.order.seeds[stream])
        want = np.concatenate(
            [IndexShuffle(size, seed, stream, e).permute_range(0, size) for e in range(3)]
        )
        assert mine.tolist() == want[: len(mine)].tolist()
    saved = json.loads(json.dumps(first.state_dict()))
    assert saved["order_version"] == 2
    assert [s["cursor"] for s in saved["samplers"]] == saved["stream_counts"]
    resumed = PhaseLoader(loader_config, 0, seed=3)
    resumed.load_state_dict(saved)
    for n in (7, 33):
        assert first.next_global_batch(n).tolist() == resumed.next_global_batch(n).tolist()
    v1 = PhaseLoader(loader_config, 0, seed=3, order_version=1)
    with pytest.raises(ValueError, match="order version 2, this phase draws in version 1"):
        v1.load_state_dict(saved)
    for loader in (first, resumed, v1):
        loader.close()
