"""One optimizer step of the curriculum: this rank's micro-batches and the token-weighted backward.

A :class:`Step` is what iterating a :class:`~curriculum_ds.Curriculum` yields. Its micro-batches
are this rank's contiguous slice of the step's global batch, already on the engine's device. The
step's loss-bearing tokens (shifted labels ≠ -100) are counted over every micro-batch and every
rank with one all-reduce when the step is drawn, so each :meth:`Step.backward` can divide by the
global count at once (torchtitan's ``global_valid_tokens``); :func:`curriculum_ds.core.loss.
scale_micro_batch_loss` is the one place that owns the scaling.

A step is built from plain values, as :class:`~curriculum_ds.plugin.evaluation.Evaluator` is:
the engine, its :class:`~curriculum_ds.distributed.Topology`, the loss weighting, the lr, a stop
flag and a completion callback. It never sees the curriculum: :meth:`Step.finish` hands a
:class:`~curriculum_ds.records.schema.StepOutcome` to the callback and returns its rows.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from curriculum_ds.core.loss import (
    IGNORE_INDEX,
    engine_grad_divisor,
    per_sample_token_losses,
    scale_micro_batch_loss,
)
from curriculum_ds.errors import StepError
from curriculum_ds.plugin.accounting import StreamAccounting
from curriculum_ds.plugin.inputs import check_aux, check_token_losses, logits_tensor
from curriculum_ds.plugin.micro_batches import StepMicroBatches
from curriculum_ds.plugin.nonfinite import any_rank, update_skipped
from curriculum_ds.plugin.normaliser import StepNormaliser
from curriculum_ds.plugin.stats import StepStats
from curriculum_ds.records.schema import StepOutcome, StepResult

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy.typing as npt

    from curriculum_ds.core.loader import MicroBatch
    from curriculum_ds.distributed import Topology
    from curriculum_ds.plugin.engine_like import EngineLike
    from curriculum_ds.records.schema import HistoryRow, MetricsRow, TraceRow

    Complete = Callable[[StepOutcome], tuple[MetricsRow, HistoryRow | None]]
    """The completion callback: a finished step's outcome -> its metrics and history rows."""

__all__ = ["Step"]


class Step:
    """One optimizer step: draw → every micro-batch ``backward`` → :meth:`finish`.

    Built by the curriculum, never by the user. Every rank holds the same global batch and the
    same counts; each runs its own micro-batches.

    Args:
        engine: the engine the micro-batches go through (:class:`~curriculum_ds.plugin.
            engine_like.EngineLike`); ``backward`` calls its ``backward`` and ``step``.
        topology: the data-parallel ranks (this rank takes its slice of ``samples``).
        loss_weighting: ``"token"`` (every loss-bearing token of the step weighs the same) or
            ``"sample"`` (DeepSpeed's mean of micro-batch means).
        lr: the learning rate of this step's update (the curriculum read it from the optimizer
            when it drew the step).
        stop_flag: asked once, in :meth:`finish`: whether this rank was asked to stop (SIGTERM).
        gather_sample_losses: whether :meth:`finish` gathers every sample's loss (dynamic
            re-weighting needs them).
        complete: the completion callback: gets the step's :class:`~curriculum_ds.plugin.
            completion.StepOutcome` once and returns its metrics row and history row (None when
            it did not recompute the weights).
        global_step / phase_idx / phase_name / samples / micro_batches / stream_tokens: see the
            attributes; ``micro_batches`` are moved to the engine's device.
        stream_names: the phase's stream names, in ``stream_idx`` order.
        loss_weights: float64 ``(num_streams,)``, each stream's ``loss_weight`` (> 0), or None
            when every weight is 1 (the plain token mean). With weights the step's objective is
            ``sum(w * loss) / sum(w)`` over its loss-bearing tokens (token weighting only).

    Attributes:
        global_step: the number this step gets once finished (1-based, global).
        phase_idx: index of the phase the step's samples come from.
        phase_name: that phase's ``name``.
        samples: the global batch, int64 ``(global_batch_size, 2)`` of ``(stream_idx,
            sample_idx)`` in global order (the same on every rank).
        micro_batches: this rank's ``gradient_accumulation_steps`` micro-batches, each
            ``micro_batch_size`` samples on the engine's device, each taken when first used
            (:class:`~curriculum_ds.plugin.micro_batches.StepMicroBatches`).
        step_tokens: non-padding input tokens of the global batch (all ranks): what ``tok``
            durations count.
        global_valid_tokens: loss-bearing tokens of the global batch (all ranks, all
            micro-batches): the normaliser of the token-weighted loss.
        skipped: True when ``global_valid_tokens == 0``: no micro-batch on any rank bears a loss,
            so ``backward`` only records and the model is not updated (the samples still count).
            After :meth:`finish`, also True for a non-finite step (:attr:`skip_reason`).
        nonfinite: True once the step's last micro-batch went backward if the step's global
            loss (any micro-batch's token-loss sum or ``aux_loss`` on any rank) is NaN or
            infinite: DeepSpeed's step then applies no update on any rank (weights, optimizer
            state and lr scheduler unchanged, the gradients discarded).
        skip_reason: after :meth:`finish`, why the model was not updated: ``"no_loss_tokens"``,
            ``"nonfinite_loss"``, ``"nonfinite_grad_norm"`` (DeepSpeed found a NaN/inf gradient
            norm under ZeRO or bf16 and skipped the update itself; not counted under fp16, where
            that is the loss scaler's ordinary overflow), or None.
        sample_losses: after :meth:`finish` with dynamic re-weighting on (which gathers them), the
            token-mean loss (nats) of every sample of the global batch, float64
            ``(global_batch_size,)`` in global order, NaN for a sample without loss-bearing
            tokens; the same on every rank. None otherwise.
        stream_tokens: int64 ``(num_streams,)``, ``step_tokens`` per stream of the phase.
        lr: the learning rate of this step's optimizer update (the optimizer's first param
            group when the step is drawn; a scheduler moves it only after the update).
    """

    def __init__(
        self,
        engine: EngineLike,
        *,
        topology: Topology,
        loss_weighting: Literal["token", "sample"],
        lr: float,
        stop_flag: Callable[[], bool],
        gather_sample_losses: bool,
        complete: Complete,
        global_step: int,
        phase_idx: int,
        phase_name: str,
        samples: npt.NDArray[np.int64],
        micro_batches: Sequence[MicroBatch],
        stream_tokens: npt.NDArray[np.int64],
        stream_names: list[str],
        loss_weights: npt.NDArray[np.float64] | None = None,
    ) -> None:
        self._engine = engine
        self._stop_flag = stop_flag
        self._gather = gather_sample_losses
        self._complete = complete
        self.global_step = global_step
        self.phase_idx = phase_idx
        self.phase_name = phase_name
        self.samples = samples
        self.stream_names = stream_names
        self.stream_tokens = stream_tokens
        self.step_tokens = int(stream_tokens.sum())
        self._device = engine.device
        self.micro_batches = StepMicroBatches.of(micro_batches, self._device)
        self._mode = loss_weighting
        self._dp_world_size = topology.dp_world_size
        self._collective = topology.collective
        # Loss-bearing tokens of the whole step (and, with loss weights, their summed weights),
        # counted before any forward (labels are known): one all-reduce per step over the
        # data-parallel group (none in a world of one)
        self._norm = StepNormaliser(self.micro_batches, samples, loss_weights, self._device)
        self._global_valid = self._norm.global_valid
        self.global_valid_tokens = int(self._global_valid.item())  # one host sync: decides a skip
        self.skipped = self.global_valid_tokens == 0
        self.nonfinite = False
        self.skip_reason: str | None = "no_loss_tokens" if self.skipped else None
        # > 0 once one of this rank's micro-batch losses (or aux terms) is NaN/inf; kept on
        # device, read once at the step's last micro-batch (after one all-reduce)
        self._local_nonfinite = torch.zeros((), dtype=torch.float64, device=self._device)
        # what DeepSpeed divides the summed gradients by (dp_world_size but for config corners)
        self._grad_divisor = engine_grad_divisor(engine, dp_world_size=self._dp_world_size)
        # this rank's per-sample sums and step statistics, summed over the ranks by finish()'s one
        # all-reduce together with the per-stream sums (StreamAccounting)
        self._stats = StepStats(
            samples_per_rank=len(samples) // self._dp_world_size,
            num_micro_batches=len(self.micro_batches),
            dp_world_size=self._dp_world_size,
            collective=self._collective,
            device=self._device,
        )
        positions = self.micro_batches.positions
        self._streams = StreamAccounting(
            stream_names,
            samples,
            stream_tokens,
            np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64),
            self._device,
        )
        self.sample_losses: npt.NDArray[np.float64] | None = None
        self._done = [False] * len(self.micro_batches)
        self._finished = False
        self._history: HistoryRow | None = None
        self.lr = lr
        # engine.step() calls so far: each backward here adds exactly one (not the loop's own)
        self._micro_steps0 = getattr(engine, "micro_steps", None)

    # ------------------------------------------------------------------------------ backward
    def backward(
        self, logits: Any, mb: MicroBatch, *, aux_loss: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token-weighted backward of one micro-batch from its logits, then ``engine.step()``.

        Computes next-token cross-entropy against ``mb.labels`` (shifted inside: position t
        predicts token t+1) and backpropagates ``sum of the micro-batch's token losses ×
        dp_world_size / global_valid_tokens`` with DeepSpeed's 1/GAS off, so that after the
        step's last micro-batch the optimizer sees the mean over every loss-bearing token of the
        step, on every rank (``curriculum_ds.core.loss.scale_micro_batch_loss``).

        Args:
            logits: the model's output for ``mb.input_ids``: a float tensor ``(micro_batch_size,
                seq_len, vocab)`` (any float dtype; the loss is computed in fp32), or an object
                with ``.logits`` (HF ``CausalLMOutput``).
            mb: one of :attr:`micro_batches`, each sent backward exactly once.
            aux_loss: an optional scalar auxiliary term of this micro-batch (e.g. an MoE
                load-balancing loss, already multiplied by its coefficient). The optimizer sees
                the mean of ``aux_loss`` over every micro-batch of the step on every rank, added
                to the token-mean loss: it is backpropagated × ``dp_world_size / (GAS ×
                dp_world_size)`` = 1/GAS, DeepSpeed's usual micro-batch scaling.

        Returns:
            The micro-batch's token-mean loss (nats), a detached fp32 scalar (NaN when it has no
            loss-bearing token). For logging; it is not what was backpropagated.

        Raises:
            StepError: ``mb`` is not a micro-batch of this step, was already sent backward, or
                the step is finished.
            ValueError: ``logits`` is not a float ``(micro_batch_size, seq_len, vocab)`` tensor for
                ``mb`` that requires grad, or ``aux_loss`` is not a one-element tensor (checked
                before anything goes backward).
        """
        tensor = logits_tensor(logits, mb)
        check_aux(aux_loss)
        mb_idx = self._claim(mb)
        loss_sums, num_valid = per_sample_token_losses(tensor, mb.labels)
        return self._backward(mb_idx, loss_sums, num_valid, aux_loss)

    def backward_token_losses(
        self,
        token_losses: torch.Tensor,
        loss_mask: torch.Tensor,
        mb: MicroBatch,
        *,
        aux_loss: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Token-weighted backward of per-token losses the user computed, then ``engine.step()``.

        For a custom head, label smoothing, a z-loss: anything that gives one loss per token.

        The scaling is that of :meth:`backward`: ``sum(token_losses[loss_mask]) ×
        dp_world_size / global_valid_tokens``. The normaliser was counted from the labels when
        the step was drawn, so the mask must be the micro-batch's own :attr:`MicroBatch.
        loss_mask` (to leave tokens out of the loss, e.g. a prompt, set their labels to
        ``IGNORE_INDEX`` in the data). Positions outside the mask are ignored, even if NaN.

        Args:
            token_losses: float ``(micro_batch_size, seq_len - 1)``, the loss (nats) of
                predicting token t+1 at position t, aligned with ``mb.labels[:, 1:]``.
            loss_mask: bool (or 0/1) ``(micro_batch_size, seq_len - 1)``, equal to
                ``mb.loss_mask``.
            mb: one of :attr:`micro_batches`, each sent backward exactly once.
            aux_loss: as in :meth:`backward`.

        Returns:
            The micro-batch's token-mean loss (nats), detached fp32 (NaN without loss tokens).

        Raises:
            StepError: ``mb`` is not a micro-batch of this step, was already sent backward, the
                step is finished, or ``loss_mask`` selects other tokens than ``mb.loss_mask``.
            ValueError: a shape is not ``(micro_batch_size, seq_len - 1)``, ``token_losses`` is
                not a float tensor that requires grad, or ``aux_loss`` is not a one-element
                tensor (checked before anything goes backward).
        """
        check_token_losses(token_losses, loss_mask, mb)
        check_aux(aux_loss)
        mask = loss_mask.to(device=mb.loss_mask.device, dtype=torch.bool)
        if not torch.equal(mask, mb.loss_mask):
            raise StepError(
                f"step {self.global_step}: loss_mask selects "
                f"{int(mask.sum())} tokens where the labels bear {int(mb.loss_mask.sum())}; the "
                "normaliser was counted from the labels, so mask tokens out by setting their "
                f"labels to {IGNORE_INDEX}"
            )
        mb_idx = self._claim(mb)
        masked = torch.where(mask, token_losses.float(), torch.zeros((), device=mask.device))
        return self._backward(mb_idx, masked.sum(dim=1), mask.sum(dim=1), aux_loss)

    def _claim(self, mb: MicroBatch) -> int:
        if self._finished:
            raise StepError(f"step {self.global_step} is finished: draw the next step")
        idx = self.micro_batches.index_of(mb)
        if idx is None:
            raise StepError(
                f"step {self.global_step}: that micro-batch is not one of this step's "
                f"{len(self.micro_batches)} (use step.micro_batches)"
            )
        if self._done[idx]:
            raise StepError(f"step {self.global_step}: micro-batch {idx} was already sent backward")
        return idx

    def _backward(
        self,
        mb_idx: int,
        loss_sums: torch.Tensor,
        num_valid: torch.Tensor,
        aux_loss: torch.Tensor | None,
    ) -> torch.Tensor:
        """Scale, backpropagate, step the engine, and keep the statistics of the micro-batch."""
        engine = self._engine
        num_micro_batches = len(self.micro_batches)
        loss_sum, count = loss_sums.sum(), num_valid.sum()
        self._check_engine_untouched(sum(self._done))
        if not self.skipped:
            loss = scale_micro_batch_loss(  # loss weights: sum(w * loss) / the step's sum(w)
                self._norm.numerator(mb_idx, loss_sums, loss_sum),
                count,
                mode=self._mode,
                global_valid_tokens=self._norm.denominator,
                dp_world_size=self._dp_world_size,
                grad_divisor=self._grad_divisor,
            )
            if aux_loss is not None:
                # the optimizer sees the mean of aux over all micro-batches and ranks: DeepSpeed
                # divides by grad_divisor (= dp_world_size) and, in sample mode, by GAS itself
                aux_scale = (
                    self._grad_divisor / (num_micro_batches * self._dp_world_size)
                    if self._mode == "token"
                    else 1.0
                )
                loss = loss + aux_loss * aux_scale
            # token mode: our factor is the whole normalisation, so DeepSpeed's 1/GAS is off
            engine.backward(loss, scale_wrt_gas=(self._mode == "sample"))
            with torch.no_grad():
                self._local_nonfinite += (~torch.isfinite(loss.detach())).double().sum()
            if sum(self._done) == num_micro_batches - 1:  # the accumulation boundary
                # every rank agrees (one all-reduce) before DeepSpeed's step, which either
                # updates everywhere or nowhere
                self.nonfinite = any_rank(self._local_nonfinite, collective=self._collective)
            if self.nonfinite:
                with update_skipped(engine):
                    engine.step()
            else:
                engine.step()
        self._done[mb_idx] = True
        return self._stats.add_micro_batch(
            mb_idx, loss_sums, num_valid, aux_loss, loss_sum=loss_sum, count=count
        )

    def _check_engine_untouched(self, num_backward: int) -> None:
        """Refuse when the loop called ``engine.step()`` itself beside ``step.backward``."""
        if self._micro_steps0 is None or self.skipped:
            return
        moved = self._engine.micro_steps - self._micro_steps0
        if moved != num_backward:
            raise StepError(
                f"step {self.global_step}: engine.step() ran {moved} time(s) for "
                f"{num_backward} micro-batch(es) sent backward; step.backward calls "
                "engine.backward and engine.step itself, do not call them in the loop"
            )

    # -------------------------------------------------------------------------------- finish
    def finish(self) -> StepResult:
        """End the step: global loss, counters, dynamic weights, exact phase boundary.

        Collective: every rank calls it once, after every one of its micro-batches went
        backward. The phase swap itself happens when the next step is drawn. Its one all-reduce
        also carries each rank's stop flag (SIGTERM): afterwards ``curriculum.stop_requested`` is
        the same on every rank. The counters, re-weighting and row come from the completion
        callback, which gets the step's outcome once.

        Returns:
            A :class:`~curriculum_ds.records.schema.StepResult`: the ``metrics.jsonl`` row, read
            only (:class:`~curriculum_ds.records.schema.MetricsRow`, each field documented
            there), whose ``history`` is the step's ``curriculum_history.jsonl`` row when it
            recomputed the re-weighting (else None). Strict JSON (no NaN); the same on every
            rank.

        Raises:
            StepError: a micro-batch has not gone backward, or the step is already finished
                (nothing is written, no counter moves).
        """
        if self._finished:
            raise StepError(f"step {self.global_step} is already finished")
        missing = [i for i, done in enumerate(self._done) if not done]
        if missing:
            raise StepError(
                f"step {self.global_step}: finish() before micro-batch(es) "
                f"{', '.join(map(str, missing))} of {len(self._done)} went backward "
                "(step.backward(logits, mb) for each of step.micro_batches)"
            )
        self._check_engine_untouched(len(self._done))
        # the step's statistics, the stop flag and the per-stream loss sums: one all-reduce, one
        # host copy; the same on every rank
        stats = self._stats
        totals = stats.all_reduce(
            self._streams.local_sums(stats.sample_sums, stats.sample_valid),
            stop=self._stop_flag(),
        )
        streams = self._streams.records(totals.tail)
        num_valid = self.global_valid_tokens
        # the step's token losses over all ranks: the sum of the streams' sums
        token_loss = self._streams.loss_sum(totals.tail) / num_valid if num_valid else None
        objective = self._norm.objective(totals.tail[: len(self.stream_names)].tolist(), token_loss)
        aux = totals.aux_loss
        if self._gather:  # one all-gather: every sample's mean token loss, in global order
            self.sample_losses = stats.sample_losses()
        self._finished = True
        engine = self._engine
        loss = objective if self._mode == "token" else totals.sample_mean_loss
        if loss is not None and aux is not None:
            loss += aux
        applied = (not self.skipped) and bool(engine.was_step_applied())
        if self.nonfinite:
            self.skip_reason = "nonfinite_loss"
        elif not self.skipped and not applied and not engine.fp16_enabled():
            # DeepSpeed skipped the update itself: a NaN/inf gradient norm (ZeRO, bf16)
            self.skip_reason = "nonfinite_grad_norm"
        self.skipped = self.skip_reason is not None
        outcome = StepOutcome(
            global_step=self.global_step,
            phase_idx=self.phase_idx,
            phase_name=self.phase_name,
            samples=self.samples,
            step_tokens=self.step_tokens,
            lr=self.lr,
            loss=None if self.skipped else _finite_or_none(loss),
            token_loss=_finite_or_none(token_loss),
            aux_loss=_finite_or_none(aux),
            valid_tokens=num_valid,
            skip_reason=self.skip_reason,
            step_applied=applied,
            streams=streams,
            sample_losses=self.sample_losses,
            stop_requested=totals.stop_requested,
        )
        record, self._history = self._complete(outcome)
        return StepResult(record, self._history)

    @property
    def reweighting(self) -> HistoryRow | None:
        """Deprecated: ``step.finish().history``. The step's history row, or None."""
        message = "step.reweighting is deprecated: use step.finish().history"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return self._history

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` has run."""
        return self._finished

    def trace_record(self) -> TraceRow:
        """The ``sample_trace.jsonl`` row of this step.

        ``step``, ``phase``, and ``samples``: the global batch as ``[stream name, sample_index]``
        pairs, in order.
        """
        names = self.stream_names
        return {
            "step": self.global_step,
            "phase": self.phase_idx,
            "samples": [[names[s], int(i)] for s, i in self.samples],
        }


def _finite_or_none(value: float | None) -> float | None:
    """``value``, or None when it is None, NaN or infinite (metrics rows are strict JSON)."""
    return value if value is not None and math.isfinite(value) else None
