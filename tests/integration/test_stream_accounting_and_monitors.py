"""Per-stream accounting and DeepSpeed's monitors.

One run of the reference loop on 2 CPU gloo ranks under the deepspeed launcher: a one-stream
phase, then a 2-stream phase (``web`` 0.9, ``code`` 0.1, so some steps hold no ``code``
sample), dynamic re-weighting on (2 buckets, a recompute every 2 steps), ``--trace-samples``,
and the ds_config's ``tensorboard``, ``csv_monitor`` and ``wandb`` (offline, under the test's tmp
folder) enabled.

* Every metrics row's ``streams`` covers the phase's streams; their tokens add up to
  ``step_tokens`` and their samples to the global batch; a stream without a sample in the step
  has samples 0, tokens 0, loss None.
* Each stream's loss equals a recomputation from the sample trace, the per-sample losses the
  step gathered (``Step.sample_losses``, dumped by the tests' wrapper of the loop) and each
  sample's loss-bearing tokens (its tokens, truncated to ``max_seq_len``, minus one), to 1e-6.
* TensorBoard event files, the CSV files and the offline W&B run hold the ``curriculum/...``
  tags with the values of ``metrics.jsonl`` and ``curriculum_history.jsonl``.

From issue 11, items 1 and 3.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import history, launch, make_dataset, metrics, ragged_docs, trace, write_ds_config
from monitor_readers import assert_monitors_hold

from curriculum_ds.data import read_stream_info

pytestmark = pytest.mark.distributed

MAX_SEQ_LEN = 64
GLOBAL_BATCH = 8  # micro-batch 2 x GAS 2 x 2 ranks


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("streams")
    web = make_dataset(root, "web", ragged_docs(200, seed=3, min_len=8, max_len=40))
    code = make_dataset(
        root, "code", ragged_docs(100, seed=4, min_len=40, max_len=120), max_seq_len=128
    )
    curriculum = {
        "max_duration": "2600tok",
        "seed": 11,
        "schedule": [
            {
                "name": "warm",
                "duration": "600tok",
                "train_loader": {"streams": [{"local": str(web)}], "max_seq_len": MAX_SEQ_LEN},
            },
            {
                "name": "mix",
                "duration": "2000tok",
                "train_loader": {
                    "streams": [
                        {"local": str(web), "proportion": 0.9},
                        {"local": str(code), "proportion": 0.1},
                    ],
                    "max_seq_len": MAX_SEQ_LEN,
                },
            },
        ],
        "dynamic": {
            "enabled": True,
            "num_buckets": 2,
            "window": 64,
            "recompute_every_n_steps": 2,
        },
        # held-out evaluation: its losses go to the monitors too (curriculum/eval/...)
        "eval": {
            "streams": [{"local": str(code), "name": "code_val"}],
            "interval": "1000tok",
            "max_samples": 6,
        },
    }
    monitors = {
        "tensorboard": {"enabled": True, "output_path": str(root / "tb"), "job_name": "run"},
        "csv_monitor": {"enabled": True, "output_path": str(root / "csv"), "job_name": "run"},
        "wandb": {"enabled": True, "project": "curriculum-test"},
    }
    cfg = write_ds_config(root / "ds.json", curriculum, **monitors)
    run_dir = root / "run"
    losses = root / "sample_losses.jsonl"
    with pytest.MonkeyPatch.context() as mp:  # the launcher passes its environment to the ranks
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_DIR", str(root / "wandb"))
        mp.setenv("WANDB_SILENT", "true")
        launch(cfg, run_dir, "--trace-samples", "--dump-sample-losses", str(losses))
    return {
        "root": root,
        "run_dir": run_dir,
        "streams": {"web": web, "code": code},
        "losses": {
            r["step"]: r["losses"] for r in map(json.loads, losses.read_text().splitlines())
        },
    }


def test_stream_tokens_and_samples_add_up_on_every_row(run):
    rows = metrics(run["run_dir"])
    assert {r["phase_name"] for r in rows} == {"warm", "mix"}
    for r in rows:
        expected = ["web"] if r["phase_name"] == "warm" else ["web", "code"]
        assert list(r["streams"]) == expected, r
        assert sum(s["tokens"] for s in r["streams"].values()) == r["step_tokens"], r
        assert sum(s["samples"] for s in r["streams"].values()) == GLOBAL_BATCH, r
        if r["phase_name"] == "warm":  # one stream: its loss is the step's token loss, exactly
            assert r["streams"]["web"]["loss"] == r["token_loss"], r
    empty = [
        r["streams"]["code"]
        for r in rows
        if r["phase_name"] == "mix" and not r["streams"]["code"]["samples"]
    ]
    assert empty, "no step of the mix phase went without a code sample"
    assert all(s == {"samples": 0, "tokens": 0, "loss": None} for s in empty)


def test_stream_losses_match_the_trace_and_the_per_sample_losses(run):
    num_tokens = {
        name: np.minimum(read_stream_info(path).metrics["num_tokens"], MAX_SEQ_LEN)
        for name, path in run["streams"].items()
    }
    rows = {r["step"]: r for r in metrics(run["run_dir"])}
    traces = trace(run["run_dir"])
    assert [t["step"] for t in traces] == sorted(rows) == sorted(run["losses"])
    checked = 0
    for t in traces:
        row, losses = rows[t["step"]], run["losses"][t["step"]]
        sums: dict[str, float] = {}
        valid: dict[str, int] = {}
        tokens: dict[str, int] = {}
        for (name, index), loss in zip(t["samples"], losses, strict=True):
            n_tokens = int(num_tokens[name][index])
            tokens[name] = tokens.get(name, 0) + n_tokens
            n_valid = n_tokens - 1  # position t predicts token t+1
            if n_valid > 0:
                sums[name] = sums.get(name, 0.0) + loss * n_valid
                valid[name] = valid.get(name, 0) + n_valid
        for name, stream in row["streams"].items():
            assert stream["tokens"] == tokens.get(name, 0), (t["step"], name)
            if name not in valid:
                assert stream["loss"] is None
                continue
            assert stream["loss"] == pytest.approx(sums[name] / valid[name], rel=1e-6, abs=1e-6)
            checked += 1
        # and the streams' token-weighted losses make up the step's loss
        total = sum(s["loss"] * valid[n] for n, s in row["streams"].items() if n in valid)
        assert total / row["valid_tokens"] == pytest.approx(row["token_loss"], rel=1e-6)
    assert checked > len(traces)  # the mix phase's steps checked both streams


def _expected_series(run):
    rows = metrics(run["run_dir"])
    expected: dict[str, dict[int, float]] = {}

    def put(tag, step, value):
        if value is not None:
            expected.setdefault(f"curriculum/{tag}", {})[step] = float(value)

    for r in rows:
        for field in ("loss", "lr", "tokens", "phase"):
            put(field, r["step"], r[field])
        for name, s in r["streams"].items():
            put(f"streams/{name}/loss", r["step"], s["loss"])
            put(f"streams/{name}/tokens", r["step"], s["tokens"])
    for h in history(run["run_dir"]):
        for i, p in enumerate(h["weights"]):
            put(f"bucket_probs/{i}", h["step"], p)
    for e in map(json.loads, (run["run_dir"] / "eval.jsonl").read_text().splitlines()):
        put("eval/loss", e["step"], e["loss"])
        for name, s in e["streams"].items():
            put(f"eval/{name}/loss", e["step"], s["loss"])
    return expected


def test_tensorboard_csv_and_offline_wandb_hold_the_metrics_values(run):
    expected = _expected_series(run)
    assert len(expected["curriculum/loss"]) == len(metrics(run["run_dir"]))
    assert "curriculum/bucket_probs/1" in expected
    assert "curriculum/streams/code/loss" in expected
    assert len(expected["curriculum/eval/code_val/loss"]) >= 3  # 2 intervals + the phase ends
    tb = assert_monitors_hold(
        expected,
        tensorboard=run["root"] / "tb" / "run",
        csv_dir=run["root"] / "csv" / "run",
        wandb_dir=run["root"] / "wandb",
    )
    # only DeepSpeed's own tags besides ours: nothing of the curriculum is written twice
    assert {t for t in tb if not t.startswith("curriculum/")} <= {"Train/Samples/lr"}
