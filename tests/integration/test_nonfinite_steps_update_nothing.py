"""Non-finite steps update nothing, through real 2-rank DeepSpeed runs on CPU (gloo).

A NaN loss injected on ONE rank at step 3 (``faulty_train --nan-loss 1:3``, NaN logits in that
rank's first micro-batch): every rank skips the update, so the checkpoint of step 3 holds the
same weights and optimizer state as that of step 2 (every rank's files, bit for bit), DeepSpeed
counts the step in ``skipped_steps``, the metrics row says ``skipped``/``nonfinite_loss`` in
strict JSON, and the run goes on to the end, updating again from step 4. Under ZeRO 0 (where
DeepSpeed has no check of its own), 2 and 3 in fp32, and ZeRO 2 in bf16. With
``curriculum.max_consecutive_nonfinite`` steps in a row the run stops with one line, exit code 1,
and ``latest`` stays at the last checkpoint written before the limit.

The runs are in the session's shared launched job (``tests/shared_job.py``): each run a whole
``curriculum_ds.train.main`` with its own config and engine, the NaN injection put back after it.

From issue 13, item 3.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import fixed_docs, make_dataset, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.records.jsonl import read_jsonl

pytestmark = pytest.mark.distributed

STEP_TOKENS = 256  # global batch 8 (2 ranks x micro 2 x GAS 2) x 32 tokens


def _curriculum(data: Path, num_steps: int, **extra: Any) -> dict[str, Any]:
    duration = f"{num_steps * STEP_TOKENS}tok"
    return {
        "max_duration": duration,
        "seed": 3,
        "schedule": [
            {
                "name": "a",
                "duration": duration,
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 32},
            }
        ],
        **extra,
    }


def _data(root: Path) -> Path:
    return make_dataset(root, "d", fixed_docs(64, 32), max_seq_len=32)


def _strict_rows(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl parsed as strict JSON (a bare NaN or Infinity is an error)."""

    def refuse(constant: str) -> None:
        raise AssertionError(f"{path}: {constant} is not JSON")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def _state(obj: Any) -> Any:
    """Weights and optimizer state of a checkpoint file, without DeepSpeed's step counters."""
    if not isinstance(obj, dict):
        return obj
    counters = {"global_steps", "global_samples", "skipped_steps", "lr_scheduler", "curriculum"}
    counters |= {"ds_config", "ds_version", "client_state", "data_sampler", "random_ltd"}
    return {k: v for k, v in obj.items() if k not in counters}


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dict__") and not isinstance(a, type):  # e.g. DeepSpeed's loss scaler
        return type(a) is type(b) and _equal(vars(a), vars(b))
    return bool(a == b)


def _files(tag: Path) -> dict[str, Any]:
    return {f.name: torch.load(f, weights_only=False) for f in sorted(tag.glob("*.pt"))}


def _num_tensors(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return 1
    if isinstance(obj, dict):
        return sum(_num_tensors(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_num_tensors(v) for v in obj)
    return 0


SPLITS = [(0, False), (2, False), (3, False), (2, True)]  # (ZeRO stage, bf16)


@shared_runs
def _nan_runs(root: Path) -> Generator[list[Run], Outputs, dict[Any, Any]]:
    """Every run of this module, in the session's shared launched job: NaN on rank 1 at step 3
    under each of SPLITS (``{(stage, bf16): run dir}``), and, last, NaN on rank 0 at steps 2 and
    3 with ``max_consecutive_nonfinite`` 2 (``"consecutive"``: its run dir and output; it exits
    1)."""
    data = _data(root / "data")
    runs = []
    dirs: dict[Any, Any] = {}
    for stage, bf16 in SPLITS:
        name = f"zero{stage}_{'bf16' if bf16 else 'fp32'}"
        cfg = write_ds_config(
            root / f"{name}.json",
            _curriculum(data, 5),
            zero_optimization={"stage": stage},
            bf16={"enabled": bf16},
        )
        dirs[(stage, bf16)] = root / name
        runs.append(Run(cfg, root / name, ("--save-interval", "1", "--nan-loss", "1:3")))
    cur = _curriculum(data, 6, max_consecutive_nonfinite=2)
    cfg = write_ds_config(root / "consecutive.json", cur)
    consecutive = root / "consecutive"
    runs.append(Run(cfg, consecutive, ("--save-interval", "1", "--nan-loss", "0:2,3"), True))
    outputs = yield runs
    dirs["consecutive"] = (consecutive, outputs[consecutive])
    return dirs


@pytest.fixture(scope="module")
def nan_runs(shared_job: Any) -> dict[Any, Any]:
    return shared_job(_nan_runs)


@pytest.mark.parametrize(("stage", "bf16"), SPLITS, ids=str)
def test_nan_on_one_rank_updates_nothing_anywhere(
    nan_runs: dict[Any, Any], stage: int, bf16: bool
) -> None:
    run = nan_runs[(stage, bf16)]

    rows = _strict_rows(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    bad = rows[2]
    assert bad["skipped"] is True
    assert bad["skip_reason"] == "nonfinite_loss"
    assert bad["loss"] is None
    assert bad["token_loss"] is None
    assert bad["step_applied"] is False
    assert bad["samples"] == 24  # its samples are consumed: the data order goes on
    for row in rows[:2] + rows[3:]:
        assert row["skipped"] is False
        assert row["skip_reason"] is None
        assert row["step_applied"]
        assert 0 < row["loss"] < 10

    ckpts = run / "checkpoints"
    before, at, after = (_files(ckpts / f"global_step{k}") for k in (2, 3, 4))
    optim_files = [n for n in at if "optim_states" in n]
    assert len(optim_files) == (2 if stage else 0)  # ZeRO: one optimizer partition per rank
    for name in at:
        # weights (module, fp32 partitions) and optimizer moments: step 3 == step 2, every rank
        assert _num_tensors(_state(at[name])) > 0, name
        assert _equal(_state(at[name]), _state(before[name])), f"{name} changed at the NaN step"
    # and from step 4 on it trains again (the weights live in the optimizer files under ZeRO-3)
    assert not all(_equal(_state(after[n]), _state(at[n])) for n in at)
    model = next(n for n in at if n.endswith("model_states.pt"))
    assert at[model]["skipped_steps"] == 1
    assert after[model]["skipped_steps"] == 1
    assert at[model]["global_steps"] == 3  # DeepSpeed's counter moved with the step


def test_consecutive_nonfinite_steps_stop_the_run(nan_runs: dict[Any, Any]) -> None:
    run, proc = nan_runs["consecutive"]
    assert proc.returncode == 1, proc.output[-3000:]
    output = proc.output  # both ranks'
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if "curriculum_ds: error" in line]
    assert errors == [
        "curriculum_ds: error: steps 2-3: 2 optimizer steps in a row had a NaN/inf loss or "
        "gradient norm (curriculum.max_consecutive_nonfinite = 2); none updated the model, the "
        "run stops and the last checkpoint written stays `latest`"
    ]
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["skip_reason"] for r in rows] == [None, "nonfinite_loss", "nonfinite_loss"]
    ckpts = run / "checkpoints"
    # step 2's checkpoint (weights of step 1, the count below the limit) is the last written
    assert (ckpts / "latest").read_text() == "global_step2"
    assert not (ckpts / "global_step3").exists()
