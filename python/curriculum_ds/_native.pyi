"""Type stubs of the Rust extension ``curriculum_ds._native`` (rust/src/py.rs).

Use the typed wrappers in :mod:`curriculum_ds.kernels`; they normalise dtype and contiguity.
"""

from typing import final

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BucketSampler",
    "IndexShuffle",
    "MdsShards",
    "RollingWindow",
    "WeightedSampler",
    "__version__",
    "assign_buckets",
    "blend_samples",
    "blend_tokens",
    "bucket_edges",
    "epoch_permutation",
    "num_threads",
    "sample_without_replacement",
    "set_num_threads",
    "stream_order",
]

__version__: str

def bucket_edges(
    window: NDArray[np.float32] | NDArray[np.float64], num_buckets: int
) -> NDArray[np.float64]: ...
def assign_buckets(
    values: NDArray[np.float32] | NDArray[np.float64],
    edges: NDArray[np.float64],
    nan_policy: str = "raise",
) -> NDArray[np.int64]: ...
def sample_without_replacement(
    weights: NDArray[np.float64], k: int, seed: int
) -> NDArray[np.int64]: ...
def epoch_permutation(n: int, seed: int, epoch: int) -> NDArray[np.int64]: ...
def blend_samples(
    proportions: NDArray[np.float64],
    counts: NDArray[np.int64],
    start: int,
    n: int,
    base: NDArray[np.float64] | None = None,
) -> NDArray[np.int64]: ...
def blend_tokens(
    proportions: NDArray[np.float64],
    tokens: NDArray[np.int64],
    lengths: NDArray[np.int64],
    offsets: NDArray[np.int64],
    n: int,
    base: NDArray[np.float64] | None = None,
) -> NDArray[np.int64]: ...
def stream_order(
    streams: NDArray[np.int64],
    cursors: NDArray[np.int64],
    sizes: NDArray[np.int64],
    seeds: NDArray[np.int64],
) -> NDArray[np.int64]: ...
def num_threads() -> int: ...
def set_num_threads(threads: int) -> None: ...

@final
class IndexShuffle:
    def __new__(cls, n: int, seed: int, stream: int, epoch: int) -> IndexShuffle: ...
    def permute(self, i: int) -> int: ...
    def inverse(self, j: int) -> int: ...
    def permute_range(self, start: int, count: int) -> NDArray[np.int64]: ...
    def __len__(self) -> int: ...

@final
class MdsShards:
    def __new__(
        cls,
        streams: list[tuple[str, list[str], list[int], list[int], list[int], int, int, bool]],
    ) -> MdsShards: ...
    def gather(
        self, pairs: NDArray[np.int64], limit: int
    ) -> tuple[NDArray[np.uint8], NDArray[np.int64]] | None: ...
    def gather_padded(
        self, pairs: NDArray[np.int64], limit: int, signed: bool, ignore_index: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int] | None: ...
    def unmap_all(self) -> None: ...

@final
class RollingWindow:
    def __new__(cls, capacity: int) -> RollingWindow: ...
    @staticmethod
    def from_parts(
        capacity: int, values: NDArray[np.float32], num_non_finite: int
    ) -> RollingWindow: ...
    def push(self, values: NDArray[np.float32] | NDArray[np.float64]) -> None: ...
    def edges(self, num_buckets: int) -> NDArray[np.float64]: ...
    def values(self) -> NDArray[np.float32]: ...
    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def num_non_finite(self) -> int: ...

@final
class WeightedSampler:
    def __new__(cls, weights: NDArray[np.float64], seed: int) -> WeightedSampler: ...
    def sample(self, k: int) -> NDArray[np.int64]: ...
    @property
    def seed(self) -> int: ...
    @seed.setter
    def seed(self, value: int) -> None: ...
    @property
    def num_draws(self) -> int: ...
    @num_draws.setter
    def num_draws(self, value: int) -> None: ...
    def __len__(self) -> int: ...

@final
class BucketSampler:
    def __new__(
        cls, bucket_idx: NDArray[np.int64], num_buckets: int, seed: int
    ) -> BucketSampler: ...
    def sample(self, probs: NDArray[np.float64], k: int) -> NDArray[np.int64]: ...
    def set_buckets(self, bucket_idx: NDArray[np.int64]) -> None: ...
    def __len__(self) -> int: ...
    def counts(self) -> NDArray[np.int64]: ...
    @property
    def num_buckets(self) -> int: ...
    def state(
        self,
    ) -> tuple[int, int, int, NDArray[np.int64], NDArray[np.int64]]: ...
    def load_state(
        self,
        seed: int,
        num_calls: int,
        generation: int,
        cursors: NDArray[np.int64],
        epochs: NDArray[np.int64],
    ) -> None: ...
