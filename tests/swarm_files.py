"""A tiny ``curriculum-ds mixopt run`` swarm on the data of ``helpers.tiny_experiment``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers import tiny_experiment


def tiny_swarm(root: Path, *, micro_batch_size: int = 2, **spec: Any) -> Path:
    """``root/swarm.json``: 4 runs over streams ``a``/``b`` of ``tiny_experiment``'s base (2000
    tokens, eval streams ``val_a``/``val_b``: its question-answer stream left out, the swarm's
    target is text loss), a small proposal search; ``spec`` overrides keys. The data is built
    once per ``root``."""
    tiny_experiment(root, micro_batch_size=micro_batch_size)
    base = json.loads((root / "base.json").read_text())
    evals = base["curriculum"]["eval"]
    evals["streams"] = [s for s in evals["streams"] if not s["local"].endswith("val_qa")]
    (root / "swarm_base.json").write_text(json.dumps(base, indent=2))
    document: dict[str, Any] = {
        "base": "swarm_base.json",
        "num_runs": 4,
        "seed": 3,
        "search": {"candidates": 2000, "top_k": 16, "bootstrap": 4},
    }
    document.update(spec)
    path = root / "swarm.json"
    path.write_text(json.dumps(document, indent=2))
    return path
