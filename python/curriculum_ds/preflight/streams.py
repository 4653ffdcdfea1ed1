"""Reading a curriculum's streams once each: their info, shard files and probed token ids.

The first half of the data preflight (:func:`~curriculum_ds.preflight.check_streams` checks what
is read here): every distinct stream of the schedule and of ``eval`` is opened once, a local one
on disk (shard files against ``index.json``, a decoded probe), a remote one at its remote
(listing, ``index.json``, every shard file). Every refusal is a
:class:`~curriculum_ds.errors.ConfigError` naming the stream's JSON path (and phase). Touches no
RNG; deterministic.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.config.messages import show_value
from curriculum_ds.errors import ConfigError, DataError
from curriculum_ds.files.user_paths import path_error

if TYPE_CHECKING:
    from curriculum_ds.config.models import CurriculumConfig, PhaseConfig, StreamConfig
    from curriculum_ds.config.sections import EvalStreamConfig
    from curriculum_ds.data import StreamInfo

__all__ = ["read_stream_info_checked", "stream_infos", "verify_stream_checked"]


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
        try:
            infos[stream.local], token_ranges[stream.local] = _read_local_stream(
                where, stream.local, verify_hashes=verify_hashes
            )
        except OSError as exc:  # ENAMETOOLONG, EACCES, ELOOP: the path itself is refused
            raise path_error(where + ":", stream.local, exc) from None
    return infos, token_ranges


def _read_local_stream(
    where: str, local: str, *, verify_hashes: bool
) -> tuple[StreamInfo, tuple[int, int] | None]:
    """A local stream's info and probed token-id range; see :func:`_read_streams`.

    Raises:
        ConfigError: ``<where>: "local" <why>`` (missing, not a folder, no ``index.json``, not
            a readable MDS dataset).
        OSError: the system refused the path itself (the caller names the field).
    """
    if not Path(local).exists():
        raise ConfigError(f"{where}: {show_value(local)} does not exist")
    if not Path(local).is_dir():
        raise ConfigError(f"{where}: {show_value(local)} is not a directory")
    if not (Path(local) / "index.json").is_file():
        raise ConfigError(
            f"{where}: {show_value(local)} is not an MDS dataset (no index.json; "
            "build one with `curriculum-ds prepare`)"
        )
    try:
        # the shards first: reading a foreign dataset's info decodes every sample
        token_range = verify_stream_checked(local, verify_hashes=verify_hashes)
        return read_stream_info_checked(local), token_range
    except DataError as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(
            f"{where}: {show_value(local)} is not a readable MDS dataset: {detail}"
        ) from None


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
    except OSError as exc:  # the cache folder itself refused (read-only, name too long)
        raise path_error(f"{path}.local:", stream.local, exc) from None
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
