"""Reading a phase's samples: token arrays of ``(stream_idx, sample_idx)`` pairs, micro-batches.

:class:`SampleReader` owns the phase's mosaicml-streaming datasets (one per stream, opened once,
released by :meth:`~SampleReader.close` or when collected) and reads samples in bulk from the
memory-mapped shards (:class:`~curriculum_ds.data.bulk.BulkReader`), byte-identical to streaming's
``StreamingDataset.__getitem__``, which reads them instead when a shard is not cached yet (a
remote stream's sample is then downloaded first, by mosaicml-streaming, one process per node, and
checked against its recorded hash). The order in which samples are read is the phase loader's
(:mod:`curriculum_ds.core.loader`); this module only reads.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from curriculum_ds.core.loss import IGNORE_INDEX
from curriculum_ds.core.microbatch import MicroBatch, collate
from curriculum_ds.data import close_stream, open_stream
from curriculum_ds.data.bulk import BulkReader
from curriculum_ds.data.index import DOC_STARTS_COLUMN
from curriculum_ds.data.qa import PROMPT_LEN_COLUMN
from curriculum_ds.data.streams import drop_cached_shard
from curriculum_ds.data.streams import streaming_registration as _streaming_registration
from curriculum_ds.errors import DownloadError

__all__ = ["SampleReader"]


class SampleReader:
    """The samples of a phase's streams, read by ``(stream_idx, sample_idx)``.

    Args:
        names: The streams' names (for errors).
        locals_: Each stream's local folder (a remote stream's cache).
        remotes: Each stream's remote, or None for a local stream.
        doc_starts: Per stream, whether its rows' document starts are read (document masking
            of packed rows, :meth:`MicroBatch.with_documents`); None: no stream's (no
            ``position_ids``). A stream without them counts as one document per row.
        prompt_lens: Per stream, its samples' prompt lengths (int64 ``(num_samples,)``, a QA
            stream's ``prompt_len`` metric) or None; the labels of each sample's prompt bear no
            loss (:meth:`MicroBatch.with_prompts`). None: no QA stream.
    """

    def __init__(
        self,
        names: Sequence[str],
        locals_: Sequence[str],
        remotes: Sequence[str | None],
        *,
        doc_starts: Sequence[bool] | None = None,
        prompt_lens: Sequence[npt.NDArray[np.int64] | None] | None = None,
    ) -> None:
        self.names, self.locals, self.remotes = list(names), list(locals_), list(remotes)
        qa = prompt_lens is not None and any(p is not None for p in prompt_lens)
        self.prompt_lens = list(prompt_lens) if prompt_lens is not None and qa else None
        with _streaming_registration():
            self.datasets = [open_stream(lo, re) for lo, re in zip(locals_, remotes, strict=True)]
        # released by close(), or when the reader is garbage-collected if nobody called it
        self._release = weakref.finalize(self, _close_all, self.datasets)
        self.bulk = BulkReader.of(self.datasets, self.names)  # None: all through streaming
        self.doc_starts = None if doc_starts is None or not any(doc_starts) else list(doc_starts)
        self.starts_bulk = (
            None
            if self.doc_starts is None or not all(self.doc_starts)
            else BulkReader.of(self.datasets, self.names, column=DOC_STARTS_COLUMN)
        )

    @classmethod
    def for_phase(cls, names: Sequence[str], loader: Any, infos: Sequence[Any]) -> SampleReader:
        """The reader of a phase's streams.

        Args:
            names: The streams' names.
            loader: The phase's ``train_loader`` (``LoaderConfig``: its streams' ``local`` and
                ``remote``, ``document_masking``).
            infos: Each stream's ``StreamInfo``: with ``document_masking`` on, the packed rows of
                the streams that record their document starts (``doc_starts``) are masked.
        """
        masking = loader.document_masking and any(info.doc_starts for info in infos)
        return cls(
            names,
            [s.local for s in loader.streams],
            [s.remote for s in loader.streams],
            doc_starts=[bool(info.doc_starts) for info in infos] if masking else None,
            prompt_lens=[info.metrics.get(PROMPT_LEN_COLUMN) for info in infos],
        )

    @property
    def masks_documents(self) -> bool:
        """Whether micro-batches carry ``position_ids`` (document masking of packed rows)."""
        return self.doc_starts is not None

    def fetch(self, pairs: npt.NDArray[np.int64], seq_len: int) -> list[npt.NDArray[np.int32]]:
        """The token arrays of ``(stream_idx, sample_idx)`` pairs, each cut to ``seq_len``.

        Raises:
            DownloadError: a sample cannot be read (its shard failed to download or to verify
                against its recorded hash, or a local shard file went missing), or a shard file
                changed on disk while the run was reading it, naming the stream.
        """
        flat = None if self.bulk is None else self.bulk.read(pairs, seq_len)
        if flat is None:
            return self.fetch_each(pairs, seq_len)
        return np.split(flat[0], np.cumsum(flat[1][:-1])) if len(flat[1]) else []

    def fetch_each(self, pairs: npt.NDArray[np.int64], seq_len: int) -> list[npt.NDArray[np.int32]]:
        """:meth:`fetch` through streaming's ``__getitem__``, one sample at a time."""
        out = []
        datasets = self.datasets
        for stream, index in pairs.tolist():  # plain ints: no numpy scalar per sample
            try:
                tokens = datasets[stream][index]["input_ids"]
            except Exception as err:  # streaming wraps storage errors in RuntimeError/ValueError
                if self.remotes[stream] is not None:  # no unverified shard left in the cache
                    drop_cached_shard(datasets[stream], index)
                    for bulk in (self.bulk, self.starts_bulk):
                        if bulk is not None:
                            bulk.forget()
                raise DownloadError(self._failure(stream, index, err)) from None
            out.append(np.asarray(tokens)[:seq_len])  # a warmup step's length, else max_seq_len
        return out

    def stop_document_masking(self) -> None:
        """From now on, micro-batches without ``position_ids`` (rows unmasked).

        For a phase resumed from a loader state of before document masking.
        """
        if self.starts_bulk is not None:
            self.starts_bulk.forget()
        self.doc_starts = self.starts_bulk = None

    def fetch_starts(
        self, pairs: npt.NDArray[np.int64], seq_len: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The document starts of ``(stream_idx, sample_idx)`` pairs' rows, concatenated.

        Returns:
            ``(starts, counts)``: int64 offsets in each row (those of a stream that records none:
            none), and int64 ``(n,)`` how many are each row's. Starts past ``seq_len`` may be
            left in (the collate drops them).

        Raises:
            DownloadError: as :meth:`fetch`.
        """
        bulk = self.starts_bulk
        read = None if bulk is None else bulk.read(pairs, seq_len)
        if read is not None:
            return read[0].astype(np.int64), read[1]
        has = self.doc_starts or []
        out: list[npt.NDArray[Any]] = []
        for stream, index in pairs.tolist():
            if not has[stream]:
                out.append(np.zeros(0, dtype=np.int64))
                continue
            try:
                out.append(np.asarray(self.datasets[stream][index][DOC_STARTS_COLUMN]))
            except Exception as err:  # streaming wraps storage errors in RuntimeError/ValueError
                raise DownloadError(self._failure(stream, index, err)) from None
        counts = np.fromiter((len(x) for x in out), dtype=np.int64, count=len(out))
        return (np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)), counts

    def _failure(self, stream: int, index: int, err: Exception) -> str:
        text = str(err).strip()
        detail = text.splitlines()[0] if text else type(err).__name__
        local, remote = self.locals[stream], self.remotes[stream]
        source = f"remote {remote}, cache {local}" if remote is not None else local
        return f"stream {self.names[stream]!r} ({source}): cannot read sample {index}: {detail}"

    def micro_batch(
        self, pairs: npt.NDArray[np.int64], positions: npt.NDArray[np.int64], seq_len: int
    ) -> MicroBatch:
        """One micro-batch of ``(stream_idx, sample_idx)`` pairs, each cut to ``seq_len``.

        Read padded in bulk (as ``collate(self.fetch(pairs, seq_len), positions)`` pads them);
        with ``doc_starts`` (document masking) it carries ``position_ids`` and its boundary
        labels are ignored (:meth:`MicroBatch.with_documents`); a QA sample's prompt labels
        are ignored (:meth:`MicroBatch.with_prompts`).

        Raises:
            DownloadError: as :meth:`fetch`.
        """
        bulk = self.bulk
        padded = None if bulk is None else bulk.read_padded(pairs, seq_len, IGNORE_INDEX)
        mb = None if padded is None else MicroBatch.of_arrays(*padded, positions)
        if mb is None:
            mb = collate(self.fetch(pairs, seq_len), positions)
        if self.doc_starts is not None:  # document masking: positions restart per document
            mb = mb.with_documents(*self.fetch_starts(pairs, seq_len))
        if self.prompt_lens is not None:  # QA records: only the answer bears loss
            mb = mb.with_prompts(self.prompts_of(pairs))
        return mb

    def prompts_of(self, pairs: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The prompt lengths of ``(stream_idx, sample_idx)`` pairs, int64 ``(n,)``.

        0 for a sample of a stream that is not QA records.
        """
        out = np.zeros(len(pairs), dtype=np.int64)
        for stream, lens in enumerate(self.prompt_lens or []):
            if lens is not None:
                rows = pairs[:, 0] == stream
                out[rows] = lens[pairs[rows, 1]]
        return out

    def micro_batches(
        self,
        batch: npt.NDArray[np.int64],
        seq_len: int,
        *,
        dp_rank: int,
        dp_world_size: int,
        micro_batch_size: int,
    ) -> list[MicroBatch]:
        """This rank's micro-batches of a global batch (:meth:`micro_batch`), in order."""
        per_rank = len(batch) // dp_world_size
        start = dp_rank * per_rank
        result = []
        for offset in range(start, start + per_rank, micro_batch_size):
            positions = np.arange(offset, offset + micro_batch_size, dtype=np.int64)
            result.append(self.micro_batch(batch[positions], positions, seq_len))
        return result

    def close(self) -> None:
        """Release the streaming datasets (their shared memory, see ``close_stream``), the maps."""
        for bulk in (self.bulk, self.starts_bulk):
            if bulk is not None:
                bulk.forget()
        self._release()


def _close_all(datasets: list[Any]) -> None:
    for ds in datasets:
        close_stream(ds)
    datasets.clear()
