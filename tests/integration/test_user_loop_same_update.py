"""A user loop on the public API makes the reference loop's update.

One plain-SGD step (``lr = 1``, no momentum, ``gradient_clipping`` 0 so that no scale hides
behind a clip) with the same ds_config and data, 2 CPU gloo ranks, GAS 2, micro-batches of 2
ragged, right-padded samples, under ZeRO 0 and ZeRO 3:

* the reference loop, ``curriculum_ds.train`` (through
  ``tests/integration/faulty_train.py --max-steps 1 --dump-state``), and
* ``user_loop_one_step.py``: a loop written on ``curriculum_ds.initialize`` / ``for step in
  curriculum`` / ``step.backward`` / ``step.finish`` (and a variant that computes its own
  per-token cross-entropy for ``step.backward_token_losses``)

must start from the same parameters, draw the same global batch and change the parameters by the
same update ``params_after - params_before`` to 1e-6 relative (``||Δ_user - Δ_ref|| /
||Δ_ref||``).

The reference loop's two steps (ZeRO 0 and 3) are runs of the session's shared launched job
(``tests/shared_job.py``); the user loop's three steps (ZeRO 0, ZeRO 3, ZeRO 3 with its own
token losses) run one after the other in ONE launch of the script (``--also``), each on a new
model and a new ``initialize``.

From issue 10.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import REPO, make_dataset, metrics, ragged_docs, trace, write_ds_config
from shared_job import Outputs, Run, shared_runs

from curriculum_ds.commands.launch import build_command, launcher_env
from curriculum_ds.config import load_config
from curriculum_ds.train import build_model

SEED = 5
MAX_SEQ_LEN = 64
UPDATE_RTOL = 1e-6
USER_LOOP = Path(__file__).resolve().parent / "user_loop_one_step.py"
_SHM_RACE = re.compile(r"cannot open MDS dataset .*File exists: '/\d+_locals'")


def _flat(params: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([params[name].float().flatten() for name in sorted(params)])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative difference of two update vectors: ||a - b|| / ||b||."""
    return float((a - b).norm() / b.norm())


def _config(root: Path, data: Path, stage: int) -> Path:
    curriculum = {
        "max_duration": "1000000tok",
        "seed": SEED,
        "loss_weighting": "token",
        "schedule": [
            {
                "name": "only",
                "duration": "1000000tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": MAX_SEQ_LEN},
            }
        ],
    }
    return write_ds_config(
        root / f"ds_zero{stage}.json",
        curriculum,
        train_micro_batch_size_per_gpu=2,
        gradient_accumulation_steps=2,
        optimizer={"type": "SGD", "params": {"lr": 1.0}},  # no momentum: update = -gradient
        zero_optimization={"stage": stage},
        zero_allow_untested_optimizer=True,
        gradient_clipping=0.0,
    )


def _launch_user_loop(cfg: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``deepspeed --num_gpus 2 user_loop_one_step.py --deepspeed_config cfg --out out ...``."""
    cmd = build_command(cfg, num_gpus=2, train_args=["--out", str(out), *extra])
    at = cmd.index("--module")
    cmd[at : at + 2] = [str(USER_LOOP)]  # a script of the user's, not our module
    env = launcher_env(cuda=False)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    for _ in range(2):
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=600, cwd=cfg.parent
        )
        # streaming's shared-memory prefix race with concurrent jobs (see helpers.launch)
        if not _SHM_RACE.search(proc.stderr):
            break
    assert proc.returncode == 0, (
        f"user loop failed ({proc.returncode}): {' '.join(cmd)}\n"
        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
    )
    return proc


STAGES = (0, 3)
VARIANTS = ((0, "logits"), (3, "logits"), (3, "token-losses"))
"""The user loop's steps (ZeRO stage, loss), all in one launch."""


def _data(root: Path) -> Path:
    # 5..60 bytes + EOS in 64-token rows: micro-batches of 2 are right-padded
    return make_dataset(
        root, "ragged", ragged_docs(64, seed=3, min_len=5, max_len=60), max_seq_len=MAX_SEQ_LEN
    )


@shared_runs
def _reference_runs(root: Path) -> Generator[list[Run], Outputs, Path]:
    """The reference loop's one step under ZeRO 0 and 3 (the session's shared job)."""
    data = _data(root)
    runs = []
    for stage in STAGES:
        run_dir = root / f"reference_zero{stage}"
        args = ("--max-steps", "1", "--trace-samples", "--dump-state", str(run_dir / "state"))
        runs.append(Run(_config(root, data, stage), run_dir, args))
    yield runs
    return root


@pytest.fixture(scope="module")
def root(shared_job) -> Path:
    return shared_job(_reference_runs)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def reference(root) -> Callable[[int], dict[str, Any]]:
    """Per ZeRO stage, the reference loop's one step (read from the shared job's runs)."""
    cache: dict[int, dict[str, Any]] = {}

    def get(stage: int) -> dict[str, Any]:
        if stage not in cache:
            cfg = root / f"ds_zero{stage}.json"
            run_dir = root / f"reference_zero{stage}"
            run = load_config(cfg)
            torch.manual_seed(run.curriculum.seed)  # as curriculum_ds.train does
            init = _flat(
                {
                    n: p.detach()
                    for n, p in build_model(None, run.curriculum, MAX_SEQ_LEN).named_parameters()
                }
            )
            (row,) = metrics(run_dir)
            (samples,) = trace(run_dir)
            after = _flat(torch.load(run_dir / "state" / "params.pt"))
            cache[stage] = {
                "cfg": cfg,
                "init": init,
                "update": after - init,
                "row": row,
                "trace": samples,
            }
        return cache[stage]

    return get


@pytest.fixture(scope="module")
def user_loops(root) -> Path:
    """Every variant of the user loop, one launch: ``root/user_zero{stage}_{loss}``."""
    (stage, loss), *more = VARIANTS
    extra = []
    for more_stage, more_loss in more:
        cfg, out = root / f"ds_zero{more_stage}.json", _out(root, more_stage, more_loss)
        extra += ["--also", f"{cfg},{out},{more_loss}"]
    _launch_user_loop(
        root / f"ds_zero{stage}.json", _out(root, stage, loss), "--loss", loss, *extra
    )
    return root


def _out(root: Path, stage: int, loss: str) -> Path:
    return root / f"user_zero{stage}_{loss}"


def _check_same_update(
    reference: Callable[[int], dict[str, Any]], root: Path, stage: int, loss: str
) -> None:
    ref = reference(stage)
    out = _out(root, stage, loss)

    user_init = _flat(torch.load(out / "init.pt"))
    user_update = _flat(torch.load(out / "after.pt")) - user_init
    assert torch.equal(user_init, ref["init"]), "the two loops did not start from the same model"

    saved = json.loads((out / "record.json").read_text())
    record, user_trace = saved["record"], saved["trace"]
    assert user_trace == ref["trace"], "the two loops drew different global batches"
    assert record["valid_tokens"] == ref["row"]["valid_tokens"]
    assert record["skipped"] is False
    assert record["step_applied"] is True
    assert record["loss"] == pytest.approx(ref["row"]["loss"], rel=1e-6)

    # ragged samples: every rank's micro-batches hold padding, and GAS 2 x micro-batches of 2
    for rank in (0, 1):
        shapes = json.loads((out / f"rank{rank}.json").read_text())
        assert [s["shape"][0] for s in shapes] == [2, 2]
        assert sum(s["padded_positions"] for s in shapes) > 0

    assert float(ref["update"].norm()) > 1e-3  # a real step, far above fp32 noise
    rel = _rel(user_update, ref["update"])
    print(f"\nZeRO {stage}, user loop ({loss}) vs reference loop: update differs by {rel:.3g}")
    assert rel <= UPDATE_RTOL, f"ZeRO {stage} ({loss}): the user loop's update is off by {rel:.3g}"


@pytest.mark.distributed
@pytest.mark.parametrize("stage", [0, 3])
def test_user_loop_on_public_api_makes_the_reference_update(reference, user_loops, stage):
    _check_same_update(reference, user_loops, stage, "logits")


@pytest.mark.distributed
def test_user_token_losses_make_the_reference_update_under_zero3(reference, user_loops):
    """The same step with the user's own per-token cross-entropy (``backward_token_losses``)."""
    _check_same_update(reference, user_loops, 3, "token-losses")
