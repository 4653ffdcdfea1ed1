"""Golden vectors of ODM's weight update, made by the reference's own code outside the project.

Reference: ``alon-albalak/online-data-mixing``, ``megatron/data/data_sampling_utils.py`` at
commit edbfdadb62b0388120b6198b1743067a7cd990dc: ``SmoothedMeanWeightUpdater`` (the class the
README names as the paper's method), both of its code paths:

* ``update(dataset_name, reward, iteration)``: one domain per step (``megatron/training.py``'s
  ``train``: the step's batch comes from one sampled domain, reward = its ``lm_loss``); the
  weights ``exp(ε_{t-1}·R̂_d)·(1 - K·ε_t) / Σ_j exp(ε_{t-1}·R̂_j) + ε_t``;
* ``group_update(dataset_names, rewards, iteration)``: every domain of a mixed minibatch
  (``train_mixed_minibatch``: reward = each present domain's mean micro-batch loss), whose
  weights drop the ``exp``: ``ε_{t-1}·R̂_d·(1 - K·ε_t) / Σ_j ε_{t-1}·R̂_j + ε_t``.

This script does not import curriculum_ds. ``data_sampling_utils.py`` imports megatron, torch
and deepspeed at its top, so the module is not imported whole: the script reads the class's
source from a checkout (``--source path/to/data_sampling_utils.py``), compiles it as it is with
``math``, ``numpy`` and ``typing``, and calls it.

Inputs (seeded, numpy PCG64), for (K, α) in (2, 0.9), (5, 0.9), (5, 0.5), (17, 0.9)
(α = 0.9: the reference's default):

* ``single``: 1,000 updates at iterations 1..1000, each of one stream drawn from the current
  probabilities with a reward (loss, nats) uniform in [0.5, 5.5];
* ``group``: 1,000 updates at iterations 1..1000, each of a random non-empty subset of the
  streams with a reward each, uniform in [0.5, 5.5].

Output: ``odm_golden.npz`` beside this script, per case ``{path}_K{K}_a{α}_``: ``rewards``
float64 ``(T, K)`` (NaN: stream absent from that update), ``iterations`` int64 ``(T,)``,
``probs`` float64 ``(T, K)`` (the returned probabilities) and ``eps`` float64 ``(T,)``.

Run: ``python make_odm_golden.py --source /path/to/megatron/data/data_sampling_utils.py``
(numpy; written with numpy 2.4.6, Python 3.11).
"""

from __future__ import annotations

import argparse
import ast
import math
import typing
from pathlib import Path

import numpy as np

REFERENCE_COMMIT = "edbfdadb62b0388120b6198b1743067a7cd990dc"
CLASS = "SmoothedMeanWeightUpdater"
CASES = ((2, 0.9), (5, 0.9), (5, 0.5), (17, 0.9))
"""(K, α) of each case."""
NUM_UPDATES = 1000


def load_updater(source: Path) -> type:
    """The reference's class, compiled from its own source text."""
    tree = ast.parse(source.read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS]
    module = ast.Module(body=[node], type_ignores=[])
    namespace: dict[str, object] = {"math": math, "np": np, **vars(typing)}
    exec(compile(module, str(source), "exec"), namespace)
    return namespace[CLASS]  # type: ignore[return-value]


def run(updater_cls: type, path: str, k: int, alpha: float, seed: int) -> dict[str, np.ndarray]:
    """One case: NUM_UPDATES updates through the reference's ``update`` or ``group_update``."""
    rng = np.random.default_rng(seed)
    names = [f"s{i}" for i in range(k)]
    updater = updater_cls(names, list(np.full(k, 1.0 / k)), smoothing_factor=alpha)
    rewards = np.full((NUM_UPDATES, k), np.nan)
    probs = np.zeros((NUM_UPDATES, k))
    eps = np.zeros(NUM_UPDATES)
    current = np.full(k, 1.0 / k)
    for i in range(NUM_UPDATES):
        iteration = i + 1
        if path == "single":
            d = int(rng.choice(k, p=current / current.sum()))
            rewards[i, d] = rng.uniform(0.5, 5.5)
            out = updater.update(names[d], float(rewards[i, d]), iteration)
        else:
            present = rng.random(k) < 0.6
            present[rng.integers(k)] = True
            rewards[i, present] = rng.uniform(0.5, 5.5, present.sum())
            idx = np.flatnonzero(present)
            out = updater.group_update(
                [names[j] for j in idx], [float(rewards[i, j]) for j in idx], iteration
            )
        current = np.asarray(out, dtype=np.float64)
        probs[i], eps[i] = current, updater.eps
    return {
        "rewards": rewards,
        "iterations": np.arange(1, NUM_UPDATES + 1, dtype=np.int64),
        "probs": probs,
        "eps": eps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("odm_golden.npz"))
    args = parser.parse_args()
    updater_cls = load_updater(args.source)
    arrays: dict[str, np.ndarray] = {"commit": np.array(REFERENCE_COMMIT)}
    seed = 0
    for path in ("single", "group"):
        for k, alpha in CASES:
            seed += 1
            for key, value in run(updater_cls, path, k, alpha, seed).items():
                arrays[f"{path}_K{k}_a{alpha}_{key}"] = value
    np.savez_compressed(args.out, **arrays)
    print(f"wrote {args.out} ({len(arrays)} arrays)")


if __name__ == "__main__":
    main()
