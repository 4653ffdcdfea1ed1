"""Golden vectors for Aioli and Skill-it, made by the references' OWN training loops.

Not part of the project (nothing imports it); run it in a scratch virtualenv outside the project
with the references' numeric pins (numpy 1.24.3, pandas 2.0.3, tqdm), on checkouts of:

* ``HazyResearch/aioli`` at a2361123335cb91d68f5ad86a6c85de7a79e6d5e,
  ``trainer/aioli_trainer.py`` (``AioliTrainer.train`` and ``learn_params_subroutine``);
* ``HazyResearch/skill-it`` at 807b3bf7b11970f3a6fb6201cb37dcc1a3335f00,
  ``trainer/mw_trainer.py`` (``MWTrainer.train``)::

    python3 -m venv /tmp/ref-aioli
    /tmp/ref-aioli/bin/pip install numpy==1.24.3 pandas==2.0.3 tqdm
    git -C AIOLI_REPO archive a2361123 trainer | tar -x -C /tmp/ref-src/aioli
    git -C SKILLIT_REPO archive 807b3bf7 trainer | tar -x -C /tmp/ref-src/skill-it
    /tmp/ref-aioli/bin/python tests/data/mixers/make_aioli_skillit_golden.py \
        /tmp/ref-src/aioli /tmp/ref-src/skill-it tests/data/mixers

Both references are trainer forks (a GPU model, tokenised datasets, wandb). The update rules
are written inline in their ``train`` methods, so this script runs those methods unmodified,
loaded from the checkout, with the training replaced around them: ``torch`` and ``wandb`` are
stub modules (a forward returns a dummy loss, ``.cuda()`` returns itself), the model, optimizer,
data loaders and datasets are stubs, and the evaluator returns synthetic per-stream losses (a
seeded random walk). ``trainer/utils.py`` imports transformers and the datasets, so it is not
imported; its ``get_steps`` (both) and ``aggregate_task_category`` (Skill-it) are taken from the
checkout's source (``ast``) and executed as written. Every weight vector the reference hands its
``train_data.set_proportions`` is recorded (normalised, as its ``set_proportions`` does), with the
losses it was given.

Writes ``aioli_golden.npz`` and ``skillit_golden.npz`` (float64).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np

# ------------------------------------------------------------------------------------- stubs


class _T:
    """A stand-in tensor: ``.cuda()``, ``.backward()``, ``.numpy()``."""

    def __init__(self, value: object = 0.0) -> None:
        self.value = value

    def cuda(self) -> _T:
        return self

    def backward(self) -> None:
        return None

    def numpy(self) -> object:
        return self.value

    def mean(self) -> _T:
        return self


def _install_stub_modules() -> None:
    torch = types.ModuleType("torch")
    torch.mean = lambda x: x  # type: ignore[attr-defined]
    torch.is_tensor = lambda x: isinstance(x, _T)  # type: ignore[attr-defined]
    nn = types.ModuleType("torch.nn")
    utils = types.ModuleType("torch.nn.utils")
    utils.clip_grad_norm_ = lambda params, norm: None  # type: ignore[attr-defined]
    torch.nn = nn  # type: ignore[attr-defined]
    nn.utils = utils  # type: ignore[attr-defined]
    wandb = types.ModuleType("wandb")
    wandb.log = lambda *a, **k: None  # type: ignore[attr-defined]
    sys.modules.update({"torch": torch, "torch.nn": nn, "torch.nn.utils": utils, "wandb": wandb})


def _functions_from(path: Path, names: list[str]) -> dict[str, object]:
    """Execute the named top-level functions of a source file as written (numpy, pandas)."""
    tree = ast.parse(path.read_text())
    wanted = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    module = ast.Module(body=wanted, type_ignores=[])
    import pandas as pd

    scope: dict[str, object] = {"np": np, "pd": pd}
    exec(compile(module, str(path), "exec"), scope)  # the reference's own code
    return {n: scope[n] for n in names}


class _Model:
    def train(self) -> None: ...

    def zero_grad(self) -> None: ...

    def parameters(self) -> list[object]:
        return []

    def __call__(self, **kwargs: object) -> types.SimpleNamespace:
        return types.SimpleNamespace(loss=_T())


class _Step:
    def step(self) -> None: ...


class _Bar:
    def update(self, n: int) -> None: ...


def _loader(*args: object, **kwargs: object) -> object:
    """An endless data loader of stand-in batches (the references break out by step counts)."""

    def batches():
        while True:
            yield {"input_ids": _T(), "labels": _T()}

    return batches()


class _TrainData:
    def __init__(self, k: int) -> None:
        self.k = k
        self.skills = np.arange(k)
        self.calls: list[np.ndarray] = []

    def set_proportions(self, args: object, proportions: object) -> None:
        p = np.array(proportions, dtype=np.float64)
        self.calls.append(p / sum(p))  # the references' set_proportions: p / sum(p)


def _load(package_dir: Path, module: str, utils: dict[str, object]) -> types.ModuleType:
    """``trainer.<module>`` of a checkout, with a ``trainer.utils`` of ``utils``."""
    for name in [m for m in sys.modules if m == "trainer" or m.startswith("trainer.")]:
        del sys.modules[name]
    pkg = types.ModuleType("trainer")
    pkg.__path__ = [str(package_dir)]
    sys.modules["trainer"] = pkg
    stub_utils = types.ModuleType("trainer.utils")
    stub_utils.__dict__.update(utils)
    sys.modules["trainer.utils"] = stub_utils
    spec = importlib.util.spec_from_file_location(f"trainer.{module}", package_dir / f"{module}.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[f"trainer.{module}"] = mod
    spec.loader.exec_module(mod)
    return mod


class _Log:
    def info(self, *a: object) -> None: ...

    def warning(self, *a: object) -> None: ...


# ------------------------------------------------------------------------------------- Aioli


def aioli_case(repo: Path, k: int, rounds: int, seed: int, params: dict) -> dict[str, np.ndarray]:
    """Run ``AioliTrainer.train`` for ``rounds`` rounds on synthetic eval losses."""
    real = _functions_from(repo / "trainer" / "utils.py", ["get_steps"])
    utils = {
        "get_steps": real["get_steps"],
        "get_tokenized_val_dataset": lambda *a, **kw: None,
        "create_optimizer_scheduler": lambda *a, **kw: (_Step(), _Step()),
        "get_train_dataloader": _loader,
        "get_tokenized_train_dataset": lambda *a, **kw: None,
        "save_model_and_optimizer": lambda *a, **kw: None,
    }
    mod = _load(repo / "trainer", "aioli_trainer", utils)
    lp_duration = params["lp_rounds"] * params["lp_steps"] * k
    update_steps = lp_duration + 1 + seed % 3
    args = types.SimpleNamespace(
        k=k,
        slice_list=[],
        max_steps=update_steps * rounds,
        n_epochs=1,
        num_ckpts=1,  # ckpt_steps = total_steps: no periodic evaluation inside a round
        update_steps=update_steps,
        lr=1e-3,
        lr_scheduler=None,
        end_lr=None,
        warmup_steps=0,
        graph_path=None,
        aioli_prior=None,
        prior_steps=None,
        batch_size=1,
        break_steps=None,
        aioli_normalize_A=True,
        aioli_diagonal=False,
        selection_seed=seed,
        **params,
    )
    rng = np.random.default_rng(1000 + seed)
    current = base = rng.uniform(2.0, 6.0, k)
    evals: list[tuple[str, np.ndarray]] = []

    class _Evaluator:
        result_path = "/tmp/ref-aioli-run"

        def evaluate(self, data, counter, weights, *a, do_not_log=False, split="val", **kw):
            nonlocal current
            # a random walk back toward its start: mostly down, some up (negative drops happen)
            current = current + 0.05 * (base - current) - rng.normal(0.02, 0.05, k)
            current = current.astype(np.float32).astype(np.float64)  # stored as float32
            evals.append(("probe" if do_not_log else "other", current.copy()))
            import pandas as pd

            return pd.DataFrame({"task_idx": np.arange(k), "task_loss": current.copy()})

    train_data = _TrainData(k)
    trainer = mod.AioliTrainer(args, _Log(), None, _Model(), None, None, train_data, _Evaluator())
    np.random.seed(seed)  # noqa: NPY002  (the reference draws its probe order from numpy's global RNG
    trainer.train()
    # evals: per round [round start ("other"), K·lp_rounds probes]; then two final ones
    per_round = 1 + k * params["lp_rounds"]
    probes = k * params["lp_rounds"]
    loss_0 = np.stack([evals[r * per_round][1] for r in range(rounds)])
    probes_of = [evals[r * per_round + 1 : (r + 1) * per_round] for r in range(rounds)]
    probe_losses = np.stack([np.stack([e[1] for e in probes]) for probes in probes_of])
    assert all(e[0] == "probe" for probes in probes_of for e in probes)
    # set_proportions calls: per round, K·lp_rounds probe mixtures then the round's weights
    calls = train_data.calls
    assert len(calls) == rounds * (probes + 1), len(calls)
    orders = np.stack(
        [
            np.array([int(np.argmax(calls[r * (probes + 1) + j])) for j in range(probes)])
            for r in range(rounds)
        ]
    )
    weights = np.stack([calls[r * (probes + 1) + probes] for r in range(rounds)])
    return {
        "k": np.array(k),
        "eta": np.array(params["eta"]),
        "ema": np.array(np.nan if params["ema"] is None else params["ema"]),
        "lp_rounds": np.array(params["lp_rounds"]),
        "one_hot_factor": np.array(params["one_hot_factor"]),
        "loss_0": loss_0.astype(np.float32),
        "orders": orders.astype(np.int8),
        "probe_losses": probe_losses.astype(np.float32),
        "weights": weights,
        # its normalised A of each round (before the EMA), for the first 10 rounds
        "graphs": np.stack(trainer.all_graphs[:10]),
    }


# ----------------------------------------------------------------------------------- Skill-it


def skillit_case(
    repo: Path, k: int, updates: int, seed: int, params: dict
) -> dict[str, np.ndarray]:
    """Run ``MWTrainer.train`` for ``updates`` updates on synthetic eval losses."""
    real = _functions_from(repo / "trainer" / "utils.py", ["get_steps", "aggregate_task_category"])
    utils = {
        "get_steps": real["get_steps"],
        "aggregate_task_category": real["aggregate_task_category"],
        "create_optimizer_scheduler": lambda *a, **kw: (_Step(), _Step()),
        "get_train_dataloader": _loader,
        "get_train_dataset": lambda args, logger, tok: _TrainData(k),
        "get_tokenized_train_dataset": lambda *a, **kw: None,
        "log_val_loss_per_skill": lambda *a, **kw: None,
    }
    mod = _load(repo / "trainer", "mw_trainer", utils)
    rng = np.random.default_rng(2000 + seed)
    evals_per_update = params.pop("evals_per_update")
    ckpt_steps = 2
    update_steps = ckpt_steps * evals_per_update
    graph = params.pop("graph")
    prior = rng.uniform(0.2, 1.0, k)
    args = types.SimpleNamespace(
        k=k,
        n_select=0,
        n_epochs=1,
        max_steps=update_steps * (updates + 1),
        num_ckpts=(updates + 1) * evals_per_update,
        update_steps=update_steps,
        lr=1e-3,
        initialize_loss=False,
        graph=None if graph is None else [int(v) for v in graph.ravel()],
        graph_path=None,
        ignore_lone_nodes=False,
        target_mask=None,
        mw_prior=prior.tolist(),
        ni_test=False,
        mw_init=None,
        eta_schedule=False,
        normalize_loss=False,
        dynamic_lambda=False,
        task_name="lego",
        batch_size=1,
        slicer=None,
        **params,
    )
    current = base = rng.uniform(1.0, 4.0, k)
    evals: list[np.ndarray] = []

    class _Evaluator:
        def evaluate(self, data, counter, weights, output_idxs):
            nonlocal current
            current = current + 0.05 * (base - current) - rng.normal(0.01, 0.05, k)
            current = current.astype(np.float32).astype(np.float64)  # stored as float32
            evals.append(current.copy())
            # per skill, the losses of its samples (aggregate_task_category: sum / count)
            return {i: [_T(np.float64(current[i]))] for i in range(k)}

    class _Val:
        def get_tokenized_dataset(self):
            return None, None

    train_data_holder: dict[str, _TrainData] = {}

    def get_train_dataset(args, logger, tok):
        train_data_holder["d"] = _TrainData(k)
        return train_data_holder["d"]

    mod.get_train_dataset = get_train_dataset
    mod.MWTrainer().train(args, _Log(), None, _Model(), _Val(), _Evaluator())
    calls = train_data_holder["d"].calls
    # the initial mixture, then one per update; the evaluations each update had seen
    ckpt, _ = real["get_steps"](args)
    seen = [(u + 1) * update_steps // ckpt for u in range(len(calls) - 1)]
    # the reference evaluates with the loss of skill i in row i (its graph applied as given)
    reference_graph = np.eye(k) if graph is None else graph.astype(float)
    off_diagonal_ones = (reference_graph == 1) & ~np.eye(k, dtype=bool)
    reference_graph = np.where(off_diagonal_ones, 0.5, reference_graph)
    return {
        "k": np.array(k),
        "eta": np.array(params["eta"]),
        "window": np.array(params["mw_window"]),
        "graph": reference_graph,
        "prior": prior,
        "evals": np.stack(evals[: max(seen)]).astype(np.float32),
        "evals_seen": np.array(seen),
        "initial": calls[0],
        "weights": np.stack(calls[1:]),
    }


def main() -> None:
    aioli_repo, skillit_repo, out = (Path(a) for a in sys.argv[1:4])
    _install_stub_modules()
    cases: dict[str, np.ndarray] = {}
    aioli_params = [
        (2, 400, dict(eta=0.2, ema=0.1, lp_rounds=4, lp_steps=4, one_hot_factor=0.625)),
        (5, 200, dict(eta=0.5, ema=0.3, lp_rounds=2, lp_steps=1, one_hot_factor=0.7)),
        (17, 60, dict(eta=0.2, ema=0.1, lp_rounds=1, lp_steps=1, one_hot_factor=0.625)),
        (2, 200, dict(eta=0.1, ema=None, lp_rounds=1, lp_steps=2, one_hot_factor=0.8)),
        (5, 100, dict(eta=0.2, ema=None, lp_rounds=1, lp_steps=1, one_hot_factor=0.625)),
        (17, 20, dict(eta=0.3, ema=0.5, lp_rounds=2, lp_steps=1, one_hot_factor=0.9)),
        (5, 150, dict(eta=0.2, ema=0.0, lp_rounds=3, lp_steps=1, one_hot_factor=0.625)),
    ]
    total = 0
    for n, (k, rounds, params) in enumerate(aioli_params):
        for key, value in aioli_case(aioli_repo, k, rounds, n, dict(params)).items():
            cases[f"case{n}/{key}"] = value
        total += rounds
    np.savez_compressed(out / "aioli_golden.npz", **cases)
    print(f"aioli: {len(aioli_params)} cases, {total} updates")

    rng = np.random.default_rng(7)
    chain5 = np.array(
        [[1, 0, 0, 0, 0], [1, 1, 1, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]
    )  # scripts/lego/pt/skillit.sh's graph

    def random_graph(k: int) -> np.ndarray:
        g = (rng.random((k, k)) < 0.3).astype(int)
        np.fill_diagonal(g, 1)
        return g

    skillit_params = [
        (2, 300, dict(eta=0.5, mw_window=3, graph=None, evals_per_update=1)),
        (5, 300, dict(eta=0.5, mw_window=3, graph=chain5, evals_per_update=1)),
        (17, 300, dict(eta=0.2, mw_window=2, graph=random_graph(17), evals_per_update=1)),
        (5, 100, dict(eta=0.8, mw_window=1, graph=random_graph(5), evals_per_update=3)),
        (2, 100, dict(eta=0.3, mw_window=5, graph=random_graph(2), evals_per_update=2)),
    ]
    cases = {}
    total = 0
    for n, (k, updates, params) in enumerate(skillit_params):
        for key, value in skillit_case(skillit_repo, k, updates, n, dict(params)).items():
            cases[f"case{n}/{key}"] = value
        total += updates
    np.savez_compressed(out / "skillit_golden.npz", **cases)
    print(f"skillit: {len(skillit_params)} cases, {total} updates")


if __name__ == "__main__":
    main()
