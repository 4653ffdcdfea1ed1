"""``curriculum-ds score``: each sample's mean token loss under a reference model, as a column.

The ``excess_loss`` signal of dynamic re-weighting (:mod:`curriculum_ds.dynamic.signals`) scores a
sample by its loss minus its loss under a reference model, read from a metric column of its
stream. :func:`score` writes that column: for every sample of every prepared MDS folder, the
mean next-token cross-entropy (nats) over its loss-bearing tokens under a Hugging Face causal
LM, the per-sample quantity the training step gathers (the same collate,
:func:`~curriculum_ds.core.microbatch.collate`, and the same
:func:`~curriculum_ds.core.loss.per_sample_token_losses`), into the folder's ``metrics.npz``
(:func:`~curriculum_ds.data.metric_store.write_metric_column`).

Every refusal (a model folder that does not load or is not causal, a folder that is not
prepared data, is a remote stream's cache or cannot be written, a vocabulary or context too small
for the data, a bad or taken column name) is one line, raised before anything is written in any
folder.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from curriculum_ds.commands.score_checks import (
    check_causal,
    check_writable,
    load_model,
    torch_device,
)
from curriculum_ds.data.index import META_FILENAME
from curriculum_ds.data.metrics import METRIC_COLUMNS
from curriculum_ds.data.remote import SYNC_STAMP
from curriculum_ds.errors import ConfigError, CurriculumError, DataError

if TYPE_CHECKING:
    import torch

    from curriculum_ds.commands.score_ranks import Ranks
    from curriculum_ds.core.microbatch import MicroBatch
    from curriculum_ds.data import StreamInfo

__all__ = ["RESERVED_COLUMNS", "ScoreSummary", "check_column_name", "score", "score_samples"]

RESERVED_COLUMNS: tuple[str, ...] = ("input_ids", *METRIC_COLUMNS)
"""The columns ``curriculum-ds prepare`` writes itself; ``score`` never writes one of them."""


@dataclass(frozen=True)
class ScoreSummary:
    """What :func:`score` wrote into one folder.

    Attributes:
        folder: The dataset folder, as given.
        column: The metric column written.
        num_samples: Samples scored (every sample of the folder).
        num_tokens: Tokens read, EOS included, over all samples.
        num_loss_tokens: Loss-bearing tokens (``num_tokens`` minus one per sample).
        mean_loss: Token-weighted mean loss over the folder's loss-bearing tokens, nats.
        seconds: Wall-clock time of the forward passes, seconds.
    """

    folder: Path
    column: str
    num_samples: int
    num_tokens: int
    num_loss_tokens: int
    mean_loss: float
    seconds: float

    def describe(self) -> str:
        """The summary in one line.

        E.g. ``scored data/code: 120 samples, 5,432 tokens in 1.2 s (4,527 tokens/s), mean loss
        3.2140 nats; wrote metric column "ref_loss"``.
        """
        rate = self.num_tokens / self.seconds if self.seconds > 0 else float("inf")
        return (
            f"scored {self.folder}: {self.num_samples:,} samples, {self.num_tokens:,} tokens in "
            f"{self.seconds:.1f} s ({rate:,.0f} tokens/s), mean loss {self.mean_loss:.4f} nats; "
            f'wrote metric column "{self.column}"'
        )


def check_column_name(column: str) -> None:
    """Refuse a ``--column`` that is empty, not a plain identifier, or one of prepare's own.

    Raises:
        ConfigError: one line naming the value.
    """
    if not column:
        raise ConfigError("score: --column is empty; name the metric column to write")
    if not (column.isascii() and column.isidentifier()):
        raise ConfigError(
            f'score: --column "{column}" is not a plain identifier (ASCII letters, digits and _, '
            "not starting with a digit)"
        )
    if column in RESERVED_COLUMNS:
        raise ConfigError(
            f'score: --column "{column}" is one of prepare\'s own columns '
            f"({', '.join(RESERVED_COLUMNS)}); choose another name"
        )


def _read_folder(folder: Path, column: str, overwrite: bool) -> StreamInfo:
    """The folder's info, checked: prepared data, and ``column`` free unless ``overwrite``.

    Raises:
        DataError: one line naming the folder.
    """
    from curriculum_ds.data import read_stream_info

    missing = None
    if not folder.is_dir():
        missing = "no such folder"
    elif not (folder / "index.json").is_file():
        missing = "no index.json"
    elif not (folder / META_FILENAME).is_file():
        missing = f"no {META_FILENAME}, where prepare lists the metric columns"
    if missing is not None:
        raise DataError(
            f"score: {folder} is not a prepared MDS folder ({missing}; make one with "
            "`curriculum-ds prepare`)"
        )
    if (folder / SYNC_STAMP).is_file():
        raise DataError(
            f"score: {folder} is the cache folder of a remote stream (it has {SYNC_STAMP}): the "
            "next sync replaces its metrics.npz and curriculum_meta.json with the remote's, "
            "without the column; score the prepared folder, then upload it"
        )
    try:
        info = read_stream_info(folder)
    except DataError as err:
        detail = str(err).replace("\n", " ")
        raise DataError(f"score: {folder} is not a prepared MDS folder: {detail}") from None
    if column in info.metrics and not overwrite:
        raise DataError(
            f'score: {folder} already has a metric column "{column}" (pass --overwrite to '
            "replace it)"
        )
    return info


def _max_token_id(folder: Path, info: StreamInfo) -> int:
    """The largest token id of the folder: recorded by prepare, else read from every sample."""
    if info.max_token_id is not None:
        return int(info.max_token_id)
    high = -1
    for _, mb in _micro_batches(folder, info, np.arange(info.num_samples), 256):
        high = max(high, int(mb.input_ids.max()))
    return high


def _check_model_fits(
    model: Any, model_dir: Path, folders: Sequence[tuple[Path, StreamInfo]]
) -> None:
    """Refuse data the model cannot embed: a token id ≥ vocab_size, a sample past its positions.

    Raises:
        ConfigError: one line naming the model, the folder and both values.
    """
    from curriculum_ds.preflight.model import model_max_positions

    vocab = getattr(model.config, "vocab_size", None)
    found = model_max_positions(model)
    for folder, info in folders:
        high = _max_token_id(folder, info)
        if isinstance(vocab, int) and high >= vocab:
            raise ConfigError(
                f"score: model {model_dir} has vocab_size {vocab}, but {folder} holds token id "
                f"{high}"
            )
        longest = int(info.metrics["num_tokens"].max())
        if found is not None and longest > found[0]:
            key = found[1].split(" of ")[0]
            raise ConfigError(
                f"score: model {model_dir} has {found[0]} positions ({key}), but {folder} holds "
                f"a sample of {longest} tokens"
            )


def _micro_batches(
    folder: Path, info: StreamInfo, order: npt.NDArray[np.int64], batch_size: int
) -> Iterator[tuple[npt.NDArray[np.int64], MicroBatch]]:
    """``(sample indices, micro-batch)`` over ``order`` in batches, padded as training pads.

    The samples are read as the training loader reads them (the mapped shards in bulk,
    :class:`~curriculum_ds.data.bulk.BulkReader`, else streaming one by one), uncut, and
    right-padded by :func:`~curriculum_ds.core.microbatch.collate`'s rule (0 ids, ``IGNORE_INDEX``
    labels, attention mask 0 on padding).
    """
    from curriculum_ds.core.loss import IGNORE_INDEX
    from curriculum_ds.core.microbatch import MicroBatch, collate
    from curriculum_ds.data import close_stream, open_stream
    from curriculum_ds.data.bulk import BulkReader
    from curriculum_ds.data.qa import PROMPT_LEN_COLUMN
    from curriculum_ds.data.streams import streaming_registration

    with streaming_registration():
        ds = open_stream(folder)
    try:
        bulk = BulkReader.of([ds])
        limit = int(info.metrics["num_tokens"].max())
        prompts = info.metrics.get(PROMPT_LEN_COLUMN)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            pairs = np.stack([np.zeros_like(idx), idx], axis=1)
            padded = None if bulk is None else bulk.read_padded(pairs, limit, IGNORE_INDEX)
            if padded is not None:
                mb = MicroBatch.of_arrays(*padded, idx)
            else:
                mb = collate([np.asarray(ds[int(i)]["input_ids"]) for i in idx], idx)
            if prompts is not None:  # QA records: the answer's loss, as the training step's
                mb = mb.with_prompts(prompts[idx])
            yield idx, mb
    finally:
        if bulk is not None:
            bulk.forget()
        close_stream(ds)


def score_samples(
    model: Any,
    folder: Path,
    info: StreamInfo,
    *,
    batch_size: int,
    device: torch.device,
    on_batch: Callable[[int], None] | None = None,
    ranks: Ranks | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Each sample's mean token loss under ``model`` (and its sum and count), in sample order.

    Samples are batched in order of length (less padding; a sample's loss does not depend on
    its batch, up to float rounding), padded and masked as the training step pads them, run
    through ``model(input_ids, attention_mask=...)`` under ``torch.no_grad()`` and summed by
    :func:`~curriculum_ds.core.loss.per_sample_token_losses` (fp32 logits, labels shifted by one,
    padding excluded).

    Args:
        model: a causal LM in eval mode on ``device``, returning logits ``(batch, seq, vocab)``
            (or an output with ``.logits``).
        folder: the dataset folder.
        info: its :class:`~curriculum_ds.data.StreamInfo`.
        batch_size: samples per forward pass, ≥ 1.
        device: where the forward runs.
        on_batch: called with the number of samples of each finished batch (a progress bar).
        ranks: the ranks scoring together: this rank scores every ``world_size``-th sample of
            the length order from its rank on, and the ranks' results are summed (each sample
            is scored by one rank, 0.0 and 0 on the others), so every rank returns the whole.

    Returns:
        ``(losses, loss_sums, num_valid)``: float64 ``(num_samples,)`` each sample's mean token
        loss in nats, ``loss_sum / num_valid`` (0.0 for a sample without a loss-bearing token,
        whose training loss is NaN and never used); float64 ``(num_samples,)`` its token-loss
        sum in nats; int64 ``(num_samples,)`` its loss-bearing tokens. Deterministic for
        deterministic kernels.

    Raises:
        DataError: the model gives a non-finite loss on a sample (naming it).
    """
    import torch

    from curriculum_ds.core.loss import per_sample_token_losses

    sums = np.zeros(info.num_samples, dtype=np.float64)
    valid = np.zeros(info.num_samples, dtype=np.int64)
    order = np.argsort(np.asarray(info.metrics["num_tokens"]), kind="stable").astype(np.int64)
    if ranks is not None:  # every world_size-th of the length order: slices of like lengths
        order = order[ranks.rank :: ranks.world_size]
    with torch.no_grad():
        for idx, mb in _micro_batches(folder, info, order, batch_size):
            mb = mb.to(device)
            out = model(mb.input_ids, attention_mask=mb.attention_mask)
            logits = out.logits if hasattr(out, "logits") else out
            loss_sums, num_valid = per_sample_token_losses(logits, mb.labels)
            sums[idx] = loss_sums.double().cpu().numpy()
            valid[idx] = num_valid.cpu().numpy()
            if on_batch is not None:
                on_batch(len(idx))
    if ranks is not None:  # each sample is scored by one rank, 0 elsewhere: the sum is exact
        sums, valid = ranks.sum(sums), ranks.sum(valid)
    bad = np.flatnonzero(~np.isfinite(sums))
    if bad.size:
        raise DataError(
            f"score: the model gives a non-finite loss ({sums[bad[0]]}) on sample {bad[0]} of "
            f"{folder}; nothing written there"
        )
    # the training step's per-sample value: sum / count (stats.StepStats.sample_losses)
    losses = np.where(valid > 0, sums / np.maximum(valid, 1), 0.0)
    return losses, sums, valid


def _checked(
    data: Sequence[str | Path],
    model: str | Path,
    column: str,
    batch_size: int,
    device: str | None,
    overwrite: bool,
) -> tuple[list[tuple[Path, StreamInfo]], Any, torch.device]:
    """Every check of :func:`score`; ``(folders with their info, the model on the device, it)``."""
    check_column_name(column)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"score: --batch-size must be an integer >= 1, got {batch_size!r}")
    if not data:
        raise DataError("score: no DATA folder given")
    folders: list[tuple[Path, StreamInfo]] = []
    seen: set[Path] = set()
    for given in data:
        folder = Path(given)
        if folder.resolve() in seen:
            raise DataError(f"score: {folder} is given twice")
        seen.add(folder.resolve())
        folders.append((folder, _read_folder(folder, column, overwrite)))
    chosen = torch_device(device)
    model_dir = Path(model)
    lm = load_model(model_dir)
    _check_model_fits(lm, model_dir, folders)
    vocab = getattr(lm.config, "vocab_size", None)
    if not isinstance(vocab, int):  # ids the data holds are ids the model embeds
        vocab = 1 + max(_max_token_id(folder, info) for folder, info in folders)
    check_causal(lm, model_dir, vocab)
    check_writable([folder for folder, _ in folders])
    return folders, lm.to(chosen), chosen


def score(
    data: Sequence[str | Path],
    model: str | Path,
    column: str,
    *,
    batch_size: int = 16,
    device: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
    on_folder: Callable[[ScoreSummary], None] | None = None,
    ranks: Ranks | None = None,
) -> list[ScoreSummary]:
    """Write each sample's mean token loss under ``model`` as metric column ``column``.

    Everything is checked before anything is written: the column name
    (:func:`check_column_name`), each folder (prepared by ``curriculum-ds prepare``, not a remote
    stream's cache; ``column`` not there yet unless ``overwrite``), the device, the model folder
    (loaded with ``AutoModelForCausalLM.from_pretrained(model, local_files_only=True)``: no
    download), its ``vocab_size`` against the largest token id of each folder (recorded by
    prepare, else read), its positions (``n_positions``, ``max_position_embeddings``, ...)
    against the longest sample, that it is causal and that a file can be created in each folder
    (:mod:`~curriculum_ds.commands.score_checks`). Then each folder in turn is scored
    (:func:`score_samples`) and its column written atomically
    (:func:`~curriculum_ds.data.metric_store.write_metric_column`); a
    failure while scoring a later folder leaves the earlier ones written.

    Args:
        data: prepared MDS folders (local).
        model: a Hugging Face causal-LM folder (e.g. ``curriculum-ds export``'s output).
        column: the metric column to write (a plain identifier).
        batch_size: samples per forward pass, ≥ 1.
        device: a torch device (``"cpu"``, ``"cuda:1"``); None: cuda when available, else cpu.
        overwrite: replace the column where it exists.
        progress: a tqdm bar over samples on stderr.
        on_folder: called with each folder's summary once its column is written.
        ranks: the ranks scoring together (``deepspeed --module curriculum_ds.commands.score``,
            :mod:`~curriculum_ds.commands.score_ranks`): every rank checks everything, the
            ranks agree on the first refusal and on the data (a digest per folder), each scores
            its slice of every folder (:func:`score_samples`) and rank 0 writes the column,
            once; the other ranks return no summary. None: this process alone.

    Returns:
        One :class:`ScoreSummary` per folder, in order (none on a rank other than 0).

    Raises:
        ConfigError: a bad column name, batch size or device; a model folder that does not
            load or is not causal; a model whose vocabulary or context is too small for the data.
        DataError: a folder that is not prepared data, a remote stream's cache, given twice,
            not writable, or that has ``column`` without ``overwrite``; a non-finite loss; a
            failed write.
    """
    from tqdm import tqdm

    from curriculum_ds.data.metric_store import write_metric_column

    try:
        folders, lm, chosen = _checked(data, model, column, batch_size, device, overwrite)
    except CurriculumError as err:
        if ranks is None:
            raise
        ranks.refuse(err)  # every rank raises the first refusal
    if ranks is not None:  # the first refusal of any rank, or ranks reading other data
        ranks.agree([folder for folder, _ in folders])

    summaries = []
    for folder, info in folders:
        started = time.perf_counter()
        with tqdm(
            total=info.num_samples,
            desc=f"score {folder}",
            unit="sample",
            disable=not progress,
            leave=False,
            file=sys.stderr,
        ) as bar:
            losses, sums, valid = score_samples(
                lm,
                folder,
                info,
                batch_size=batch_size,
                device=chosen,
                on_batch=bar.update,
                ranks=ranks,
            )
        seconds = time.perf_counter() - started
        if ranks is not None and ranks.rank != 0:
            continue  # rank 0 writes the column, once
        write_metric_column(folder, column, losses)
        num_loss_tokens = int(valid.sum())
        summary = ScoreSummary(
            folder=folder,
            column=column,
            num_samples=info.num_samples,
            num_tokens=info.num_tokens,
            num_loss_tokens=num_loss_tokens,
            mean_loss=float(sums.sum() / num_loss_tokens) if num_loss_tokens else float("nan"),
            seconds=seconds,
        )
        if on_folder is not None:
            on_folder(summary)
        summaries.append(summary)
    return summaries


if __name__ == "__main__":  # deepspeed --num_gpus N --module curriculum_ds.commands.score ...
    from curriculum_ds.commands.score_ranks import main

    sys.exit(main(sys.argv[1:]))
