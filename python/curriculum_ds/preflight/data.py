"""The data checks of a curriculum's streams: intact, one tokenizer, ids the model can embed.

:func:`check_streams` checks what :mod:`curriculum_ds.preflight.streams` read (shard files, a
decoded probe, one tokenizer and vocabulary for all streams, token ids within the model's
vocabulary, finite values in the dynamic re-weighting's metric columns), and that a packed
stream's rows fit every phase that reads it
(:func:`curriculum_ds.data.packing.check_packed_rows`, which the loader calls too). Every refusal
is a :class:`~curriculum_ds.errors.ConfigError` naming the JSON path (and phase). Touches no RNG;
deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.config.messages import show_value
from curriculum_ds.data.packing import check_packed_rows
from curriculum_ds.errors import ConfigError
from curriculum_ds.preflight.model import _model_vocab_size
from curriculum_ds.preflight.streams import _all_streams, _read_streams, _stream_path

if TYPE_CHECKING:
    from curriculum_ds.config.models import CurriculumConfig

__all__ = ["check_streams"]


def check_streams(
    cfg: CurriculumConfig, *, model: str | Path | None = None, strict: bool = False
) -> None:
    """Check that every stream is a readable, intact MDS dataset that the run's model can read.

    * Each stream's shard files must match its ``index.json`` and a probe of its samples must
      decode (:func:`curriculum_ds.data.verify_stream`; with ``strict``, recorded shard hashes
      are verified too, which reads every hashed shard once).
    * Streams made by ``curriculum-ds prepare`` must all share one vocabulary size and one
      tokenizer (the byte tokenizer, or one ``tokenizer.json`` by its recorded sha256); streams
      of unknown vocabulary are not compared. Every stream must hold at least one sample.
    * Token ids (a stream's recorded or scanned range, and its probed samples) must be in
      ``[0, vocab_size)`` of the embedding that will read them: ``model``'s ``config.json``
      ``vocab_size`` when ``model`` is given; else, with ``strict`` (the run gets no ``--model``
      and builds its default model sized to the recorded ``vocab_size``), that recorded size;
      else each stream's own recorded ``vocab_size`` (a stream of unknown vocabulary is then not
      range-checked: the run may be given a ``--model`` this check does not know).
    * With ``strict`` and no ``model``, at least one stream must record its ``vocab_size``
      (else the run needs ``--model``).
    * The ``eval`` streams pass the same checks as the train streams (their errors name
      ``curriculum.eval.streams[j].local``).
    * A packed stream's rows must fit every phase that reads it (:func:`check_packed_rows`).
    * With dynamic re-weighting over buckets (``unit: "buckets"``), every train stream must have
      the ``static_metric`` column, and its values must be finite (the bucketing refuses a NaN
      or an infinity). ``num_tokens`` cannot bucket a packed stream (every row but the last has
      the same length: the lone short row would fill a bucket of its own and be drawn at that
      bucket's probability). ``unit: "streams"`` has no buckets: ``static_metric`` is unused.
    * With dynamic re-weighting by ``signal: "excess_loss"`` (either unit), every train stream
      of every phase must have the ``reference_metric`` column (``curriculum-ds score``), every
      value finite.

    A stream with a ``remote`` is checked there instead of on disk
    (:func:`curriculum_ds.data.sync_stream_metadata`): the remote must answer and hold
    ``index.json`` and every shard file it lists, at its recorded size; its ``index.json`` and
    sidecar files are downloaded into ``local`` (the cache folder). Its shards are not probed
    (that would download them): mosaicml-streaming checks each one against its recorded hash
    when it downloads it during training.

    Relative ``local`` paths are resolved against the current working directory. Reads the
    streams' metadata, shard headers and a few samples; deterministic.

    Args:
        cfg: The validated curriculum.
        model: The ``--model`` folder the run will use (a local HF model), or ``None``.
        strict: The checks of ``curriculum-ds validate``: hashes, and the run's vocabulary must
            be known (``model``, or a recorded ``vocab_size``).

    Raises:
        ConfigError: naming the JSON path and phase of the first bad stream (missing, not MDS,
            unreadable, empty, a shard file missing/truncated/corrupt, another vocab_size or
            tokenizer, a token id out of range, no known vocab_size, packed rows longer than the
            phase's max_seq_len), ``--model`` when its folder
            or ``vocab_size`` cannot be read, or ``curriculum.dynamic.static_metric`` (buckets)
            or ``curriculum.dynamic.reference_metric`` (excess_loss) when dynamic re-weighting
            is enabled and a stream lacks that metric column or holds a non-finite value in it
            (naming the stream, the column and the sample index).
    """
    infos, token_ranges = _read_streams(cfg, verify_hashes=strict)
    streams = _all_streams(cfg)
    first_seen: dict[str, str] = {}  # local -> the path of its first use
    for where, stream in streams:
        first_seen.setdefault(stream.local, where)

    first_vocab: tuple[int, str, str] | None = None  # (vocab_size, local, where)
    first_tok: tuple[str, str, str, str] | None = None  # (identity, shown, local, where)
    for where, stream in streams:
        info = infos[stream.local]
        vocab = getattr(info, "vocab_size", None)
        if not isinstance(vocab, int):
            continue  # not made by `prepare`: the tokenizer is unknown
        if first_vocab is None:
            first_vocab = (vocab, stream.local, where.removeprefix("curriculum."))
        elif vocab != first_vocab[0]:
            raise ConfigError(
                f"{where}.local: {show_value(stream.local)} was tokenized with "
                f"vocab_size {vocab} but {show_value(first_vocab[1])} ({first_vocab[2]}) with "
                f"{first_vocab[0]}; all streams must share one tokenizer"
            )
        identity = _tokenizer_identity(info)
        if identity is None:
            continue
        if first_tok is None:
            first_tok = (*identity, stream.local, where.removeprefix("curriculum."))
        elif identity[0] != first_tok[0]:
            raise ConfigError(
                f"{where}.local: {show_value(stream.local)} was prepared with tokenizer "
                f"{identity[1]} but {show_value(first_tok[2])} ({first_tok[3]}) with tokenizer "
                f"{first_tok[1]}; all streams must share one tokenizer"
            )

    for i, phase in enumerate(cfg.schedule):
        for j, stream in enumerate(phase.train_loader.streams):
            check_packed_rows(
                infos[stream.local], phase.train_loader.peak_seq_len, _stream_path(i, phase, j)
            )

    run_vocab: tuple[int, str] | None = None  # (vocab_size, where it comes from)
    if model is not None:
        run_vocab = (_model_vocab_size(model), f"of --model {model}")
    elif strict:
        if first_vocab is None:
            where, stream = streams[0]
            raise ConfigError(
                f"{where}.local: {show_value(stream.local)} has no vocab_size (no stream of the "
                "schedule was made by `curriculum-ds prepare`); pass --model DIR, the local HF "
                "model folder the run will use"
            )
        run_vocab = (first_vocab[0], "recorded by `curriculum-ds prepare`, the default model's")
    for local, where in first_seen.items():
        info = infos[local]
        own = getattr(info, "vocab_size", None)
        if run_vocab is not None:
            vocab, source = run_vocab
        elif isinstance(own, int):
            vocab, source = own, "recorded by `curriculum-ds prepare`"
        else:
            continue
        lows = [getattr(info, "min_token_id", None)]
        highs = [getattr(info, "max_token_id", None)]
        probed = token_ranges[local]
        if probed is not None:
            lows.append(probed[0])
            highs.append(probed[1])
        low = min((v for v in lows if v is not None), default=None)
        high = max((v for v in highs if v is not None), default=None)
        if low is not None and low < 0:
            raise ConfigError(
                f"{where}.local: {show_value(local)} holds token id {low}; token ids must be >= 0"
            )
        if high is not None and high >= vocab:
            raise ConfigError(
                f"{where}.local: {show_value(local)} holds token id {high}, out of range for "
                f"vocab_size {vocab} ({source}); ids must be < vocab_size"
            )

    if not cfg.dynamic.enabled:
        return
    if cfg.dynamic.signal == "excess_loss" and cfg.dynamic.reference_metric is not None:
        _check_metric_column(
            cfg,
            infos,
            field="reference_metric",
            metric=cfg.dynamic.reference_metric,
            fix="re-run `curriculum-ds score`",
            missing_fix=(
                "; write it with `curriculum-ds score DATA... --model REFERENCE_MODEL --column "
                f"{cfg.dynamic.reference_metric}`"
            ),
        )
    if cfg.dynamic.unit == "streams":
        return  # static_metric buckets samples; the streams unit has no buckets
    metric = cfg.dynamic.static_metric
    for where, stream in _all_streams(cfg, eval_streams=False):
        if metric == "num_tokens" and getattr(infos[stream.local], "packed", False):
            raise ConfigError(
                f'curriculum.dynamic.static_metric: "num_tokens" is the same for every row of '
                f"the packed stream {show_value(stream.local)} ({where.removeprefix('curriculum.')}"
                "), so it cannot order packed rows by difficulty; set static_metric to "
                '"compression_ratio" or "token_entropy"'
            )
    _check_metric_column(
        cfg, infos, field="static_metric", metric=metric, fix="re-run `curriculum-ds prepare`"
    )


def _check_metric_column(
    cfg: CurriculumConfig,
    infos: Mapping[str, Any],
    *,
    field: str,
    metric: str,
    fix: str,
    missing_fix: str = "",
) -> None:
    """Every train stream of every phase has metric column ``metric``, every value finite.

    Args:
        cfg: the validated curriculum.
        infos: each stream's info (``metrics``: column name → values), keyed by ``local``.
        field: the ``curriculum.dynamic`` field that names the column, for the message.
        metric: the column.
        fix: what to do about a non-finite value, for the message.
        missing_fix: what to do about a missing column, appended to that message.

    Raises:
        ConfigError: ``curriculum.dynamic.<field>: stream "<local>" (<JSON path>) has no metric
            column ...`` (naming the columns it has), or ``...: metric column "<metric>" of
            metrics.npz is nan at sample 5; ...``.
    """
    lacking = [
        (where, stream.local, metrics)
        for where, stream in _all_streams(cfg, eval_streams=False)
        if isinstance(metrics := getattr(infos[stream.local], "metrics", None), Mapping)
        and metric not in metrics
    ]
    if lacking:
        where, local, metrics = lacking[0]
        others = len({lack[1] for lack in lacking}) - 1
        have = ", ".join(sorted(metrics)) or "none"
        also = f" (and {others} other stream(s))" if others else ""
        raise ConfigError(
            f"curriculum.dynamic.{field}: stream {show_value(local)} "
            f"({where.removeprefix('curriculum.')}){also} has no "
            f"metric column {show_value(metric)} (it has: {have}){missing_fix}"
        )
    for where, stream in _all_streams(cfg, eval_streams=False):
        metrics = getattr(infos[stream.local], "metrics", None)
        if not isinstance(metrics, Mapping):
            continue
        bad = _first_non_finite(metrics[metric])
        if bad is not None:
            raise ConfigError(
                f"curriculum.dynamic.{field}: stream {show_value(stream.local)} "
                f"({where.removeprefix('curriculum.')}): metric column {show_value(metric)} of "
                f"metrics.npz is {bad[1]} at sample {bad[0]}; every value must be finite "
                f"({fix})"
            )


def _first_non_finite(values: Any) -> tuple[int, float] | None:
    """``(sample_idx, value)`` of the first NaN or infinite value of a metric column, or None."""
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size == 0:
        return None
    return int(bad[0]), float(arr[bad[0]])


def _tokenizer_identity(info: Any) -> tuple[str, str] | None:
    """``(identity, shown)`` of the tokenizer a stream was prepared with, or None if unknown.

    The byte tokenizer is ``"byte"``; a ``tokenizer.json`` is its recorded sha256 (the same file
    at another path is the same tokenizer), else its path.
    """
    tokenizer = getattr(info, "tokenizer", None)
    sha = getattr(info, "tokenizer_sha256", None)
    if tokenizer == "byte":
        return "byte", '"byte"'
    if isinstance(sha, str):
        return f"sha256:{sha}", f"{show_value(tokenizer)} (sha256 {sha[:12]})"
    if isinstance(tokenizer, str):
        return f"path:{tokenizer}", show_value(tokenizer)
    return None
