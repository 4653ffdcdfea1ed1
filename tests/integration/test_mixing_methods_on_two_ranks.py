"""The mixing methods by name on real ranks: 2 CPU gloo ranks, ZeRO-2, the deepspeed launcher.

Three streams at a natural mix in tokens (0.35 / 0.35 / 0.30): two learnable cycles of
characters and one of random printable characters (noise), ``dynamic.unit: "streams"``. Each
method of :data:`ARMS` (one row each; a method adds its row) runs uninterrupted, and the rows
with ``kill`` also run killed by SIGKILL after step :data:`KILL_AFTER` and resumed with
``--resume auto`` from the step-8 checkpoint. For every arm:

* every recompute's weights are bit-identical on both ranks (each rank's own history rows,
  ``--dump-history``) and the end state of the method is too (``--dump-state``);
* a killed and resumed run has the uninterrupted run's sample trace, history rows (weights,
  scores and the method's own fields) and, at the end, its method state.

The excess-loss methods read a reference column ``ref_loss`` written straight into the prepared
folders (``write_metric_column``): what a model that has learned each stream would score (0.3
nats on the cycles; ln 94 on the noise, the entropy of its characters, which no model beats).
The subject here is the method's bookkeeping across ranks and resumes; a reference made and
scored the way a user makes one is in ``test_adaptive_mixing_over_streams.py``.

DoReMi's ``apply: "sampling"`` arm is not killed: its saved state is loss mode's key for key
and its resume differs only in the loader restoring its own proportions (the ODM and ADO kills'
path); ``tests/unit/dynamic/test_doremi_sampling_resumes_as_its_loss_mode.py`` shows both
in-process, so the suite saves a launch (~20 s).

DoReMi's own checks: ``apply: "loss"`` keeps the sampling mix and makes each step's loss
``Σ w·ℓ / Σ w`` over its tokens with the loss weights in force; ``curriculum-ds mix`` on the
DoReMi run prints a ``train_loader`` whose proportions are the history's average, and a phase of
it passes ``validate``.

Aioli's and Skill-it's own checks: they evaluate held-out streams of the train streams' names
at their own steps (a separate held-out set, ``eval_streams: "held"`` below), which write no
``eval.jsonl``; Aioli's probes lean the batches toward each stream in turn and its killed run
resumes from a checkpoint taken in the middle of a probe.

ODM's own checks: ε_t in every row is ``min(1/K, sqrt(ln K / (K·t)))``, and each row's weights
are the reference's rule applied to the previous row's R̂ and ε with the row's rewards. ADO's:
the fits run on rank 0 and are broadcast (``fit`` identical on both ranks, its α in the
reference's range), the first update comes at ``warmup_steps``.

From issue 33 (acceptance).
"""

from __future__ import annotations

import json
import math
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import history, make_dataset, metrics, trace, write_ds_config
from mixing_docs import cycle_docs, noise_docs
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.cli import main as cli_main
from curriculum_ds.data import read_stream_info
from curriculum_ds.data.metric_store import write_metric_column
from curriculum_ds.records.jsonl import last_row_per_step, read_jsonl

pytestmark = pytest.mark.distributed


@dataclass(frozen=True)
class Arm:
    """A method's run: its ``dynamic`` keys (over the common ones), and whether it is killed."""

    dynamic: dict[str, Any]
    kill: bool = False
    """Also run killed after :data:`KILL_AFTER` and resumed (one kill per method)."""
    keys: tuple[str, ...] = field(default=())
    """The method's own history keys, compared between the runs as the common ones."""
    min_rows: int = 8
    """History rows an uninterrupted run has at least."""


ARMS: dict[str, Arm] = {
    "doremi": Arm(
        {"method": "doremi", "reference_metric": "ref_loss"},
        keys=("apply", "average_weights", "eta", "epsilon"),
    ),
    "doremi_loss": Arm(
        {"method": "doremi", "reference_metric": "ref_loss", "doremi": {"apply": "loss"}},
        kill=True,
        keys=("apply", "average_weights", "loss_weights", "eta", "epsilon"),
    ),
    "aioli": Arm(
        {
            "method": "aioli",
            # rounds after steps 7, 14, 21: 3 probes of 2 steps, the learned mix for 1
            "recompute_every_n_steps": 7,
            "aioli": {
                "lp_rounds": 1,
                "probe_steps": 2,
                "eval_streams": "held",
                "eval_max_samples": 8,
            },
        },
        kill=True,  # the step-8 checkpoint is inside the first probe (steps 8-9)
        keys=("interaction", "probe_steps"),
        min_rows=2,
    ),
    "skillit": Arm(
        {"method": "skillit", "skillit": {"eval_streams": "held", "eval_max_samples": 8}},
        kill=True,  # its window of evaluations comes back whole
        keys=("eval_losses",),
    ),
    "odm": Arm(
        {"method": "odm", "recompute_every_n_steps": 1, "odm": {"warmup_steps": 2}},
        kill=True,
        keys=("t", "epsilon_t", "rewards", "estimated_reward"),
    ),
    "ado": Arm(
        {
            "method": "ado",
            "recompute_every_n_steps": 1,
            "ado": {
                "skip_steps": 1,
                "warmup_steps": 6,
                "refit_every": 3,
                "savgol_window": 5,
                "fit_starts": 2,
            },
        },
        kill=True,
        keys=("t", "fit", "refitted", "stream_losses"),
    ),
}
"""One row per method (a method adds its own): the arm's name → its :class:`Arm`."""

NATURAL = {"text_a": 0.35, "text_b": 0.35, "noise": 0.30}
TOKENS = "7000tok"  # ~22 steps of 8 samples
SAVE_INTERVAL = 4
KILL_AFTER = 10  # latest is then global_step8
COMMON_KEYS = ("step", "phase", "method", "unit", "signal", "streams", "weights", "scores",
               "stream_counts", "window_size", "num_non_finite", "kept_previous")  # fmt: skip
REFERENCE = {"text_a": 0.3, "text_b": 0.3, "noise": math.log(94)}


def _curriculum(folders: dict[str, Path], dynamic: dict[str, Any]) -> dict[str, Any]:
    streams = [{"local": str(folders[n]), "name": n, "proportion": p} for n, p in NATURAL.items()]
    section = dynamic.get(dynamic["method"])
    if isinstance(section, dict) and section.get("eval_streams") == "held":
        held_out = [{"local": str(folders[f"held/{n}"]), "name": n} for n in NATURAL]
        dynamic = {**dynamic, dynamic["method"]: {**section, "eval_streams": held_out}}
    return {
        "max_duration": TOKENS,
        "seed": 5,
        "schedule": [
            {
                "name": "mix",
                "duration": TOKENS,
                "train_loader": {
                    "streams": streams,
                    "max_seq_len": 64,
                    "proportion_unit": "tokens",
                },
            }
        ],
        "dynamic": {
            "enabled": True,
            "unit": "streams",
            "window": 16,  # one recompute's samples (8 a step)
            "recompute_every_n_steps": 2,
            **dynamic,
        },
    }


@shared_runs
def _runs(root: Path) -> Generator[list[Run], Outputs, dict[str, Any]]:
    docs = {
        "text_a": cycle_docs(200, "abcdefghijklmnopqrstuvwxyz ", seed=11),
        "text_b": cycle_docs(200, "0123456789+-*/=", seed=12),
        "noise": noise_docs(200, seed=13),
    }
    folders = {name: make_dataset(root, name, d) for name, d in docs.items()}
    held_out = {  # the held-out streams of Aioli and Skill-it: other documents, the same names
        "text_a": cycle_docs(16, "abcdefghijklmnopqrstuvwxyz ", seed=21),
        "text_b": cycle_docs(16, "0123456789+-*/=", seed=22),
        "noise": noise_docs(16, seed=23),
    }
    (root / "held").mkdir()
    for name, d in held_out.items():
        folders[f"held/{name}"] = make_dataset(root / "held", name, d)
    for name, folder in folders.items():
        if name.startswith("held/"):
            continue
        num = read_stream_info(str(folder)).num_samples
        write_metric_column(folder, "ref_loss", np.full(num, REFERENCE[name]))
    common = ("--save-interval", str(SAVE_INTERVAL), "--trace-samples")
    full, killed, configs = {}, {}, {}
    for arm, spec in ARMS.items():
        configs[arm] = write_ds_config(
            root / f"{arm}.json",
            _curriculum(folders, spec.dynamic),
            optimizer={"type": "AdamW", "params": {"lr": 3e-3}},
            zero_optimization={"stage": 2},
        )
        full[arm], killed[arm] = root / f"{arm}_full", root / f"{arm}_killed"
    dumps = ("--dump-state", "{dir}/dump", "--dump-history", "{dir}/ranks")

    def args(run_dir: Path, *extra: str) -> tuple[str, ...]:
        return (*common, *(a.format(dir=run_dir) for a in dumps), *extra)

    first = [Run(configs[a], full[a], args(full[a])) for a in ARMS]
    kills = [
        Run(configs[a], killed[a], args(killed[a], "--kill-after-step", str(KILL_AFTER)))
        for a, spec in ARMS.items()
        if spec.kill
    ]
    yield [*first, *kills]
    resumed = [Run(configs[a], killed[a], args(killed[a], "--resume", "auto")) for a in ARMS
               if ARMS[a].kill]  # fmt: skip
    if resumed:
        yield resumed
    return {"root": root, "folders": folders, "full": full, "killed": killed}


@pytest.fixture(scope="module")
def runs(shared_job):
    return shared_job(_runs)


def _rows(rows: list[dict[str, Any]], arm: str) -> list[dict[str, Any]]:
    keys = (*COMMON_KEYS, *ARMS[arm].keys)
    return [{k: r.get(k) for k in keys} for r in rows]


@pytest.mark.parametrize("arm", list(ARMS))
def test_every_recompute_is_bit_identical_on_both_ranks(runs, arm):
    run_dir = runs["full"][arm]
    rank0 = read_jsonl(run_dir / "ranks" / "rank0_history.jsonl")
    rank1 = read_jsonl(run_dir / "ranks" / "rank1_history.jsonl")
    assert len(rank0) >= ARMS[arm].min_rows
    assert rank1 == rank0  # JSON floats: repr round-trips, so equal rows are equal bits
    assert _rows(history(run_dir), arm) == _rows(rank0, arm)
    assert all(r["method"] == ARMS[arm].dynamic["method"] for r in rank0)
    state0 = torch.load(run_dir / "dump" / "rank0_dynamic.pt", weights_only=False)
    state1 = torch.load(run_dir / "dump" / "rank1_dynamic.pt", weights_only=False)
    _assert_same_state(state0, state1)
    np.testing.assert_array_equal(state0["probs"], rank0[-1]["weights"])


def _assert_same_state(a: Any, b: Any, path: str = "dynamic") -> None:
    """Equal saved states, arrays bit for bit."""
    if isinstance(a, dict):
        assert isinstance(b, dict), path
        assert sorted(a) == sorted(b), path
        for key in a:
            _assert_same_state(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple), path
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_state(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype, path
        assert a.tobytes() == b.tobytes(), path
    else:
        assert a == b, path


@pytest.mark.parametrize("arm", [a for a, spec in ARMS.items() if spec.kill])
def test_killed_and_resumed_run_has_the_uninterrupted_batches_weights_and_history(runs, arm):
    full, killed = runs["full"][arm], runs["killed"][arm]
    assert (killed / "checkpoints" / "latest").read_text() == "global_step" + str(
        metrics(full)[-1]["step"]
    )
    assert trace(killed) == trace(full)
    assert _rows(history(killed), arm) == _rows(history(full), arm)
    # every rank's rows (the killed half's, then the resumed half's from step 9 on, the step-10
    # recompute taken again): the uninterrupted run's
    for rank in (0, 1):
        rows = read_jsonl(killed / "ranks" / f"rank{rank}_history.jsonl")
        assert last_row_per_step(rows) == read_jsonl(full / "ranks" / f"rank{rank}_history.jsonl")
    _assert_same_state(
        torch.load(killed / "dump" / "rank0_dynamic.pt", weights_only=False),
        torch.load(full / "dump" / "rank0_dynamic.pt", weights_only=False),
    )
    assert [r["loss"] for r in metrics(killed)] == [r["loss"] for r in metrics(full)]


def test_doremi_weights_follow_the_excess_loss_and_average_into_its_output(runs):
    rows = history(runs["full"]["doremi"])
    names = rows[0]["streams"]
    assert names == list(NATURAL)
    weights = np.array([[0.35, 0.35, 0.30]] + [r["weights"] for r in rows])
    np.testing.assert_allclose(rows[-1]["average_weights"], weights.mean(axis=0), atol=1e-12)
    for r in rows:
        assert abs(sum(r["weights"]) - 1.0) <= 1e-12
        assert min(r["weights"]) >= 1e-4 / 3 * (1 - 1e-12)
    # the noise is at its reference (its entropy) once its characters are learned: least weight
    average = dict(zip(names, rows[-1]["average_weights"], strict=True))
    assert min(average, key=average.get) == "noise", average


def test_doremi_loss_mode_keeps_the_mix_and_weights_each_steps_loss(runs):
    run_dir = runs["full"]["doremi_loss"]
    rows = {r["step"]: r for r in history(run_dir)}
    assert all(r["apply"] == "loss" for r in rows.values())
    # the sampling mix stays the natural one: the token shares track it
    totals = {n: 0 for n in NATURAL}
    for row in metrics(run_dir):
        for name, stream in row["streams"].items():
            totals[name] += stream["tokens"]
    shares = {n: t / sum(totals.values()) for n, t in totals.items()}
    assert all(abs(shares[n] - NATURAL[n]) < 0.02 for n in NATURAL), shares
    # each step's loss is Σ w·ℓ / Σ w over its loss-bearing tokens, with the weights in force
    in_force = None
    checked = 0
    for row in metrics(run_dir):
        if in_force is not None:
            streams = row["streams"]
            valid = {n: s["tokens"] - s["samples"] for n, s in streams.items()}  # L - 1 each
            w = dict(zip(in_force["streams"], in_force["loss_weights"], strict=True))
            num = sum(w[n] * streams[n]["loss"] * valid[n] for n in streams)
            den = sum(w[n] * valid[n] for n in streams)
            assert row["loss"] == pytest.approx(num / den, rel=1e-5), row["step"]
            checked += 1
        in_force = rows.get(row["step"], in_force)
    assert checked >= 15
    lw = np.array(in_force["loss_weights"])
    w = np.array(in_force["weights"])
    np.testing.assert_allclose(lw, (w / [0.35, 0.35, 0.30]) / (w / [0.35, 0.35, 0.30]).sum())


def test_mix_prints_the_doremi_average_as_a_loader_validate_accepts(runs):
    run_dir = runs["full"]["doremi"]
    result = CliRunner().invoke(cli_main, ["mix", str(run_dir)])
    assert result.exit_code == 0, result.output
    loader = json.loads(result.output)
    assert loader["proportion_unit"] == "tokens"
    got = [s["proportion"] for s in loader["streams"]]
    average = history(run_dir)[-1]["average_weights"]
    assert max(abs(a - b) for a, b in zip(got, average, strict=True)) <= 1e-12
    phase = {"name": "main", "duration": TOKENS, "train_loader": loader}
    cfg = write_ds_config(
        runs["root"] / "mixed.json", {"max_duration": TOKENS, "schedule": [phase]}
    )
    checked = CliRunner().invoke(cli_main, ["validate", str(cfg)])
    assert checked.exit_code == 0, checked.output


def test_aioli_probes_lean_toward_each_stream_and_its_rounds_weight_the_text(runs):
    run_dir = runs["full"]["aioli"]
    rows = history(run_dir)
    assert [r["step"] for r in rows] == [13, 20]
    assert all(r["probe_steps"] == 6 for r in rows)
    steps = {row["step"]: row["streams"] for row in metrics(run_dir)}
    for start in (7, 14):  # each probe's 2 steps: most tokens from its stream (0.625 of them)
        leaned = []
        for probe in range(3):
            tokens = {n: 0 for n in NATURAL}
            for step in (start + 2 * probe + 1, start + 2 * probe + 2):
                for name, stream in steps[step].items():
                    tokens[name] += stream["tokens"]
            leaned.append(max(tokens, key=tokens.get))
            assert tokens[leaned[-1]] / sum(tokens.values()) > 0.5, (start, probe, tokens)
        assert sorted(leaned) == sorted(NATURAL)  # every stream probed once per round
    for r in rows:
        a = np.array(r["interaction"])
        np.testing.assert_allclose(r["scores"], a.sum(axis=0), rtol=0, atol=0)
        assert abs(sum(r["weights"]) - 1.0) <= 1e-12
    assert not (run_dir / "eval.jsonl").exists()  # its evaluations are its own


def test_skillit_updates_from_the_last_evaluations_of_the_held_out_streams(runs):
    run_dir = runs["full"]["skillit"]
    rows = history(run_dir)
    assert [r["step"] for r in rows] == list(range(2, 2 * len(rows) + 1, 2))
    assert [r["window_size"] for r in rows[:4]] == [1, 2, 3, 3]
    natural = np.array(list(NATURAL.values()))
    for i, r in enumerate(rows):
        window = [rows[j]["eval_losses"] for j in range(max(0, i - 2), i + 1)]
        summed = np.sum(window, axis=0)  # the identity graph
        np.testing.assert_allclose(r["scores"], summed, rtol=1e-15)
        w = natural * np.exp(0.5 * summed)
        np.testing.assert_allclose(r["weights"], w / w.sum(), rtol=1e-12)
    # over the natural mix, the weights rank the streams as their summed held-out losses
    last = rows[-1]
    ratio = np.array(last["weights"]) / natural
    assert np.argsort(ratio).tolist() == np.argsort(last["scores"]).tolist()
    assert not (run_dir / "eval.jsonl").exists()


def test_odm_rows_follow_the_references_rule(runs):
    from curriculum_ds.dynamic.odm import odm_update

    rows = history(runs["full"]["odm"])
    k = len(NATURAL)
    assert [r["t"] for r in rows] == list(range(3, 3 + len(rows)))  # warmup_steps 2, every step
    estimated, eps = np.zeros(k), 1 / k
    for r in rows:
        assert r["epsilon_t"] == min(1 / k, math.sqrt(math.log(k) / (k * r["t"])))
        rewards = np.array([np.nan if x is None else x for x in r["rewards"]])
        estimated, eps, probs = odm_update(estimated, eps, rewards, r["t"], smoothing=0.9)
        assert r["estimated_reward"] == estimated.tolist()
        assert r["weights"] == probs.tolist()


def test_ado_fits_on_rank_0_and_acts_after_its_warmup(runs):
    rows = history(runs["full"]["ado"])
    assert rows[0]["t"] == 6  # the first fit and policy step (0-based step 6 of the phase)
    assert [r["t"] for r in rows] == list(range(6, 6 + len(rows)))
    assert [r["refitted"] for r in rows] == [r["t"] % 3 == 0 for r in rows]
    for r in rows:
        assert all(0 <= f["alpha"] <= 0.8 + 1e-3 for f in r["fit"]), r["fit"]
        assert min(r["weights"]) > 0
        assert abs(sum(r["weights"]) - 1) <= 1e-12
