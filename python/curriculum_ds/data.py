"""Data preparation: text, JSONL or folders of text → tokenized mosaicml-streaming (MDS) shards.

The pipeline is ``read documents → tokenize (EOS appended) → split into samples of at most
``max_seq_len`` tokens → per-sample metrics → MDSWriter``. Everything is deterministic: the same
inputs and tokenizer give byte-identical shards, ``metrics.npz`` and ``curriculum_meta.json``.

A prepared dataset directory holds, besides the MDS ``index.json`` and ``shard.*.mds`` files:

* ``curriculum_meta.json`` — ``{"format": "curriculum_ds/1", "vocab_size", "eos_id", "tokenizer",
  "max_seq_len", "min_tokens", "num_documents", "num_samples", "num_tokens", "max_token_id",
  "metric_columns"}``, so training can size the model's embedding (and ``validate`` can check the
  token ids against it) without opening a shard. ``max_token_id`` (the largest id of any sample)
  is absent from datasets prepared before it was recorded; readers treat it as unknown.
* ``metrics.npz`` — one array per metric column, in sample order (``num_tokens`` int64, the others
  float64), so difficulty bucketing can start without scanning the shards.

Per-sample metric columns (each also an MDS column):

* ``num_tokens`` (int): the sample's length in tokens, EOS included. Range ``[min_tokens,
  max_seq_len]``.
* ``token_entropy`` (float64, bits per token): Shannon entropy of the sample's own token-id
  frequency distribution (``-Σ p log2 p`` over the distinct ids of the sample). 0 for a sample made
  of one repeated id; at most ``log2(min(num_tokens, vocab_size))``. Higher means more varied text.
* ``compression_ratio`` (float64): raw-DEFLATE (zlib level 9, no header) compressed size divided by
  raw size of the sample's non-EOS token ids, packed as uint8 for the byte tokenizer and as uint16
  (uint32 when the vocabulary exceeds 65,536) otherwise. Lower means more redundant, easier text;
  it is the gzip-compressibility difficulty proxy of Pandey, "gzip Predicts Data-dependent Scaling
  Laws" (2024). Samples of a few dozen bytes sit near or above 1.0 because DEFLATE has a fixed
  cost; compare it between samples of similar length. 1.0 for a sample that is only EOS.

Loading for training goes through :func:`open_stream`, which sets ``LOCAL_WORLD_SIZE`` for
mosaicml-streaming first (see :func:`ensure_local_world_size`). :func:`verify_stream` checks the
shard files against ``index.json`` and decodes a few samples before any rank opens them (the data
check of ``curriculum-ds validate`` and of every launch).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import numpy as np

from curriculum_ds.errors import DataError

if TYPE_CHECKING:
    from streaming import StreamingDataset

__all__ = [
    "DATASET_FORMAT",
    "EOS_TOKEN_CANDIDATES",
    "METRIC_COLUMNS",
    "ByteTokenizer",
    "HFTokenizer",
    "PrepareSummary",
    "StreamInfo",
    "Tokenizer",
    "close_stream",
    "compression_ratio",
    "ensure_local_world_size",
    "json_limit_reason",
    "load_tokenizer",
    "open_stream",
    "prepare",
    "read_stream_info",
    "split_document",
    "token_entropy",
    "verify_stream",
]

MAX_VOCAB_SIZE = 2**31 - 1
"""Largest ``vocab_size`` accepted: token ids are int32."""

DATASET_FORMAT = "curriculum_ds/1"
"""Value of ``format`` in ``curriculum_meta.json``; bumped when the layout changes."""

META_FILENAME = "curriculum_meta.json"
METRICS_FILENAME = "metrics.npz"

METRIC_COLUMNS: tuple[str, ...] = ("num_tokens", "token_entropy", "compression_ratio")
"""Per-sample metric columns written by :func:`prepare`, in this order."""

EOS_TOKEN_CANDIDATES: tuple[str, ...] = ("</s>", "<|endoftext|>", "[SEP]")
"""Tokens looked up, in this order, to find a HF tokenizer's end-of-document id."""

SHARD_HASHES: tuple[str, ...] = ("sha1",)
"""Hashes :func:`prepare` records per shard file in ``index.json`` (Python's ``hashlib``, no extra
package); ``curriculum-ds validate`` checks them (:func:`verify_stream` with ``verify_hashes``)."""

_MDS_COLUMNS = {
    "input_ids": "ndarray:int32",
    "num_tokens": "int",
    "token_entropy": "float64",
    "compression_ratio": "float64",
}
_JSONL_SUFFIXES = frozenset({".jsonl"})
_HF_ENCODE_BATCH = 256  # documents per tokenizers.encode_batch call (bounded memory).


# --------------------------------------------------------------------------------------------------
# Tokenizers
# --------------------------------------------------------------------------------------------------


class Tokenizer(Protocol):
    """What :func:`prepare` needs from a tokenizer."""

    @property
    def vocab_size(self) -> int:
        """Number of token ids; every id is in ``[0, vocab_size)``."""
        ...

    @property
    def eos_id(self) -> int | None:
        """Id appended after every document, or ``None`` when the tokenizer has none."""
        ...

    @property
    def pack_dtype(self) -> type[np.unsignedinteger[Any]]:
        """Narrowest unsigned dtype holding every non-EOS id (used by ``compression_ratio``)."""
        ...

    def describe(self) -> str | dict[str, str]:
        """The ``tokenizer`` entry of ``curriculum_meta.json``."""
        ...

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text, EOS appended when there is one; int32, shape ``(n_i,)``."""
        ...


class ByteTokenizer:
    """Byte-level tokenizer: ids 0–255 are the UTF-8 bytes, 256 is EOS; ``vocab_size`` 257.

    Lossless and deterministic; needs no file. ``decode(encode(text)) == text`` for every string.
    """

    vocab_size: int = 257
    eos_id: int = 256
    pack_dtype = np.uint8

    def encode(self, text: str) -> np.ndarray:
        """Encode one document.

        Args:
            text: Any string.

        Returns:
            int32 array of shape ``(len(text.encode("utf-8")) + 1,)``: the UTF-8 bytes then EOS.
        """
        raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        ids = np.empty(raw.size + 1, dtype=np.int32)
        ids[:-1] = raw
        ids[-1] = self.eos_id
        return ids

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Encode several documents; see :meth:`encode`."""
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decode ids back to text, dropping EOS; invalid UTF-8 (a split sample) is replaced."""
        arr = np.asarray(ids, dtype=np.int64)
        arr = arr[arr != self.eos_id]
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(
                f"byte tokenizer ids must be in [0, 256], got {arr.min()}..{arr.max()}"
            )
        return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def describe(self) -> str:
        """Return ``"byte"``, the ``tokenizer`` entry of ``curriculum_meta.json``."""
        return "byte"


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` loaded with the ``tokenizers`` library (no download).

    Documents are encoded without the tokenizer's own special tokens (its post-processor), then the
    EOS id is appended: the first of :data:`EOS_TOKEN_CANDIDATES` in the vocabulary, else none.
    """

    def __init__(self, path: str | Path) -> None:
        """Load ``path``.

        Raises:
            DataError: the file is missing, unreadable or not a tokenizer.json.
        """
        from tokenizers import Tokenizer as _HFTokenizer

        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"tokenizer file not found: {self.path}")
        try:
            data = self.path.read_bytes()
            self._tok = _HFTokenizer.from_str(data.decode("utf-8"))
        except Exception as err:  # tokenizers raises a bare Exception
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"cannot load tokenizer {self.path}: {msg}") from err
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.vocab_size: int = int(self._tok.get_vocab_size(with_added_tokens=True))
        if self.vocab_size < 1:
            raise DataError(f"tokenizer {self.path} has an empty vocabulary")
        self.eos_id: int | None = None
        for token in EOS_TOKEN_CANDIDATES:
            token_id = self._tok.token_to_id(token)
            if token_id is not None:
                self.eos_id = int(token_id)
                break
        if self.vocab_size > 2**31 - 1:
            raise DataError(f"tokenizer {self.path}: vocab_size {self.vocab_size} exceeds int32")
        self.pack_dtype = np.uint16 if self.vocab_size <= 2**16 else np.uint32

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text (int32), EOS appended when the tokenizer has one."""
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        out = []
        for enc in encodings:
            ids = enc.ids
            if self.eos_id is not None:
                ids = [*ids, self.eos_id]
            out.append(np.asarray(ids, dtype=np.int32))
        return out

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decode ids with the tokenizer, skipping special tokens."""
        return str(self._tok.decode([int(i) for i in ids], skip_special_tokens=True))

    def describe(self) -> dict[str, str]:
        """Return ``{"path", "sha256"}``, the ``tokenizer`` entry of ``curriculum_meta.json``."""
        return {"path": str(self.path.resolve()), "sha256": self.sha256}


def load_tokenizer(path: str | Path | None) -> ByteTokenizer | HFTokenizer:
    """Return the byte tokenizer for ``None``, else the HF ``tokenizer.json`` at ``path``.

    Raises:
        DataError: the tokenizer file is missing or invalid.
    """
    if path is None:
        return ByteTokenizer()
    return HFTokenizer(path)


# --------------------------------------------------------------------------------------------------
# Reading documents
# --------------------------------------------------------------------------------------------------


@dataclass
class _ReadStats:
    num_skipped_files: int = 0


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except PermissionError as err:
        raise DataError(f"cannot read {path}: permission denied") from err
    except OSError as err:
        raise DataError(f"cannot read {path}: {err.strerror or err}") from err


def _decode_text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 text (invalid byte at offset {err.start})"
        ) from err


def json_limit_reason(err: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a text for a reason other than its syntax, in a few words.

    Python's parser recurses once per nesting level (``RecursionError``) and refuses integer
    literals longer than ``sys.get_int_max_str_digits()`` digits (a ``ValueError``).
    """
    if isinstance(err, RecursionError):
        return "nested too deeply"
    detail = str(err).splitlines()[0] if str(err) else type(err).__name__
    if "integer string conversion" in detail:
        return "an integer literal of more than 4300 digits"
    return detail


def _iter_jsonl(path: Path, data: bytes) -> Iterator[str]:
    text = _decode_text(path, data)
    # Split on "\n" only: str.splitlines() would also cut at U+2028, U+0085, ..., which
    # json.dumps(ensure_ascii=False) leaves unescaped inside strings.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{lineno}: invalid JSON ({err.msg})") from err
        except (ValueError, RecursionError) as err:
            raise DataError(f"{path}:{lineno}: invalid JSON ({json_limit_reason(err)})") from None
        if not isinstance(obj, dict):
            raise DataError(
                f"{path}:{lineno}: expected a JSON object with a 'text' field, "
                f"got {type(obj).__name__}"
            )
        if "text" not in obj:
            keys = ", ".join(sorted(map(str, obj))) or "none"
            raise DataError(f"{path}:{lineno}: missing field 'text' (fields: {keys})")
        value = obj["text"]
        if not isinstance(value, str):
            raise DataError(
                f"{path}:{lineno}: field 'text' must be a string, got {type(value).__name__}"
            )
        try:
            value.encode("utf-8")  # a "\ud800" escape decodes to a lone surrogate
        except UnicodeEncodeError as err:
            bad = value[err.start]
            raise DataError(
                f"{path}:{lineno}: field 'text' is not valid Unicode (lone surrogate "
                f"U+{ord(bad):04X} at character {err.start})"
            ) from err
        yield value


def _iter_file(path: Path, *, explicit: bool, stats: _ReadStats) -> Iterator[str]:
    """Documents of one file; in a folder walk, binary/undecodable/unreadable files are skipped."""
    if explicit:
        data = _read_bytes(path)
    else:
        try:
            data = path.read_bytes()
        except OSError:
            stats.num_skipped_files += 1
            return
    if path.suffix.lower() in _JSONL_SUFFIXES:
        yield from _iter_jsonl(path, data)
        return
    if not explicit:
        if b"\0" in data:
            stats.num_skipped_files += 1
            return
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            stats.num_skipped_files += 1
            return
    else:
        text = _decode_text(path, data)
    yield text


def _walk_folder(folder: Path) -> list[Path]:
    """All files under ``folder`` (recursively), hidden entries skipped, sorted by relative path."""
    files = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            if path.is_file():
                files.append(path)
    files.sort(key=lambda p: p.relative_to(folder).as_posix())
    return files


def _check_inputs(inputs: Sequence[Path]) -> list[Path]:
    paths = [Path(p) for p in inputs]
    if not paths:
        raise DataError("no inputs given: pass text files, JSONL files or folders")
    for path in paths:
        if not path.exists():
            raise DataError(f"input not found: {path}")
        if not (path.is_file() or path.is_dir()):
            raise DataError(f"input is neither a file nor a folder: {path}")
    return paths


def _iter_documents(paths: Sequence[Path], stats: _ReadStats) -> Iterator[str]:
    for path in paths:
        if path.is_dir():
            for file in _walk_folder(path):
                yield from _iter_file(file, explicit=False, stats=stats)
        else:
            yield from _iter_file(path, explicit=True, stats=stats)


def _batched(docs: Iterator[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for doc in docs:
        if not doc:
            continue  # an empty document has no content tokens
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# --------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------


def token_entropy(ids: np.ndarray) -> float:
    """Shannon entropy (bits per token) of the token-id frequencies within one sample.

    Args:
        ids: Token ids, any integer dtype, shape ``(n,)`` with ``n >= 1``.

    Returns:
        ``-Σ p log2 p`` over distinct ids; ``0.0`` for a single repeated id. Deterministic.
    """
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0


def compression_ratio(ids: np.ndarray, *, eos_id: int | None, pack_dtype: Any) -> float:
    """Raw-DEFLATE (level 9) compressed size over raw size of a sample's non-EOS ids.

    Args:
        ids: Token ids, shape ``(n,)``.
        eos_id: Id excluded before packing, or ``None``.
        pack_dtype: Unsigned dtype the ids are packed as (uint8 for bytes).

    Returns:
        The ratio (> 0; near or above 1 for very short samples); ``1.0`` when nothing is left.
    """
    body = ids if eos_id is None else ids[ids != eos_id]
    raw = np.ascontiguousarray(body, dtype=pack_dtype).tobytes()
    if not raw:
        return 1.0
    comp = zlib.compressobj(level=9, wbits=-15)
    size = len(comp.compress(raw)) + len(comp.flush())
    return size / len(raw)


# --------------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------------


def split_document(ids: np.ndarray, max_seq_len: int, min_tokens: int) -> list[np.ndarray]:
    """Cut one tokenized document into consecutive samples.

    Args:
        ids: The document's token ids (EOS included), shape ``(n,)``.
        max_seq_len: Longest sample, in tokens (``>= 1``).
        min_tokens: A trailing piece shorter than this is dropped.

    Returns:
        Views into ``ids``: all but the last have exactly ``max_seq_len`` tokens, and their
        concatenation is ``ids`` minus at most ``min_tokens - 1`` trailing tokens. Deterministic.
    """
    pieces = [ids[start : start + max_seq_len] for start in range(0, ids.size, max_seq_len)]
    if pieces and pieces[-1].size < min_tokens:
        pieces.pop()
    return pieces


@dataclass(frozen=True)
class PrepareSummary:
    """What :func:`prepare` wrote.

    Attributes:
        out: The dataset directory.
        num_documents: Non-empty documents read.
        num_samples: Samples written (MDS rows).
        num_tokens: Tokens written, EOS included, summed over samples.
        vocab_size: Tokenizer vocabulary size; every id is in ``[0, vocab_size)``.
        num_skipped_files: Files skipped inside folders (binary, not UTF-8, unreadable).
    """

    out: Path
    num_documents: int
    num_samples: int
    num_tokens: int
    vocab_size: int
    num_skipped_files: int = 0


def _check_out_not_in_inputs(out: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output folder inside (or equal to) an input folder: it would be read back."""
    for path in inputs:
        folder = path.resolve()
        if path.is_dir() and (out == folder or folder in out.parents):
            raise DataError(
                f"output folder {out} is inside the input folder {path}: its shards would be read "
                "back as documents; choose an output folder outside the inputs"
            )


def _check_out(out: Path) -> None:
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise DataError(f"output path exists and is not a folder: {out}")
        if any(out.iterdir()):
            raise DataError(f"output folder is not empty: {out}")


def _write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Like ``np.savez`` but byte-deterministic (fixed zip timestamps)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(arr), allow_pickle=False)


def _remove_empty_folders(folders: Sequence[Path]) -> None:
    """Remove each folder (deepest first) if it is empty; stop at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def prepare(
    inputs: Sequence[Path],
    out: Path,
    *,
    tokenizer: Path | None = None,
    max_seq_len: int = 1024,
    min_tokens: int = 2,
    size_limit: int | None = None,
    progress: bool = False,
) -> PrepareSummary:
    """Tokenize text into MDS shards with per-sample metric columns.

    Inputs, in the order given:

    * a ``.jsonl`` file: one JSON object per non-blank line, its ``text`` string is a document;
    * any other file (``.txt``, ``.md``, ``.py``, ...): the whole file (UTF-8) is one document;
    * a folder: every file under it, recursively, sorted by relative path, hidden entries
      skipped, each read as above; binary (NUL byte), non-UTF-8 or unreadable files are skipped
      and counted in ``num_skipped_files``.

    Each non-empty document is tokenized (EOS appended when the tokenizer has one) and cut into
    consecutive samples of ``max_seq_len`` tokens; a trailing piece shorter than ``min_tokens`` is
    dropped. Samples never span two documents. The MDS columns are ``input_ids``
    (``ndarray:int32``, shape ``(num_tokens,)``) and the metrics of :data:`METRIC_COLUMNS` (see the
    module docstring). Everything is written to a temporary folder next to ``out`` and renamed at
    the end, so an error leaves no partial dataset under ``out`` (and the parent folders of
    ``out`` that this call created are removed again). Each shard's :data:`SHARD_HASHES` are
    recorded in ``index.json``. Deterministic: the same inputs
    and tokenizer file give byte-identical outputs. ``out`` may not lie inside an input folder
    (a later run over that folder would read the shards back as documents).

    Args:
        inputs: Files and folders.
        out: Dataset folder to create; it must not exist or be empty.
        tokenizer: A HF ``tokenizer.json``; ``None`` for :class:`ByteTokenizer`.
        max_seq_len: Tokens per sample at most, EOS included; ``>= 2``.
        min_tokens: Shortest sample kept, in tokens; in ``[1, max_seq_len]``.
        size_limit: MDS shard size limit in bytes (``None``: streaming's default, 64 MiB).
        progress: Show a progress bar (documents) on stderr.

    Returns:
        A :class:`PrepareSummary`.

    Raises:
        DataError: no inputs, a missing/unreadable/non-UTF-8 named file (``path:line``), a JSONL
            line that is not an object with a string ``text`` field or whose text holds a lone
            surrogate (``path:line``), a bad argument, a non-empty ``out``, an ``out`` inside an
            input folder, or inputs that yield no sample. Nothing is written under ``out``.
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
    paths = _check_inputs(inputs)
    _check_out_not_in_inputs(out, paths)
    _check_out(out)
    tok = load_tokenizer(tokenizer)

    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]  # deepest first
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as err:
        _remove_empty_folders(created)
        raise DataError(f"cannot create the output folder {out}: {err.strerror or err}") from None
    try:
        stats = _ReadStats()
        num_documents = 0
        lengths: list[int] = []
        entropies: list[float] = []
        ratios: list[float] = []
        max_token_id = -1
        writer_kwargs: dict[str, Any] = {
            "progress_bar": False,
            "exist_ok": False,
            "hashes": list(SHARD_HASHES),
        }
        if size_limit is not None:
            writer_kwargs["size_limit"] = size_limit
        bar = tqdm(desc="prepare", unit="doc", disable=not progress, leave=False)
        with bar, MDSWriter(out=str(tmp), columns=_MDS_COLUMNS, **writer_kwargs) as writer:
            for batch in _batched(_iter_documents(paths, stats), _HF_ENCODE_BATCH):
                for ids in tok.encode_documents(batch):
                    num_documents += 1
                    for piece in split_document(ids, max_seq_len, min_tokens):
                        entropy = token_entropy(piece)
                        ratio = compression_ratio(
                            piece, eos_id=tok.eos_id, pack_dtype=tok.pack_dtype
                        )
                        writer.write(
                            {
                                "input_ids": piece,
                                "num_tokens": int(piece.size),
                                "token_entropy": entropy,
                                "compression_ratio": ratio,
                            }
                        )
                        lengths.append(int(piece.size))
                        max_token_id = max(max_token_id, int(piece.max()))
                        entropies.append(entropy)
                        ratios.append(ratio)
                bar.update(len(batch))
        if num_documents == 0:
            shown = ", ".join(str(p) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
            raise DataError(f"no documents found in inputs: {shown}")
        if not lengths:
            raise DataError(
                f"no samples: all {num_documents} documents are shorter than "
                f"min_tokens={min_tokens} tokens"
            )
        num_tokens = int(np.sum(lengths, dtype=np.int64))
        _write_npz(
            tmp / METRICS_FILENAME,
            {
                "num_tokens": np.asarray(lengths, dtype=np.int64),
                "token_entropy": np.asarray(entropies, dtype=np.float64),
                "compression_ratio": np.asarray(ratios, dtype=np.float64),
            },
        )
        meta = {
            "format": DATASET_FORMAT,
            "vocab_size": tok.vocab_size,
            "eos_id": tok.eos_id,
            "tokenizer": tok.describe(),
            "max_seq_len": max_seq_len,
            "min_tokens": min_tokens,
            "num_documents": num_documents,
            "num_samples": len(lengths),
            "num_tokens": num_tokens,
            "max_token_id": max_token_id,
            "metric_columns": list(METRIC_COLUMNS),
        }
        (tmp / META_FILENAME).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        _check_out(out)  # still empty? (someone may have written there meanwhile)
        if out.is_dir():
            out.rmdir()
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty_folders(created)
        raise
    return PrepareSummary(
        out=given_out,
        num_documents=num_documents,
        num_samples=len(lengths),
        num_tokens=num_tokens,
        vocab_size=tok.vocab_size,
        num_skipped_files=stats.num_skipped_files,
    )


# --------------------------------------------------------------------------------------------------
# Reading datasets back
# --------------------------------------------------------------------------------------------------


def ensure_local_world_size() -> int:
    """Make sure ``LOCAL_WORLD_SIZE`` is set for mosaicml-streaming, and return it.

    mosaicml-streaming derives node leadership (who creates its shared memory) from
    ``LOCAL_WORLD_SIZE``; DeepSpeed's launcher sets ``LOCAL_SIZE`` instead, and without either every
    rank believes it is its node's leader. When unset, it is taken from ``LOCAL_SIZE``, else
    ``WORLD_SIZE`` (single-node launchers), else 1. An existing value is left alone.

    Raises:
        DataError: the value is not a positive integer dividing ``WORLD_SIZE``.
    """
    if not os.environ.get("LOCAL_WORLD_SIZE"):
        for name in ("LOCAL_SIZE", "WORLD_SIZE"):
            if os.environ.get(name):
                os.environ["LOCAL_WORLD_SIZE"] = os.environ[name]
                break
        else:
            os.environ["LOCAL_WORLD_SIZE"] = "1"
    raw = os.environ["LOCAL_WORLD_SIZE"]
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise DataError(f"LOCAL_WORLD_SIZE must be a positive integer, got {raw!r}")
    world_raw = os.environ.get("WORLD_SIZE", "1") or "1"
    try:
        world = int(world_raw)
    except ValueError:
        world = value
    if world % value:
        raise DataError(f"LOCAL_WORLD_SIZE={value} does not divide WORLD_SIZE={world}")
    return value


def _read_index(local: Path) -> dict[str, Any]:
    """Validate that ``local`` is an MDS dataset and return its parsed ``index.json``.

    Every shard needs one of its listed files (``raw_data`` or ``zip_data``) on disk, and every
    listed file on disk must have the size ``index.json`` records (one ``stat`` per file).

    Raises:
        DataError: no folder or index, an unreadable index, no shards, a malformed shard entry,
            a missing shard file, or a shard file of another size (truncated or corrupt).
    """
    if not local.is_dir():
        raise DataError(f"dataset folder not found: {local}")
    index_path = local / "index.json"
    if not index_path.is_file():
        raise DataError(f"not an MDS dataset (no index.json): {local}")
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"cannot read MDS index {index_path}: {err}") from err
    except (ValueError, RecursionError) as err:
        raise DataError(f"cannot read MDS index {index_path}: {json_limit_reason(err)}") from None
    shards = index.get("shards") if isinstance(index, dict) else None
    if not isinstance(shards, list) or not shards:
        raise DataError(f"MDS index lists no shards: {index_path}")
    for i, shard in enumerate(shards):
        _check_shard_entry(index_path, i, shard)
        names = [
            (shard.get(key) or {}).get("basename")
            for key in ("raw_data", "zip_data")
            if isinstance(shard.get(key), dict)
        ]
        if not any(name and (local / name).is_file() for name in names):
            shown = names[0] if names else "?"
            raise DataError(f"MDS dataset {local}: shard file missing: {shown}")
        for key in ("raw_data", "zip_data"):
            info = shard.get(key)
            if not isinstance(info, dict) or not isinstance(info.get("basename"), str):
                continue
            path = local / info["basename"]
            expected = info.get("bytes")
            if isinstance(expected, int) and path.is_file():
                actual = path.stat().st_size
                if actual != expected:
                    raise DataError(
                        f"MDS dataset {local}: shard file {info['basename']} has {actual} bytes "
                        f"but index.json records {expected} (truncated or corrupt)"
                    )
    return index


_MAX_SHARD_SAMPLES = 2**32 - 2  # an MDS shard header stores num_samples + 1 offsets as uint32


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_shard_entry(index_path: Path, i: int, shard: Any) -> None:
    """Check the types and ranges of ``index.json``'s ``shards[i]`` that the readers rely on.

    Raises:
        DataError: one line naming ``index_path``, the shard index and the key.
    """
    where = f"MDS index {index_path}: shards[{i}]"
    if not isinstance(shard, dict):
        raise DataError(f"{where} is malformed: expected an object, got {type(shard).__name__}")
    samples = shard.get("samples")
    if not isinstance(samples, int) or isinstance(samples, bool):
        samples_ok = False
    else:
        samples_ok = 0 <= samples <= _MAX_SHARD_SAMPLES
    if not samples_ok:
        raise DataError(
            f"{where}.samples must be an integer in [0, {_MAX_SHARD_SAMPLES}], got {samples!r:.60}"
        )
    fmt = shard.get("format")
    if fmt != "mds":
        raise DataError(f"{where}.format must be 'mds' (only MDS shards are read), got {fmt!r:.60}")
    if shard.get("raw_data") is None and shard.get("zip_data") is None:
        raise DataError(f"{where} is malformed: neither raw_data nor zip_data is given")
    for key in ("raw_data", "zip_data"):
        info = shard.get(key)
        if info is None:
            continue
        if not isinstance(info, dict):
            raise DataError(f"{where}.{key} must be an object or null, got {type(info).__name__}")
        name = info.get("basename")
        if not isinstance(name, str) or not name or "\0" in name:
            raise DataError(f"{where}.{key}.basename must be a file name, got {name!r:.60}")
        size = info.get("bytes")
        if size is not None and (not _is_int(size) or size < 0):
            raise DataError(f"{where}.{key}.bytes must be a non-negative integer, got {size!r:.60}")
        hashes = info.get("hashes")
        if hashes is not None and not (
            isinstance(hashes, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in hashes.items())
        ):
            raise DataError(f"{where}.{key}.hashes must map algorithm names to hex digests")
    names, encodings, sizes = (
        shard.get(key) for key in ("column_names", "column_encodings", "column_sizes")
    )
    if not (
        isinstance(names, list)
        and isinstance(encodings, list)
        and isinstance(sizes, list)
        and len(names) == len(encodings) == len(sizes)
    ):
        raise DataError(
            f"{where}: column_names, column_encodings and column_sizes must be lists of one length"
        )
    if not all(isinstance(n, str) for n in names):
        raise DataError(f"{where}.column_names must be strings")
    if not all(isinstance(e, str) for e in encodings):
        raise DataError(f"{where}.column_encodings must be strings")
    for k, size in enumerate(sizes):
        if size is not None and (not _is_int(size) or not 0 <= size < 2**32):
            raise DataError(
                f"{where}.column_sizes[{k}] must be null or a non-negative integer, "
                f"got {size!r:.60}"
            )


@dataclass(frozen=True, eq=False)
class StreamInfo:
    """What training needs to know about one prepared stream, read without scanning shards.

    Attributes:
        local: The dataset folder.
        num_samples: Samples in the dataset.
        num_tokens: Tokens over all samples (EOS included).
        vocab_size: Tokenizer vocabulary size; ``None`` for an MDS dataset not made by
            :func:`prepare`.
        eos_id: End-of-document id, or ``None``.
        max_seq_len: Longest sample allowed when prepared, in tokens; ``None`` if unknown.
        tokenizer: ``"byte"``, the tokenizer file path, or ``None`` if unknown.
        metrics: Column name → read-only array of shape ``(num_samples,)``, in sample order:
            ``num_tokens`` (int64) always, plus the float64 metrics of prepared datasets.
        min_token_id: Smallest token id of any sample, when known (foreign datasets, which are
            read whole); ``None`` otherwise.
        max_token_id: Largest token id of any sample, when known (``curriculum_meta.json`` of
            datasets prepared since it is recorded, or foreign datasets); ``None`` otherwise.
        tokenizer_sha256: sha256 of the ``tokenizer.json`` the dataset was prepared with, when
            recorded (not for the byte tokenizer); ``None`` otherwise.
    """

    local: Path
    num_samples: int
    num_tokens: int
    vocab_size: int | None
    eos_id: int | None
    max_seq_len: int | None
    tokenizer: str | None
    metrics: dict[str, np.ndarray]
    min_token_id: int | None = None
    max_token_id: int | None = None
    tokenizer_sha256: str | None = None


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


def read_stream_info(local: str | Path) -> StreamInfo:
    """Read the metadata and per-sample metrics of an MDS dataset folder.

    For a dataset made by :func:`prepare`, everything comes from ``curriculum_meta.json`` and
    ``metrics.npz`` (checked against ``index.json``). For any other MDS dataset with an
    ``input_ids`` ndarray column, ``num_tokens`` is computed by reading every sample through
    :func:`open_stream` (slow for large datasets) and the tokenizer fields are ``None``.
    Nothing is cached.

    Args:
        local: A local MDS dataset folder.

    Returns:
        A :class:`StreamInfo`.

    Raises:
        DataError: ``local`` is not a readable MDS dataset, its sidecar files disagree with the
            index, or (foreign datasets) it has no ``input_ids`` column.
    """
    local = Path(local)
    index = _read_index(local)
    num_samples = int(sum(shard["samples"] for shard in index["shards"]))
    if num_samples == 0:
        raise DataError(f"MDS dataset {local} holds no samples (every shard is empty)")
    meta_path = local / META_FILENAME
    if not meta_path.exists():
        return _read_foreign_info(local, index, num_samples)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"cannot read {meta_path}: {err}") from err
    except (ValueError, RecursionError) as err:
        raise DataError(f"cannot read {meta_path}: {json_limit_reason(err)}") from None
    if not isinstance(meta, dict) or meta.get("format") != DATASET_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise DataError(f"{meta_path}: format must be {DATASET_FORMAT!r}, got {found!r}")
    for key in ("vocab_size", "num_samples", "num_tokens", "max_seq_len"):
        if not _is_int(meta.get(key)):
            raise DataError(f"{meta_path}: field {key!r} missing or not an integer")
    if not 1 <= meta["vocab_size"] <= MAX_VOCAB_SIZE:
        raise DataError(
            f"{meta_path}: field 'vocab_size' must be in [1, {MAX_VOCAB_SIZE}] (int32 token ids), "
            f"got {meta['vocab_size']:.6g}"
        )
    max_token_id = meta.get("max_token_id")  # absent in datasets prepared before it was recorded
    if max_token_id is not None and (
        isinstance(max_token_id, bool) or not isinstance(max_token_id, int)
    ):
        raise DataError(f"{meta_path}: field 'max_token_id' must be an integer")
    if meta["num_samples"] != num_samples:
        raise DataError(
            f"{meta_path}: num_samples {meta['num_samples']} disagrees with index.json "
            f"({num_samples}); re-run prepare"
        )
    columns = meta.get("metric_columns")
    if not isinstance(columns, list) or "num_tokens" not in columns:
        raise DataError(f"{meta_path}: field 'metric_columns' must list 'num_tokens'")
    metrics_path = local / METRICS_FILENAME
    try:
        with np.load(metrics_path, allow_pickle=False) as npz:
            loaded = {name: np.array(npz[name]) for name in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise DataError(f"cannot read {metrics_path}: {err}") from err
    metrics: dict[str, np.ndarray] = {}
    for name in columns:
        if name not in loaded:
            raise DataError(f"{metrics_path}: metric column {name!r} missing")
        arr = loaded[name]
        if arr.shape != (num_samples,):
            raise DataError(
                f"{metrics_path}: column {name!r} has shape {arr.shape}, expected ({num_samples},)"
            )
        dtype = np.int64 if name == "num_tokens" else np.float64
        with np.errstate(invalid="ignore", over="ignore"):  # a NaN count fails the sum below
            metrics[name] = _frozen(arr.astype(dtype, copy=False))
    if int(metrics["num_tokens"].sum()) != meta["num_tokens"]:
        raise DataError(f"{metrics_path}: num_tokens column does not sum to meta num_tokens")
    tok = meta.get("tokenizer")
    tok_fields = tok if isinstance(tok, dict) else {}
    tokenizer = tok if isinstance(tok, str) else tok_fields.get("path")
    sha = tok_fields.get("sha256")
    eos = meta.get("eos_id")
    return StreamInfo(
        local=local,
        num_samples=num_samples,
        num_tokens=int(meta["num_tokens"]),
        vocab_size=int(meta["vocab_size"]),
        eos_id=int(eos) if isinstance(eos, int) else None,
        max_seq_len=int(meta["max_seq_len"]),
        tokenizer=tokenizer if isinstance(tokenizer, str) else None,
        metrics=metrics,
        max_token_id=max_token_id,
        tokenizer_sha256=sha if isinstance(sha, str) else None,
    )


def _read_foreign_info(local: Path, index: dict[str, Any], num_samples: int) -> StreamInfo:
    for i, shard in enumerate(index["shards"]):
        names = shard.get("column_names") or []
        encodings = shard.get("column_encodings") or []
        if "input_ids" not in names:
            raise DataError(f"MDS dataset {local}: shards[{i}] has no 'input_ids' column")
        encoding = encodings[names.index("input_ids")] if len(encodings) == len(names) else ""
        if not str(encoding).startswith("ndarray"):
            raise DataError(
                f"MDS dataset {local}: column 'input_ids' must be an ndarray, got {encoding!r}"
            )
    ds = open_stream(local)
    lengths = np.empty(num_samples, dtype=np.int64)
    low: int | None = None
    high: int | None = None
    for i in range(num_samples):
        ids = np.asarray(ds[i]["input_ids"])
        lengths[i] = ids.size
        if ids.size and np.issubdtype(ids.dtype, np.integer):
            low = int(ids.min()) if low is None else min(low, int(ids.min()))
            high = int(ids.max()) if high is None else max(high, int(ids.max()))
    close_stream(ds)
    return StreamInfo(
        local=local,
        num_samples=num_samples,
        num_tokens=int(lengths.sum()),
        vocab_size=None,
        eos_id=None,
        max_seq_len=None,
        tokenizer=None,
        metrics={"num_tokens": _frozen(lengths)},
        min_token_id=low,
        max_token_id=high,
    )


_DECODE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AssertionError, OverflowError)
"""What decoding arbitrary (corrupt) shard bytes with mosaicml-streaming's coders can raise."""


def verify_stream(
    local: str | Path, *, num_probe_samples: int = 16, verify_hashes: bool = False
) -> tuple[int, int] | None:
    """Check an MDS dataset's shard files against its ``index.json`` and decode a probe of samples.

    Catches, before any rank starts, what mosaicml-streaming would only report inside training:

    * every shard needs one of the files ``index.json`` lists for it (``raw_data``, else
      ``zip_data``), and each listed file on disk must have the recorded size;
    * with ``verify_hashes``, each such file must have the hashes ``index.json`` records for it
      (mosaicml-streaming records none unless its writer was given ``hashes``; each hashed file
      is read once, and a compressed-only shard is decompressed to check its raw hashes);
    * each MDS shard's header must agree with the index: its sample count, offsets that increase
      and end at the file's size;
    * ``num_probe_samples`` samples spread evenly over the dataset (the first and the last
      included) must decode, and their ``input_ids`` must be an integer array.

    Reads the shards directly (no ``StreamingDataset``, no shared memory), so it is safe before
    ``torch.distributed`` is initialized. Non-MDS shards (JSON, CSV) get the file checks only.
    Deterministic.

    Args:
        local: A local MDS dataset folder.
        num_probe_samples: Samples to decode, at most the dataset's size; ``>= 1``.
        verify_hashes: Also check the recorded shard hashes (reads every hashed file once).

    Returns:
        ``(min_id, max_id)``: the smallest and largest token id of the probed samples'
        ``input_ids``, or ``None`` when they hold no token.

    Raises:
        DataError: one line naming the dataset folder and the shard file: missing, another size
            or hash than recorded, a header that disagrees with the index, a sample that does not
            decode, or no integer ``input_ids`` column.
        ValueError: ``num_probe_samples`` < 1.
    """
    if num_probe_samples < 1:
        raise ValueError(f"num_probe_samples must be >= 1, got {num_probe_samples}")
    local = Path(local)
    index = _read_index(local)
    shards = index["shards"]
    counts = np.array([shard["samples"] for shard in shards], dtype=np.int64)
    total = int(counts.sum())
    if total:
        spread = np.linspace(0, total - 1, min(total, num_probe_samples))
        probe = np.unique(np.rint(spread).astype(np.int64))
    else:
        probe = np.empty(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    low: int | None = None
    high: int | None = None
    for i, shard in enumerate(shards):
        name, source = _shard_source(local, shard, verify_hashes=verify_hashes)
        if shard.get("format", "mds") != "mds":
            continue
        where = f"MDS dataset {local}: shard file {name}"
        mine = (probe[(probe >= starts[i]) & (probe < starts[i + 1])] - starts[i]).tolist()
        if isinstance(source, bytes):
            read = functools.partial(_slice, source)
            found = _probe_mds_shard(read, len(source), shard, mine, where)
        else:
            with open(source, "rb") as fh:
                read = functools.partial(_read_range, fh)
                found = _probe_mds_shard(read, os.fstat(fh.fileno()).st_size, shard, mine, where)
        for lo, hi in found:
            low = lo if low is None else min(low, lo)
            high = hi if high is None else max(high, hi)
    if low is None or high is None:
        return None
    return low, high


def _slice(data: bytes, start: int, stop: int) -> bytes:
    return data[start:stop]


def _read_range(fh: BinaryIO, start: int, stop: int) -> bytes:
    fh.seek(start)
    return fh.read(stop - start)


def _probe_mds_shard(
    read: Callable[[int, int], bytes],
    size: int,
    shard: dict[str, Any],
    sample_idxs: list[int],
    where: str,
) -> list[tuple[int, int]]:
    """Check an MDS shard's header and decode the given samples' ``input_ids``.

    An MDS shard is ``uint32 num_samples``, ``uint32 offsets[num_samples + 1]`` (absolute, the
    last one the file size), the writer's config, then the samples (mosaicml-streaming
    ``MDSWriter.encode_joint_shard``). ``read(start, stop)`` returns those bytes of the shard.

    Returns:
        ``(min_id, max_id)`` of each probed sample that holds a token.
    """
    num_samples = int(shard["samples"])
    header = 4 * (num_samples + 2)
    if size < header:
        raise DataError(f"{where}: {size} bytes, too short for {num_samples} samples")
    head = read(0, header)
    found = int(np.frombuffer(head, dtype="<u4", count=1)[0])
    if found != num_samples:
        raise DataError(f"{where}: holds {found} samples but index.json records {num_samples}")
    offsets = np.frombuffer(head, dtype="<u4", count=num_samples + 1, offset=4).astype(np.int64)
    if offsets[0] < header or offsets[-1] != size or np.any(np.diff(offsets) < 0):
        raise DataError(f"{where}: corrupt sample offsets (truncated or overwritten)")
    ranges = []
    for j in sample_idxs:
        sample = read(int(offsets[j]), int(offsets[j + 1]))
        try:
            ids = np.asarray(_decode_column(shard, sample, "input_ids"))
        except _DECODE_ERRORS as err:
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"{where}: sample {j} cannot be decoded ({detail})") from None
        if not np.issubdtype(ids.dtype, np.integer):
            raise DataError(f"{where}: sample {j}: input_ids are {ids.dtype}, not integers")
        if ids.size:
            ranges.append((int(ids.min()), int(ids.max())))
    return ranges


def _shard_source(
    local: Path, shard: dict[str, Any], *, verify_hashes: bool
) -> tuple[str, bytes | Path]:
    """The name of a shard's file and where to read its raw bytes; hashes checked on request.

    The raw file's path when it is on disk, else the decompressed bytes of the compressed file
    (or, for a shard that is not MDS and has no hash to check, its compressed file's path).
    """
    from streaming.base.compression import decompress
    from streaming.base.hashing import get_hash, is_hash

    raw = shard.get("raw_data") if isinstance(shard.get("raw_data"), dict) else None
    packed = shard.get("zip_data") if isinstance(shard.get("zip_data"), dict) else None

    def check_hashes(info: dict[str, Any] | None, data: bytes) -> None:
        recorded = (info or {}).get("hashes") or {}
        for algo, digest in sorted(recorded.items()):
            if is_hash(algo) and get_hash(algo, data) != digest:
                raise DataError(
                    f"MDS dataset {local}: shard file {(info or {}).get('basename')} fails its "
                    f"{algo} hash recorded in index.json (corrupt)"
                )

    def hashed(info: dict[str, Any] | None) -> bool:
        return verify_hashes and bool((info or {}).get("hashes"))

    raw_path = local / raw["basename"] if raw and isinstance(raw.get("basename"), str) else None
    zip_path = (
        local / packed["basename"] if packed and isinstance(packed.get("basename"), str) else None
    )
    if zip_path is not None and zip_path.is_file() and hashed(packed):
        check_hashes(packed, _read_bytes(zip_path))
    if raw_path is not None and raw_path.is_file():
        if hashed(raw):
            check_hashes(raw, _read_bytes(raw_path))
        return raw_path.name, raw_path
    if zip_path is None or not zip_path.is_file():
        shown = raw_path.name if raw_path is not None else "?"
        raise DataError(f"MDS dataset {local}: shard file missing: {shown}")
    if shard.get("format", "mds") != "mds" and not hashed(raw):
        return zip_path.name, zip_path
    try:
        data = decompress(shard.get("compression"), _read_bytes(zip_path))
    except Exception as err:  # every codec raises its own error type on corrupt input
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(
            f"MDS dataset {local}: shard file {zip_path.name} cannot be decompressed ({detail})"
        ) from None
    expected = (raw or {}).get("bytes")
    if isinstance(expected, int) and len(data) != expected:
        raise DataError(
            f"MDS dataset {local}: shard file {zip_path.name} decompresses to {len(data)} bytes "
            f"but index.json records {expected} (corrupt)"
        )
    if hashed(raw):
        check_hashes(raw, data)
    return zip_path.name, data


def _decode_column(shard: dict[str, Any], sample: bytes, column: str) -> Any:
    """Decode one column of an MDS sample (mosaicml-streaming ``MDSReader.decode_sample``).

    Only ``column`` is decoded, so a pickle column of foreign data is never unpickled.
    """
    from streaming.base.format.mds.encodings import is_mds_encoding_safe, mds_decode

    names, encodings, sizes = (
        shard["column_names"],
        shard["column_encodings"],
        shard["column_sizes"],
    )
    if column not in names:
        raise ValueError(f"no {column!r} column")
    pos = 0
    lengths: list[int] = []
    for size in sizes:
        if size:
            lengths.append(int(size))
        else:
            lengths.append(int(np.frombuffer(sample, dtype="<u4", count=1, offset=pos)[0]))
            pos += 4
    k = names.index(column)
    if not is_mds_encoding_safe(encodings[k]):  # pickle: decoding would run arbitrary code
        raise ValueError(f"column {column!r} has the unsafe encoding {encodings[k]!r}")
    start = pos + sum(lengths[:k])
    if pos + sum(lengths) != len(sample):
        raise ValueError(f"{len(sample)} bytes but its columns take {pos + sum(lengths)}")
    return mds_decode(encodings[k], sample[start : start + lengths[k]])


def open_stream(local: str | Path) -> StreamingDataset:
    """Open a local MDS dataset for random access (``ds[i]["input_ids"]``).

    Builds ``streaming.StreamingDataset(local=..., remote=None, batch_size=1, shuffle=False)``
    after :func:`ensure_local_world_size`. Several datasets on the same folder may live in one
    process at once (each takes its own shared-memory prefix; with ``remote=None`` streaming does
    not refuse a reused local folder), and opening again after deleting one works.

    Caveats for distributed use: mosaicml-streaming calls ``dist.barrier()`` while registering
    its shared memory when ``torch.distributed`` is initialized, so every rank must open the same
    streams in the same order; when it is not initialized and ``WORLD_SIZE > 1`` streaming would
    initialize it itself, so initialize it (DeepSpeed) before calling this.

    Args:
        local: A local MDS dataset folder.

    Returns:
        The dataset; ``len(ds)`` is per rank, ``ds.num_samples`` is the global count, and
        ``ds[i]`` takes any global index ``i`` in ``[0, ds.num_samples)``.

    Raises:
        DataError: ``local`` is not a readable MDS dataset, or streaming refuses it.
    """
    from streaming import StreamingDataset

    local = Path(local)
    ensure_local_world_size()
    _read_index(local)
    before = {id(h) for h in _live_shared_memory()}
    try:
        ds = StreamingDataset(local=str(local.resolve()), remote=None, batch_size=1, shuffle=False)
    except (ValueError, RuntimeError, KeyError, OSError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"cannot open MDS dataset {local}: {first}") from err
    # streaming's prefix search attaches to every other live dataset's shared memory and keeps
    # those handles until exit; close the ones the new dataset does not own
    owned = {id(h) for h in _dataset_shared_memory(ds)}
    _release_shared_memory(
        h for h in _live_shared_memory() if id(h) not in before and id(h) not in owned
    )
    return ds


def _live_shared_memory() -> list[Any]:
    """Every live mosaicml-streaming SharedMemory handle of this process (gc scan; phase swaps)."""
    import gc

    from streaming.base.shared.memory import SharedMemory

    return [obj for obj in gc.get_objects() if type(obj) is SharedMemory]


def _dataset_shared_memory(ds: Any) -> list[Any]:
    """The SharedMemory handles reachable from a dataset's own attributes (a few levels deep)."""
    from streaming.base.shared.memory import SharedMemory

    seen: set[int] = set()

    def walk(obj: object, depth: int) -> list[Any]:
        if id(obj) in seen or depth > 3:
            return []
        seen.add(id(obj))
        if isinstance(obj, SharedMemory):
            return [obj]
        found: list[Any] = []
        for value in getattr(obj, "__dict__", {}).values():
            if isinstance(value, list | tuple):
                for item in value:
                    found += walk(item, depth + 1)
            elif hasattr(value, "__dict__") and type(value).__module__.startswith("streaming"):
                found += walk(value, depth + 1)
        return found

    return walk(ds, 0)


def _release_shared_memory(handles: Iterable[Any]) -> None:
    """Run streaming's own cleanup of each handle now and drop its atexit registration."""
    import atexit

    for shm in handles:
        atexit.unregister(shm.cleanup)
        shm.cleanup()


def close_stream(ds: StreamingDataset) -> None:
    """Release the shared memory a StreamingDataset holds, now instead of at interpreter exit.

    mosaicml-streaming 0.13 registers an ``atexit`` cleanup for every shared-memory handle of a
    dataset (prefix locals, barrier, epoch and cache counters, shard states), which keeps the
    handles (about a dozen file descriptors per dataset) open for the life of the process even
    after the dataset is dropped. A training run that swaps loaders, or a test session that opens
    hundreds of datasets, would run out of descriptors. This runs those cleanups now (the
    process that created a segment unlinks it, the others close it) and unregisters them. Call it
    once every rank is done with the dataset (at a phase swap); do not use the dataset afterwards.
    """
    _release_shared_memory(_dataset_shared_memory(ds))
