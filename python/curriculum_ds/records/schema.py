"""The rows a run writes, one typed shape each, and the one function that builds a step's row.

Each row is a :class:`~typing.TypedDict`: at run time a plain ``dict`` (what ``json.dumps``
writes and what :func:`~curriculum_ds.records.jsonl.read_jsonl` reads back), to the type checker
a named set of keys. Every writer and reader reads these shapes: the JSONL files
(:mod:`~curriculum_ds.records.jsonl`), DeepSpeed's monitors (:mod:`~curriculum_ds.records.
monitors`), the log lines (:mod:`~curriculum_ds.records.progress`) and ``curriculum-ds report``.

=============================== ================== ============================================
file                            row                written by
=============================== ================== ============================================
``metrics.jsonl``               :class:`MetricsRow` ``Step.finish`` (:func:`metrics_row`)
``eval.jsonl``                  :class:`EvalRow`    ``Curriculum.evaluate``
``curriculum_history.jsonl``    :class:`HistoryRow` ``Step.finish`` of a re-weighting recompute
``sample_trace.jsonl``          :class:`TraceRow`   ``Step.trace_record``
=============================== ================== ============================================

Every float that is NaN or infinite is written as ``null`` (rows are strict JSON). Pure Python:
no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "EvalRow",
    "EvalStreamRow",
    "HistoryRow",
    "MetricsRow",
    "StepOutcome",
    "StepResult",
    "StreamRow",
    "TraceRow",
    "WarmupMetricsRow",
    "history_row",
    "metrics_row",
]


class StreamRow(TypedDict):
    """One stream of a phase in one optimizer step (``metrics.jsonl``'s ``streams``)."""

    samples: int
    """The step's samples from the stream (global batch, all ranks)."""
    tokens: int
    """Their non-padding input tokens (global); the streams' tokens sum to ``step_tokens``."""
    loss: float | None
    """Token-mean loss (nats) over the stream's loss-bearing tokens on all ranks; None when it
    has none in the step, or when NaN/inf."""


@dataclass(frozen=True, kw_only=True)
class StepOutcome:
    """What a finished step hands back: its figures over every rank, the same on every rank.

    Attributes:
        global_step: the step's number (1-based, global).
        phase_idx / phase_name: the phase its samples came from.
        samples: the global batch, int64 ``(global_batch_size, 2)`` of ``(stream_idx,
            sample_idx)``.
        step_tokens: its non-padding input tokens (global).
        lr: the learning rate of its update.
        loss / token_loss / aux_loss: as in :class:`~curriculum_ds.records.schema.MetricsRow`
            (finite or None).
        valid_tokens: its loss-bearing tokens (global).
        skip_reason: why the model was not updated, or None.
        step_applied: whether DeepSpeed applied the update.
        streams: the per-stream rows (``StreamAccounting.records``).
        sample_losses: float64 ``(global_batch_size,)`` per-sample token-mean losses (nats, NaN
            without loss-bearing tokens) when they were gathered for re-weighting, else None.
        stop_requested: whether any rank was asked to stop (SIGTERM) by the step's end.
    """

    global_step: int
    phase_idx: int
    phase_name: str
    samples: npt.NDArray[np.int64]
    step_tokens: int
    lr: float
    loss: float | None
    token_loss: float | None
    aux_loss: float | None
    valid_tokens: int
    skip_reason: str | None
    step_applied: bool
    streams: dict[str, StreamRow]
    sample_losses: npt.NDArray[np.float64] | None
    stop_requested: bool


class MetricsRow(TypedDict):
    """One optimizer step: a line of ``metrics.jsonl``, what ``Step.finish`` returns."""

    step: int
    """Optimizer steps finished, this one included (1-based, global)."""
    phase: int
    """Index of the phase the step's samples came from."""
    phase_name: str
    """That phase's ``name``."""
    tokens: int
    """Non-padding input tokens consumed so far, cumulative and global."""
    samples: int
    """Samples consumed so far, cumulative and global."""
    progress: str
    """Cumulative progress, exact, in the schedule's unit (``"1200"`` tokens, ``"3/2"`` passes)."""
    loss: float | None
    """What the optimizer saw (nats): the token-mean loss (the mean of micro-batch means in
    ``sample`` weighting) plus ``aux_loss``; None when the step was skipped."""
    token_loss: float | None
    """The token-mean loss alone (nats); None when NaN/inf."""
    aux_loss: float | None
    """Mean of the ``aux_loss`` terms over every micro-batch of the step on every rank (one
    without counting 0); None when no micro-batch had one, or NaN/inf."""
    valid_tokens: int
    """The step's loss-bearing tokens, global: the normaliser of the token-weighted loss."""
    step_tokens: int
    """The step's non-padding input tokens, global (what ``tok`` durations count)."""
    skipped: bool
    """The model was not updated (``skip_reason`` says why)."""
    skip_reason: str | None
    """``"no_loss_tokens"``, ``"nonfinite_loss"``, ``"nonfinite_grad_norm"`` or None."""
    step_applied: bool
    """DeepSpeed applied the update (False also for a fp16 overflow step)."""
    lr: float
    """The learning rate of the step's update."""
    tokens_per_s: float
    """``step_tokens`` over the step's wall time (seconds), evaluations left out; 0.1 rounded."""
    data_wait_s: float
    """Seconds the step's draw waited for its micro-batches on the training thread (deciding,
    reading, collating and copying them to the device); near 0 when they were read ahead
    (``curriculum.prefetch_micro_batches``). 6 decimals."""
    prefetched: int
    """How many of the step's micro-batches on this rank were read ahead, off the training
    thread (0 for the first step of a process and after a recompute, phase swap or evaluation)."""
    phase_epochs: float
    """Passes over the phase's datamix so far (6 decimals)."""
    streams: dict[str, StreamRow]
    """Every stream of the phase, in stream order."""


class WarmupMetricsRow(MetricsRow):
    """A :class:`MetricsRow` of a phase with a ``max_seq_len`` ramp (sequence-length warmup)."""

    seq_len: int
    """The tokens per sample the step's samples were truncated to (a multiple of the loader's
    ``seq_len_multiple``, 8 by default)."""


class EvalStreamRow(TypedDict):
    """One eval stream of an evaluation (``eval.jsonl``'s ``streams``)."""

    loss: float | None
    """Token-mean loss (nats) over the stream's eval tokens on all ranks; None without any."""
    tokens: int
    """The stream's loss-bearing eval tokens, all ranks (a QA stream's: its answers')."""
    exact_match: NotRequired[float | None]
    """A question-answer stream only (``prepare --format qa``): the share of its eval records
    whose every answer token is the model's argmax under teacher forcing, all ranks (in [0, 1];
    higher is better); None without records."""


class EvalRow(TypedDict):
    """One held-out evaluation: a line of ``eval.jsonl``, what ``Curriculum.evaluate`` returns."""

    step: int
    """Optimizer steps done when it ran."""
    tokens: int
    """Cumulative global non-padding train tokens then."""
    phase: int
    """The phase of the step just finished."""
    phase_name: str
    """That phase's name."""
    loss: float | None
    """Token-mean loss over every eval token of every stream and rank (nats)."""
    eval_tokens: int
    """Those loss-bearing tokens."""
    streams: dict[str, EvalStreamRow]
    """Every eval stream, in config order."""
    eval_time_s: float
    """Wall seconds the evaluation took."""


class HistoryRow(TypedDict):
    """One re-weighting recompute: a ``curriculum_history.jsonl`` line (``step.finish().history``).

    The keys after ``phase_name`` are the recompute's record
    (:class:`~curriculum_ds.dynamic.MixtureUpdate`). ``weights`` are over the phase's buckets
    (``unit: "buckets"``) or over its streams (``unit: "streams"``, named by ``streams``).
    """

    step: int
    """The optimizer step that recomputed (global)."""
    phase: int
    """Its phase index."""
    phase_name: str
    """Its phase name."""
    method: NotRequired[str]
    """``dynamic.method`` (absent: ``"softmax"``, as in rows written before it existed)."""
    unit: NotRequired[str]
    """``dynamic.unit``: ``"buckets"`` or ``"streams"`` (absent in rows written before it
    existed: buckets)."""
    signal: NotRequired[str]
    """``dynamic.signal``: ``"loss"``, ``"excess_loss"`` or ``"learnability"``."""
    streams: NotRequired[list[str]]
    """``unit: "streams"``: the phase's stream names, in the order of ``weights``."""
    window_size: NotRequired[int]
    """Samples in the rolling window."""
    num_non_finite: int
    """Of those, the ones whose loss was NaN/inf (left out of the window)."""
    temperature: NotRequired[float]
    """``dynamic.temperature``."""
    floor: NotRequired[float]
    """``dynamic.floor``."""
    weights: list[float]
    """The bucket or stream probabilities, summing to 1."""
    scores: list[float] | None
    """Each bucket's or stream's score fed to the softmax (mean signal in nats, or the relative
    loss drop for learnability); None when the previous weights were kept."""
    edges: NotRequired[list[float]]
    """``unit: "buckets"``: the bucket edges (percentile ranks of the window's signal)."""
    bucket_counts: NotRequired[list[int]]
    """``unit: "buckets"``: window samples per bucket."""
    stream_counts: NotRequired[list[int]]
    """``unit: "streams"``: window samples per stream."""
    mean_losses: NotRequired[list[float | None]]
    """``signal: "learnability"``: each stream's mean loss in the window (nats; None: no
    sample of it there)."""
    kept_previous: NotRequired[bool]
    """True when the previous weights were kept (an empty window; for learnability, no earlier
    recompute in the phase yet)."""
    apply: NotRequired[str]
    """``method: "doremi"``: what the weights drive, ``"sampling"`` or ``"loss"``."""
    average_weights: NotRequired[list[float]]
    """``method: "doremi"``: the running mean of the weights over the phase (the initial weights
    and every update): DoReMi's output (``curriculum-ds mix``)."""
    loss_weights: NotRequired[list[float]]
    """``apply: "loss"``: each stream's loss weight from the next step on, ``(w/p) / Σ(w/p)``."""
    eta: NotRequired[float]
    """``method: "doremi"``: ``dynamic.doremi.eta``."""
    epsilon: NotRequired[float]
    """``method: "doremi"``: ``dynamic.doremi.epsilon``."""
    reason: NotRequired[str]
    """``method: "file"``, with ``kept_previous``: why the file's read was refused (one line)."""
    source: NotRequired[dict[str, str | None]]
    """``method: "file"``: the weights file as read at this recompute, ``{"path", "sha256"}``
    (``sha256`` of its bytes; None when it could not be read)."""
    t: NotRequired[int]
    """``odm``/``ado``: the update's step in the phase (ODM: 1-based, the bandit's ``t``; ADO:
    0-based, the reference's ``itr``)."""
    epsilon_t: NotRequired[float]
    """``odm``: the exploration rate ε_t of the update."""
    rewards: NotRequired[list[float | None]]
    """``odm``: each stream's reward, its mean loss in the step (nats; None: absent)."""
    estimated_reward: NotRequired[list[float]]
    """``odm``: each stream's smoothed reward R̂ after the update."""
    fit: NotRequired[list[dict[str, float]]]
    """``ado``: per stream, the fitted ``E``, ``A`` and ``alpha`` of ``L(n) = e^E + e^A / n^α``."""
    refitted: NotRequired[bool]
    """``ado``: the laws were refitted at this step."""
    stream_losses: NotRequired[list[float | None]]
    """``ado``: each stream's training loss at the step, as its curve holds it (nats)."""
    interaction: NotRequired[list[list[float]]]
    """``aioli``: the round's interaction matrix ``A`` (K×K, normalised and smoothed):
    ``A[j][i]``, stream ``j``'s eval-loss drop from training on stream ``i``; ``scores`` is
    ``Σ_j A``."""
    probe_steps: NotRequired[int]
    """``aioli``: the round's probe steps (``K × lp_rounds × probe_steps``)."""
    eval_losses: NotRequired[list[float | None]]
    """``skillit``: each stream's eval loss at the update (nats; None: not finite)."""


class TraceRow(TypedDict):
    """One optimizer step's samples: a line of ``sample_trace.jsonl``."""

    step: int
    """The optimizer step (global)."""
    phase: int
    """Its phase index."""
    samples: list[list[Any]]
    """The global batch in order, as ``[stream_name, sample_index]`` pairs."""


def metrics_row(
    outcome: StepOutcome,
    *,
    tokens: int,
    samples: int,
    progress: str,
    elapsed_s: float,
    phase_epochs: float,
    data_wait_s: float = 0.0,
    prefetched: int = 0,
    seq_len: int | None = None,
) -> MetricsRow:
    """The ``metrics.jsonl`` row of one optimizer step (the fields of :class:`MetricsRow`).

    The step's own figures are copied from ``outcome`` as they are (its losses are finite or
    None already); the run's counters after the step are given.

    Args:
        outcome: the finished step.
        tokens: cumulative non-padding input tokens after it, global.
        samples: cumulative samples after it, global.
        progress: cumulative progress after it, exact text in the schedule's unit.
        elapsed_s: the step's wall time in seconds (>= 0; evaluations left out), for
            ``tokens_per_s`` (a time under 1 ns counts as 1 ns).
        phase_epochs: passes over the phase's datamix so far (rounded to 6 decimals).
        data_wait_s: seconds the draw waited for the micro-batches (>= 0; rounded to 6
            decimals).
        prefetched: micro-batches of the step read ahead on this rank.
        seq_len: a phase with a ``max_seq_len`` ramp: the length the step's samples were cut to
            (the row is then a :class:`WarmupMetricsRow`); None otherwise (no such key).

    Returns:
        The row, in the key order of :class:`MetricsRow` (``seq_len`` last); ``skipped`` is
        ``skip_reason is not None``. Deterministic; pure.
    """
    row: dict[str, Any] = {
        "step": outcome.global_step,
        "phase": outcome.phase_idx,
        "phase_name": outcome.phase_name,
        "tokens": tokens,
        "samples": samples,
        "progress": progress,
        "loss": outcome.loss,
        "token_loss": outcome.token_loss,
        "aux_loss": outcome.aux_loss,
        "valid_tokens": outcome.valid_tokens,
        "step_tokens": outcome.step_tokens,
        "skipped": outcome.skip_reason is not None,
        "skip_reason": outcome.skip_reason,
        "step_applied": outcome.step_applied,
        "lr": outcome.lr,
        "tokens_per_s": round(outcome.step_tokens / max(elapsed_s, 1e-9), 1),
        "data_wait_s": round(max(data_wait_s, 0.0), 6),
        "prefetched": prefetched,
        "phase_epochs": round(phase_epochs, 6),
        "streams": outcome.streams,
    }
    if seq_len is not None:
        row["seq_len"] = seq_len
    return cast("MetricsRow", row)


class StepResult(dict[str, Any]):
    """What ``Step.finish`` returns: the step's ``metrics.jsonl`` row, read only, and ``history``.

    A ``dict`` of the :class:`MetricsRow` fields (``record["step"]``, ``json.dumps(record)`` and
    ``dict(record)`` work as on the row), which cannot be changed: every row writer gets the
    same values. ``history`` is the step's ``curriculum_history.jsonl`` row
    (:class:`HistoryRow`) when it recomputed the re-weighting, else None.
    """

    def __init__(self, row: MetricsRow, history: HistoryRow | None = None) -> None:
        super().__init__(row)
        self.history = history

    @property
    def row(self) -> MetricsRow:
        """The row as its typed shape (a copy)."""
        return cast("MetricsRow", dict(self))

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a step's metrics row is read only (copy it with dict(record))")

    __setitem__ = __delitem__ = _read_only
    pop = popitem = clear = update = setdefault = __ior__ = _read_only


def history_row(*, step: int, phase: int, phase_name: str, record: dict[str, Any]) -> HistoryRow:
    """The ``curriculum_history.jsonl`` row of a recompute: its step and phase, then ``record``.

    Args:
        step: the optimizer step that recomputed.
        phase: its phase index.
        phase_name: its phase name.
        record: the recompute's fields (:attr:`MixtureUpdate.record
            <curriculum_ds.dynamic.MixtureUpdate.record>`).
    """
    return cast("HistoryRow", {"step": step, "phase": phase, "phase_name": phase_name, **record})
