"""Adaptive mixing over streams on real ranks: 2 CPU gloo ranks under the deepspeed launcher.

Two learnable text streams (cycles of letters and of digits from a random start: a few steps
learn their characters, a few dozen their order) and one stream of random printable characters
(noise: nothing to learn beyond its uniform character distribution) at a natural mix in tokens
(0.35 / 0.35 / 0.30), ``dynamic.unit: "streams"``:

* ``signal: "loss"`` chases the noise: it ends with the largest mean weight.
* ``signal: "excess_loss"``, against a reference made the way a user makes one (a short
  uniform-mix run, twice the runs' tokens, exported with ``--export-final``, then
  ``curriculum-ds score`` of the three train folders into column ``ref_loss``): the noise ends
  with the smallest mean weight, and its realised token share falls below its natural share.
  (The reference being ahead of the run on text is what makes text's excess loss the larger:
  once a run catches up with its reference everywhere, every excess is ~0 and the weights drift
  to uniform; the mean over the run is DoReMi's domain weights.)
* Every signal (loss, excess_loss, learnability): a run killed (SIGKILL) after step 10 and resumed
  with ``--resume auto`` from its step-8 checkpoint has the uninterrupted run's sample trace and
  weight history; both ranks hold the same weights and window.

The runs share 4 launched jobs (``helpers.launch_many``; each SIGKILL ends its job).

From issue 20 (acceptance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import history, launch_many, make_dataset, metrics, trace, write_ds_config
from mixing_docs import cycle_docs, noise_docs

from curriculum_ds.cli import main as cli_main
from curriculum_ds.data import read_stream_info

pytestmark = pytest.mark.distributed

NATURAL = {"text_a": 0.35, "text_b": 0.35, "noise": 0.30}
STEPS_TOKENS = "7000tok"  # ~22 steps of 8 samples
REFERENCE_TOKENS = "14000tok"  # the reference trains longer: it stays ahead of the runs on text
SAVE_INTERVAL = 4
KILL_AFTER = 10  # latest is then global_step8
SIGNALS = ("loss", "excess_loss", "learnability")


def _curriculum(
    folders: dict[str, Path],
    dynamic: dict[str, Any] | None,
    *,
    uniform: bool = False,
    tokens: str = STEPS_TOKENS,
) -> dict[str, Any]:
    streams = [
        {"local": str(folders[name]), "proportion": 1 / 3 if uniform else share}
        for name, share in NATURAL.items()
    ]
    cur: dict[str, Any] = {
        "max_duration": tokens,
        "seed": 5,
        "schedule": [
            {
                "name": "mix",
                "duration": tokens,
                "train_loader": {
                    "streams": streams,
                    "max_seq_len": 64,
                    "proportion_unit": "tokens",
                },
            }
        ],
    }
    if dynamic is not None:
        cur["dynamic"] = {
            "enabled": True,
            "unit": "streams",
            "window": 48,
            "recompute_every_n_steps": 3,
            "floor": 0.05,
            **dynamic,
        }
    return cur


DYNAMIC = {
    "loss": {"signal": "loss", "temperature": 0.5},
    "excess_loss": {"signal": "excess_loss", "reference_metric": "ref_loss", "temperature": 0.5},
    "learnability": {"signal": "learnability", "learnability_horizon": 2, "temperature": 0.05},
}


def _config(root: Path, name: str, curriculum: dict[str, Any]) -> Path:
    return write_ds_config(
        root / f"{name}.json",
        curriculum,
        optimizer={"type": "AdamW", "params": {"lr": 3e-3}},
        zero_optimization={"stage": 2},
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("streams_e2e")
    folders = {
        "text_a": make_dataset(
            root, "text_a", cycle_docs(200, "abcdefghijklmnopqrstuvwxyz ", seed=11)
        ),
        "text_b": make_dataset(root, "text_b", cycle_docs(200, "0123456789+-*/=", seed=12)),
        "noise": make_dataset(root, "noise", noise_docs(200, seed=13)),
    }
    reference = _curriculum(folders, None, uniform=True, tokens=REFERENCE_TOKENS)
    ref_cfg = _config(root, "reference", reference)
    configs = {s: _config(root, s, _curriculum(folders, DYNAMIC[s])) for s in SIGNALS}
    full = {s: root / f"{s}_full" for s in SIGNALS}
    killed = {s: root / f"{s}_killed" for s in SIGNALS}
    common = ("--save-interval", str(SAVE_INTERVAL), "--trace-samples")
    ref_dir, ref_model = root / "reference", root / "reference_model"

    def kill(s: str) -> tuple[Path, Path, tuple[str, ...]]:
        return (configs[s], killed[s], (*common, "--kill-after-step", str(KILL_AFTER)))

    def resume(s: str) -> tuple[Path, Path, tuple[str, ...]]:
        return (configs[s], killed[s], (*common, "--resume", "auto"))

    def whole(s: str) -> tuple[Path, Path, tuple[str, ...]]:
        return (configs[s], full[s], (*common, "--dump-state", str(full[s] / "dump")))

    outputs: dict[Path, Any] = {}
    # job 1: the reference (uniform mix, exported), the loss and learnability runs, a kill
    outputs |= launch_many(
        [
            (ref_cfg, ref_dir, ("--export-final", str(ref_model))),
            whole("loss"),
            whole("learnability"),
            kill("loss"),
        ],
        may_fail=frozenset({killed["loss"]}),
    )
    scored = CliRunner().invoke(
        cli_main,
        ["score", *(str(f) for f in folders.values()), "--model", str(ref_model),
         "--column", "ref_loss"],
    )  # fmt: skip
    assert scored.exit_code == 0, scored.output
    # job 2: the excess-loss run, the loss run resumed, a kill; job 3 and 4 the same
    outputs |= launch_many(
        [whole("excess_loss"), resume("loss"), kill("learnability")],
        may_fail=frozenset({killed["learnability"]}),
    )
    outputs |= launch_many(
        [resume("learnability"), kill("excess_loss")],
        may_fail=frozenset({killed["excess_loss"]}),
    )
    outputs |= launch_many([resume("excess_loss")])
    return {
        "root": root,
        "folders": folders,
        "full": full,
        "killed": killed,
        "outputs": outputs,
        "score_output": scored.output,
    }


def _mean_weights(run_dir: Path) -> dict[str, float]:
    rows = history(run_dir)
    assert rows, "no recompute"
    names = rows[0]["streams"]
    weights = np.array([r["weights"] for r in rows])
    return dict(zip(names, weights.mean(axis=0).tolist(), strict=True))


def _token_shares(run_dir: Path) -> dict[str, float]:
    totals: dict[str, int] = {}
    for row in metrics(run_dir):
        for name, stream in row["streams"].items():
            totals[name] = totals.get(name, 0) + stream["tokens"]
    return {name: tokens / sum(totals.values()) for name, tokens in totals.items()}


def test_loss_signal_gives_the_noise_the_largest_mean_weight(runs):
    mean = _mean_weights(runs["full"]["loss"])
    assert max(mean, key=mean.get) == "noise", mean
    rows = history(runs["full"]["loss"])
    assert all(r["unit"] == "streams" and r["signal"] == "loss" for r in rows)
    assert all(r["streams"] == list(NATURAL) for r in rows)
    for r in rows:
        assert abs(sum(r["weights"]) - 1.0) <= 1e-12
        assert min(r["weights"]) >= 0.05


def test_excess_loss_against_a_scored_reference_gives_the_noise_the_smallest_weight(runs):
    mean = _mean_weights(runs["full"]["excess_loss"])
    assert min(mean, key=mean.get) == "noise", mean
    shares = _token_shares(runs["full"]["excess_loss"])
    assert shares["noise"] < NATURAL["noise"], shares
    # the reference was scored onto every train folder: a finite loss per sample
    for folder in runs["folders"].values():
        column = read_stream_info(str(folder)).metrics["ref_loss"]
        assert np.isfinite(column).all()
    noise_ref = read_stream_info(str(runs["folders"]["noise"])).metrics["ref_loss"].mean()
    text_ref = read_stream_info(str(runs["folders"]["text_a"])).metrics["ref_loss"].mean()
    assert noise_ref > text_ref  # the reference learned the text, not the noise


def test_the_loss_signal_draws_more_noise_than_its_natural_share(runs):
    # the contrast: chasing raw loss draws more noise than its natural share
    assert _token_shares(runs["full"]["loss"])["noise"] > NATURAL["noise"]


@pytest.mark.parametrize("signal", SIGNALS)
def test_killed_and_resumed_run_has_the_uninterrupted_trace_and_history(runs, signal):
    full, killed = runs["full"][signal], runs["killed"][signal]
    assert (killed / "checkpoints" / "latest").read_text() == "global_step" + str(
        metrics(full)[-1]["step"]
    )
    assert trace(killed) == trace(full)
    keys = ("step", "unit", "signal", "streams", "weights", "scores", "stream_counts",
            "window_size", "mean_losses", "kept_previous")  # fmt: skip
    a = [{k: r.get(k) for k in keys} for r in history(full)]
    b = [{k: r.get(k) for k in keys} for r in history(killed)]
    assert b == a
    assert len(a) >= 6


@pytest.mark.parametrize("signal", SIGNALS)
def test_both_ranks_hold_the_same_weights_and_window(runs, signal):
    dump = runs["full"][signal] / "dump"
    rank0 = torch.load(dump / "rank0_dynamic.pt", weights_only=False)
    rank1 = torch.load(dump / "rank1_dynamic.pt", weights_only=False)
    assert rank0["unit"] == "streams"
    assert rank0["probs"].tobytes() == rank1["probs"].tobytes()
    assert rank0["window"]["values"].tobytes() == rank1["window"]["values"].tobytes()
    assert rank0["window"]["streams"].tobytes() == rank1["window"]["streams"].tobytes()
    assert np.allclose(rank0["probs"], history(runs["full"][signal])[-1]["weights"], rtol=0)
