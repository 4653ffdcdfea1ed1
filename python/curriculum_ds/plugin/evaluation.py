"""Held-out evaluation (``curriculum.eval``): a fixed eval set, an exact distributed loss.

:class:`Evaluator` owns the eval set of a run and says when an evaluation is due; the
:class:`~curriculum_ds.Curriculum` exposes it as ``curriculum.eval_due`` and
``curriculum.evaluate()`` (the reference loop calls exactly those).

* **The eval set is fixed.** Each stream contributes its first ``max_samples`` samples (fewer when
  it holds fewer), in index order, truncated to ``max_seq_len`` tokens: the same samples at every
  evaluation, in every run, whatever the number of ranks. Rank ``r`` of ``W`` takes the contiguous
  slice ``[r·⌈n/W⌉, (r+1)·⌈n/W⌉)`` of each stream's ``n`` samples. The samples are read once, at
  the first evaluation, and kept in memory.
* **Every rank runs the same number of forwards** (a ZeRO-3 forward is collective): a rank whose
  slice is short runs a placeholder row whose labels bear no loss.
* **Exact means.** Per stream, the loss is the sum of next-token cross-entropies (nats) over every
  loss-bearing token of the stream's eval samples on every rank, divided by the number of those
  tokens: one all-reduce of float64 ``[loss sums, token counts]``, never a mean of rank means.
  ``loss`` (all streams) is the same over all eval tokens.
* **Question-answer streams** (``prepare --format qa``): a sample's prompt bears no loss (its
  ``prompt_len`` labels are ignored), and the stream also reports ``exact_match``: the share of
  its records whose every answer token is the model's argmax under teacher forcing
  (:mod:`curriculum_ds.core.exact_match`), from the same forwards; hits and records are summed
  over ranks in the same all-reduce, so the share is exact too.
* **No side effects on training.** The forwards run under ``torch.no_grad()`` with the model in
  eval mode, which is restored afterwards; the global RNGs (Python ``random``, numpy, torch CPU and
  CUDA) are saved and restored around them, the training sample order is not touched, and nothing
  goes into the checkpoint state (due-ness is a pure function of the progress before and after a
  step), so a run with evaluation draws the same training batches as one without.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from curriculum_ds.core.exact_match import answer_hits
from curriculum_ds.core.loader import MicroBatch, collate
from curriculum_ds.core.loss import IGNORE_INDEX, per_sample_token_losses
from curriculum_ds.data import close_stream, open_stream
from curriculum_ds.data.qa import PROMPT_LEN_COLUMN
from curriculum_ds.data.streams import streaming_registration as _streaming_registration
from curriculum_ds.data.streams import sync_remote_stream as _sync_remote
from curriculum_ds.errors import DownloadError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import numpy.typing as npt

    from curriculum_ds.config import CurriculumConfig, EvalConfig
    from curriculum_ds.core.schedule import PhaseSchedule, Progress
    from curriculum_ds.plugin.engine_like import EngineLike
    from curriculum_ds.records.schema import EvalRow, EvalStreamRow

__all__ = ["EvalBatch", "Evaluator", "preserved_rng", "probe_eval_config", "stream_losses"]


@dataclass(frozen=True)
class EvalBatch:
    """One eval micro-batch of one stream on this rank."""

    stream_idx: int
    """Index of the stream in ``curriculum.eval.streams``."""
    micro_batch: MicroBatch
    """The tokens, on the CPU (``labels`` all ``IGNORE_INDEX`` for a placeholder row)."""


class Evaluator:
    """The fixed eval set of one run and its evaluation (see the module docstring).

    Args:
        config: the validated ``curriculum.eval`` section.
        schedule: the run's phase boundaries (evaluations are due at every phase end).
        max_seq_len: tokens per eval sample when ``config.max_seq_len`` is None.
        micro_batch_size: eval samples per forward per rank.
        dp_rank / dp_world_size: this rank and the number of data-parallel ranks.

    Attributes:
        stream_names: the eval streams' names, in config order (``eval.jsonl`` keys).
    """

    def __init__(
        self,
        config: EvalConfig,
        schedule: PhaseSchedule,
        *,
        max_seq_len: int,
        micro_batch_size: int,
        dp_rank: int,
        dp_world_size: int,
    ) -> None:
        self.config = config
        self.schedule = schedule
        self.max_seq_len = config.max_seq_len or max_seq_len
        self.micro_batch_size = micro_batch_size
        self.dp_rank = dp_rank
        self.dp_world_size = dp_world_size
        self.stream_names = [s.name or s.local for s in config.streams]
        self.qa_streams: list[bool] = []  # per stream: QA records (known once read)
        self._batches: list[EvalBatch] | None = None  # read at the first evaluation

    # ------------------------------------------------------------------------------ due
    def is_due(self, before: Progress, after: Progress) -> bool:
        """Whether a step that moved progress from ``before`` to ``after`` ends with an eval.

        True when ``(before, after]`` holds a multiple of ``interval`` or a phase end (the last
        phase end is ``max_duration``). Progress is in the schedule's unit (int tokens or
        Fraction passes, global). Pure; deterministic.
        """
        interval = self.config.interval
        if interval is not None and before // interval.value < after // interval.value:
            return True
        return any(before < end <= after for end in self.schedule.ends)

    # ------------------------------------------------------------------------------ data
    def batches(self) -> list[EvalBatch]:
        """This rank's eval micro-batches (on the CPU), read from the streams on first use.

        Collective the first time (every rank opens the streams, in config order).

        Raises:
            DataError: a stream cannot be opened (the preflight checked it before the run).
            DownloadError: a remote stream's metadata or a sample cannot be fetched (names the
                stream).
        """
        if self._batches is None:
            self._batches = self._read()
        return self._batches

    def _read(self) -> list[EvalBatch]:
        batches: list[EvalBatch] = []
        streams = self.config.streams
        for name, s in zip(self.stream_names, streams, strict=True):
            if s.remote is not None and not (Path(s.local) / "index.json").is_file():
                _sync_remote(name, s.local, s.remote)  # preflight was skipped (check_data=False)
        with _streaming_registration():
            datasets = [open_stream(s.local, s.remote) for s in streams]
        try:
            for stream_idx, ds in enumerate(datasets):
                num = min(self.config.max_samples, int(ds.num_samples))
                per_rank = math.ceil(num / self.dp_world_size)
                start = min(self.dp_rank * per_rank, num)
                stop = min(start + per_rank, num)
                name = self.stream_names[stream_idx]
                samples = [self._sample(ds, name, i) for i in range(start, stop)]
                placeholder = self._sample(ds, name, 0)
                self.qa_streams.append(placeholder[1] is not None)
                num_forwards = math.ceil(per_rank / self.micro_batch_size)
                for k in range(num_forwards):
                    chunk = samples[k * self.micro_batch_size : (k + 1) * self.micro_batch_size]
                    batches.append(EvalBatch(stream_idx, _collate(chunk, placeholder[0])))
        finally:
            for ds in datasets:
                close_stream(ds)
        return batches

    def _sample(self, ds: Any, name: str, index: int) -> tuple[npt.NDArray[Any], int | None]:
        """Sample ``index`` of an open stream, cut to ``max_seq_len`` tokens, and its prompt_len.

        The ``prompt_len`` is None for a sample that is not a QA record.

        Raises:
            DownloadError: it cannot be read (a shard failed to download or verify, or went
                missing), naming the eval stream.
        """
        try:
            sample = ds[index]
            prompt_len = sample.get(PROMPT_LEN_COLUMN)
            ids = np.asarray(sample["input_ids"])[: self.max_seq_len]
            return ids, None if prompt_len is None else int(prompt_len)
        except Exception as err:  # streaming wraps storage errors in RuntimeError/ValueError
            detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise DownloadError(
                f"eval stream {name!r}: cannot read sample {index}: {detail}"
            ) from None

    # ------------------------------------------------------------------------------ run
    def evaluate(
        self,
        engine: EngineLike,
        forward: Callable[[MicroBatch], Any] | None = None,
        *,
        step: int,
        tokens: int,
        phase_idx: int,
        phase_name: str,
    ) -> EvalRow:
        """Evaluate every stream's fixed eval set; collective (every rank calls it).

        Args:
            engine: the DeepSpeed engine (or any ``torch.nn.Module``; its ``device`` attribute,
                default CPU); put in eval mode for the forwards, then back in its previous mode.
            forward: ``forward(mb) -> logits`` (float ``(batch, seq_len, vocab)`` or an object
                with ``.logits``) for a model that is not called as ``engine(input_ids,
                attention_mask=...)``; default: that call.
            step: optimizer steps done (copied into the row).
            tokens: cumulative global non-padding train tokens (copied into the row).
            phase_idx: the phase of the step just finished (copied into the row).
            phase_name: that phase's name (copied into the row).

        Returns:
            The ``eval.jsonl`` row: ``step``, ``tokens``, ``phase``, ``phase_name``, ``loss``
            (token-weighted mean over every eval token of every stream and rank, nats),
            ``eval_tokens`` (those loss-bearing tokens), ``streams: {name: {"loss",
            "tokens"}}`` (the same per stream; loss None for a stream without loss-bearing
            tokens; a QA stream adds ``exact_match``, the share of its records answered
            exactly, None without records) and ``eval_time_s`` (wall seconds). The same on
            every rank. Deterministic for deterministic kernels.

        Raises:
            ValueError: ``forward`` returned something that is not ``(batch, seq_len, vocab)``.
        """
        started = time.perf_counter()
        device = getattr(engine, "device", torch.device("cpu"))
        num_streams = len(self.stream_names)
        # [loss sum per stream (nats) ..., loss-bearing tokens per stream ..., exact answers
        # per stream ..., QA records per stream ...], this rank
        stats = torch.zeros(4 * num_streams, dtype=torch.float64, device=device)
        # DeepSpeed's engine.train/eval set the wrapped module's mode, not the engine's own flag
        module: Any = getattr(engine, "module", engine)
        was_training = bool(module.training)
        with preserved_rng(), torch.no_grad():
            engine.eval()
            try:
                for batch in self.batches():
                    mb = batch.micro_batch.to(device)
                    out = (
                        forward(mb)
                        if forward is not None
                        else engine(mb.input_ids, attention_mask=mb.attention_mask)
                    )
                    logits = out.logits if hasattr(out, "logits") else out
                    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
                        raise ValueError(
                            "evaluate: the forward must return logits (batch, seq_len, vocab), "
                            f"got {type(logits).__name__}"
                        )
                    loss_sums, num_valid = per_sample_token_losses(logits, mb.labels)
                    stats[batch.stream_idx] += loss_sums.double().sum()
                    stats[num_streams + batch.stream_idx] += num_valid.sum().double()
                    if self.qa_streams[batch.stream_idx]:
                        hit, record = answer_hits(logits, mb.labels)
                        stats[2 * num_streams + batch.stream_idx] += hit.sum().double()
                        stats[3 * num_streams + batch.stream_idx] += record.sum().double()
            finally:
                engine.train(was_training)
        if dist.is_available() and dist.is_initialized() and self.dp_world_size > 1:
            dist.all_reduce(stats)
        values = stats.cpu().tolist()
        sums, counts = values[:num_streams], [int(c) for c in values[num_streams : 2 * num_streams]]
        hits, records = values[2 * num_streams : 3 * num_streams], values[3 * num_streams :]
        total_tokens = sum(counts)
        streams: dict[str, EvalStreamRow] = {}
        for k, name in enumerate(self.stream_names):
            streams[name] = {
                "loss": sums[k] / counts[k] if counts[k] else None,
                "tokens": counts[k],
            }
            if self.qa_streams[k]:
                streams[name]["exact_match"] = hits[k] / records[k] if records[k] else None
        return {
            "step": step,
            "tokens": tokens,
            "phase": phase_idx,
            "phase_name": phase_name,
            "loss": sum(sums) / total_tokens if total_tokens else None,
            "eval_tokens": total_tokens,
            "streams": streams,
            "eval_time_s": round(time.perf_counter() - started, 4),
        }


def stream_losses(row: EvalRow) -> dict[str, float]:
    """An eval row's mean token loss per stream (nats), streams without eval tokens left out."""
    return {n: s["loss"] for n, s in row["streams"].items() if s["loss"] is not None}


def probe_eval_config(cfg: CurriculumConfig) -> EvalConfig | None:
    """The held-out set a method that evaluates at its own steps reads (Aioli, Skill-it).

    ``dynamic.<method>.eval_streams`` when given, else the ``curriculum.eval`` streams named as
    a train stream of some phase; ``eval_max_samples`` (default: ``curriculum.eval``'s, else
    512) samples of each. None for a method without one. Pure.
    """
    from curriculum_ds.config import EvalConfig
    from curriculum_ds.config.mixers import ReadsHeldOutLosses

    section = cfg.dynamic.method_config if cfg.dynamic.enabled else None
    if not isinstance(section, ReadsHeldOutLosses):
        return None
    held_out = cfg.eval
    max_samples = section.eval_max_samples or (held_out.max_samples if held_out else 512)
    if section.eval_streams is not None:
        return EvalConfig(streams=section.eval_streams, max_samples=max_samples)
    assert held_out is not None  # the config refuses a method without held-out streams
    trained = {s.name for phase in cfg.schedule for s in phase.train_loader.streams}
    streams = [s for s in held_out.streams if (s.name or s.local) in trained]
    return EvalConfig(streams=streams, max_samples=max_samples, max_seq_len=held_out.max_seq_len)


def _collate(
    samples: list[tuple[npt.NDArray[Any], int | None]], placeholder: npt.NDArray[Any]
) -> MicroBatch:
    """A micro-batch of ``(tokens, prompt_len)`` samples, a QA record's prompt bearing no loss.

    One loss-free placeholder row when there are none.
    """
    if samples:
        mb = collate([ids for ids, _ in samples], np.arange(len(samples), dtype=np.int64))
        if any(p is not None for _, p in samples):
            mb = mb.with_prompts(np.array([p or 0 for _, p in samples], dtype=np.int64))
        return mb
    mb = collate([placeholder], np.zeros(1, dtype=np.int64))
    return MicroBatch(
        mb.input_ids, mb.attention_mask, torch.full_like(mb.labels, IGNORE_INDEX), mb.positions
    )


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Restore the global RNGs on exit: Python ``random``, numpy's, torch's CPU and CUDA ones.

    Whatever the body draws (a model that samples in eval mode, a library that seeds), the
    training that follows sees the same random streams as if the body had not run.
    """
    py_state = random.getstate()
    np_state = np.random.get_state()  # noqa: NPY002  (the global state user code draws from)
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002
