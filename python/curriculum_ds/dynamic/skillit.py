"""``method: "skillit"``: Skill-it's multiplicative weights over a skills graph.

Its keys: ``dynamic.skillit`` (:class:`~curriculum_ds.config.mixers.SkillitConfig`).

Inside a phase of two streams or more, the phase starts at the reference's initial mixture
``w_init ⊙ exp(η · A · w_init)`` (``w_init``: the phase's proportions; with the identity graph,
the proportions themselves). After every global step that is a multiple of
``recompute_every_n_steps`` the held-out streams are evaluated (the caller's evaluation,
:class:`~curriculum_ds.dynamic.protocol.ProbingReweighter`) and the weights become
``w_init ⊙ exp(η · A · Σ L_eval)`` over the phase's last ``window`` evaluations (fewer at the
phase's first recomputes). The reference evaluates every ``ckpt_steps`` (50 of its 1,000-step
rounds in ``scripts/lego/pt/skillit.sh``) and sums the last ``window`` of those; here the
evaluation is once per update, so ``window`` spans that many updates. The arithmetic and its
reference: :mod:`curriculum_ds.dynamic.skillit_rule`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from curriculum_ds.config.mixers import SkillitConfig
from curriculum_ds.dynamic.eval_losses import losses_of
from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.skillit_rule import initial_weights, skillit_weights
from curriculum_ds.dynamic.state import StreamSkillitState
from curriculum_ds.dynamic.state_common import method_keys
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["SkillitReweighter"]


@register
class SkillitReweighter:
    """``method: "skillit"`` over ``unit: "streams"``: held-out losses through a skills graph.

    Args:
        cfg: The ``curriculum.dynamic`` section (``method: "skillit"``).
    """

    method: ClassVar[str] = "skillit"
    units: ClassVar[frozenset[str]] = frozenset({"streams"})
    num_buckets = 1

    def __init__(self, cfg: DynamicConfig):
        section = cfg.method_config
        assert isinstance(section, SkillitConfig)  # DynamicConfig's method_config for "skillit"
        self.cfg = cfg
        self.section = section
        self.num_recomputes = 0
        self.phase_idx: int | None = None
        self.stream_names: list[str] = []
        self.prior = np.zeros(0, dtype=np.float64)
        self.probs = np.zeros(0, dtype=np.float64)
        self.graph = np.zeros((0, 0), dtype=np.float64)
        self.evals: list[npt.NDArray[np.float64]] = []

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """Start a phase at ``w_init ⊙ exp(η · A · w_init)``; restore its evaluations on a resume.

        Returns:
            The initial mixture (a phase of one stream: nothing); on a resume inside the phase
            the loader then restores the weights it had.
        """
        self.phase_idx = view.phase_idx
        self.stream_names = list(view.stream_names)
        k = len(self.stream_names)
        graph = self.section.graph
        self.graph = np.eye(k) if graph == "identity" else np.array(graph, dtype=np.float64)
        self.prior = np.asarray(view.proportions, dtype=np.float64).copy()
        self.evals = []
        if saved is not None:
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, StreamSkillitState) and saved.phase_idx == view.phase_idx:
                self.prior = np.asarray(saved.prior, dtype=np.float64).copy()
                self.evals = [np.asarray(e, dtype=np.float64).copy() for e in saved.evals]
        if k < 2:
            self.probs = self.prior.copy()
            return MixtureUpdate()
        self.probs = initial_weights(self.prior, self.graph, self.section.eta)
        if isinstance(saved, StreamSkillitState) and saved.phase_idx == view.phase_idx:
            self.probs = np.asarray(saved.probs, dtype=np.float64).copy()
        return MixtureUpdate(proportions=self.probs.copy())

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Training losses do not move this method."""

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """The run's own held-out evaluations do not move it (it evaluates at its updates)."""

    def probe_due(self, global_step: int) -> bool:
        """After every multiple of ``recompute_every_n_steps``, in a phase of 2 streams or more."""
        return len(self.stream_names) >= 2 and global_step % self.cfg.recompute_every_n_steps == 0

    def observe_probe(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Keep the evaluation (the phase's last ``window`` of them)."""
        self.evals = [*self.evals, losses_of(losses, self.stream_names)][-self.section.window :]

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """At every update: the new weights and the history row.

        Returns:
            None off the updates; else the new ``proportions`` and the record (``method``,
            ``streams``, ``weights``, ``scores`` = ``A · Σ L_eval``, ``eval_losses`` = the
            latest evaluation, ``window_size`` = evaluations summed). A non-finite loss keeps
            the previous weights (``kept_previous``).
        """
        if not self.probe_due(global_step) or not self.evals:
            return None
        self.num_recomputes += 1
        summed = np.array(self.evals).sum(axis=0)
        record: dict[str, Any] = {
            "unit": "streams",
            "method": "skillit",
            "streams": list(self.stream_names),
            "num_non_finite": int((~np.isfinite(self.evals[-1])).sum()),
            "window_size": len(self.evals),
            "eval_losses": [None if np.isnan(v) else float(v) for v in self.evals[-1]],
        }
        if not np.isfinite(summed).all():
            record.update(weights=self.probs.tolist(), scores=None, kept_previous=True)
            return MixtureUpdate(record=record)
        self.probs = skillit_weights(self.prior, self.graph, self.evals, self.section.eta)
        record.update(weights=self.probs.tolist(), scores=self.graph.dot(summed).tolist())
        return MixtureUpdate(proportions=self.probs.copy(), record=record)

    def state(self) -> StreamSkillitState:
        """Everything a resume needs: weights, prior, the window of evaluations. Copies."""
        return StreamSkillitState(
            method_keys=method_keys(self.cfg),
            phase_idx=self.phase_idx,
            probs=self.probs.copy(),
            prior=self.prior.copy(),
            window_capacity=self.cfg.window,
            num_recomputes=self.num_recomputes,
            evals=tuple(e.copy() for e in self.evals),
        )
