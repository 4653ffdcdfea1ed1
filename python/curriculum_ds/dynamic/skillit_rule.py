"""Skill-it's arithmetic (Chen et al., NeurIPS 2023), pure: the skills graph and the weights.

Exact to ``HazyResearch/skill-it`` ``trainer/mw_trainer.py`` at
807b3bf7b11970f3a6fb6201cb37dcc1a3335f00 (``MWTrainer.train``: the initial mixture and the
update inline in its loop), replayed against that code's own output in
``tests/unit/dynamic/test_skillit_matches_the_reference.py``::

    w_0 = w_init ⊙ exp(η · A · w_init)                  (the mixture before any evaluation)
    w   = w_init ⊙ exp(η · A · Σ_{last window evals} L_eval)

normalised to sum to 1, with ``A`` the ``K × K`` skills graph (``A[i, j]``: how much training on
skill ``i`` helps skill ``j``'s loss; the identity when skills are independent) and ``w_init``
the prior (the reference's ``--mw_prior``; here the phase's proportions). The reference's
optional variants (``--eta_schedule``'s ``η_t = η / (ΣL_t / ΣL_0)``, ``--normalize_loss``'s
``L / L_0``, ``--ignore_lone_nodes``, ``--target_mask``, ``--dynamic_lambda``) are not
implemented; its CLI also turns an off-diagonal ``1`` of a graph into ``0.5`` ("for
synthetics"), which a graph given here does not need: its entries are used as written.

Every function returns float64 and is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["initial_weights", "skillit_weights"]


def initial_weights(
    prior: npt.NDArray[np.float64], graph: npt.NDArray[np.float64], eta: float
) -> npt.NDArray[np.float64]:
    """The mixture before any evaluation: ``prior ⊙ exp(η · A · prior)``, normalised."""
    prior = np.asarray(prior, dtype=np.float64)
    w = np.multiply(prior, np.exp(eta * np.asarray(graph, dtype=np.float64).dot(prior)))
    return w / w.sum()


def skillit_weights(
    prior: npt.NDArray[np.float64],
    graph: npt.NDArray[np.float64],
    window: Sequence[npt.NDArray[np.float64]],
    eta: float,
) -> npt.NDArray[np.float64]:
    """``prior ⊙ exp(η · A · Σ window)``, normalised.

    Args:
        prior: float64 ``(K,)``, > 0.
        graph: float64 ``(K, K)``, ≥ 0.
        window: the last ``window`` evaluations' losses, oldest first, each float64 ``(K,)``.
        eta: the step size, > 0.
    """
    losses = np.array(window, dtype=np.float64).sum(axis=0)
    w = np.multiply(
        np.asarray(prior, dtype=np.float64),
        np.exp(eta * np.asarray(graph, dtype=np.float64).dot(losses)),
    )
    return w / w.sum()
