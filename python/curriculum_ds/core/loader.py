"""The phase loader: a deterministic global sample order over a phase's datamix.

Each phase of the schedule gets its own loader, built from mosaicml-streaming
``StreamingDataset`` objects (one per stream, local shards, random access) and swapped whole at
the phase boundary. The order of samples is ours, not streaming's, so that it is exact and
resumable whatever the number of ranks:

* **Streams at their proportions.** With ``proportion_unit: "samples"`` (the default) the k-th
  sample of the phase goes to the stream with the largest deficit ``p_s * k - count_s``
  (Megatron-LM's ``build_blending_indices`` rule): no RNG, exact proportions at every prefix
  (error below one sample per stream). With ``"tokens"`` the next slot goes to the stream with
  the largest token deficit ``p_s * T - t_s`` (``T`` non-padding tokens placed so far in the
  phase, ``t_s`` those of stream ``s``, after truncation to ``max_seq_len``) and takes that
  stream's next sample: at every prefix a stream is at most one of its samples above its token
  share (with two streams, neither is further than one sample from it). The sample's length must
  be known before the slot is decided, so each stream keeps a lookahead of up to one global batch
  of already drawn samples (``pending`` in the state). Both rules run in the Rust kernels
  :func:`~curriculum_ds.kernels.blend_samples` / :func:`~curriculum_ds.kernels.blend_tokens`.
* **Mixtures that move.** A stream's proportion may be a ramp (:mod:`curriculum_ds.config.ramps`):
  a step's shares are the ramp's values at the step's start ``fraction`` of the phase, normalised
  over the streams, and the deficit rule tracks the *integral* of that step-wise target
  (``targets`` in the state, float64 per stream, in the proportion unit): after every step each
  stream's count is within one sample (or one sample's tokens) of it. A ``max_seq_len`` ramp
  (sequence-length warmup) truncates a step's samples to its value at the step's start
  (:meth:`~curriculum_ds.config.LoaderConfig.seq_len_at`); token counts, and so durations, count
  the truncated tokens.
* **Samples within a stream** (:mod:`curriculum_ds.core.stream_order`). Order version 2 (the
  default of a new run): the next position of the stream's per-epoch
  :class:`~curriculum_ds.kernels.IndexShuffle`, computed per index (a cursor per stream, 64-bit).
  Version 1 (a run begun before it, and the bucket unit): a
  :class:`curriculum_ds.kernels.BucketSampler` per stream: the next index of a per-epoch
  permutation (one bucket) or of the permutation of a bucket picked by the dynamic re-weighting
  probabilities. Each stream runs through its own epochs;
  an epoch of the datamix (the ``ep`` unit) is ``samples_per_pass`` samples of the phase.
  **Dynamic re-weighting** over buckets (``dynamic.unit: "buckets"``) picks buckets *within* a
  stream and never changes the stream mix, in either unit; over streams (``"streams"``) its
  weights replace the proportions from each recompute on (:meth:`PhaseLoader.apply`):
  the deficit rule then tracks the integral of those step-wise weights, as it tracks a ramp.
  With ``"tokens"`` a sample placed at step t may have been drawn (its bucket
  picked) up to one global batch earlier, i.e. under the bucket probabilities or bucket
  assignment of step t - 1.
* **Global batches.** Every rank computes the same global batch of ``(stream_idx, sample_idx)``
  pairs from (seed, phase_idx, counters) and takes its own contiguous slice, so the sequence of
  global batches depends only on the global batch size, never on how it is split into ranks and
  micro-batches (streaming's rule), and resuming is restoring counters, not RNG blobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from curriculum_ds.core.loader_state import Hold, LoaderState
from curriculum_ds.core.microbatch import MicroBatch, collate
from curriculum_ds.core.sample_reader import SampleReader
from curriculum_ds.core.stream_order import BucketOrder, derive_seed, make_order
from curriculum_ds.data import read_stream_info
from curriculum_ds.data.packing import check_packed_rows
from curriculum_ds.data.streams import sync_remote_stream as _sync_remote
from curriculum_ds.dynamic.update import MixtureUpdate, PhaseView
from curriculum_ds.kernels import BucketSampler, blend_samples, blend_tokens

if TYPE_CHECKING:
    from curriculum_ds.config import PhaseConfig

__all__ = ["MicroBatch", "PhaseLoader", "collate", "derive_seed"]


class PhaseLoader:
    """Deterministic, resumable loader of one phase's datamix.

    Args:
        phase: The phase's config (its ``train_loader`` streams, proportions, ``max_seq_len``).
        phase_idx: Index of the phase in the schedule (mixed into the seeds).
        seed: The run's seed (``curriculum.seed``).
        num_buckets: Buckets of the per-stream samplers (1 without dynamic re-weighting).
        order_version: The run's order of samples within a stream
            (:mod:`~curriculum_ds.core.stream_order`); None: 2, or 1 with buckets.

    The loader holds no RNG: its state is the counters returned by :meth:`state_dict`.
    """

    def __init__(
        self,
        phase: PhaseConfig,
        phase_idx: int,
        *,
        seed: int,
        num_buckets: int = 1,
        order_version: int | None = None,
    ):
        self.phase = phase
        self.phase_idx = phase_idx
        self.seed = seed
        self.num_buckets = num_buckets
        loader = phase.train_loader
        self.max_seq_len = loader.peak_seq_len  # the largest point of a warmup ramp
        self.seq_len = loader.seq_len_at(0.0)  # this step's truncation (moves with a warmup)
        self.stream_names = [s.name or Path(s.local).name for s in loader.streams]
        for name, s in zip(self.stream_names, loader.streams, strict=True):
            if s.remote is not None and not (Path(s.local) / "index.json").is_file():
                _sync_remote(name, s.local, s.remote)  # preflight was skipped (check_data=False)
        self.infos = [read_stream_info(s.local, remote=s.remote) for s in loader.streams]
        for j, info in enumerate(self.infos):  # a packed row is never cut (also preflighted)
            check_packed_rows(
                info,
                self.max_seq_len,
                f"curriculum.schedule[{phase_idx}] ({phase.name!r}).train_loader.streams[{j}]",
            )
        self.reader = SampleReader.for_phase(self.stream_names, loader, self.infos)
        self.moving_mix = loader.is_moving_mix
        # dynamic.unit "streams": the weights of the last recompute, which replace the proportions
        self.stream_weights: npt.NDArray[np.float64] | None = None
        # a temporary mixture (MixtureUpdate.hold_steps): draws left under it, and the stream
        # weights after it (None: the phase's ramp again)
        self.hold: tuple[int, npt.NDArray[np.float64] | None] | None = None
        # dynamic.unit "buckets": the bucket probabilities the samplers draw with
        self.bucket_probs = np.full(num_buckets, 1.0 / num_buckets)
        self.proportions = np.array(loader.proportions_at(0.0), dtype=np.float64)
        # a moving mix only: the integral of each stream's target so far, in the unit counted
        self.targets = np.zeros(len(loader.streams), dtype=np.float64)
        self.loss_weights = np.array([s.loss_weight for s in loader.streams], dtype=np.float64)
        self.samples_per_pass = int(
            loader.epoch_size
            if loader.epoch_size is not None
            else sum(info.num_samples for info in self.infos)
        )
        # input tokens per sample after truncation: what "tok" durations count (no padding)
        self._raw_tokens = [
            np.asarray(info.metrics["num_tokens"], dtype=np.int64) for info in self.infos
        ]
        self.num_tokens = [np.minimum(t, self.seq_len) for t in self._raw_tokens]
        sizes = [info.num_samples for info in self.infos]
        self.order = make_order(order_version, sizes, num_buckets, seed=seed, phase_idx=phase_idx)
        self.proportion_unit = loader.proportion_unit
        self.stream_counts = np.zeros(len(self.infos), dtype=np.int64)
        self.num_samples = 0  # samples drawn in this phase (global)
        # "tokens" only: tokens placed per stream, and each stream's drawn, not yet placed samples
        self.placed_tokens = np.zeros(len(self.infos), dtype=np.int64)
        self.pending = [np.zeros(0, dtype=np.int64) for _ in self.infos]

    # ----------------------------------------------------------------------------- ordering
    def next_global_batch(
        self,
        global_batch_size: int,
        probs: npt.NDArray[np.float64] | None = None,
        *,
        fraction: float = 0.0,
    ) -> npt.NDArray[np.int64]:
        """Draw the next global batch.

        Args:
            global_batch_size: Samples per optimizer step over all ranks and micro-batches.
            probs: Bucket probabilities, float64 ``(num_buckets,)`` summing to 1; None: the
                loader's own (:attr:`bucket_probs`, set by :meth:`apply`; uniform until then).
            fraction: The step's start progress in the phase, in [0, 1] (its consumed share of
                the phase's duration): where ramps are read. Ignored without ramps.

        Returns:
            int64 ``(global_batch_size, 2)`` of ``(stream_idx, sample_idx)`` in global order.
            Deterministic given (seed, phase_idx, counters, probs, fraction). Until the next
            draw, :meth:`stream_tokens` and :meth:`fetch` truncate to this step's ``seq_len``.
        """
        if probs is None:
            probs = self.bucket_probs
        self._count_down_hold()
        loader = self.phase.train_loader
        seq_len = loader.seq_len_at(fraction)
        if seq_len != self.seq_len:
            self.seq_len = seq_len
            self.num_tokens = [np.minimum(t, seq_len) for t in self._raw_tokens]
        if self.stream_weights is not None:
            self.proportions = self.stream_weights
        elif self.moving_mix:
            self.proportions = np.array(loader.proportions_at(fraction), dtype=np.float64)
        if self.proportion_unit == "tokens":
            return self._next_by_tokens(global_batch_size, probs)
        num_streams = len(self.infos)
        if self._tracks_targets:  # the slots of this call count from 1 over the targets so far
            stream_of_slot = blend_samples(
                self.proportions, self.stream_counts, 0, global_batch_size, base=self.targets
            )
            self.targets = self.targets + self.proportions * global_batch_size
        else:
            stream_of_slot = blend_samples(
                self.proportions, self.stream_counts, self.num_samples, global_batch_size
            )
        self.stream_counts += np.bincount(stream_of_slot, minlength=num_streams)
        self.num_samples += global_batch_size
        batch = np.empty((global_batch_size, 2), dtype=np.int64)
        batch[:, 0] = stream_of_slot
        batch[:, 1] = self.order.take(stream_of_slot, probs)
        return batch

    def _next_by_tokens(
        self, global_batch_size: int, probs: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.int64]:
        """:meth:`next_global_batch` for ``proportion_unit: "tokens"``.

        Every stream's lookahead is first topped up to ``global_batch_size`` samples (the most
        slots one stream can get), so the largest-deficit rule always knows the next sample's
        length; the samples it does not place stay pending for the next batches.
        """
        for stream in range(len(self.infos)):
            missing = global_batch_size - len(self.pending[stream])
            if missing > 0:
                self.pending[stream] = np.concatenate(
                    [self.pending[stream], self.order.next(stream, missing, probs)]
                )
        lengths = [self.num_tokens[s][p] for s, p in enumerate(self.pending)]
        base = self.targets if self._tracks_targets else None
        stream_of_slot = blend_tokens(
            self.proportions, self.placed_tokens, lengths, global_batch_size, base=base
        )
        placed_before = int(self.placed_tokens.sum())
        batch = np.empty((global_batch_size, 2), dtype=np.int64)
        batch[:, 0] = stream_of_slot
        for stream in range(len(self.infos)):
            slots = np.flatnonzero(stream_of_slot == stream)
            taken = len(slots)
            batch[slots, 1] = self.pending[stream][:taken]
            self.placed_tokens[stream] += int(lengths[stream][:taken].sum())
            self.stream_counts[stream] += taken
            self.pending[stream] = self.pending[stream][taken:]
        self.num_samples += global_batch_size
        if self._tracks_targets:
            self.targets = self.targets + self.proportions * (
                int(self.placed_tokens.sum()) - placed_before
            )
        return batch

    @property
    def _tracks_targets(self) -> bool:
        """Whether the deficit rule follows ``targets`` (a moving mix, or stream weights)."""
        return self.moving_mix or self.stream_weights is not None

    def view(self) -> PhaseView:
        """The phase as a re-weighting reads it (names, proportions, sizes, metric columns)."""
        return PhaseView(
            phase_idx=self.phase_idx,
            stream_names=tuple(self.stream_names),
            proportions=self.proportions.copy(),
            num_samples=tuple(info.num_samples for info in self.infos),
            metrics=tuple(info.metrics for info in self.infos),
            seed=self.seed,
        )

    def apply(self, update: MixtureUpdate) -> None:
        """Apply a re-weighting's update from the next draw: the one place one reaches the loader.

        Bucket assignments and probabilities go to the samplers, proportions replace the phase's
        (:meth:`set_proportions`; with ``hold_steps``, for that many draws only, then the
        stream weights of before come back: the last recompute's, the phase's ramp, or its
        static proportions), loss weights replace the streams' ``loss_weight``.

        Raises:
            ValueError: a field does not fit this phase (its number of streams or buckets, a
                weight not > 0, loss weights negative or all 0).
            SamplingError: an assignment has the wrong length or a bucket out of range.
        """
        if update.buckets is not None:
            self.set_buckets(update.buckets)
        if update.bucket_probs is not None:
            probs = np.asarray(update.bucket_probs, dtype=np.float64)
            if probs.shape != (self.num_buckets,):
                raise ValueError(f"bucket probabilities {probs.tolist()} for {self.num_buckets}")
            self.bucket_probs = probs.copy()
        if update.loss_weights is not None:
            weights = np.asarray(update.loss_weights, dtype=np.float64)
            if (
                weights.shape != self.loss_weights.shape
                or (weights < 0).any()
                or weights.sum() <= 0
            ):
                raise ValueError(f"loss weights {weights.tolist()} do not fit the phase's streams")
            self.loss_weights = weights.copy()
        if update.proportions is not None:
            before = self.stream_weights
            if before is None and not self.moving_mix:  # static: its own shares, tracked
                before = self.proportions.copy()
            self.set_proportions(update.proportions)
            self.hold = None if update.hold_steps is None else (update.hold_steps, before)

    def _count_down_hold(self) -> None:
        """A draw under a temporary mixture: the mixture of before comes back after the last."""
        if self.hold is None:
            return
        left, after = self.hold
        if left == 0:
            self.stream_weights, self.hold = after, None
        else:
            self.hold = (left - 1, after)

    def set_proportions(self, weights: npt.NDArray[np.float64]) -> None:
        """Replace the phase's stream proportions from the next draw on (``unit: "streams"``).

        From the first call on, the largest-deficit rule tracks ``targets``: the integral of the
        step-wise proportions, in the ``proportion_unit``, started at what each stream already
        has, so the new weights apply to what is drawn from now on (no catching up on the past).
        A ramp of the phase is overridden. Saved by :meth:`state_dict` (``stream_weights``).

        Args:
            weights: float64 ``(num_streams,)``, every entry > 0, summing to 1.

        Raises:
            ValueError: a shape other than ``(num_streams,)``, or an entry that is not > 0.
        """
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (len(self.infos),) or not (weights > 0).all():
            raise ValueError(
                f"stream weights {weights.tolist()} do not fit a phase of {len(self.infos)} "
                "stream(s) (each > 0)"
            )
        if not self._tracks_targets:
            counted = self.placed_tokens if self.proportion_unit == "tokens" else self.stream_counts
            self.targets = counted.astype(np.float64)
        self.stream_weights = weights.copy()

    def set_buckets(self, buckets: Sequence[npt.NDArray[np.int64]]) -> None:
        """Give each stream's sampler a new bucket assignment (from the dynamic re-weighting).

        Args:
            buckets: per stream, int64 ``(num_samples,)`` bucket of every sample in
                ``[0, num_buckets)``.

        Raises:
            ValueError: if the number of streams differs.
            SamplingError: if an assignment has the wrong length or a bucket out of range.
        """
        if len(buckets) != len(self.infos):
            raise ValueError(f"{len(buckets)} bucket assignments for {len(self.infos)} streams")
        self.order.set_buckets(buckets)

    @property
    def samplers(self) -> list[BucketSampler]:
        """Order version 1's per-stream samplers (none in version 2)."""
        return self.order.samplers if isinstance(self.order, BucketOrder) else []

    @property
    def order_version(self) -> int:
        """The order of samples within a stream (:mod:`~curriculum_ds.core.stream_order`)."""
        return self.order.version

    def batch_tokens(self, batch: npt.NDArray[np.int64]) -> int:
        """Non-padding input tokens of a global batch (after truncation to ``max_seq_len``)."""
        return int(self.stream_tokens(batch).sum())

    def stream_tokens(self, batch: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Non-padding input tokens of a global batch per stream of the phase.

        Args:
            batch: int64 ``(n, 2)`` of ``(stream_idx, sample_idx)``, as drawn.

        Returns:
            int64 ``(num_streams,)``: stream s's tokens (after truncation to ``max_seq_len``);
            0 for a stream without samples in the batch. Sums to :meth:`batch_tokens`.
        """
        out = np.zeros(len(self.num_tokens), dtype=np.int64)
        for stream, tokens in enumerate(self.num_tokens):
            rows = batch[batch[:, 0] == stream, 1]
            if len(rows):
                out[stream] = int(tokens[rows].sum())
        return out

    def epochs_done(self) -> float:
        """Passes over the datamix so far in this phase (``num_samples / samples_per_pass``)."""
        return self.num_samples / self.samples_per_pass

    # ----------------------------------------------------------------------------- reading
    def fetch(self, pairs: npt.NDArray[np.int64]) -> list[npt.NDArray[np.int32]]:
        """The token arrays of ``(stream_idx, sample_idx)`` pairs, cut to this step's seq_len."""
        return self.reader.fetch(pairs, self.seq_len)

    def micro_batches(
        self,
        batch: npt.NDArray[np.int64],
        *,
        dp_rank: int,
        dp_world_size: int,
        micro_batch_size: int,
    ) -> list[MicroBatch]:
        """This rank's micro-batches of a global batch: a contiguous slice, in order."""
        sizes = {"dp_rank": dp_rank, "dp_world_size": dp_world_size}
        return self.reader.micro_batches(
            batch, self.seq_len, **sizes, micro_batch_size=micro_batch_size
        )

    # ----------------------------------------------------------------------------- state
    @property
    def stream_sizes(self) -> tuple[int, ...]:
        """Each stream's number of samples."""
        return tuple(info.num_samples for info in self.infos)

    def state(self) -> LoaderState:
        """The counters a resume inside this phase needs (:class:`LoaderState`). Deterministic."""
        tokens = self.proportion_unit == "tokens"
        weights = self.stream_weights
        # the loader's own counters, of the declared types: not validated again (once per step)
        return LoaderState.model_construct(
            phase_idx=self.phase_idx,
            num_samples=self.num_samples,
            stream_counts=tuple(self.stream_counts.tolist()),
            samplers=self.order.state(),
            order_version=2 if self.order.version == 2 else None,
            proportion_unit="tokens" if tokens else None,
            stream_tokens=tuple(self.placed_tokens.tolist()) if tokens else None,
            pending=tuple(tuple(p.tolist()) for p in self.pending) if tokens else None,
            # floats round-trip exactly through JSON and torch.save
            targets=tuple(self.targets.tolist()) if self._tracks_targets else None,
            stream_weights=None if weights is None else tuple(weights.tolist()),
            hold=None if self.hold is None else Hold.of(*self.hold),
            document_masking=self.reader.masks_documents or None,
        )

    def restore(self, state: LoaderState) -> None:
        """Continue from a :meth:`state` of this phase (same phase, same data).

        Raises:
            ValueError: the state does not fit this phase (:meth:`LoaderState.fit`); nothing
                changes.
            SamplingError: a sampler state is refused by its kernel.
        """
        state.fit(self)
        self.order.restore(state.samplers)
        zeros = (0,) * len(self.infos)
        tokens = self.proportion_unit == "tokens"  # fit: then stream_tokens and pending are set
        self.num_samples = state.num_samples
        self.stream_counts = np.array(state.stream_counts, dtype=np.int64)
        self.placed_tokens = np.array((tokens and state.stream_tokens) or zeros, dtype=np.int64)
        pending = (tokens and state.pending) or [()] * len(zeros)
        self.pending = [np.array(p, dtype=np.int64) for p in pending]
        weights = state.stream_weights
        self.stream_weights = None if weights is None else np.array(weights, dtype=np.float64)
        targets = (self._tracks_targets and state.targets) or zeros  # fit: set when tracked
        self.targets = np.array(targets, dtype=np.float64)
        self.hold = None if state.hold is None else state.hold.pair()
        if state.document_masking is None:  # begun unmasked (a checkpoint of before): stays so
            self.reader.stop_document_masking()

    def state_dict(self) -> dict[str, Any]:
        """:meth:`state` in its saved form (:meth:`LoaderState.to_dict`): plain ints and lists."""
        return self.state().to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """:meth:`restore` from a :meth:`state_dict` (read by :meth:`LoaderState.from_dict`).

        Raises:
            ResumeError: a key is missing or mistyped (one line naming it); else as
                :meth:`restore`.
        """
        self.restore(LoaderState.from_dict(state))

    def close(self) -> None:
        """Release the streaming datasets (their shared memory), the maps."""
        self.reader.close()
