"""Output lengths that cannot be allocated are refused with ValueError, never a process abort."""

import numpy as np
import pytest

import curriculum_ds as cds


@pytest.mark.parametrize(
    "call",
    [
        lambda: cds.epoch_permutation(2**40, 1, 0),
        lambda: cds.epoch_permutation(2**62, 1, 0),
        lambda: cds.WeightedSampler(np.ones(3), seed=1).sample(2**40),
        lambda: cds.WeightedSampler(np.ones(3), seed=1).sample(2**62),
        lambda: cds.BucketSampler(np.array([0, 1]), 2, seed=1).sample(np.array([0.5, 0.5]), 2**40),
        lambda: cds.sample_without_replacement(np.ones(3), 2**50, 1),
    ],
)
def test_unallocatable_lengths_are_a_value_error(call):
    with pytest.raises(ValueError, match=r"would need .* GiB, more than this machine's"):
        call()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: cds.kernels.bucket_edges(np.ones(4), 2**70), "num_buckets"),
        (lambda: cds.kernels.bucket_edges(np.ones(4), -(2**70)), "num_buckets"),
        (lambda: cds.kernels.RollingWindow(2**70), "capacity"),
        (lambda: cds.kernels.RollingWindow(4).edges(2**70), "num_buckets"),
        (
            lambda: cds.kernels.RollingWindow.from_state_dict(
                {"capacity": 4, "values": np.ones(2, np.float32), "num_non_finite": 2**64}
            ),
            "num_non_finite",
        ),
        (
            lambda: cds.kernels.RollingWindow.from_state_dict(
                {"capacity": 2**64, "values": np.ones(2, np.float32), "num_non_finite": 0}
            ),
            "capacity",
        ),
        (lambda: cds.kernels.BucketSampler(np.zeros(2, np.int64), 2**70, 0), "num_buckets"),
        (lambda: cds.kernels.epoch_permutation(3, 0, 2**64), "epoch"),
    ],
)
def test_out_of_range_python_ints_are_value_errors_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
