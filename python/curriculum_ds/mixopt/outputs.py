"""What a fit writes and prints: ``fit.json``, ``proposal.json``, ``predictions.csv``, the tables.

- ``fit.json``: the regressor, the runs, and per eval stream the cross-validated Spearman and
  mean relative error, plus the fit's and the proposal's wall times;
- ``proposal.json``: a ready ``train_loader`` (``proportion_unit: "tokens"``; streams whose share
  is 0 are left out, proportions must be > 0), the mixture and the prior by stream, the predicted
  loss per eval stream with its bootstrap interval and at the prior, the target, the constraints;
- ``predictions.csv`` (``--predict``): the first column of the mixtures to predict, then one
  predicted loss column per loss column of the results.

Every file is written atomically (:mod:`curriculum_ds.files.atomic`).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.files.atomic import write_text_atomically
from curriculum_ds.mixopt.fit import FitResult
from curriculum_ds.mixopt.tables import CsvTable

__all__ = [
    "fit_summary",
    "format_tables",
    "proposal_document",
    "write_fit_json",
    "write_predictions",
    "write_proposal_json",
]


def fit_summary(result: FitResult) -> dict[str, Any]:
    """``fit.json``'s content."""
    return {
        "regressor": result.regressor,
        "num_runs": len(result.swarm.keys),
        "streams": list(result.swarm.streams),
        "eval_streams": {
            name: {"cv_spearman": q.spearman, "cv_relative_error": q.relative_error}
            for name, q in zip(result.swarm.loss_names, result.quality, strict=True)
        },
        "cv_spearman_mean": float(np.mean([q.spearman for q in result.quality])),
        "fit_seconds": result.fit_seconds,
        "proposal_seconds": result.proposal_seconds,
    }


def proposal_document(
    result: FitResult, locals_by_stream: dict[str, str] | None = None
) -> dict[str, Any]:
    """``proposal.json``'s content.

    Args:
        result: the fit.
        locals_by_stream: each stream's prepared folder for the ``train_loader`` (``None``: the
            stream's name stands in for it, to be replaced by the user's folder).
    """
    proposal = result.proposal
    streams = result.swarm.streams
    loader_streams = [
        {
            "name": name,
            "local": (locals_by_stream or {}).get(name, name),
            "proportion": float(share),
        }
        for name, share in zip(streams, proposal.mixture, strict=True)
        if share > 0
    ]
    predicted = {
        name: {
            "value": float(proposal.predicted[s]),
            "low": float(proposal.low[s]),
            "high": float(proposal.high[s]),
            "at_prior": float(proposal.prior_predicted[s]),
        }
        for s, name in enumerate(result.swarm.loss_names)
    }
    return {
        "train_loader": {"proportion_unit": "tokens", "streams": loader_streams},
        "mixture": {name: float(w) for name, w in zip(streams, proposal.mixture, strict=True)},
        "prior": {name: float(w) for name, w in zip(streams, result.prior, strict=True)},
        "predicted": predicted,
        "target": {
            "weights": {
                name: float(w)
                for name, w in zip(result.swarm.loss_names, result.target_weights, strict=True)
            },
            "value": proposal.target,
            "low": proposal.target_low,
            "high": proposal.target_high,
            "at_prior": proposal.prior_target,
        },
        "kl_to_prior_nats": proposal.kl_to_prior,
        "constraints": result.constraints.model_dump(),
        "regressor": result.regressor,
        "notes": result.notes,
    }


def write_fit_json(result: FitResult, out: Path) -> None:
    """Write ``out/fit.json``."""
    write_text_atomically(out / "fit.json", json.dumps(fit_summary(result), indent=2) + "\n")


def write_proposal_json(
    result: FitResult, out: Path, locals_by_stream: dict[str, str] | None = None
) -> None:
    """Write ``out/proposal.json``."""
    document = proposal_document(result, locals_by_stream)
    write_text_atomically(out / "proposal.json", json.dumps(document, indent=2) + "\n")


def write_predictions(result: FitResult, table: CsvTable, out: Path) -> None:
    """Write ``out/predictions.csv``: ``table``'s keys, then each eval stream's predicted loss.

    ``table``'s columns must be the swarm's streams (checked by the caller), in any order.
    """
    order = [table.columns.index(name) for name in result.swarm.streams]
    mixtures = table.values[:, order]
    columns = [model.predict(mixtures) for model in result.models]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([table.key_name, *result.swarm.loss_names])
    for i, key in enumerate(table.keys):
        writer.writerow([key, *(repr(float(column[i])) for column in columns)])
    write_text_atomically(out / "predictions.csv", buffer.getvalue())


def format_tables(result: FitResult, tokens: np.ndarray | None, target_tokens: float | None) -> str:
    """The printed tables: the fit per eval stream, then the proposal beside the prior."""
    proposal = result.proposal
    width = max(len(name) for name in (*result.swarm.loss_names, *result.swarm.streams, "target"))
    lines = [
        f"fit: {result.regressor} on {len(result.swarm.keys)} runs "
        f"({result.fit_seconds:.1f} s), proposal {result.proposal_seconds:.1f} s",
        f"{'eval stream':<{width}}  cv_spearman  cv_rel_err  at_prior  proposal  interval (5-95 %)",
    ]
    for s, name in enumerate(result.swarm.loss_names):
        q = result.quality[s]
        lines.append(
            f"{name:<{width}}  {q.spearman:>11.3f}  {q.relative_error:>10.4f}  "
            f"{proposal.prior_predicted[s]:>8.4f}  {proposal.predicted[s]:>8.4f}  "
            f"[{proposal.low[s]:.4f}, {proposal.high[s]:.4f}]"
        )
    lines.append(
        f"{'target':<{width}}  {'':>11}  {'':>10}  {proposal.prior_target:>8.4f}  "
        f"{proposal.target:>8.4f}  [{proposal.target_low:.4f}, {proposal.target_high:.4f}]"
    )
    passes = tokens is not None and target_tokens is not None
    lines += ["", f"{'stream':<{width}}  prior   proposal" + ("  passes" if passes else "")]
    for j, name in enumerate(result.swarm.streams):
        row = f"{name:<{width}}  {result.prior[j]:.4f}  {proposal.mixture[j]:.4f}"
        if tokens is not None and target_tokens is not None:
            row += f"  {proposal.mixture[j] * target_tokens / tokens[j]:>6.2f}"
        lines.append(row)
    lines.append(f"KL(proposal || prior) = {proposal.kl_to_prior:.4f} nats")
    lines += [f"note: {note}" for note in result.notes]
    return "\n".join(lines)
