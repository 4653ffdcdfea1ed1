"""One optimizer step of the curriculum: this rank's micro-batches and the token-weighted backward.

A :class:`Step` is what iterating a :class:`~curriculum_ds.Curriculum` yields. Its micro-batches
are this rank's contiguous slice of the step's global batch, already on the engine's device. The
step's loss-bearing tokens (shifted labels ≠ -100) are counted over every micro-batch and every
rank with one all-reduce when the step is drawn, so each :meth:`Step.backward` can divide by the
global count at once (torchtitan's ``global_valid_tokens``); :func:`curriculum_ds.loss.
scale_micro_batch_loss` is the one place that owns the scaling.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from curriculum_ds.errors import StepError
from curriculum_ds.loss import (
    IGNORE_INDEX,
    engine_grad_divisor,
    global_valid_tokens,
    per_sample_token_losses,
    scale_micro_batch_loss,
)
from curriculum_ds.plugin.accounting import StreamAccounting
from curriculum_ds.plugin.nonfinite import any_rank, update_skipped

if TYPE_CHECKING:
    import numpy.typing as npt

    from curriculum_ds.loader import MicroBatch
    from curriculum_ds.plugin.curriculum import Curriculum

__all__ = ["Step"]


class Step:
    """One optimizer step: draw → every micro-batch ``backward`` → :meth:`finish`.

    Built by the curriculum, never by the user. Every rank holds the same global batch and the
    same counts; each runs its own micro-batches.

    Attributes:
        global_step: the number this step gets once finished (1-based, global).
        phase_idx: index of the phase the step's samples come from.
        phase_name: that phase's ``name``.
        samples: the global batch, int64 ``(global_batch_size, 2)`` of ``(stream_idx,
            sample_idx)`` in global order (the same on every rank).
        micro_batches: this rank's ``gradient_accumulation_steps`` micro-batches, each
            ``micro_batch_size`` samples, tensors on the engine's device.
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
        reweighting: after :meth:`finish`, the dynamic re-weighting's history record when this
            step recomputed the bucket weights (``curriculum_history.jsonl`` fields), else None.
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
        curriculum: Curriculum,
        *,
        global_step: int,
        phase_idx: int,
        phase_name: str,
        samples: npt.NDArray[np.int64],
        micro_batches: list[MicroBatch],
        stream_tokens: npt.NDArray[np.int64],
        stream_names: list[str],
    ) -> None:
        self._curriculum = curriculum
        self.global_step = global_step
        self.phase_idx = phase_idx
        self.phase_name = phase_name
        self.samples = samples
        self.stream_names = stream_names
        self.stream_tokens = stream_tokens
        self.step_tokens = int(stream_tokens.sum())
        engine = curriculum.engine
        self._device = engine.device
        self.micro_batches = [mb.to(self._device) for mb in micro_batches]
        self._mode = curriculum.config.loss_weighting
        self._dp_world_size = curriculum.dp_world_size
        self._collective = dist.is_initialized() and self._dp_world_size > 1
        # Loss-bearing tokens of the whole step, counted before any forward (labels are known):
        # one all-reduce per step over the data-parallel group (none in a world of one).
        self._global_valid = global_valid_tokens(
            [mb.labels for mb in self.micro_batches], device=self._device
        )
        self.global_valid_tokens = int(self._global_valid.item())  # one host sync: decides a skip
        self.skipped = self.global_valid_tokens == 0
        self.nonfinite = False
        self.skip_reason: str | None = "no_loss_tokens" if self.skipped else None
        # > 0 once one of this rank's micro-batch losses (or aux terms) is NaN/inf; kept on
        # device, read once at the step's last micro-batch (after one all-reduce)
        self._local_nonfinite = torch.zeros((), dtype=torch.float64, device=self._device)
        # what DeepSpeed divides the summed gradients by (dp_world_size but for config corners)
        self._grad_divisor = engine_grad_divisor(engine, dp_world_size=self._dp_world_size)
        per_rank = len(samples) // self._dp_world_size
        # each of this rank's samples' sum of token losses (nats) and loss-bearing tokens, in the
        # order of its micro-batches' rows
        self._sample_sums = torch.zeros(per_rank, dtype=torch.float64, device=self._device)
        self._sample_valid = torch.zeros(per_rank, dtype=torch.float64, device=self._device)
        positions = [mb.positions for mb in self.micro_batches]
        self._streams = StreamAccounting(
            stream_names,
            samples,
            stream_tokens,
            np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64),
            self._device,
        )
        self.sample_losses: npt.NDArray[np.float64] | None = None
        # this rank's [sum of micro-batch mean losses / GAS, sum of aux_loss values, number of
        # aux_loss values given, 1 if this rank was asked to stop (SIGTERM)]; the token losses
        # are summed per stream (StreamAccounting); finish()'s one all-reduce sums them all
        self._stats = torch.zeros(4, dtype=torch.float64, device=self._device)
        self._done = [False] * len(self.micro_batches)
        self._finished = False
        self.reweighting: dict[str, Any] | None = None
        # the learning rate this step's optimizer update uses: DeepSpeed's scheduler moves it
        # only after the update, so it is the optimizer's now (first param group)
        self.lr = _optimizer_lr(engine)
        # engine.step() calls so far: each backward here adds exactly one (a loop's own
        # engine.backward/engine.step beside step.backward would apply a second update)
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
        step, on every rank (``curriculum_ds.loss.scale_micro_batch_loss``).

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
        tensor = logits.logits if hasattr(logits, "logits") else logits
        if (
            not isinstance(tensor, torch.Tensor)
            or tensor.dim() != 3
            or tuple(tensor.shape[:2]) != tuple(mb.labels.shape)
        ):
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor)
            raise ValueError(
                f"step.backward: logits must be (batch, seq_len, vocab) = "
                f"({mb.labels.shape[0]}, {mb.labels.shape[1]}, vocab) for this micro-batch, "
                f"got {shape}"
            )
        _check_differentiable("step.backward: logits", tensor)
        _check_aux(aux_loss)
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
        expected = tuple(mb.loss_mask.shape)
        for name, t in (("token_losses", token_losses), ("loss_mask", loss_mask)):
            if tuple(t.shape) != expected:
                raise ValueError(
                    f"step.backward_token_losses: {name} must be (batch, seq_len - 1) = "
                    f"{expected} for this micro-batch, got {tuple(t.shape)}"
                )
        _check_differentiable("step.backward_token_losses: token_losses", token_losses)
        _check_aux(aux_loss)
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
        for idx, candidate in enumerate(self.micro_batches):
            if candidate is mb:
                if self._done[idx]:
                    raise StepError(
                        f"step {self.global_step}: micro-batch {idx} was already sent backward"
                    )
                return idx
        raise StepError(
            f"step {self.global_step}: that micro-batch is not one of this step's "
            f"{len(self.micro_batches)} (use step.micro_batches)"
        )

    def _backward(
        self,
        mb_idx: int,
        loss_sums: torch.Tensor,
        num_valid: torch.Tensor,
        aux_loss: torch.Tensor | None,
    ) -> torch.Tensor:
        """Scale, backpropagate, step the engine, and keep the statistics of the micro-batch."""
        engine = self._curriculum.engine
        num_micro_batches = len(self.micro_batches)
        loss_sum, count = loss_sums.sum(), num_valid.sum()
        self._check_engine_untouched(sum(self._done))
        if not self.skipped:
            loss = scale_micro_batch_loss(
                loss_sum,
                count,
                mode=self._mode,
                global_valid_tokens=self._global_valid,
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
        with torch.no_grad():
            lo = mb_idx * len(num_valid)
            self._sample_sums[lo : lo + len(num_valid)] = loss_sums.double()
            self._sample_valid[lo : lo + len(num_valid)] = num_valid.double()
            self._stats[0] += (loss_sum / count.clamp(min=1)).double() / num_micro_batches
            if aux_loss is not None:
                self._stats[1] += aux_loss.detach().double().to(self._device).sum()
                self._stats[2] += 1
            return (loss_sum / count).detach().float()

    def _check_engine_untouched(self, num_backward: int) -> None:
        """Refuse when the loop called ``engine.step()`` itself beside ``step.backward``."""
        if self._micro_steps0 is None or self.skipped:
            return
        moved = self._curriculum.engine.micro_steps - self._micro_steps0
        if moved != num_backward:
            raise StepError(
                f"step {self.global_step}: engine.step() ran {moved} time(s) for "
                f"{num_backward} micro-batch(es) sent backward; step.backward calls "
                "engine.backward and engine.step itself, do not call them in the loop"
            )

    # -------------------------------------------------------------------------------- finish
    def finish(self) -> dict[str, Any]:
        """End the step: global loss, counters, dynamic weights, exact phase boundary.

        Collective: every rank calls it once, after every one of its micro-batches went
        backward. The phase swap itself happens when the next step is drawn. Its one all-reduce
        also carries each rank's SIGTERM flag: afterwards ``curriculum.stop_requested`` is the
        same on every rank.

        Returns:
            The ``metrics.jsonl`` row: ``step``, ``phase``, ``phase_name``, ``tokens``
            (cumulative non-padding input tokens, global), ``samples`` (cumulative, global),
            ``progress`` (exact text in the schedule's unit), ``loss`` (what the optimizer saw,
            nats: the token-mean loss plus ``aux_loss``; None when skipped), ``token_loss`` (the
            token mean alone; None when NaN/inf), ``aux_loss`` (the mean of the ``aux_loss``
            terms over every micro-batch of the step on every rank, a micro-batch without one
            counting 0; None when no micro-batch had one, or NaN/inf), ``valid_tokens``,
            ``step_tokens``, ``skipped`` (the model was not updated), ``skip_reason`` (see
            :attr:`skip_reason`), ``step_applied`` (False also for a fp16 overflow step DeepSpeed
            did not apply), ``lr``, ``tokens_per_s``, ``phase_epochs`` and ``streams``: ``{name:
            {"samples", "tokens", "loss"}}`` for every stream of the phase, the step's samples
            and non-padding input tokens from that stream (the tokens sum to ``step_tokens``)
            and its token-mean loss (nats) over its loss-bearing tokens on all ranks (None when
            it has none in this step, e.g. no sample, or when NaN/inf). Strict JSON (no NaN).
            The same on every rank.

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
        self._stats[3] = float(self._curriculum.stop_signal.received is not None)
        # the step's statistics, the stop flag and the per-stream loss sums: one all-reduce, one
        # host copy
        stats = torch.cat(
            [self._stats, self._streams.local_sums(self._sample_sums, self._sample_valid)]
        )
        if self._collective:
            dist.all_reduce(stats)
        stats = stats.cpu()
        stop_requested = float(stats[3]) > 0  # the same on every rank
        streams = self._streams.records(stats[4:])
        num_valid = self.global_valid_tokens
        # the step's token losses over all ranks: the sum of the streams' sums
        token_loss = self._streams.loss_sum(stats[4:]) / num_valid if num_valid else None
        sample_loss = float(stats[0]) / self._dp_world_size
        num_terms = len(self.micro_batches) * self._dp_world_size
        aux = float(stats[1]) / num_terms if float(stats[2]) > 0 else None
        gathered = None
        if self._curriculum.dynamic is not None:
            # each sample's mean token loss (nats); NaN without loss-bearing tokens
            local = torch.where(
                self._sample_valid > 0,
                self._sample_sums / self._sample_valid.clamp(min=1),
                float("nan"),
            )
            # one collective: every rank gets the step's per-sample losses, in global order
            if self._collective:
                parts = [torch.empty_like(local) for _ in range(self._dp_world_size)]
                dist.all_gather(parts, local)
                gathered = torch.cat(parts).cpu().numpy()
            else:
                gathered = local.cpu().numpy()
            self.sample_losses = gathered
        self._finished = True
        engine = self._curriculum.engine
        loss = token_loss if self._mode == "token" else sample_loss
        if loss is not None and aux is not None:
            loss += aux
        applied = (not self.skipped) and bool(engine.was_step_applied())
        if self.nonfinite:
            self.skip_reason = "nonfinite_loss"
        elif not self.skipped and not applied and not engine.fp16_enabled():
            # DeepSpeed skipped the update itself: a NaN/inf gradient norm (ZeRO, bf16)
            self.skip_reason = "nonfinite_grad_norm"
        self.skipped = self.skip_reason is not None
        result = {
            "loss": None if self.skipped else _finite_or_none(loss),
            "token_loss": _finite_or_none(token_loss),
            "aux_loss": _finite_or_none(aux),
            "valid_tokens": num_valid,
            "skipped": self.skipped,
            "skip_reason": self.skip_reason,
            "step_applied": applied,
            "streams": streams,
        }
        return self._curriculum._complete_step(
            self, result, gathered, stop_requested=stop_requested
        )

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` has run."""
        return self._finished

    def trace_record(self) -> dict[str, Any]:
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


def _optimizer_lr(engine: Any) -> float:
    """The first param group's learning rate (what the next optimizer update uses).

    Read from the optimizer rather than ``engine.get_lr()``, which asks the scheduler and, before
    its first step, warns and answers 0 whatever the optimizer holds.
    """
    optimizer = getattr(engine, "optimizer", None)
    groups = getattr(optimizer, "param_groups", None)
    if groups:
        return float(groups[0]["lr"])
    return float(engine.get_lr()[0])


def _check_differentiable(what: str, tensor: torch.Tensor) -> None:
    """A loss input must be a float tensor in the autograd graph (not detached, not no_grad)."""
    if not tensor.is_floating_point():
        raise ValueError(f"{what} must be a floating-point tensor, got {tensor.dtype}")
    if not tensor.requires_grad:
        raise ValueError(
            f"{what} does not require grad: computed under torch.no_grad() or detached, so "
            "nothing could go backward"
        )


def _check_aux(aux_loss: object) -> None:
    """``aux_loss`` is None or a one-element tensor (a Python number has no gradient)."""
    if aux_loss is None:
        return
    if not isinstance(aux_loss, torch.Tensor) or aux_loss.numel() != 1:
        got = tuple(aux_loss.shape) if isinstance(aux_loss, torch.Tensor) else type(aux_loss)
        raise ValueError(
            f"aux_loss must be a one-element tensor (this micro-batch's auxiliary term), got {got}"
        )
