"""``curriculum-ds mixopt run``'s back-end: the swarm through ablate's runner, then the fit.

The swarm's runs (:func:`~curriculum_ds.mixopt.swarm_file.load_swarm`) go through
:func:`~curriculum_ds.ablate.runs.run_experiment` as they are, into ``OUT/runs/run-IIII/seed-S``:
a finished run is skipped, an interrupted one resumed from its last checkpoint, and a run whose
config changed since it ran (another base, prior, knobs or seed) is refused in one line before
anything runs (:func:`~curriculum_ds.ablate.runs.check_unchanged`). Then ``OUT/swarm.jsonl`` (one
row per run: its mixture and eval losses), the fit and the proposal (:func:`~curriculum_ds.mixopt.
fit.fit_swarm`: ``fit.json``, ``proposal.json``, ``mixopt.png``). ``--validate SEEDS``: an ablate
experiment in ``OUT/validate`` (proposal, natural, uniform; paired by seed), ablate as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.ablate.runs import CommandHook, check_unchanged, run_experiment
from curriculum_ds.errors import ConfigError
from curriculum_ds.files.atomic import write_text_atomically
from curriculum_ds.mixopt.fit import FitOptions, FitResult, fit_swarm
from curriculum_ds.mixopt.outputs import format_tables, write_fit_json, write_proposal_json
from curriculum_ds.mixopt.plot import render_png
from curriculum_ds.mixopt.propose import SearchSettings
from curriculum_ds.mixopt.swarm_file import Swarm, run_name, run_patch
from curriculum_ds.mixopt.tables import SwarmData

__all__ = [
    "check_unchanged_swarm",
    "fit_swarm_runs",
    "mixopt_run",
    "run_swarm",
    "swarm_rows",
    "validate_experiment",
]


def run_swarm(
    swarm: Swarm,
    out: Path,
    *,
    num_gpus: int,
    save_interval: int = 50,
    command_hook: CommandHook | None = None,
) -> tuple[FitResult, str]:
    """Run (or resume, or skip) the swarm's runs, then fit and propose into ``out``.

    Returns:
        The fit and the printed tables.

    Raises:
        ConfigError: runs already in ``out`` were made by another swarm file (one line).
        CurriculumError: a run failed (its log is named); the finished ones are kept.
    """
    check_unchanged_swarm(swarm, out)
    rows = run_experiment(
        swarm.experiment,
        out,
        num_gpus=num_gpus,
        save_interval=save_interval,
        command_hook=command_hook,
        target=lambda row: swarm_target(swarm, row),
    )
    records = swarm_rows(swarm, rows)
    write_text_atomically(out / "swarm.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    return fit_swarm_runs(swarm, records, out)


def check_unchanged_swarm(swarm: Swarm, out: Path) -> None:
    """Refuse, in one line, a swarm file changed for runs already in ``out`` (reads only)."""
    try:
        check_unchanged(swarm.experiment, out)
    except ConfigError as exc:
        what = str(exc).split(": give the changed arm")[0]  # ablate's advice is for arms
        raise ConfigError(
            f"{swarm.path}: the swarm changed for runs that already ran ({what}); new runs may "
            "be added (num_runs), anything else needs a new --out"
        ) from None


def swarm_target(swarm: Swarm, row: dict[str, Any]) -> float:
    """A finished run's target value: its eval losses weighted by the swarm's target."""
    losses = [row["streams"][name] for name in swarm.experiment.eval_streams]
    return float(np.dot(swarm.target_weights, losses))


def swarm_rows(swarm: Swarm, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``swarm.jsonl``'s rows: each finished run's name, mixture, eval losses and target."""
    records = []
    for i in range(swarm.spec.num_runs):
        row = next(r for r in rows if r["arm"] == run_name(i))
        records.append(
            {
                "run": run_name(i),
                "mixture": dict(zip(swarm.streams, map(float, swarm.mixtures[i]), strict=True)),
                "losses": {name: row["streams"][name] for name in swarm.experiment.eval_streams},
                "target": swarm_target(swarm, row),
                "tokens": row["tokens"],
                "wall_s": row["wall_s"],
            }
        )
    return records


def fit_swarm_runs(swarm: Swarm, records: list[dict[str, Any]], out: Path) -> tuple[FitResult, str]:
    """The fit and the proposal of the swarm's rows.

    Writes ``fit.json``, ``proposal.json`` (its ``train_loader`` names the base's folders) and
    ``mixopt.png`` into ``out``.
    """
    eval_streams = swarm.experiment.eval_streams
    data = SwarmData(
        keys=tuple(r["run"] for r in records),
        streams=swarm.streams,
        mixtures=np.array([[r["mixture"][s] for s in swarm.streams] for r in records]),
        loss_names=eval_streams,
        losses=np.array([[r["losses"][s] for s in eval_streams] for r in records]),
    )
    spec = swarm.spec
    result = fit_swarm(
        data,
        FitOptions(
            regressor=spec.regressor,
            prior=swarm.prior,
            tokens=swarm.tokens,
            constraints=spec.constraints,
            target_weights=swarm.target_weights,
            folds=min(5, len(records)),
            search=SearchSettings(
                num_candidates=spec.search.candidates,
                top_k=spec.search.top_k,
                seed=spec.seed,
                knobs=spec.knobs,
                bootstrap=spec.search.bootstrap,
            ),
        ),
    )
    notes = [n for n in result.notes if not n.startswith("no --prior")]
    result.notes[:] = notes
    write_fit_json(result, out)
    write_proposal_json(result, out, swarm.locals_by_stream)
    render_png(result, out / "mixopt.png")
    return result, format_tables(result, swarm.tokens, spec.constraints.target_tokens)


def validate_experiment(swarm: Swarm, mixture: np.ndarray, seeds: list[int], out: Path) -> Path:
    """Write ``out/validate/experiment.json`` (+ its base) and return it, for ablate.

    Its arms: proposal, natural (the prior) and uniform, at the target's ``max_duration``
    (``constraints.target_tokens``, else the base's), paired by ``seeds``.
    """
    folder = out / "validate"
    folder.mkdir(parents=True, exist_ok=True)
    base = json.loads(json.dumps(swarm.experiment.base))
    target_tokens = swarm.spec.constraints.target_tokens
    if target_tokens is not None:
        duration = f"{int(target_tokens)}tok"
        base["curriculum"]["max_duration"] = duration
        if "duration" in base["curriculum"]["schedule"][0]:
            base["curriculum"]["schedule"][0]["duration"] = duration
    for stream in base["curriculum"]["schedule"][0]["train_loader"]["streams"]:
        local = Path(stream["local"])
        if not local.is_absolute():  # relative to the base's folder: keep it valid from here
            stream["local"] = str((swarm.path.parent / swarm.spec.base).parent / local)
    write_text_atomically(folder / "base.json", json.dumps(base, indent=2))
    uniform = np.full(len(swarm.streams), 1.0 / len(swarm.streams))
    experiment = {
        "base": "base.json",
        "arms": {
            "proposal": run_patch(base, mixture),
            "natural": run_patch(base, swarm.prior),
            "uniform": run_patch(base, uniform),
        },
        "reference": "natural",
        "seeds": seeds,
    }
    if swarm.experiment.model is not None:
        experiment["model"] = str(Path(swarm.experiment.model).resolve())
    path = folder / "experiment.json"
    write_text_atomically(path, json.dumps(experiment, indent=2))
    return path


def mixopt_run(
    swarm_path: Path,
    out: Path,
    *,
    num_gpus: int | None = None,
    validate: list[int] | None = None,
    save_interval: int = 50,
    command_hook: CommandHook | None = None,
) -> str:
    """The whole ``mixopt run``: check, run the swarm, fit, propose (then ``--validate``).

    Returns:
        What is printed at the end: the fit's tables (and the validation's table).

    Raises:
        ConfigError: one line, before anything is written (:func:`load_swarm`,
            :func:`run_swarm`'s check).
        CurriculumError: a run failed (named, with its log).
    """
    from curriculum_ds.ablate import ablate
    from curriculum_ds.commands.launch import default_num_gpus
    from curriculum_ds.files.user_paths import make_folder
    from curriculum_ds.mixopt.swarm_file import load_swarm

    swarm = load_swarm(swarm_path)
    if validate is not None and len(set(validate)) < 2:
        raise ConfigError(f"--validate: at least 2 distinct seeds are needed, got {validate}")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    check_unchanged_swarm(swarm, out)
    make_folder(out, field="--out")
    result, table = run_swarm(
        swarm,
        out,
        num_gpus=num_gpus or default_num_gpus(),
        save_interval=save_interval,
        command_hook=command_hook,
    )
    if validate is not None:
        experiment = validate_experiment(swarm, result.proposal.mixture, validate, out)
        table += "\n" + ablate(
            experiment,
            out / "validate",
            num_gpus=num_gpus,
            save_interval=save_interval,
            command_hook=command_hook,
        )
    return table
