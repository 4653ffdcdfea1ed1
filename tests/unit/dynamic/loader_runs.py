"""Shared builders for the tests that drive a mixing method over a real loader.

Three prepared streams (``text_a``, ``text_b`` and a ``noise`` stream) with a reference-loss
column, and the rebuild of a loader and its method from their saved forms as a new process
rebuilds them on a resume.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from helpers import make_dataset, ragged_docs

from curriculum_ds.config import DynamicConfig, PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.dynamic import MixtureUpdate, make_reweighter, parse_dynamic_state

NOISE = 2
"""The index of the stream whose loss stays high."""


def add_column(folder: Path, name: str, values: np.ndarray) -> None:
    """Add a metric column to a prepared folder as `curriculum-ds score` does (test fixture)."""
    with np.load(folder / "metrics.npz") as npz:
        columns = {k: npz[k] for k in npz.files}
    columns[name] = np.asarray(values, dtype=np.float64)
    np.savez(folder / "metrics.npz", **columns)
    meta_path = folder / "curriculum_meta.json"
    meta = json.loads(meta_path.read_text())
    meta["metric_columns"] = [*meta["metric_columns"], name]
    meta_path.write_text(json.dumps(meta))


def reference_streams(root: Path) -> list[Path]:
    """``text_a``, ``text_b``, ``noise`` (60, 70, 80 samples) with a ``ref_loss`` column.

    The reference model: good on text (1.0 nats), as bad as anyone on noise (4.0).
    """
    out = []
    for i, name in enumerate(("text_a", "text_b", "noise")):
        num_samples = 60 + 10 * i
        folder = make_dataset(root, name, ragged_docs(num_samples, seed=i, min_len=8, max_len=60))
        add_column(folder, "ref_loss", np.full(num_samples, 4.0 if i == NOISE else 1.0))
        out.append(folder)
    return out


def mix_phase(
    streams: list[Path], *, unit: str = "samples", names: tuple[str, ...] | None = None
) -> PhaseConfig:
    """A phase "mix" of ``streams`` at 0.4 / 0.4 / 0.2 in ``unit``, rows of 64 tokens at most.

    ``names``: the streams' names (default: their folders').
    """
    entries = [
        {"local": str(s), "proportion": p} for s, p in zip(streams, (0.4, 0.4, 0.2), strict=True)
    ]
    for entry, name in zip(entries, names or (), strict=False):
        entry["name"] = name
    return PhaseConfig.model_validate(
        {
            "name": "mix",
            "duration": "1000000tok",
            "train_loader": {"streams": entries, "max_seq_len": 64, "proportion_unit": unit},
        }
    )


def started(phase: PhaseConfig, cfg: DynamicConfig) -> tuple[PhaseLoader, Any]:
    """The phase's loader (seed 3, one bucket) and the method of ``cfg``, its phase started.

    The update of ``start_phase`` is applied to the loader.
    """
    loader = PhaseLoader(phase, 0, seed=3, num_buckets=1)
    method = make_reweighter(cfg)
    loader.apply(method.start_phase(loader.view(), None))
    return loader, method


def resumed(
    phase: PhaseConfig, cfg: DynamicConfig, loader: PhaseLoader, method: Any
) -> tuple[PhaseLoader, Any, MixtureUpdate]:
    """The loader and the method rebuilt from their saved forms, as a new process does.

    The method's state goes through its saved form (``to_dict``, read back); its
    ``start_phase`` update is applied, then the loader's own state (through JSON). ``loader``
    is closed.

    Returns:
        ``(loader, method, update)``: the new ones and what ``start_phase`` handed back.
    """
    loader_state, saved = loader.state_dict(), method.state().to_dict()
    loader.close()
    loader = PhaseLoader(phase, 0, seed=3, num_buckets=1)
    method = make_reweighter(cfg)
    back = method.start_phase(loader.view(), parse_dynamic_state(saved))
    loader.apply(back)
    loader.load_state_dict(json.loads(json.dumps(loader_state)))
    return loader, method, back
