"""The token-weighted loss measured through the real DeepSpeed engine (issue 5, items 3, 4, 6, 7).

Every run is a real ``curriculum_ds.train`` run on CPU gloo ranks under the deepspeed launcher,
doing ONE plain-SGD step (``lr = 1``, so the update is minus the gradient the optimizer saw) over
the same global batch of 8 ragged, right-padded samples. The oracle is a single-process full-batch
computation in this test process: the seeded initial model, the same 8 samples, torch's own
``cross_entropy(..., ignore_index=-100, reduction="mean")`` (the token mean), one backward.

DeepSpeed 0.19.8 clips gradients to norm 1.0 unless told otherwise; clipping would hide a wrong
scale factor (any multiple of the true gradient is clipped to the same update), so every config
here sets ``"gradient_clipping": 0.0``. (The divisor read from DeepSpeed's code is checked
in-process: tests/unit/test_grad_divisor_follows_deepspeed.py.)

The runs share two launched jobs (``helpers.launch_many``: one on 2 ranks, one on 1 rank), each
run a whole ``curriculum_ds.train.main`` with its own config, model and engine, one after the
other in the same rank processes: a launch costs 10-20 s of launcher and imports, a run ~1 s.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from helpers import RunOutput, launch_many, make_dataset, metrics, ragged_docs, write_ds_config

from curriculum_ds.config import load_config
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.loss import IGNORE_INDEX
from curriculum_ds.train import build_model

SEED = 5
GLOBAL_BATCH = 8
MAX_SEQ_LEN = 64
FP32_RTOL = 1e-5
SPLITS = [(2, 4, 1), (2, 1, 4), (1, 1, 8)]  # (ranks, gradient_accumulation_steps, micro_batch_size)
MEASURED: dict[str, float] = {}  # name -> relative difference, printed at the end (pytest -s)


# ------------------------------------------------------------------------------------ helpers
def _ds_config(
    root: Path,
    tag: str,
    data: Path,
    *,
    mode: str,
    ranks: int,
    gas: int,
    mb: int,
    stage: int,
    streams: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> Path:
    curriculum = {
        "max_duration": "1000000tok",
        "seed": SEED,
        # the order version 1 draws the ragged first batch whose sample and token means differ
        # by more than 0.1% (the oracle's check below); the normalisation is the same in both
        "order_version": 1,
        "loss_weighting": mode,
        "schedule": [
            {
                "name": "only",
                "duration": "1000000tok",
                "train_loader": {
                    "streams": streams or [{"local": str(data)}],
                    "max_seq_len": MAX_SEQ_LEN,
                },
            }
        ],
    }
    assert ranks * gas * mb == GLOBAL_BATCH
    return write_ds_config(
        root / f"{tag}.json",
        curriculum,
        train_micro_batch_size_per_gpu=mb,
        gradient_accumulation_steps=gas,
        optimizer={"type": "SGD", "params": {"lr": 1.0}},
        zero_optimization={"stage": stage},
        zero_allow_untested_optimizer=True,
        gradient_clipping=0.0,
        **extra,
    )


def _flat(params: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([params[name].float().flatten() for name in sorted(params)])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative difference of two update vectors: ||a - b|| / ||b||."""
    return float((a - b).norm() / b.norm())


class Oracle:
    """The single-process full-batch computation of the step every split must reproduce."""

    def __init__(self, cfg_path: Path):
        run = load_config(cfg_path)
        self.cfg = run.curriculum
        torch.manual_seed(self.cfg.seed)  # as the trainer does before building the model
        self.model = build_model(None, self.cfg, MAX_SEQ_LEN)
        self.init = _flat({n: p.detach() for n, p in self.model.named_parameters()})
        loader = PhaseLoader(
            self.cfg.schedule[0], 0, seed=self.cfg.seed, order_version=self.cfg.fresh_order_version
        )
        self.batch = loader.next_global_batch(GLOBAL_BATCH, None)
        self.loader = loader
        (full,) = loader.micro_batches(
            self.batch, dp_rank=0, dp_world_size=1, micro_batch_size=GLOBAL_BATCH
        )
        self.full = full
        self.valid_tokens = int((full.labels[:, 1:] != IGNORE_INDEX).sum())
        self.token_loss, self.token_update = self._update([self._token_mean(full)])

    def _logits_labels(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits
        return logits[:, :-1].reshape(-1, logits.size(-1)).float(), mb.labels[:, 1:].reshape(-1)

    def _token_mean(self, mb: Any) -> torch.Tensor:
        logits, labels = self._logits_labels(mb)
        return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="mean")

    def _update(self, losses: list[torch.Tensor]) -> tuple[float, torch.Tensor]:
        self.model.zero_grad()
        loss = torch.stack(losses).mean()
        loss.backward()
        grad = _flat({n: p.grad for n, p in self.model.named_parameters()})
        return float(loss.detach()), -grad  # SGD, lr 1

    def sample_mode(self, *, ranks: int, mb: int) -> tuple[float, torch.Tensor]:
        """DeepSpeed's usual weighting: mean over ranks and micro-batches of micro-batch means."""
        means = [
            self._token_mean(m)
            for r in range(ranks)
            for m in self.loader.micro_batches(
                self.batch, dp_rank=r, dp_world_size=ranks, micro_batch_size=mb
            )
        ]
        return self._update(means)


Case = tuple[
    Path, Path, tuple[str, ...]
]  # (ds_config, run_dir, extra args): one run of launch_many


def _case(root: Path, tag: str, data: Path, *, num_gpus: int, **cfg: Any) -> Case:
    """The config and arguments of one one-step run with --dump-state."""
    cfg_path = _ds_config(root, tag, data, ranks=num_gpus, **cfg)
    return _one_step(cfg_path, root / tag)


def _one_step(cfg_path: Path, run_dir: Path) -> Case:
    return (cfg_path, run_dir, ("--max-steps", "1", "--dump-state", str(run_dir / "state")))


def _result(case: Case, output: RunOutput) -> dict[str, Any]:
    """A run's metrics row, update vector and output."""
    cfg_path, run_dir, _ = case
    if output.returncode != 0:
        return {"returncode": output.returncode, "stderr": output.output, "cfg": cfg_path}
    params = torch.load(run_dir / "state" / "params.pt")
    (row,) = metrics(run_dir)
    return {"row": row, "params": _flat(params), "stderr": output.output, "cfg": cfg_path}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("token_loss_data")
    # 5..60 bytes + EOS in 64-token rows: every micro-batch of >1 sample is right-padded
    return make_dataset(
        root, "ragged", ragged_docs(64, seed=3, min_len=5, max_len=60), max_seq_len=MAX_SEQ_LEN
    )


@pytest.fixture(scope="module")
def oracle(data, tmp_path_factory) -> Oracle:
    root = tmp_path_factory.mktemp("oracle")
    return Oracle(_ds_config(root, "oracle", data, mode="token", ranks=1, gas=1, mb=8, stage=0))


LOSS_WEIGHTS = (0.25, 3.0)
"""Issue 22: two streams of the same documents, their tokens weighing 0.25 and 3 in the loss."""


def _weighted_streams(data: Path) -> list[dict[str, Any]]:
    return [
        {"local": str(data), "name": name, "proportion": p, "loss_weight": w}
        for name, p, w in (("light", 0.5, LOSS_WEIGHTS[0]), ("heavy", 0.5, LOSS_WEIGHTS[1]))
    ]


class WeightedOracle:
    """The single-process full-batch ``sum(w * loss) / sum(w)`` over the step's loss tokens."""

    def __init__(self, cfg_path: Path):
        cfg = load_config(cfg_path).curriculum
        torch.manual_seed(cfg.seed)
        model = build_model(None, cfg, MAX_SEQ_LEN)
        self.init = _flat({n: p.detach() for n, p in model.named_parameters()})
        loader = PhaseLoader(
            cfg.schedule[0], 0, seed=cfg.seed, order_version=cfg.fresh_order_version
        )
        batch = loader.next_global_batch(GLOBAL_BATCH, None)
        (full,) = loader.micro_batches(
            batch, dp_rank=0, dp_world_size=1, micro_batch_size=GLOBAL_BATCH
        )
        logits = model(input_ids=full.input_ids, attention_mask=full.attention_mask).logits
        labels = full.labels[:, 1:]
        token_losses = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)).float(),
            labels.reshape(-1),
            ignore_index=IGNORE_INDEX,
            reduction="none",
        ).view(labels.shape)
        mask = (labels != IGNORE_INDEX).double()
        weights = torch.tensor(LOSS_WEIGHTS, dtype=torch.float64)[torch.from_numpy(batch[:, 0])]
        per_token = weights[:, None] * mask
        loss = (token_losses.double() * per_token).sum() / per_token.sum()
        self.loss, self.update = self._update(model, loss)
        plain = (token_losses.double() * mask).sum() / mask.sum()
        self.token_loss, self.plain_update = self._update(model, plain)
        per_stream = (token_losses.double() * mask).detach()
        self.stream_losses = {
            name: float(per_stream[batch[:, 0] == s].sum() / mask[batch[:, 0] == s].sum())
            for s, name in enumerate(("light", "heavy"))
        }
        assert set(batch[:, 0].tolist()) == {0, 1}  # both streams in the step

    @staticmethod
    def _update(model: Any, loss: torch.Tensor) -> tuple[float, torch.Tensor]:
        model.zero_grad()
        loss.backward(retain_graph=True)
        return float(loss.detach()), -_flat({n: p.grad for n, p in model.named_parameters()})


CORNERS = {
    "zero3-predivide-equals-dp": (
        3,
        {
            "gradient_predivide_factor": 2.0,
            "zero_optimization": {"stage": 3, "reduce_scatter": False},
        },
    ),
    "zero2-allreduce-sum": (2, {"gradient_allreduce_op": "sum"}),
}
"""The corners where DeepSpeed's divisor is not dp_world_size: id -> (ZeRO stage, ds_config)."""


def _corner_case(root: Path, data: Path, name: str) -> Case:
    stage, corner = CORNERS[name]
    extra = dict(corner)
    zero = extra.pop("zero_optimization", {"stage": stage})
    cfg_path = _ds_config(
        root, f"corner_{name}", data, mode="token", ranks=2, gas=2, mb=2, stage=stage, **extra
    )
    raw = json.loads(cfg_path.read_text())
    raw["zero_optimization"] = zero
    cfg_path.write_text(json.dumps(raw))
    return _one_step(cfg_path, root / f"corner_{name}")


def _c03_cases(root: Path) -> dict[int, Case]:
    """C03: 1 rank, GAS 2 over a short and a long sample, and GAS 1 over both together."""
    # 11 tokens (10 loss-bearing) and 61 tokens (60 loss-bearing): micro-batch means would weigh
    # a token of the short sample 6x a token of the long one
    data = make_dataset(root, "c03", ["s" * 10, "L" * 60], max_seq_len=MAX_SEQ_LEN)
    cases = {}
    for gas, mb in ((2, 1), (1, 2)):
        curriculum = {
            "max_duration": "1000000tok",
            "seed": SEED,
            "schedule": [
                {
                    "name": "only",
                    "duration": "1000000tok",
                    "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": MAX_SEQ_LEN},
                }
            ],
        }
        cfg = write_ds_config(
            root / f"c03_{gas}.json",
            curriculum,
            train_micro_batch_size_per_gpu=mb,
            gradient_accumulation_steps=gas,
            gradient_clipping=0.0,
            optimizer={"type": "SGD", "params": {"lr": 1.0}},
        )
        cases[gas] = _one_step(cfg, root / f"c03_{gas}")
    return cases


@pytest.fixture(scope="module")
def engine_runs(data, tmp_path_factory) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Every one-step run of this module, in two launched jobs (launch_many): one on 2 ranks, one
    on 1 rank. Keys: ``("token", stage, ranks, gas, mb)`` (every ZeRO stage x every split),
    ``("sample", 0, 2, 4, 1)``, ``("bf16", 2, ranks, gas, mb)`` (the 2-rank splits),
    ``("corner", id)`` (CORNERS) and ``("c03", gas)``."""
    root = tmp_path_factory.mktemp("engine_runs")
    cases: dict[tuple[Any, ...], Case] = {}
    for stage in (0, 1, 2, 3):
        for ranks, gas, mb in SPLITS:
            cases[("token", stage, ranks, gas, mb)] = _case(
                root,
                f"token_z{stage}_{ranks}x{gas}x{mb}",
                data,
                num_gpus=ranks,
                mode="token",
                gas=gas,
                mb=mb,
                stage=stage,
            )
    cases[("sample", 0, 2, 4, 1)] = _case(
        root, "sample_z0_2x4x1", data, num_gpus=2, mode="sample", gas=4, mb=1, stage=0
    )
    for ranks, gas, mb in SPLITS[:2]:
        cases[("bf16", 2, ranks, gas, mb)] = _case(
            root,
            f"bf16_z2_{ranks}x{gas}x{mb}",
            data,
            num_gpus=ranks,
            mode="token",
            gas=gas,
            mb=mb,
            stage=2,
            bf16={"enabled": True},
        )
    for name in CORNERS:
        cases[("corner", name)] = _corner_case(root, data, name)
    for stage in (0, 2):  # issue 22: per-stream loss weights, 2 ranks x GAS 2
        cases[("weighted", stage)] = _case(
            root,
            f"weighted_z{stage}",
            data,
            num_gpus=2,
            mode="token",
            gas=2,
            mb=2,
            stage=stage,
            streams=_weighted_streams(data),
        )
    for gas, case in _c03_cases(root).items():
        cases[("c03", gas)] = case
    # last on 2 ranks: DeepSpeed's CPU accelerator may refuse fp16 (see test_fp16_dynamic_...)
    cases[("fp16", 2, 2, 4, 1)] = _case(
        root,
        "fp16",
        data,
        num_gpus=2,
        mode="token",
        gas=4,
        mb=1,
        stage=2,
        fp16={"enabled": True, "loss_scale": 0, "initial_scale_power": 8},
    )
    one_rank = {k for k in cases if k[0] == "c03" or (k[0] == "token" and len(k) > 2 and k[2] == 1)}
    outputs: dict[Path, RunOutput] = {}
    for num_gpus, keys in ((2, [k for k in cases if k not in one_rank]), (1, sorted(one_rank))):
        outputs |= launch_many(
            [cases[k] for k in keys], num_gpus=num_gpus, may_fail=frozenset({root / "fp16"})
        )
    return {key: _result(case, outputs[case[1]]) for key, case in cases.items()}


@pytest.fixture(scope="module")
def fp32_runs(engine_runs) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Token mode: every ZeRO stage x every split (12 runs); sample mode: 1 run."""
    return {k: run for k, run in engine_runs.items() if k[0] in ("token", "sample")}


def _report() -> None:
    print("\nmeasured relative differences:\n" + json.dumps(MEASURED, indent=1))


# ------------------------------------------------------------------------------ the tests
def test_oracle_batch_is_ragged_and_padded(oracle):
    lengths = oracle.full.attention_mask.sum(dim=1)
    assert len(set(lengths.tolist())) > 3  # ragged
    assert int(lengths.min()) < oracle.full.input_ids.size(1)  # padding in the full micro-batch
    assert oracle.valid_tokens == int((lengths - 1).sum())


@pytest.mark.distributed
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_token_weighted_update_is_exact_for_every_split(stage, fp32_runs, oracle):
    """(2 ranks, GAS 4, mb 1), (2, 1, 4) and (1, 1, 8) give the same SGD step.

    From issue 5, item 3.
    """
    updates = {}
    for ranks, gas, mb in SPLITS:
        run = fp32_runs[("token", stage, ranks, gas, mb)]
        updates[(ranks, gas, mb)] = run["params"] - oracle.init
        rel = _rel(updates[(ranks, gas, mb)], oracle.token_update)
        MEASURED[f"zero{stage} {ranks}x{gas}x{mb} vs oracle"] = rel
        assert rel <= FP32_RTOL, f"ZeRO {stage}, split {ranks}x{gas}x{mb}: update off by {rel:.3g}"
        row = run["row"]
        assert row["skipped"] is False
        assert row["valid_tokens"] == oracle.valid_tokens
        assert row["loss"] == pytest.approx(oracle.token_loss, rel=1e-6)
    reference = updates[(1, 1, 8)]
    for split in SPLITS[:2]:
        rel = _rel(updates[split], reference)
        MEASURED[f"zero{stage} {'x'.join(map(str, split))} vs 1x1x8"] = rel
        assert rel <= FP32_RTOL
    losses = [fp32_runs[("token", stage, *s)]["row"]["loss"] for s in SPLITS]
    assert max(losses) - min(losses) <= 1e-6 * losses[0]
    _report()


@pytest.mark.distributed
def test_logged_loss_is_the_true_token_mean_over_all_ranks(fp32_runs, oracle):
    """Metrics.jsonl's loss is the full batch's token mean, on every split/stage.

    From issue 5, item 4.
    """
    for key, run in fp32_runs.items():
        if key[0] != "token":
            continue
        row = run["row"]
        assert row["loss"] == pytest.approx(oracle.token_loss, rel=1e-6), key
        assert row["token_loss"] == row["loss"]
    # and it is not what the other weightings would give on this ragged batch
    sample_loss, _ = oracle.sample_mode(ranks=2, mb=1)
    assert abs(sample_loss - oracle.token_loss) > 1e-3 * oracle.token_loss


@pytest.mark.distributed
def test_sample_mode_shows_the_difference_it_should(fp32_runs, oracle):
    """`"sample"`: mean of micro-batch means: exact to its own oracle, not the token mean."""
    run = fp32_runs[("sample", 0, 2, 4, 1)]
    update = run["params"] - oracle.init
    sample_loss, sample_update = oracle.sample_mode(ranks=2, mb=1)
    rel_token = _rel(update, oracle.token_update)
    rel_sample = _rel(update, sample_update)
    MEASURED["sample-mode zero0 2x4x1 vs token oracle"] = rel_token
    MEASURED["sample-mode zero0 2x4x1 vs sample oracle"] = rel_sample
    assert rel_sample <= FP32_RTOL
    assert rel_token > 1e-2  # a thousand times the token mode's tolerance
    assert run["row"]["loss"] == pytest.approx(sample_loss, rel=1e-6)
    assert run["row"]["token_loss"] == pytest.approx(oracle.token_loss, rel=1e-6)
    _report()


@pytest.mark.distributed
@pytest.mark.parametrize("stage", [0, 2])
def test_loss_weights_give_the_weighted_objectives_gradient(stage, engine_runs, data, tmp_path):
    """``loss_weight`` per stream: the update is the oracle's ``sum(w * loss) / sum(w)`` to 1e-6.

    2 ranks, GAS 2, ZeRO 0 and 2; ``loss`` is the weighted objective, ``token_loss`` and the
    per-stream losses stay unweighted. From issue 22, item 3.
    """
    oracle = WeightedOracle(
        _ds_config(
            tmp_path,
            "oracle",
            data,
            mode="token",
            ranks=1,
            gas=1,
            mb=8,
            stage=0,
            streams=_weighted_streams(data),
        )
    )
    run = engine_runs[("weighted", stage)]
    assert "row" in run, run.get("stderr")
    rel = _rel(run["params"] - oracle.init, oracle.update)
    MEASURED[f"loss weights zero{stage} 2x2x2 vs oracle"] = rel
    assert rel <= 1e-6
    row = run["row"]
    assert row["loss"] == pytest.approx(oracle.loss, rel=1e-6)
    assert row["token_loss"] == pytest.approx(oracle.token_loss, rel=1e-6)
    assert _rel(oracle.update, oracle.plain_update) > 1e-2  # the weights change the gradient
    for name, loss in oracle.stream_losses.items():
        assert row["streams"][name]["loss"] == pytest.approx(loss, rel=1e-6)
    _report()


# ----------------------------------------------------------------------- mixed precision
# bf16 (DeepSpeed keeps fp32 master weights; the model's copy, which --dump-state writes, is bf16):
# the forward runs in bf16, whose 8-bit mantissa gives relative errors of 2^-8 ≈ 4e-3 per rounding;
# splits differ in padding and matmul shapes, so logits and gradients differ by a few bf16 ulps, and
# the written parameters are the master rounded to bf16 (ulp 2^-8 relative to the parameter, which
# for GPT-2's 0.02-scale init is ~1e-4 absolute, against updates of ~1e-2). A wrong normalisation is
# a factor of 2 to 8 here (GAS 4, 2 ranks, token counts per micro-batch from 5 to 60), i.e. a
# relative difference >= 0.5: BF16_RTOL sits far below that and far above the bf16 noise.
BF16_RTOL = 3e-2


@pytest.fixture(scope="module")
def bf16_runs(engine_runs) -> dict[tuple[int, int, int], dict[str, Any]]:
    """bf16 under ZeRO 2, the two 2-rank splits."""
    return {k[2:]: run for k, run in engine_runs.items() if k[0] == "bf16"}


@pytest.mark.distributed
def test_bf16_normalisation_is_still_exact(bf16_runs, oracle):
    updates = {split: run["params"] - oracle.init for split, run in bf16_runs.items()}
    between = _rel(updates[(2, 4, 1)], updates[(2, 1, 4)])
    MEASURED["bf16 zero2 2x4x1 vs 2x1x4"] = between
    assert between <= BF16_RTOL
    for split, update in updates.items():
        rel = _rel(update, oracle.token_update)
        MEASURED[f"bf16 zero2 {'x'.join(map(str, split))} vs fp32 oracle"] = rel
        assert rel <= BF16_RTOL
        row = bf16_runs[split]["row"]
        assert math.isfinite(row["loss"])
        assert row["loss"] == pytest.approx(oracle.token_loss, rel=1e-2)
    _report()


FP16_REFUSAL = "Type fp16 is not supported on your device."


@pytest.mark.distributed
def test_fp16_dynamic_loss_scaler(engine_runs, oracle):
    """fp16 with DeepSpeed's dynamic loss scaler (``loss_scale: 0``).

    Where the accelerator does fp16 (a GPU; a CPU with oneDNN fp16), the update matches the oracle
    as closely as bf16 does: the scaler multiplies our loss by S and unscales the gradients by 1/S,
    on top of the normalisation. DeepSpeed's CPU accelerator refuses fp16 when oneDNN has no fp16
    (``torch.ops.mkldnn._is_mkldnn_fp16_supported()`` false): then the refusal must be DeepSpeed's
    own sanity check, not an error of ours.
    """
    run = engine_runs[("fp16", 2, 2, 4, 1)]
    if run.get("returncode", 0) != 0:
        import deepspeed.accelerator as acc

        stderr = run["stderr"]
        assert not acc.get_accelerator().is_fp16_supported()
        assert f"ValueError: {FP16_REFUSAL}" in stderr
        assert "deepspeed/runtime/engine.py" in stderr
        assert "_do_sanity_check" in stderr
        assert "curriculum_ds: error" not in stderr
        pytest.skip(
            f"DeepSpeed's CPU accelerator refuses fp16 ({FP16_REFUSAL!r}); checked on GPU only"
        )
    row = run["row"]
    update = run["params"] - oracle.init
    rel = _rel(update, oracle.token_update)
    MEASURED["fp16 zero2 2x4x1 vs fp32 oracle"] = rel
    # a first step may be skipped by the scaler on overflow; with 2^8 it should not be
    assert row["skipped"] is False
    assert rel <= BF16_RTOL


@pytest.mark.distributed
@pytest.mark.parametrize("corner", list(CORNERS))
def test_config_corners_where_deepspeed_divides_differently(corner, engine_runs, oracle):
    """The corners where DeepSpeed's divisor is not dp_world_size still give the token-mean step."""
    stage, extra = CORNERS[corner]
    update = engine_runs[("corner", corner)]["params"] - oracle.init
    rel = _rel(update, oracle.token_update)
    extra = {k: v for k, v in extra.items() if k != "zero_optimization"}
    MEASURED[f"corner zero{stage} {sorted(extra)} vs oracle"] = rel
    assert rel <= FP32_RTOL
    _report()


# ------------------------------------------------------------------ C03 through the engine
@pytest.mark.distributed
def test_short_and_long_sample_gas2_equals_gas1_through_the_engine(engine_runs):
    """C03 on the real engine: 1 rank, GAS 2, a short and a long sample == GAS 1, both together."""
    cfg = engine_runs[("c03", 2)]["cfg"]
    runs = {
        gas: (engine_runs[("c03", gas)]["row"], engine_runs[("c03", gas)]["params"])
        for gas in (2, 1)
    }
    torch.manual_seed(SEED)
    init = _flat(
        {
            n: p.detach()
            for n, p in build_model(
                None, load_config(cfg).curriculum, MAX_SEQ_LEN
            ).named_parameters()
        }
    )
    (row2, p2), (row1, p1) = runs[2], runs[1]
    assert row2["valid_tokens"] == row1["valid_tokens"] == 70
    assert row2["loss"] == pytest.approx(row1["loss"], rel=1e-6)
    rel = _rel(p2 - init, p1 - init)
    MEASURED["C03 engine GAS2 vs GAS1"] = rel
    assert rel <= FP32_RTOL
    _report()
