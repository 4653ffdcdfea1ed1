"""``unit: "buckets", signal: "loss"`` (the default) draws what it drew before units existed.

The digests were taken from the code before ``dynamic.unit`` and ``dynamic.signal`` were added
(commit 7a42a72) with this same loop: 40 steps of a real two-stream loader, re-weighting over 4
buckets every 3 steps from losses that are a fixed function of the samples (some NaN), in both
proportion units. Any change in the batches drawn or the history recorded changes the digest.

From issue 20 (acceptance: the bucket unit reproduces today's sample trace bit for bit).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import make_dataset, ragged_docs

from curriculum_ds.config import DynamicConfig, PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import make_reweighter

EARLIER_DIGESTS = {
    "samples": "0bbd92a58dc90d9ee5f8ba9f449c56ad3b4a73b3a1bc607a7a0c5c30bb8896ef",
    "tokens": "8c666646f7ecfa5943e805ac1a6dc6cfe46dbf8144ed1b1f792781933c42d0ce",
}


def _digest(root: Path, proportion_unit: str) -> str:
    a = make_dataset(root, "a", ragged_docs(90, seed=3, min_len=5, max_len=60))
    b = make_dataset(root, "b", ragged_docs(70, seed=4, min_len=20, max_len=64))
    phase = PhaseConfig.model_validate(
        {
            "name": "p",
            "duration": "100000tok",
            "train_loader": {
                "streams": [
                    {"local": str(a), "proportion": 0.4},
                    {"local": str(b), "proportion": 0.6},
                ],
                "max_seq_len": 64,
                "proportion_unit": proportion_unit,
            },
        }
    )
    cfg = DynamicConfig(
        enabled=True,
        num_buckets=4,
        window=50,
        recompute_every_n_steps=3,
        temperature=0.3,
        floor=0.05,
    )
    assert (cfg.unit, cfg.signal) == ("buckets", "loss")  # the defaults
    loader = PhaseLoader(phase, 0, seed=7, num_buckets=4)
    reweighter = make_reweighter(cfg)
    start = reweighter.start_phase(loader.view(), None)
    assert start.buckets is not None
    loader.apply(start)
    digest = hashlib.sha256()
    for step in range(1, 41):
        batch = loader.next_global_batch(12)
        digest.update(batch.tobytes())
        losses = ((batch[:, 0] * 31 + batch[:, 1] * 17) % 23) / 7.0 + 0.1
        losses[step % 12] = np.nan if step % 5 == 0 else losses[step % 12]
        reweighter.observe(batch, losses)
        update = reweighter.maybe_recompute(step)
        if update is not None:
            assert update.proportions is None
            loader.apply(update)
            keys = ("weights", "scores", "edges", "bucket_counts")
            digest.update(json.dumps({k: update.record.get(k) for k in keys}).encode())
            assert (update.record["unit"], update.record["signal"]) == ("buckets", "loss")
    loader.close()
    return digest.hexdigest()


@pytest.mark.parametrize("proportion_unit", ["samples", "tokens"])
def test_bucket_unit_draws_and_records_what_it_did_before_units(tmp_path, proportion_unit):
    assert _digest(tmp_path, proportion_unit) == EARLIER_DIGESTS[proportion_unit]
