"""``prepare``: documents → tokenized mosaicml-streaming (MDS) shards with metric columns.

The pipeline is ``read documents → tokenize (EOS appended) → split into samples of at most
max_seq_len tokens, or pack them into rows of exactly max_seq_len (:mod:`.packing`) → per-sample
metrics → MDSWriter``, written to a temporary folder and renamed into place. Memory stays bounded
by the shard size, a batch of documents and 24 bytes of metrics per row, whatever the input size.

The module is named ``writer`` rather than ``prepare`` so that the function
:func:`prepare`, re-exported by :mod:`curriculum_ds.data`, does not shadow it there
(``import curriculum_ds.data.prepare as m`` would bind the function).
"""

from __future__ import annotations

import contextlib
import itertools
import json
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from curriculum_ds.data.documents import (
    ACCEPTED_FORMATS,
    FORMATS,
    ReadStats,
    batched,
    check_inputs,
    describe_skipped,
    iter_documents,
    iter_jsonl_records,
)
from curriculum_ds.data.index import (
    DATASET_FORMAT,
    DOC_STARTS_COLUMN,
    META_FILENAME,
    METRICS_FILENAME,
)
from curriculum_ds.data.metrics import compression_ratio, token_entropy
from curriculum_ds.data.packing import PaddingTally, pack_documents, split_document
from curriculum_ds.data.parts import PART_KEY
from curriculum_ds.data.qa import PROMPT_LEN_COLUMN, QA_FORMAT, qa_samples
from curriculum_ds.data.staging import (
    check_out_empty,
    staged_folder,
    write_npz,
)
from curriculum_ds.data.tokenizers import load_tokenizer
from curriculum_ds.errors import DataError

__all__ = ["SHARD_HASHES", "PrepareSummary", "prepare", "split_document"]

SHARD_HASHES: tuple[str, ...] = ("sha1",)
"""Hashes :func:`prepare` records per shard file in ``index.json`` (Python's ``hashlib``, no extra
package); ``curriculum-ds validate`` checks them
(:func:`curriculum_ds.data.verify_stream` with ``verify_hashes``)."""

_MDS_COLUMNS = {
    "input_ids": "ndarray:int32",
    "num_tokens": "int",
    "token_entropy": "float64",
    "compression_ratio": "float64",
}
_HF_ENCODE_BATCH = 256  # documents per tokenizers.encode_batch call (bounded memory).


@dataclass(frozen=True)
class PrepareSummary:
    """What :func:`prepare` wrote.

    Attributes:
        out: The dataset directory.
        num_documents: Non-empty documents read.
        num_samples: Samples written (MDS rows).
        num_tokens: Tokens written, EOS included, summed over samples.
        vocab_size: Tokenizer vocabulary size; every id is in ``[0, vocab_size)``.
        num_skipped_files: Files skipped inside folders for their content (binary, not UTF-8,
            unreadable).
        skipped_suffixes: The same files by lower-case suffix (``""``: none; ``".tar.gz"``),
            summing to ``num_skipped_files``.
        packed: Whether the rows are packed (``pack=True``).
        max_seq_len: The row length asked for, in tokens.
        padding_unpacked: Share of token slots that would be padding with every document split
            into its own rows, each padded to ``max_seq_len``; in ``[0, 1)``.
        padding_packed: The same share with the documents packed (only the last row is short).
        tally: The counts behind both shares (parts' tallies add up to the whole's).
    """

    out: Path
    num_documents: int
    num_samples: int
    num_tokens: int
    vocab_size: int
    num_skipped_files: int = 0
    skipped_suffixes: dict[str, int] = field(default_factory=dict)
    packed: bool = False
    max_seq_len: int = 0
    padding_unpacked: float = 0.0
    padding_packed: float = 0.0
    tally: PaddingTally | None = field(default=None, compare=False, repr=False)

    def describe_padding(self) -> str:
        """The padding fraction of both layouts at ``max_seq_len``, in one line.

        E.g. ``"padding at max_seq_len 128 (rows padded to it): 38.2% unpacked, 0.1% packed;
        written packed"``.
        """
        return (
            f"padding at max_seq_len {self.max_seq_len} (rows padded to it): "
            f"{self.padding_unpacked:.1%} unpacked, {self.padding_packed:.1%} packed; "
            f"written {'packed' if self.packed else 'unpacked'}"
        )

    def describe_skipped(self) -> str:
        """What folder walks skipped, in one line; ``""`` when nothing was."""
        return describe_skipped(ReadStats(self.num_skipped_files, Counter(self.skipped_suffixes)))


def _check_out_not_in_inputs(out: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output folder inside (or equal to) an input folder: it would be read back."""
    for path in inputs:
        folder = path.resolve()
        if path.is_dir() and (out == folder or folder in out.parents):
            raise DataError(
                f"output folder {out} is inside the input folder {path}: its shards would be read "
                "back as documents; choose an output folder outside the inputs"
            )


def _qa_rows(
    records: Iterator[tuple[str, dict[str, Any]]],
    tok: Any,
    max_seq_len: int,
    select: Callable[[int], bool] | None,
    tally: PaddingTally,
    prompt_lens: array[int],
) -> Iterator[tuple[np.ndarray, None]]:
    """The rows of QA records (:func:`~curriculum_ds.data.qa.qa_samples`), one per record.

    Each one's prompt length is appended to ``prompt_lens`` before it is yielded.
    """
    if select is not None:
        records = (r for i, r in enumerate(records) if select(i))
    for ids, prompt_len in qa_samples(records, tok, max_seq_len):
        tally.add(int(ids.size))
        prompt_lens.append(prompt_len)
        yield ids, None


def prepare(
    inputs: Sequence[Path],
    out: Path,
    *,
    tokenizer: Path | None = None,
    max_seq_len: int = 1024,
    min_tokens: int = 2,
    size_limit: int | None = None,
    format: str | None = None,
    text_field: str = "text",
    pack: bool = False,
    progress: bool = False,
    select: Callable[[int], bool] | None = None,
    documents: tuple[int, int] | None = None,
    part: Mapping[str, Any] | None = None,
) -> PrepareSummary:
    """Tokenize text into MDS shards with per-sample metric columns.

    Inputs, in the order given, each file read in its format (:data:`FORMATS`), which its suffix
    decides unless ``format`` is given:

    * ``.txt``, ``.md`` (``text``): the whole file (UTF-8) is one document;
    * ``.jsonl`` (``jsonl``): one JSON object per non-blank line, its ``text_field`` string is a
      document;
    * ``.json`` (``json``): one JSON array; each element is a document, a string or an object
      with a ``text_field`` string;
    * ``.parquet`` (``parquet``): each row's ``text_field`` column (string, or UTF-8 binary) is a
      document, read one record batch at a time;
    * a ``.gz``, ``.zst`` or ``.zstd`` suffix after one of the above (``d.jsonl.gz``): the file is
      decompressed while read (gzip, zstd); JSONL is streamed line by line either way;
    * a folder written by ``datasets``' ``Dataset.save_to_disk`` (named, or met in a folder):
      each row's ``text_field`` is a document (``datasets.load_from_disk``, memory-mapped, read
      in batches); a saved ``DatasetDict`` is refused (name one split's folder);
    * any other suffix (``.csv``, ``.py``, ...) names no format: a named file is
      refused before anything is read or written (``format`` reads it anyway);
    * a folder: every file under it, recursively, sorted by relative path, hidden entries
      skipped, each read as above (with ``format``, every file in that format). A file whose
      suffix names no format (``.h``, ``.pm``, ``LICENSE``, ``changelog.Debian.gz``,
      decompressed) is read as ``text`` by its content; text files that are binary (a NUL byte,
      or a compressed stream that does not decompress) or not UTF-8, and unreadable files, are
      skipped and counted in ``num_skipped_files`` (by suffix in ``skipped_suffixes``).

    Each non-empty document is tokenized (EOS appended when the tokenizer has one) and cut into
    consecutive samples of ``max_seq_len`` tokens; a trailing piece shorter than ``min_tokens`` is
    dropped. Samples never span two documents. With ``pack``, the tokenized documents (each
    ending with EOS) are concatenated in order and cut into rows of exactly ``max_seq_len``
    tokens instead; only the last row may be shorter, no token is dropped (``min_tokens`` does
    not apply) and a row may span several documents, whose EOS tokens separate them.

    The MDS columns are ``input_ids``
    (``ndarray:int32``, shape ``(num_tokens,)``) and the metrics of
    :data:`~curriculum_ds.data.metrics.METRIC_COLUMNS` (see :mod:`curriculum_ds.data`); packed
    rows add ``doc_starts`` (:data:`DOC_STARTS_COLUMN`, ``ndarray:int32``): 0, then the other
    offsets in the row where a document begins (increasing).
    Everything is written to a temporary folder next to ``out`` and renamed at the end, so an
    error leaves no partial dataset under ``out`` (and the parent folders of ``out`` that this
    call created are removed again). Each shard's :data:`SHARD_HASHES` are recorded in
    ``index.json``. Deterministic: the same inputs and tokenizer file give byte-identical
    outputs. ``out`` may not lie inside an input folder
    (a later run over that folder would read the shards back as documents).

    Args:
        inputs: Files and folders.
        out: Dataset folder to create; it must not exist or be empty.
        tokenizer: A HF ``tokenizer.json``; ``None`` for
            :class:`~curriculum_ds.data.tokenizers.ByteTokenizer`.
        max_seq_len: Tokens per sample at most, EOS included; ``>= 2``.
        min_tokens: Shortest sample kept, in tokens; in ``[1, max_seq_len]``.
        size_limit: MDS shard size limit in bytes (``None``: streaming's default, 64 MiB).
        format: ``"text"``, ``"jsonl"``, ``"json"`` or ``"parquet"`` for every input file, or
            ``None`` to decide by suffix; ``"qa"``: every file is JSONL of question-answer
            records, one sample each with its ``prompt_len`` column (:mod:`curriculum_ds.data.qa`;
            not with ``pack``; ``select`` then counts records).
        text_field: The field of a JSONL line's or JSON element's object, or the column of a
            Parquet file or saved dataset, that holds the text.
        pack: Pack documents into full rows (above); recorded as ``"packed": true`` in
            ``curriculum_meta.json``. Needs a tokenizer with an EOS token.
        progress: Show a progress bar (documents) on stderr, from the first batch of documents
            read: a refused input (missing, unknown format, empty, bad first file) draws none.
        select: Write only the non-empty documents whose 0-based index among the non-empty
            documents (reading order) it accepts; ``None``: all
            (:func:`~curriculum_ds.data.split.prepare_split` uses it for a held-out split).
        documents: ``(first, stop)``: read only the non-empty documents of these 0-based indices
            (reading stops after ``stop - 1``); ``select`` sees the same indices. ``None``: all.
        part: The record of a part (:func:`~curriculum_ds.data.parts.part_record`), written
            under ``"part"`` in ``curriculum_meta.json``; a part may hold no sample (its range is
            empty or all its documents are too short). ``None``: a whole stream.

    Returns:
        A :class:`PrepareSummary`.

    Raises:
        DataError: no inputs, a missing/unreadable/non-UTF-8 named file (``path:line``), a named
            file whose suffix names no format, a JSONL line that is not an object with a string
            ``text_field`` or whose text holds a lone surrogate (``path:line``), a JSON file that
            is not an array of such documents (``path`` or ``path[index]``), a Parquet or saved
            dataset row that is null or not UTF-8 or a column that is missing or not text
            (``path[row]``, 0-based, or ``path``), corrupt gzip/zstd data, a bad argument, a
            non-empty ``out``, an ``out`` inside an input folder, ``pack`` with a tokenizer that
            has no EOS, or inputs that yield no sample. Nothing is written under ``out``.
    """
    from streaming import MDSWriter
    from tqdm import tqdm

    given_out = Path(out)
    out = given_out.resolve()
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 2:
        raise DataError(f"max_seq_len must be an integer >= 2, got {max_seq_len!r}")
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int):
        raise DataError(f"min_tokens must be an integer, got {min_tokens!r}")
    if not 1 <= min_tokens <= max_seq_len:
        raise DataError(f"min_tokens must be in [1, max_seq_len={max_seq_len}], got {min_tokens}")
    if size_limit is not None and not 0 < size_limit < 2**32:
        raise DataError(f"size_limit must be in (0, 2**32) bytes, got {size_limit}")
    if not isinstance(text_field, str) or not text_field:
        raise DataError(f"text_field must be a non-empty string, got {text_field!r}")
    qa = format == QA_FORMAT
    if format is not None and format not in FORMATS and not qa:
        raise DataError(f"format must be one of {', '.join(FORMATS)}, qa or None, got {format!r}")
    if qa and pack:
        raise DataError("--pack and --format qa: a QA record is one sample; prepare it unpacked")
    stats = ReadStats()
    files = check_inputs(inputs, format="jsonl" if qa else format)
    paths = [Path(p) for p in inputs]
    _check_out_not_in_inputs(out, paths)
    check_out_empty(out)
    tok = load_tokenizer(tokenizer)
    if pack and tok.eos_id is None:
        raise DataError(
            f"--pack needs a tokenizer with an end-of-document token to separate the packed "
            f"documents; {tok.describe()} has none"
        )

    with staged_folder(out) as tmp:
        tally = PaddingTally(max_seq_len, min_tokens)
        lengths = array("q")  # per row: 8 bytes each, the only per-row state kept
        entropies = array("d")
        ratios = array("d")
        prompt_lens = array("q")  # QA records only
        max_token_id = -1
        writer_kwargs: dict[str, Any] = {
            "progress_bar": False,
            "exist_ok": False,
            "hashes": list(SHARD_HASHES),
        }
        if size_limit is not None:
            writer_kwargs["size_limit"] = size_limit
        bar: Any = None
        read = iter_documents(files, stats, text_field=text_field)
        if documents is not None or select is not None:
            first, stop = documents if documents is not None else (0, None)
            nonempty = itertools.islice((d for d in read if d), stop)  # stops reading there
            read = (
                doc
                for i, doc in enumerate(nonempty)
                if i >= first and (select is None or select(i))
            )
        docs = batched(read, _HF_ENCODE_BATCH)
        with contextlib.ExitStack() as stack:
            writer = stack.enter_context(
                MDSWriter(
                    out=str(tmp),
                    columns=_MDS_COLUMNS
                    | ({DOC_STARTS_COLUMN: "ndarray:int32"} if pack else {})
                    | ({PROMPT_LEN_COLUMN: "int"} if qa else {}),
                    **writer_kwargs,
                )
            )

            def encoded() -> Iterator[np.ndarray]:
                nonlocal bar
                for batch in docs:
                    if bar is None:  # drawn once documents were read: a refused input draws none
                        bar = stack.enter_context(
                            tqdm(desc="prepare", unit="doc", disable=not progress, leave=False)
                        )
                    for ids in tok.encode_documents(batch):
                        tally.add(int(ids.size))
                        yield ids
                    bar.update(len(batch))

            rows: Iterator[tuple[np.ndarray, np.ndarray | None]]
            if qa:
                rows = _qa_rows(
                    iter_jsonl_records(files, stats, expected="'prompt' and 'answer' fields"),
                    tok,
                    max_seq_len,
                    select,
                    tally,
                    prompt_lens,
                )
            elif pack:
                rows = pack_documents(encoded(), max_seq_len)
            else:
                rows = (
                    (piece, None)
                    for ids in encoded()
                    for piece in split_document(ids, max_seq_len, min_tokens)
                )
            for piece, starts in rows:
                entropy = token_entropy(piece)
                ratio = compression_ratio(piece, eos_id=tok.eos_id, pack_dtype=tok.pack_dtype)
                sample = {
                    "input_ids": piece,
                    "num_tokens": int(piece.size),
                    "token_entropy": entropy,
                    "compression_ratio": ratio,
                }
                if starts is not None:
                    sample[DOC_STARTS_COLUMN] = starts
                if qa:
                    sample[PROMPT_LEN_COLUMN] = prompt_lens[-1]
                writer.write(sample)
                lengths.append(int(piece.size))
                max_token_id = max(max_token_id, int(piece.max()))
                entropies.append(entropy)
                ratios.append(ratio)
        num_documents = tally.num_documents
        if num_documents == 0 and part is None:
            shown = ", ".join(str(p) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
            skipped = describe_skipped(stats)
            raise DataError(
                f"no documents found in inputs: {shown}"
                + (f" (skipped {skipped}; reads {ACCEPTED_FORMATS})" if skipped else "")
            )
        if not lengths and part is None:
            raise DataError(
                f"no samples: all {num_documents} documents are shorter than "
                f"min_tokens={min_tokens} tokens"
            )
        num_tokens = int(np.sum(lengths, dtype=np.int64))
        columns = {
            "num_tokens": np.asarray(lengths, dtype=np.int64),
            "token_entropy": np.asarray(entropies, dtype=np.float64),
            "compression_ratio": np.asarray(ratios, dtype=np.float64),
        }
        if qa:
            columns[PROMPT_LEN_COLUMN] = np.asarray(prompt_lens, dtype=np.int64)
        write_npz(tmp / METRICS_FILENAME, columns)
        meta = {
            "format": DATASET_FORMAT,
            "vocab_size": tok.vocab_size,
            "eos_id": tok.eos_id,
            "tokenizer": tok.describe(),
            "max_seq_len": max_seq_len,
            "min_tokens": 1 if pack else min_tokens,
            "packed": pack,
            "num_documents": num_documents,
            "num_samples": len(lengths),
            "num_tokens": num_tokens,
            "max_token_id": max_token_id,
            "metric_columns": list(columns),
        }
        if part is not None:
            meta[PART_KEY] = dict(part)
        (tmp / META_FILENAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        for name, text in tok.hf_files().items():  # for AutoTokenizer (and `export`)
            (tmp / name).write_text(text, encoding="utf-8")
    return PrepareSummary(
        out=given_out,
        num_documents=num_documents,
        num_samples=len(lengths),
        num_tokens=num_tokens,
        vocab_size=tok.vocab_size,
        num_skipped_files=stats.num_skipped_files,
        skipped_suffixes=dict(sorted(stats.skipped_suffixes.items())),
        packed=pack,
        max_seq_len=max_seq_len,
        padding_unpacked=tally.unpacked,
        padding_packed=tally.packed,
        tally=tally,
    )
