"""Preflight: the checks every run's config, model and data pass before any rank starts.

One module that ``curriculum-ds validate``, ``curriculum-ds launch``, the plugin API
(``curriculum_ds.initialize``/``attach``) and training itself reach through
:func:`curriculum_ds.config.load_config`:

* the DeepSpeed part of the ds_config, by DeepSpeed's own config models, unknown top-level keys
  with a did-you-mean, scheduler parameters, monitor packages
  (:func:`deepspeed_config_errors`, implemented in :mod:`curriculum_ds.config.deepspeed`);
* the model's context: every phase's ``max_seq_len`` against the positions the model can embed
  (:func:`check_model_context`, from ``--model``'s ``config.json`` or a live module);
* with ``check_data=True``, the data: :func:`check_streams` checks each stream of a validated
  curriculum (shard files against ``index.json``, a decoded probe, one tokenizer and vocabulary
  for all streams, token ids within the model's vocabulary, finite values in the dynamic
  re-weighting's metric column), and :func:`stream_infos` reads each distinct stream's
  :class:`~curriculum_ds.data.StreamInfo` once.

Every refusal is a :class:`~curriculum_ds.errors.ConfigError` of one line per problem naming the
JSON path (and phase). Reads the model's config.json, the streams' metadata, shard headers and a
few samples; touches no RNG; deterministic.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.config.deepspeed import deepspeed_config_errors
from curriculum_ds.config.messages import join_errors, show_value
from curriculum_ds.errors import ConfigError, DataError

if TYPE_CHECKING:
    from curriculum_ds.config.models import (
        CurriculumConfig,
        EvalStreamConfig,
        PhaseConfig,
        StreamConfig,
    )
    from curriculum_ds.data import StreamInfo

__all__ = [
    "POSITION_KEYS",
    "check_model_context",
    "check_packed_rows",
    "check_streams",
    "deepspeed_config_errors",
    "model_max_positions",
    "read_stream_info_checked",
    "stream_infos",
    "verify_stream_checked",
]


def read_stream_info_checked(local: str, *, remote: str | None = None) -> StreamInfo:
    """``curriculum_ds.data.read_stream_info(local, remote=...)``: num_samples, vocab_size, metrics.

    Imported lazily so that validating a config does not import streaming until data is read.

    Raises:
        DataError: the directory is missing or not a readable MDS dataset.
    """
    from curriculum_ds.data import read_stream_info

    return read_stream_info(local, remote=remote)


def stream_infos(cfg: CurriculumConfig) -> dict[str, Any]:
    """Read every distinct stream's info once, keyed by its ``local`` string.

    Each stream's shard files are checked first (:func:`verify_stream_checked`, no hashes).

    Raises:
        ConfigError: naming the first stream (JSON path and phase) that is missing or unreadable
            (a shard file missing, truncated or corrupt).
    """
    return _read_streams(cfg, verify_hashes=False)[0]


def _read_streams(
    cfg: CurriculumConfig, *, verify_hashes: bool
) -> tuple[dict[str, Any], dict[str, tuple[int, int] | None]]:
    """Each distinct stream's info and probed token-id range, keyed by ``local``; see above."""
    infos: dict[str, Any] = {}
    token_ranges: dict[str, tuple[int, int] | None] = {}
    _check_one_remote_per_local(cfg)
    for path, stream in _all_streams(cfg):
        if stream.local in infos:
            continue
        if stream.remote is not None:
            infos[stream.local] = _read_remote_stream(path, stream, stream.remote)
            token_ranges[stream.local] = None  # the shards are not downloaded to check
            continue
        where = f"{path}.local"
        if not Path(stream.local).exists():
            raise ConfigError(f"{where}: {show_value(stream.local)} does not exist")
        if not Path(stream.local).is_dir():
            raise ConfigError(f"{where}: {show_value(stream.local)} is not a directory")
        if not (Path(stream.local) / "index.json").is_file():
            raise ConfigError(
                f"{where}: {show_value(stream.local)} is not an MDS dataset (no index.json; "
                "build one with `curriculum-ds prepare`)"
            )
        try:
            # the shards first: reading a foreign dataset's info decodes every sample
            token_ranges[stream.local] = verify_stream_checked(
                stream.local, verify_hashes=verify_hashes
            )
            infos[stream.local] = read_stream_info_checked(stream.local)
        except DataError as exc:
            detail = str(exc).replace("\n", " ")
            raise ConfigError(
                f"{where}: {show_value(stream.local)} is not a readable MDS dataset: {detail}"
            ) from None
    return infos, token_ranges


def _check_one_remote_per_local(cfg: CurriculumConfig) -> None:
    """A ``local`` folder is one stream's data or cache: every use of it names the same remote.

    Raises:
        ConfigError: naming the second use and the first.
    """
    remotes: dict[str, tuple[str | None, str]] = {}  # local -> (its remote, where first seen)
    for path, stream in _all_streams(cfg):
        first = remotes.setdefault(stream.local, (stream.remote, path))
        if first[0] != stream.remote:
            raise ConfigError(
                f"{path}.remote: {show_value(stream.remote)}, but "
                f"{first[1].removeprefix('curriculum.')} reads the same local "
                f"{show_value(stream.local)} from {show_value(first[0])}; a cache folder "
                "belongs to one remote"
            )


def _read_remote_stream(
    path: str, stream: StreamConfig | EvalStreamConfig, remote: str
) -> StreamInfo:
    """A remote stream's info, after checking its remote (listing, index, every shard file).

    Raises:
        ConfigError: ``<path>.remote: stream "name" (remote): <why>``.
    """
    from curriculum_ds.data import sync_stream_metadata

    try:
        sync_stream_metadata(stream.local, remote)
        return read_stream_info_checked(stream.local, remote=remote)
    except DataError as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(
            f"{path}.remote: stream {show_value(stream.name)} ({remote}): {detail}"
        ) from None


def verify_stream_checked(local: str, *, verify_hashes: bool = False) -> tuple[int, int] | None:
    """``curriculum_ds.data.verify_stream(local)``: shard files and a probe of decoded samples.

    Imported lazily, like :func:`read_stream_info_checked`.

    Returns:
        ``(min_id, max_id)`` of the probed samples' token ids, or ``None`` when they hold none.

    Raises:
        DataError: naming the shard file that is missing, truncated, corrupt or undecodable.
    """
    from curriculum_ds.data import verify_stream

    return verify_stream(local, verify_hashes=verify_hashes)


def _model_config(model: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` of a local HF model folder.

    Raises:
        ConfigError: ``--model ...``: not a folder, no config.json, unreadable or not an object.
    """
    folder = Path(model)
    if not folder.is_dir():
        raise ConfigError(f"--model {model}: not a local model folder (no download at run time)")
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--model {model}: no config.json in the model folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(f"--model {model}: cannot read config.json: {detail}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--model {model}: config.json is not a JSON object")
    return raw


def _model_vocab_size(model: str | Path) -> int:
    """``vocab_size`` of a local HF model folder's ``config.json`` (or of its ``text_config``).

    Raises:
        ConfigError: ``--model ...``: not a folder, no readable config.json, no vocab_size.
    """
    raw = _model_config(model)
    vocab = raw.get("vocab_size")
    if vocab is None and isinstance(raw.get("text_config"), dict):
        vocab = raw["text_config"].get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise ConfigError(
            f"--model {model}: config.json has no positive integer vocab_size, "
            f"got {show_value(vocab)}"
        )
    return vocab


POSITION_KEYS = (
    "n_positions",
    "max_position_embeddings",
    "n_ctx",
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
)
"""The names HF configs (GPT-2, Llama/BERT, GPT-J, BLOOM-style, ChatGLM) and user models give
the number of positions a model can embed, in the order they are read."""


def _positions_in(config: Any) -> tuple[int, str] | None:
    """``(positions, key)`` of the first :data:`POSITION_KEYS` entry a config dict/object holds."""
    for key in POSITION_KEYS:
        value = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, key
    return None


def model_max_positions(model: Any) -> tuple[int, str] | None:
    """The longest sequence a model can embed, and where that number was read.

    Args:
        model: a local HF model folder (``str``/``Path``: its ``config.json``, or the
            ``text_config`` inside it), or a live ``torch.nn.Module`` (a DeepSpeed engine's
            ``.module`` is used): its ``.config`` when it has one (a HF ``PretrainedConfig``),
            else an attribute ``max_seq_len`` or ``max_position_embeddings`` the user declared.

    Returns:
        ``(positions, source)``, e.g. ``(256, "n_positions in gpt2/config.json")``, or None when
        the model declares none (then its context is unchecked).

    Raises:
        ConfigError: a folder that is not a model folder or whose config.json cannot be read.
    """
    if isinstance(model, str | os.PathLike):
        raw = _model_config(Path(model))
        for config, where in ((raw, ""), (raw.get("text_config"), "text_config.")):
            found = _positions_in(config) if isinstance(config, Mapping) else None
            if found is not None:
                return found[0], f"{where}{found[1]} in {Path(model) / 'config.json'}"
        return None
    module = getattr(model, "module", model)  # a DeepSpeed engine wraps the user's module
    name = type(module).__name__
    config = getattr(module, "config", None)
    if config is not None:
        found = _positions_in(config)
        if found is not None:
            return found[0], f"{found[1]} of {name}.config"
    for attr in ("max_seq_len", "max_position_embeddings"):
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, f"{name}.{attr}"
    return None


def check_model_context(cfg: CurriculumConfig, model: Any) -> None:
    """Refuse phases whose ``max_seq_len`` exceeds the positions the model can embed.

    A longer sample would index past the position embedding (``IndexError: index out of range
    in self``) in the middle of training, when the phase reaches it.

    Args:
        cfg: the validated curriculum.
        model: as in :func:`model_max_positions` (a folder or a live module); a model that
            declares no maximum is not checked.

    Raises:
        ConfigError: one line per phase that is too long, ``curriculum.schedule[1] ("mix")
            .train_loader.max_seq_len: 512 exceeds the model's 256 positions (n_positions in
            DIR/config.json)``, or a model folder that cannot be read.
    """
    found = model_max_positions(model)
    if found is None:
        return
    positions, source = found
    errors = [
        f"curriculum.schedule[{i}] ({show_value(phase.name)}).train_loader.max_seq_len: "
        f"{phase.train_loader.max_seq_len} exceeds the model's {positions} positions ({source})"
        for i, phase in enumerate(cfg.schedule)
        if phase.train_loader.max_seq_len > positions
    ]
    eval_len = cfg.eval.max_seq_len if cfg.eval is not None else None
    if eval_len is not None and eval_len > positions:
        errors.append(
            f"curriculum.eval.max_seq_len: {eval_len} exceeds the model's {positions} positions "
            f"({source})"
        )
    if errors:
        raise ConfigError(join_errors(errors))


def check_packed_rows(info: Any, max_seq_len: int, where: str) -> None:
    """Refuse a packed stream whose rows are longer than the phase's ``max_seq_len``.

    A packed row (``prepare --pack``) spans documents; cutting it to a shorter ``max_seq_len``
    would drop the rest of the row's tokens, so it is refused rather than truncated. Rows shorter
    than ``max_seq_len`` are fine (a micro-batch is padded to its longest row).

    Args:
        info: The stream's :class:`~curriculum_ds.data.StreamInfo` (``packed``, ``max_seq_len``).
        max_seq_len: The phase's ``train_loader.max_seq_len``, tokens.
        where: The stream's JSON path and phase, for the message.

    Raises:
        ConfigError: one line naming the stream, its row length and the phase's max_seq_len.
    """
    row_len = getattr(info, "max_seq_len", None)
    if getattr(info, "packed", False) and isinstance(row_len, int) and row_len > max_seq_len:
        local = getattr(info, "local", "?")
        raise ConfigError(
            f"{where}.local: {show_value(str(local))} is packed into rows of {row_len} tokens, "
            f"longer than the phase's max_seq_len {max_seq_len} (a packed row is never cut); "
            f"raise max_seq_len to {row_len} or re-run `curriculum-ds prepare --pack "
            f"--max-seq-len {max_seq_len}`"
        )


def _stream_path(i: int, phase: PhaseConfig, j: int) -> str:
    return f"curriculum.schedule[{i}] ({show_value(phase.name)}).train_loader.streams[{j}]"


def _all_streams(cfg: CurriculumConfig, *, eval_streams: bool = True) -> list[tuple[str, Any]]:
    """``(JSON path, stream config)`` of every train stream, then of every ``eval`` stream."""
    streams: list[tuple[str, Any]] = [
        (_stream_path(i, phase, j), stream)
        for i, phase in enumerate(cfg.schedule)
        for j, stream in enumerate(phase.train_loader.streams)
    ]
    if eval_streams and cfg.eval is not None:
        streams += [(f"curriculum.eval.streams[{j}]", s) for j, s in enumerate(cfg.eval.streams)]
    return streams


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
    * With dynamic re-weighting, every train stream must have the ``static_metric`` column, and
      its values must be finite (the bucketing refuses a NaN or an infinity). ``num_tokens``
      cannot bucket a packed stream (every row but the last has the same length: the lone short
      row would fill a bucket of its own and be drawn at that bucket's probability).

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
            or ``vocab_size`` cannot be read, or ``curriculum.dynamic.static_metric`` when dynamic
            re-weighting is enabled and a stream lacks that metric column or holds a non-finite
            value in it (naming the stream, the column and the sample index).
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
                infos[stream.local], phase.train_loader.max_seq_len, _stream_path(i, phase, j)
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
    metric = cfg.dynamic.static_metric
    for where, stream in _all_streams(cfg, eval_streams=False):
        if metric == "num_tokens" and getattr(infos[stream.local], "packed", False):
            raise ConfigError(
                f'curriculum.dynamic.static_metric: "num_tokens" is the same for every row of '
                f"the packed stream {show_value(stream.local)} ({where.removeprefix('curriculum.')}"
                "), so it cannot order packed rows by difficulty; set static_metric to "
                '"compression_ratio" or "token_entropy"'
            )
        metrics = getattr(infos[stream.local], "metrics", None)
        if not isinstance(metrics, Mapping):
            continue
        if metric not in metrics:
            have = ", ".join(sorted(metrics)) or "none"
            raise ConfigError(
                f"curriculum.dynamic.static_metric: stream {show_value(stream.local)} "
                f"({where.removeprefix('curriculum.')}) has no "
                f"metric column {show_value(metric)} (it has: {have})"
            )
        bad = _first_non_finite(metrics[metric])
        if bad is not None:
            raise ConfigError(
                f"curriculum.dynamic.static_metric: stream {show_value(stream.local)} "
                f"({where.removeprefix('curriculum.')}): metric column {show_value(metric)} of "
                f"metrics.npz is {bad[1]} at sample {bad[0]}; every value must be finite "
                "(re-run `curriculum-ds prepare`)"
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
