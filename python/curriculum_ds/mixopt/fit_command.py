"""``curriculum-ds mixopt fit``'s back-end: read, check everything, fit, then write.

Every input is read and checked (the CSV files, ``--prior``, ``--tokens``, the constraints, the
regressor's name, the columns of ``--predict``) before ``--out`` is created: a mistake is one line
and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from curriculum_ds.errors import ConfigError, DataError
from curriculum_ds.mixopt.constraints import Constraints, mixture_bounds
from curriculum_ds.mixopt.fit import FitOptions, FitResult, fit_swarm
from curriculum_ds.mixopt.outputs import (
    format_tables,
    write_fit_json,
    write_predictions,
    write_proposal_json,
)
from curriculum_ds.mixopt.plot import render_png
from curriculum_ds.mixopt.propose import SearchSettings
from curriculum_ds.mixopt.regressors import check_regressor
from curriculum_ds.mixopt.tables import read_mixtures, read_stream_json, read_swarm_csv

__all__ = ["FitRequest", "run_fit"]


@dataclass(frozen=True, kw_only=True)
class FitRequest:
    """The options of ``mixopt fit``, as given."""

    results: Path
    mixtures: Path
    out: Path
    regressor: str = "log_linear"
    predict: Path | None = None
    prior: Path | None = None
    tokens: Path | None = None
    constraints: Constraints = field(default_factory=Constraints)
    search: SearchSettings = field(default_factory=SearchSettings)
    n_jobs: int = 1


def run_fit(request: FitRequest) -> tuple[FitResult, str]:
    """Fit, propose, write ``fit.json``, ``proposal.json``, ``mixopt.png`` (+ ``predictions.csv``).

    Returns:
        The result and the printed tables.

    Raises:
        DataError: an unreadable or malformed input file (one line naming it).
        ConfigError: an unknown regressor, constraints no mixture satisfies, ``--out`` a file.
    """
    regressor = check_regressor(request.regressor)
    swarm = read_swarm_csv(request.results, request.mixtures)
    prior = (
        None if request.prior is None else read_stream_json(request.prior, "--prior", swarm.streams)
    )
    tokens = (
        None
        if request.tokens is None
        else read_stream_json(request.tokens, "--tokens", swarm.streams)
    )
    mixture_bounds(request.constraints, swarm.streams, tokens)  # refuse before any fit
    table = None
    if request.predict is not None:
        table = read_mixtures(request.predict, "--predict")
        if sorted(table.columns) != sorted(swarm.streams):
            missing = sorted(set(swarm.streams) - set(table.columns))
            extra = sorted(set(table.columns) - set(swarm.streams))
            what = f"lacks stream {missing[0]!r}" if missing else f"has unknown stream {extra[0]!r}"
            raise DataError(
                f"--predict {request.predict}: {what} (its columns must be --mixtures')"
            )
    if request.out.exists() and not request.out.is_dir():
        raise ConfigError(f"--out {request.out}: exists and is not a folder")
    result = fit_swarm(
        swarm,
        FitOptions(
            regressor=regressor,
            prior=prior,
            tokens=tokens,
            constraints=request.constraints,
            search=request.search,
            n_jobs=request.n_jobs,
        ),
    )
    request.out.mkdir(parents=True, exist_ok=True)
    write_fit_json(result, request.out)
    write_proposal_json(result, request.out)
    if table is not None:
        write_predictions(result, table, request.out)
    render_png(result, request.out / "mixopt.png")
    return result, format_tables(result, tokens, request.constraints.target_tokens)
