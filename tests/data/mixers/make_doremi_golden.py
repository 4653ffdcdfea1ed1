"""Golden vectors of DoReMi's weight update, made by the reference's own code outside the project.

Reference: ``sangmichaelxie/doremi``, ``doremi/trainer.py`` at commit
7cde52d1848737aa967ecbdb9e643cf334de160d: ``DoReMiTrainer.update_domain_weights`` (the
``doremiv1`` step) and ``write_weights`` (the running average), with the buffers
``doremi/train.py`` registers (``avg_domain_weights`` starts as the initial weights,
``update_counter`` at 1, ``perdomain_scores`` at ``ln V``).

This script does not import curriculum_ds. It reads the two methods' source from a checkout of
the reference (``--trainer path/to/doremi/trainer.py``), compiles them as they are, and calls
them on a stand-in ``self`` (``model`` buffers, ``args.reweight_eta/reweight_eps``, a ``wandb``
that records nothing): ``doremi/trainer.py`` itself imports transformers 4.x internals and
flash-attention, which do not install here, so the module is not imported whole.

Two runs of the same inputs:

* ``float64``: the reference's code with its two ``.float()`` casts (float32 buffers) made
  ``.double()`` by an AST rewrite and float64 buffers: the same arithmetic in float64, what our
  float64 implementation is compared with at 1e-9;
* ``float32``: the code verbatim, float32 buffers as the reference keeps them (for the record:
  our float64 weights stay within float32 rounding of these).

Inputs (seeded, numpy PCG64): for K in (2, 5, 17), sequences of updates with their own η, ε,
initial weights (Dirichlet) and initial score ``ln V``. Each update is one step of B samples
``(stream, sample_idx)`` drawn from a random subset of the streams (some streams are absent
from some updates), a per-sample mean token loss, and each stream's reference-loss column.
Each sample is handed to the reference as one "token" (scores = loss − reference loss, mask
true): our per-sample clipping is the reference's per-token rule applied to per-sample losses.

Run: ``python make_doremi_golden.py --trainer /path/to/doremi/trainer.py`` (torch, numpy;
written with torch 2.15.0 and numpy 2.1.3) → ``doremi_golden.npz`` beside this script.
"""

from __future__ import annotations

import argparse
import ast
import types
from pathlib import Path

import numpy as np
import torch

REFERENCE_COMMIT = "7cde52d1848737aa967ecbdb9e643cf334de160d"
METHODS = ("update_domain_weights", "write_weights", "read_weights")
# (K, number of sequences, updates per sequence, samples per update B, samples per stream N)
PLAN = ((2, 3, 150, 8, 40), (5, 3, 150, 16, 60), (17, 1, 300, 24, 50))
# (η, ε) of each sequence, in order: the defaults, a larger step and smoothing, no smoothing
SETTINGS = (
    (1.0, 1e-4), (2.0, 0.05), (0.1, 0.0), (1.0, 0.05), (0.1, 1e-4), (2.0, 1e-4), (1.0, 1e-4),
)  # fmt: skip


class _ToDouble(ast.NodeTransformer):
    """``x.float()`` → ``x.double()``: the reference's float32 casts, made float64."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "float" and not node.args:
            f.attr = "double"
        return node


def reference_methods(trainer: Path, *, float64: bool) -> dict[str, types.FunctionType]:
    """The reference's own methods, compiled from its source (float64: casts made double)."""
    tree = ast.parse(trainer.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DoReMiTrainer")
    funcs = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in METHODS]
    assert {f.name for f in funcs} == set(METHODS)
    module = ast.Module(body=funcs, type_ignores=[])
    if float64:
        module = _ToDouble().visit(module)
    ast.fix_missing_locations(module)
    wandb = types.SimpleNamespace(log=lambda *a, **k: None)
    namespace: dict = {"torch": torch, "wandb": wandb}
    exec(compile(module, str(trainer), "exec"), namespace)
    return {name: namespace[name] for name in METHODS}


class _Self:
    """The stand-in ``self`` the reference's methods read: ``model`` buffers and ``args``."""

    def __init__(self, methods, w0, score0, eta, eps, dtype):
        k = len(w0)
        self.model = types.SimpleNamespace(
            train_domain_weights=torch.tensor(w0, dtype=dtype),
            avg_domain_weights=torch.tensor(w0, dtype=dtype),
            perdomain_scores=torch.full((k,), score0, dtype=dtype),
            update_counter=torch.tensor(1),
        )
        self.args = types.SimpleNamespace(
            reweight_eta=eta, reweight_eps=eps, doremi_optimizer="doremiv1"
        )
        self.domain_list = [f"s{i}" for i in range(k)]
        self._methods = methods

    def __getattr__(self, name):
        return types.MethodType(self._methods[name], self)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", type=Path, required=True, help="the reference's trainer.py")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("doremi_golden.npz"))
    args = parser.parse_args()
    ref64 = reference_methods(args.trainer, float64=True)
    ref32 = reference_methods(args.trainer, float64=False)
    rng = np.random.Generator(np.random.PCG64(20261203))
    out: dict[str, np.ndarray] = {}
    seq = 0
    for k, num_seq, num_updates, b, n in PLAN:
        for _j in range(num_seq):
            eta, eps = SETTINGS[seq]
            w0 = rng.dirichlet(np.ones(k))
            score0 = float(np.log(rng.integers(50, 70000)))
            ref = rng.uniform(0.5, 6.0, size=(k, n)).astype(np.float32).astype(np.float64)
            streams = np.empty((num_updates, b), dtype=np.int64)
            for t in range(num_updates):  # a random subset of the streams (absent ones keep s)
                present = rng.choice(k, size=rng.integers(1, k + 1), replace=False)
                streams[t] = rng.choice(present, size=b)
            idx = rng.integers(0, n, size=(num_updates, b))
            # losses around the reference's: about half the samples have a positive excess
            losses = ref[streams, idx] + rng.normal(0.2, 1.0, size=(num_updates, b))
            losses = np.maximum(losses, 0.01).astype(np.float32).astype(np.float64)
            runs = {
                "w64": _Self(ref64, w0, score0, eta, eps, torch.float64),
                "w32": _Self(ref32, w0, score0, eta, eps, torch.float32),
            }
            got: dict[str, list] = {f"{r}{what}": [] for r in runs for what in ("", "avg", "s")}
            for t in range(num_updates):
                excess = torch.tensor(losses[t] - ref[streams[t], idx[t]], dtype=torch.float64)
                mask = torch.ones(b, dtype=torch.bool)
                ids = torch.tensor(streams[t])
                for name, self_ in runs.items():
                    dtype = self_.model.train_domain_weights.dtype
                    self_.update_domain_weights(excess.to(dtype), mask, ids)
                    got[name].append(self_.model.train_domain_weights.double().numpy().copy())
                    got[f"{name}avg"].append(self_.model.avg_domain_weights.double().numpy().copy())
                    got[f"{name}s"].append(self_.model.perdomain_scores.double().numpy().copy())
            p = f"seq{seq}_"
            out |= {
                p + "k": np.int64(k), p + "eta": np.float64(eta), p + "eps": np.float64(eps),
                p + "w0": w0, p + "score0": np.float64(score0),
                p + "ref": ref.astype(np.float32), p + "streams": streams.astype(np.int8),
                p + "idx": idx.astype(np.int16), p + "losses": losses.astype(np.float32),
            }  # fmt: skip
            for key, rows in got.items():
                if key == "w32s":  # the float32 run's scores are the float64 run's, rounded
                    continue
                out[p + key] = np.stack(rows).astype(np.float32 if "32" in key else np.float64)
            seq += 1
    out["num_sequences"] = np.int64(seq)
    out["reference_commit"] = np.array(REFERENCE_COMMIT)
    np.savez_compressed(args.out, **out)
    total = sum(int(out[f"seq{i}_losses"].shape[0]) for i in range(seq))
    print(f"{seq} sequences, {total} updates -> {args.out}")


if __name__ == "__main__":
    main()
