"""``curriculum-ds mixopt``: the mixture search (docs/mixopt.md); ``fit`` fits others' runs."""

from __future__ import annotations

from pathlib import Path

import click

from curriculum_ds.cli.group import main

_FILE = click.Path(path_type=Path, dir_okay=False)


@main.group()
def mixopt() -> None:
    """Find a mixture from proxy runs: a regression per eval stream and a constrained proposal."""


@mixopt.command()
@click.argument("results", type=_FILE)
@click.option("--mixtures", required=True, type=_FILE, help="one row per run: its shares")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="results folder")
@click.option("--regressor", default="log_linear", show_default=True, help="log_linear|lightgbm")
@click.option(
    "--predict", type=_FILE, default=None, help="mixtures to predict: DIR/predictions.csv"
)
@click.option("--prior", type=_FILE, default=None, help="JSON {stream: share} (default: uniform)")
@click.option(
    "--tokens", type=_FILE, default=None, help="JSON {stream: tokens} for --max-repetition"
)
@click.option(
    "--max-repetition", type=float, default=None, help="passes per stream in the target run"
)
@click.option("--target-tokens", type=float, default=None, help="the target run's tokens")
@click.option("--min-weight", type=float, default=0.0, show_default=True, help="least share")
@click.option("--kl-to-prior", type=float, default=0.0, show_default=True, help="KL weight")
@click.option("--candidates", type=click.IntRange(1), default=100_000, show_default=True)
@click.option("--top-k", type=click.IntRange(1), default=128, show_default=True)
@click.option("--bootstrap", type=click.IntRange(0), default=20, show_default=True)
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True)
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True, help="LightGBM's")
def fit(
    results: Path,
    mixtures: Path,
    out: Path,
    regressor: str,
    predict: Path | None,
    prior: Path | None,
    tokens: Path | None,
    max_repetition: float | None,
    target_tokens: float | None,
    min_weight: float,
    kl_to_prior: float,
    candidates: int,
    top_k: int,
    bootstrap: int,
    seed: int,
    threads: int,
) -> None:
    """Fit RESULTS.csv (RegMix's layout, joined with --mixtures on the first column); propose."""
    from pydantic import ValidationError

    from curriculum_ds.errors import ConfigError
    from curriculum_ds.mixopt.constraints import Constraints
    from curriculum_ds.mixopt.fit_command import FitRequest, run_fit
    from curriculum_ds.mixopt.propose import SearchSettings

    try:
        constraints = Constraints(
            max_repetition=max_repetition,
            target_tokens=target_tokens,
            min_weight=min_weight,
            kl_to_prior=kl_to_prior,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        name = "--" + str(error["loc"][0]).replace("_", "-")
        raise ConfigError(f"{name}: {error['msg']} (got {error.get('input')!r})") from None
    request = FitRequest(
        results=results,
        mixtures=mixtures,
        out=out,
        regressor=regressor,
        predict=predict,
        prior=prior,
        tokens=tokens,
        constraints=constraints,
        search=SearchSettings(
            num_candidates=candidates, top_k=top_k, seed=seed, bootstrap=bootstrap
        ),
        n_jobs=threads,
    )
    _, table = run_fit(request)
    click.echo(table)
    click.echo(
        f"results: {out / 'proposal.json'}  fit: {out / 'fit.json'}  picture: {out / 'mixopt.png'}"
    )


@mixopt.command()
@click.argument("swarm", type=_FILE)
@click.option("--out", required=True, type=click.Path(path_type=Path), help="results folder")
@click.option("--num-gpus", type=click.IntRange(1), default=None, help="ranks per run")
@click.option(
    "--validate",
    type=click.IntRange(2),
    default=None,
    help="seeds (1..N) of proposal vs natural vs uniform",
)
@click.option("--save-interval", type=click.IntRange(1), default=50, show_default=True)
def run(
    swarm: Path, out: Path, num_gpus: int | None, validate: int | None, save_interval: int
) -> None:
    """Run SWARM.json's proxy runs (resumably), fit, propose (docs/mixopt.md)."""
    from curriculum_ds.mixopt.swarm_run import mixopt_run

    seeds = None if validate is None else list(range(1, validate + 1))
    table = mixopt_run(swarm, out, num_gpus=num_gpus, validate=seeds, save_interval=save_interval)
    click.echo(table)
    click.echo(
        f"results: {out / 'proposal.json'}  fit: {out / 'fit.json'}  runs: {out / 'swarm.jsonl'}"
    )
