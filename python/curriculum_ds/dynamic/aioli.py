"""``method: "aioli"``: Aioli's probe rounds over the phase's streams (``dynamic.aioli``).

A round starts after every global step that is a multiple of ``recompute_every_n_steps`` (the
reference's ``update_steps``), inside a phase of two streams or more:

1. after that step the held-out streams are evaluated (``L_0``), and the first probe's mixture
   is handed to the loader for ``probe_steps`` draws (``MixtureUpdate.hold_steps``);
2. after each probe the streams are evaluated again, the drops since the previous evaluation
   go to the probed stream's column, and the next probe starts; the probe order is
   ``lp_rounds`` seeded permutations (:func:`~curriculum_ds.dynamic.aioli_rule.probe_order`);
3. after the last probe, the interaction matrix is un-mixed, normalised and smoothed, and the
   weights ``w_init · exp(η · Σ_rows A)`` hold until the next round (the history row).

Probe steps are ordinary steps of the run (counted in its progress, checkpointed); the round
in progress is in the state, so a resume in the middle of a probe goes on with it exactly
(the loader restores its own ``hold``). The evaluations are the caller's
(:class:`~curriculum_ds.dynamic.protocol.ProbingReweighter`), the same on every rank, so every
rank decides the same. ``w_init`` is the phase's proportions at its start (the reference's
uniform ``weights_init`` when they are uniform). The arithmetic and its reference:
:mod:`curriculum_ds.dynamic.aioli_rule`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from curriculum_ds.config.mixers import AioliConfig
from curriculum_ds.dynamic.aioli_rule import (
    normalize_a,
    probe_mixture,
    probe_order,
    round_weights,
    unmix,
)
from curriculum_ds.dynamic.eval_losses import losses_of
from curriculum_ds.dynamic.registry import register
from curriculum_ds.dynamic.state import AioliRoundState, StreamAioliState
from curriculum_ds.dynamic.state_common import method_keys
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView

if TYPE_CHECKING:
    from curriculum_ds.config import DynamicConfig
    from curriculum_ds.dynamic.state import DynamicState

__all__ = ["AioliReweighter"]


@register
class AioliReweighter:
    """``method: "aioli"`` over ``unit: "streams"``: probe rounds, interaction matrix, weights.

    Args:
        cfg: The ``curriculum.dynamic`` section (``method: "aioli"``).
    """

    method: ClassVar[str] = "aioli"
    units: ClassVar[frozenset[str]] = frozenset({"streams"})
    num_buckets = 1

    def __init__(self, cfg: DynamicConfig):
        section = cfg.method_config
        assert isinstance(section, AioliConfig)  # DynamicConfig's method_config for "aioli"
        self.cfg = cfg
        self.section = section
        self.num_recomputes = 0
        self.phase_idx: int | None = None
        self.seed = 0
        self.stream_names: list[str] = []
        self.prior = np.zeros(0, dtype=np.float64)
        self.probs = np.zeros(0, dtype=np.float64)
        self.smoothed: npt.NDArray[np.float64] | None = None
        self.rounds_started = 0
        self.round: AioliRoundState | None = None

    @property
    def num_probes(self) -> int:
        """Probes in a round: ``K × lp_rounds``."""
        return len(self.stream_names) * self.section.lp_rounds

    def start_phase(self, view: PhaseView, saved: DynamicState | None) -> MixtureUpdate:
        """Start a phase at its own proportions; restore a round in progress on a resume."""
        self.phase_idx = view.phase_idx
        self.seed = view.seed
        self.stream_names = list(view.stream_names)
        self.prior = np.asarray(view.proportions, dtype=np.float64).copy()
        self.probs = self.prior.copy()
        self.smoothed, self.rounds_started, self.round = None, 0, None
        if saved is not None:
            self.num_recomputes = saved.num_recomputes
            if isinstance(saved, StreamAioliState) and saved.phase_idx == view.phase_idx:
                k = len(self.stream_names)
                self.prior = np.asarray(saved.prior, dtype=np.float64).copy()
                self.probs = np.asarray(saved.probs, dtype=np.float64).copy()
                if saved.smoothed is not None:
                    self.smoothed = np.asarray(saved.smoothed, dtype=np.float64).reshape(k, k)
                self.rounds_started, self.round = saved.rounds_started, saved.round
                if self.round is not None and len(self.round.order) != self.num_probes:
                    self.round = None  # lp_rounds changed: the round is dropped, not mixed
        return MixtureUpdate()

    def observe(self, batch: npt.NDArray[np.int64], losses: npt.NDArray[np.float64]) -> None:
        """Training losses do not move this method."""

    def observe_eval(self, global_step: int, losses: Mapping[str, float]) -> None:
        """The run's own held-out evaluations do not move it (its probes have their own)."""

    def _probe_end(self, global_step: int) -> int | None:
        """The probes done after ``global_step`` when it ends one (0: the round's start)."""
        if self.round is None:
            return None
        done, rest = divmod(global_step - self.round.start, self.section.probe_steps)
        return done if rest == 0 and 0 < done <= self.num_probes else None

    def probe_due(self, global_step: int) -> bool:
        """Whether a round starts after ``global_step``, or one of its probes ends there.

        A round starts after a multiple of ``recompute_every_n_steps``; never in a phase of
        one stream.
        """
        if len(self.stream_names) < 2:
            return False
        if self.round is None:
            return global_step % self.cfg.recompute_every_n_steps == 0
        return self._probe_end(global_step) is not None

    def observe_probe(self, global_step: int, losses: Mapping[str, float]) -> None:
        """Start a round with ``L_0``, or add a probe's drops to its stream's column."""
        now = losses_of(losses, self.stream_names)
        if self.round is None:
            order = probe_order(
                self.seed,
                self.phase_idx or 0,
                self.rounds_started,
                len(self.stream_names),
                self.section.lp_rounds,
            )
            self.rounds_started += 1
            k = len(self.stream_names)
            self.round = AioliRoundState(
                start=global_step,
                order=order,
                probes_done=0,
                loss_before=now,
                drops=np.zeros(k * k, dtype=np.float64),
            )
            return
        k = len(self.stream_names)
        r = self.round
        drops = np.asarray(r.drops, dtype=np.float64).reshape(k, k).copy()
        drops[:, int(r.order[r.probes_done])] += np.asarray(r.loss_before) - now
        self.round = r.model_copy(
            update={"probes_done": r.probes_done + 1, "loss_before": now, "drops": drops.ravel()}
        )

    def maybe_recompute(self, global_step: int) -> MixtureUpdate | None:
        """The next probe's mixture, or after the last probe the round's weights (history row).

        Returns:
            None off a round's boundaries; a probe: its mixture held ``probe_steps`` draws (no
            history row); a round's end: the new ``proportions`` and the record (``method``,
            ``streams``, ``weights``, ``scores`` = ``Σ_rows A``, ``interaction`` = the smoothed
            ``A``, ``probe_steps`` of the round). A degenerate round (every normalised entry
            equal, or a non-finite loss) keeps the previous weights (``kept_previous``).
        """
        r = self.round
        if r is None or global_step != r.start + r.probes_done * self.section.probe_steps:
            return None
        k = len(self.stream_names)
        if r.probes_done < self.num_probes:
            stream = int(r.order[r.probes_done])
            mixture = probe_mixture(k, stream, self.section.one_hot_factor)
            return MixtureUpdate(proportions=mixture, hold_steps=self.section.probe_steps)
        self.round = None
        self.num_recomputes += 1
        drops = np.asarray(r.drops, dtype=np.float64).reshape(k, k)
        section = self.section
        record: dict[str, Any] = {
            "unit": "streams",
            "method": "aioli",
            "streams": list(self.stream_names),
            "num_non_finite": 0,
            "probe_steps": self.num_probes * section.probe_steps,
        }
        with np.errstate(all="ignore"):
            a = normalize_a(
                unmix(drops, lp_rounds=section.lp_rounds, one_hot_factor=section.one_hot_factor)
            )
        if not np.isfinite(a).all():
            record.update(weights=self.probs.tolist(), scores=None, kept_previous=True)
            return MixtureUpdate(proportions=self.probs.copy(), record=record)
        if section.ema is None:
            self.smoothed = a
            self.probs = round_weights(self.probs, a, section.eta)
        else:
            if self.smoothed is not None:
                a = (1 - section.ema) * a + section.ema * self.smoothed
            self.smoothed = a
            self.probs = round_weights(self.prior, a, section.eta)
        record.update(
            weights=self.probs.tolist(),
            scores=a.sum(axis=0).tolist(),
            interaction=a.tolist(),
        )
        return MixtureUpdate(proportions=self.probs.copy(), record=record)

    def state(self) -> StreamAioliState:
        """Everything a resume needs, the round in progress included. Copies."""
        return StreamAioliState(
            method_keys=method_keys(self.cfg),
            phase_idx=self.phase_idx,
            probs=self.probs.copy(),
            prior=self.prior.copy(),
            window_capacity=self.cfg.window,
            num_recomputes=self.num_recomputes,
            rounds_started=self.rounds_started,
            smoothed=None if self.smoothed is None else self.smoothed.ravel().copy(),
            round=self.round,
        )
