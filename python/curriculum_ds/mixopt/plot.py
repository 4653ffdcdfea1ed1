"""``mixopt.png``: the answer of a fit at a glance.

Top row, the answer: the proposed mixture beside the prior (one pair of bars per stream, the
proposal's share printed), and the predicted target at the prior and at the proposal with the
proposal's bootstrap interval. Below, one panel per eval stream: the cross-validated predicted
loss of each swarm run against its observed loss, with the diagonal and the Spearman in the title
(how far the regression can be trusted).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from curriculum_ds.mixopt.fit import FitResult

__all__ = ["render_png"]

_COLUMNS = 5


def _short(name: str) -> str:
    """A column name without RegMix's ``train_the_pile_`` / ``metric/the_pile_`` decorations."""
    for prefix in ("train_the_pile_", "metric/the_pile_", "metric/", "train_"):
        name = name.removeprefix(prefix)
    return name.removesuffix("_val_loss")


def render_png(result: FitResult, out: Path) -> Path:
    """Draw the picture (see the module docstring) to ``out`` (PNG, 110 dpi, Agg backend).

    Returns:
        ``out``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    proposal = result.proposal
    names = result.swarm.loss_names
    rows = 1 + math.ceil(len(names) / _COLUMNS)
    fig = plt.figure(figsize=(3.6 * _COLUMNS, 4.2 + 3.0 * (rows - 1)), constrained_layout=True)
    grid = fig.add_gridspec(rows, _COLUMNS, height_ratios=[1.5] + [1.0] * (rows - 1))

    ax = fig.add_subplot(grid[0, : _COLUMNS - 1])
    streams = result.swarm.streams
    x = np.arange(len(streams))
    ax.bar(x - 0.2, result.prior, 0.4, color="0.7", label="prior")
    ax.bar(x + 0.2, proposal.mixture, 0.4, color="tab:blue", label="proposal")
    for j, share in enumerate(proposal.mixture):
        if share < 0.005:
            continue
        ax.text(j + 0.2, share, f"{share:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [_short(s) for s in streams], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("share of training tokens")
    ax.set_title(
        f"Proposed mixture ({result.regressor}, {len(result.swarm.keys)} runs): KL to prior "
        f"{proposal.kl_to_prior:.3f} nats",
        fontsize=11,
        fontweight="bold",
    )
    ax.legend()
    ax.grid(axis="y", alpha=0.3)

    ax = fig.add_subplot(grid[0, _COLUMNS - 1])
    # a percentile bootstrap interval need not contain the estimate: drawn as it is
    ax.vlines([1], proposal.target_low, proposal.target_high, color="tab:blue", lw=2)
    ax.hlines([proposal.target_low, proposal.target_high], 0.92, 1.08, color="tab:blue", lw=2)
    ax.errorbar([0], [proposal.prior_target], fmt="o", ms=9, color="0.45")
    ax.annotate(f"{proposal.prior_target:.4f}", (0, proposal.prior_target), xytext=(8, 0),
                textcoords="offset points", va="center", fontsize=8)  # fmt: skip
    ax.errorbar([1], [proposal.target], fmt="o", ms=9, color="tab:blue")
    ax.set_xticks([0, 1], ["prior", "proposal"])
    ax.set_xlim(-0.6, 1.6)
    delta = proposal.target - proposal.prior_target
    ax.set_title(
        f"predicted target\n{proposal.target:.4f} ({delta:+.4f} vs prior)\n"
        f"bootstrap 5-95 %: [{proposal.target_low:.4f}, {proposal.target_high:.4f}]",
        fontsize=10,
    )
    ax.grid(axis="y", alpha=0.3)

    for s, name in enumerate(names):
        ax = fig.add_subplot(grid[1 + s // _COLUMNS, s % _COLUMNS])
        observed = result.swarm.losses[:, s]
        predicted = result.cv_predicted[:, s]
        ax.scatter(observed, predicted, s=6, alpha=0.5)
        span = [min(observed.min(), predicted.min()), max(observed.max(), predicted.max())]
        ax.plot(span, span, color="black", lw=0.8)
        ax.set_title(f"{_short(name)}: ρ = {result.quality[s].spearman:.3f}", fontsize=9)
        ax.set_xlabel("observed loss", fontsize=8)
        ax.set_ylabel("predicted (cross-validated)", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
