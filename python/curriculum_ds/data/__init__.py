"""Data: text, JSONL, JSON arrays or folders of them → tokenized MDS shards, and back.

The pipeline is ``read documents → tokenize (EOS appended) → split into samples of at most
``max_seq_len`` tokens (or, with ``pack``, concatenate into rows of exactly ``max_seq_len``) →
per-sample metrics → MDSWriter``. Everything is deterministic: the same
inputs and tokenizer give byte-identical shards, ``metrics.npz`` and ``curriculum_meta.json``.

A prepared dataset directory holds, besides the MDS ``index.json`` and ``shard.*.mds`` files:

* ``curriculum_meta.json`` — ``{"format": "curriculum_ds/1", "vocab_size", "eos_id", "tokenizer",
  "max_seq_len", "min_tokens", "packed", "num_documents", "num_samples", "num_tokens",
  "max_token_id", "metric_columns"}``, so training can size the model's embedding (and
  ``validate`` can check the token ids against it) without opening a shard. ``max_token_id`` (the
  largest id of any sample) and ``packed`` are absent from datasets prepared before they were
  recorded; readers treat them as unknown and ``false``. ``packed: true`` (``prepare --pack``)
  means the documents were concatenated, EOS-separated, into rows of exactly ``max_seq_len``
  tokens (only the last row shorter; ``min_tokens`` is then 1); a packed row is one sample.
* ``metrics.npz`` — one array per metric column, in sample order (``num_tokens`` int64, the others
  float64), so difficulty bucketing can start without scanning the shards.

Per-sample metric columns (each also an MDS column):

* ``num_tokens`` (int): the sample's length in tokens, EOS included. Range ``[min_tokens,
  max_seq_len]``; ``max_seq_len`` for every packed row but the last.
* ``token_entropy`` (float64, bits per token): Shannon entropy of the sample's own token-id
  frequency distribution (``-Σ p log2 p`` over the distinct ids of the sample). 0 for a sample made
  of one repeated id; at most ``log2(min(num_tokens, vocab_size))``. Higher means more varied text.
* ``compression_ratio`` (float64): raw-DEFLATE (zlib level 9, no header) compressed size divided by
  raw size of the sample's non-EOS token ids, packed as uint8 for the byte tokenizer and as uint16
  (uint32 when the vocabulary exceeds 65,536) otherwise. Lower means more redundant, easier text;
  it is the gzip-compressibility difficulty proxy of Pandey, "gzip Predicts Data-dependent Scaling
  Laws" (2024). Samples of a few dozen bytes sit near or above 1.0 because DEFLATE has a fixed
  cost; compare it between samples of similar length. 1.0 for a sample that is only EOS.

Columns added later are in ``metrics.npz`` and ``metric_columns`` only (not MDS columns):
``curriculum-ds score --column NAME`` writes ``NAME`` (float64, nats), each sample's mean token
loss under a reference model, which ``dynamic.reference_metric`` names.

Loading for training goes through :func:`open_stream`, which sets ``LOCAL_WORLD_SIZE`` for
mosaicml-streaming first (see :func:`curriculum_ds.distributed.ensure_local_world_size`).
:func:`verify_stream` checks the shard files against ``index.json`` and decodes a few samples
before any rank opens them (the data check of ``curriculum-ds validate`` and of every launch).

Modules, one concern each: ``tokenizers`` (byte and HF tokenizers), ``documents`` (input
formats; reading text, JSONL, JSON and folders), ``jsonl_reading`` (JSON(L) objects and fields,
one line per error), ``qa`` (``prepare --format qa``: question-answer records, ``prompt_len``),
``sources`` (streaming readers: gzip/zstd, Parquet, saved HF datasets), ``packing`` (rows:
split or packed; padding fractions),
``metrics`` (per-sample metrics), ``writer`` (:func:`prepare`), ``staging`` (a folder written
beside its target and renamed into place; the deterministic ``.npz``), ``split``
(``prepare_split``: a held-out folder by document, ``prepare --val-fraction``), ``parts``
(``prepare --shard I/N``: a part's document range and record), ``sharded`` (``prepare_parts``:
a part or a whole stream over ``--num-workers`` processes), ``merge`` (``merge_parts``, the
``curriculum-ds merge`` of the parts into one stream), ``index``
(``index.json`` and the sidecar file names), ``info`` (:func:`read_stream_info`), ``verify``
(:func:`verify_stream`), ``metric_store`` (:func:`write_metric_column`: a column added to
``metrics.npz`` later, by ``curriculum-ds score``), ``streams`` (:func:`open_stream`,
:func:`close_stream` and the mosaicml-streaming shared-memory workarounds), ``remote``
(:func:`sync_stream_metadata`: a remote stream's listing, index and sidecar files). Every name
below is re-exported here.
"""

from curriculum_ds.data.documents import json_limit_reason
from curriculum_ds.data.index import DATASET_FORMAT, META_FILENAME, METRICS_FILENAME
from curriculum_ds.data.info import StreamInfo, read_stream_info
from curriculum_ds.data.metric_store import write_metric_column
from curriculum_ds.data.metrics import METRIC_COLUMNS, compression_ratio, token_entropy
from curriculum_ds.data.remote import sync_stream_metadata
from curriculum_ds.data.streams import close_stream, open_stream
from curriculum_ds.data.tokenizers import (
    EOS_TOKEN_CANDIDATES,
    MAX_VOCAB_SIZE,
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    load_tokenizer,
)
from curriculum_ds.data.verify import verify_stream
from curriculum_ds.data.writer import SHARD_HASHES, PrepareSummary, prepare, split_document
from curriculum_ds.distributed import ensure_local_world_size

__all__ = [
    "DATASET_FORMAT",
    "EOS_TOKEN_CANDIDATES",
    "MAX_VOCAB_SIZE",
    "META_FILENAME",
    "METRICS_FILENAME",
    "METRIC_COLUMNS",
    "SHARD_HASHES",
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
    "sync_stream_metadata",
    "token_entropy",
    "verify_stream",
    "write_metric_column",
]
