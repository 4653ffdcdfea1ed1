"""The saved states of the published mixing methods over streams: DoReMi, file, Aioli, Skill-it.

Each is one typed model (:class:`~curriculum_ds.dynamic.state.DynamicState` tags them on
``unit/method``), holding the common keys of every re-weighting state and its method's own
sub-state; ``to_dict`` writes the saved form. Pure Python and numpy: no torch, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator

from curriculum_ds.core.saved import FloatArray, Int, IntArray, SavedModel
from curriculum_ds.dynamic.state_common import StreamWindowState, _Common

__all__ = [
    "AioliRoundState",
    "DoReMiState",
    "DoReMiSubState",
    "FileSourceState",
    "StreamADOState",
    "StreamAioliState",
    "StreamFileState",
    "StreamODMState",
    "StreamSkillitState",
]

_EMPTY_IF_NONE = BeforeValidator(lambda v: () if v is None else v)


class _PublishedMethod(_Common):
    """A published method's state: the common keys, written in one place, then its own.

    Attributes:
        saves_signal: whether the saved form has ``signal`` and ``reference_metric`` (the
            methods that read a loss signal through a window or evaluations: DoReMi, Aioli,
            Skill-it; ODM, ADO and ``file`` keep none).
    """

    unit: ClassVar[str] = "streams"
    saves_signal: ClassVar[bool] = False

    def _common_dict(self) -> dict[str, Any]:
        """The common keys of the saved form, in their order; each method appends its own."""
        out: dict[str, Any] = {"unit": self.unit, "method": self.method}
        if self.saves_signal:
            out.update(signal=self.signal, reference_metric=self.reference_metric)
        out.update(
            phase_idx=self.phase_idx,
            probs=self.probs,
            num_recomputes=self.num_recomputes,
            method_keys=self.method_keys,
        )
        return out


class _StreamMethod(_PublishedMethod):
    """A method without a rolling window (ODM, ADO, ``file``): ``dynamic.window`` does not apply."""

    @property
    def window_capacity(self) -> None:
        """None: no rolling window (``dynamic.window`` does not apply)."""
        return None


class DoReMiSubState(SavedModel):
    """DoReMi's own keys (``dynamic.doremi`` of a saved state).

    Attributes:
        last_scores: float64 ``(num_streams,)``, each stream's score at the last update (an
            absent stream keeps it).
        average: float64 ``(num_streams,)``, the running mean of the weights over the phase
            (the initial weights and every update): DoReMi's output.
        num_updates: updates in the phase so far, ≥ 0.
    """

    last_scores: FloatArray
    average: FloatArray
    num_updates: Int

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``last_scores``, ``average``, ``num_updates``."""
        return {
            "last_scores": self.last_scores,
            "average": self.average,
            "num_updates": self.num_updates,
        }


class DoReMiState(_PublishedMethod):
    """The state of ``method: "doremi"`` over ``unit: "streams"`` (``DoReMiReweighter``).

    ``probs`` are DoReMi's weights now (their logarithm is what the next update moves).

    Attributes:
        window: the rolling window of clipped excess losses and their streams.
        doremi: the last scores, the running mean of the weights, the update count.
    """

    method: ClassVar[str] = "doremi"
    saves_signal: ClassVar[bool] = True

    window: StreamWindowState
    doremi: DoReMiSubState

    @property
    def window_capacity(self) -> int:
        """Signals the rolling window holds at most."""
        return self.window.capacity

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys, ``window`` and ``doremi``."""
        return {
            **self._common_dict(),
            "window": self.window.to_dict(),
            "doremi": self.doremi.to_dict(),
        }


class FileSourceState(SavedModel):
    """``method: "file"``'s own keys: the weights file and the last content applied from it.

    Attributes:
        path: ``dynamic.file.path`` of the run that saved it.
        sha256: hex sha256 of the file content whose weights hold now (None: none applied in
            the phase yet, the phase's proportions hold).
    """

    path: str
    sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``path``, ``sha256``."""
        return {"path": self.path, "sha256": self.sha256}


class StreamFileState(_StreamMethod):
    """The state of ``method: "file"`` over ``unit: "streams"`` (``FileReweighter``).

    The weights now (``probs``), the recompute count, the phase and the file's sub-state; no
    window (the file method reads no loss). What the run decided at each boundary is in the run
    directory's ``mixture_journal.jsonl``, which a resume replays.

    Attributes:
        file: the weights file and the sha256 of the content applied last.
    """

    method: ClassVar[str] = "file"

    file: FileSourceState

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys and ``file`` (``path``, ``sha256``)."""
        return {**self._common_dict(), "file": self.file.to_dict()}


class _ReadsEvalState(_PublishedMethod):
    """What the methods that steer by held-out losses keep (Aioli, Skill-it).

    Attributes:
        prior: float64 ``(num_streams,)``, the phase's proportions at its start (``w_init``).
        window_capacity: ``dynamic.window`` of the run that saved it (unused by the method;
            kept so a resume's check of an unchanged window reads it as for every method).
    """

    saves_signal: ClassVar[bool] = True
    prior: FloatArray
    window_capacity: Int

    def _eval_dict(self) -> dict[str, Any]:
        """The common keys, ``prior`` and ``window_capacity``."""
        return {
            **self._common_dict(),
            "prior": self.prior,
            "window_capacity": self.window_capacity,
        }


class AioliRoundState(SavedModel):
    """An Aioli round in progress (its probes; ``AioliReweighter``).

    Attributes:
        start: the global step it started after (its first evaluation).
        order: the streams its probes lean toward, in order (``K × lp_rounds``).
        probes_done: probes finished (each followed by an evaluation).
        loss_before: float64 ``(K,)``, the eval losses of the last evaluation.
        drops: float64 ``(K·K,)``, row-major: ``G[j, i]``, the summed drops of stream ``j``'s
            loss over the probes of stream ``i`` so far.
    """

    start: Int
    order: IntArray
    probes_done: Int
    loss_before: FloatArray
    drops: FloatArray

    def to_dict(self) -> dict[str, Any]:
        """The saved form: ``start``, ``order``, ``probes_done``, ``loss_before``, ``drops``."""
        return {
            "start": self.start,
            "order": self.order,
            "probes_done": self.probes_done,
            "loss_before": self.loss_before,
            "drops": self.drops,
        }


class StreamAioliState(_ReadsEvalState):
    """The state of ``method: "aioli"`` (``AioliReweighter``).

    Attributes:
        rounds_started: rounds started in the phase (the next round's probe order draws on it).
        smoothed: float64 ``(K·K,)`` row-major, the EMA of the normalised interaction matrix
            (None before the phase's first round ends).
        round: the round in progress (None between rounds).
    """

    method: ClassVar[str] = "aioli"

    rounds_started: Int
    smoothed: FloatArray | None = None
    round: AioliRoundState | None = None

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys, ``rounds_started``, ``smoothed``, ``round``."""
        return {
            **self._eval_dict(),
            "rounds_started": self.rounds_started,
            "smoothed": self.smoothed,
            "round": None if self.round is None else self.round.to_dict(),
        }


class StreamSkillitState(_ReadsEvalState):
    """The state of ``method: "skillit"`` (``SkillitReweighter``).

    Attributes:
        evals: the phase's last ``skillit.window`` evaluations, oldest first, float64 ``(K,)``
            each.
    """

    method: ClassVar[str] = "skillit"

    evals: Annotated[tuple[FloatArray, ...], _EMPTY_IF_NONE] = ()

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys and ``evals``."""
        return {**self._eval_dict(), "evals": list(self.evals)}


class StreamODMState(_StreamMethod):
    """The state of ``method: "odm"`` (``dynamic.odm.ODMReweighter``).

    Attributes:
        estimated_reward: float64 ``(num_streams,)``, the bandit's smoothed rewards R̂.
        eps: ε of the last update (1/K before the first).
        phase_steps: optimizer steps the phase has taken (the bandit's ``t``).
    """

    method: ClassVar[str] = "odm"

    estimated_reward: FloatArray
    eps: float
    phase_steps: Int

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys, ``estimated_reward``, ``eps``, ``phase_steps``."""
        return {
            **self._common_dict(),
            "estimated_reward": self.estimated_reward,
            "eps": self.eps,
            "phase_steps": self.phase_steps,
        }


class StreamADOState(_StreamMethod):
    """The state of ``method: "ado"`` (``dynamic.ado.ADOReweighter``).

    Attributes:
        losses: per stream, float64 ``(phase_steps,)``: its training loss at each step of the
            phase (imputed where absent, as the reference does): the curve the fits read.
        step_samples: int64 ``(phase_steps,)``: the global batch's samples at each step.
        count_ema: float64 ``(num_streams,)``: EMA of the realised stream shares (``h``).
        probs_mean: float64 ``(num_streams,)``: the running mean of the policy (``p̄``).
        fit_params: per stream ``(A, E, α)`` of the last accepted fit, float64 ``(3,)`` each;
            empty before the first.
    """

    method: ClassVar[str] = "ado"

    losses: tuple[FloatArray, ...]
    step_samples: IntArray
    count_ema: FloatArray
    probs_mean: FloatArray
    fit_params: tuple[FloatArray, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The saved form: the common keys, then the ADO keys above."""
        return {
            **self._common_dict(),
            "losses": list(self.losses),
            "step_samples": self.step_samples,
            "count_ema": self.count_ema,
            "probs_mean": self.probs_mean,
            "fit_params": list(self.fit_params),
        }
