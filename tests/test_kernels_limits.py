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
