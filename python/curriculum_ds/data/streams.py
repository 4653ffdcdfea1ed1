"""Opening and closing prepared datasets with mosaicml-streaming, and its shared-memory workarounds.

mosaicml-streaming 0.13 keeps every shared-memory handle a dataset touches open until the
interpreter exits (``atexit``), and its prefix search attaches to the handles of every other live
dataset of the process. :func:`open_stream` and :func:`close_stream` release them as soon as they
are not needed, so a run that swaps loaders at phase boundaries (or a test session opening
hundreds of datasets) does not run out of file descriptors.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.data.index import read_index
from curriculum_ds.distributed import ensure_local_world_size
from curriculum_ds.errors import DataError

if TYPE_CHECKING:
    from streaming import StreamingDataset

__all__ = [
    "close_stream",
    "drop_cached_shard",
    "open_stream",
    "shared_memory_lock",
    "streaming_registration",
    "sync_remote_stream",
]

SHARED_MEMORY_LOCK = Path(tempfile.gettempdir()) / "curriculum_ds_streaming_shm.lock"
"""The node-wide lock file that orders shared-memory registrations and releases (POSIX flock)."""


@contextlib.contextmanager
def shared_memory_lock(*, exclusive: bool) -> Iterator[None]:
    """Hold the node-wide streaming shared-memory lock (``flock``; released if the process dies).

    mosaicml-streaming picks a shared-memory prefix by scanning ``/dev/shm`` for the first free
    one, separately on every rank, and the local leader then creates it. Ranks of one job must
    see the same free prefixes: a registration holds the lock exclusively, and releasing
    segments (:func:`close_stream`, which unlinks the ones this process created) holds it
    shared, so no prefix is freed by another job between two ranks' scans.

    Args:
        exclusive: True for a registration (one job's ranks opening streams), False for a release.
    """
    import fcntl  # POSIX only, like DeepSpeed's launcher

    fd = os.open(SHARED_MEMORY_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # drops the lock


def open_stream(local: str | Path, remote: str | None = None) -> StreamingDataset:
    """Open an MDS dataset for random access (``ds[i]["input_ids"]``).

    Builds ``streaming.StreamingDataset(local=..., remote=..., batch_size=1, shuffle=False)``
    after :func:`curriculum_ds.distributed.ensure_local_world_size` (mosaicml-streaming derives
    node leadership from ``LOCAL_WORLD_SIZE``). Several datasets on the same folder may live in
    one process at once (each takes its own shared-memory prefix; with ``remote=None`` streaming
    does not refuse a reused local folder), and opening again after deleting one works.

    Caveats for distributed use: mosaicml-streaming calls ``dist.barrier()`` while registering
    its shared memory when ``torch.distributed`` is initialized, so every rank must open the same
    streams in the same order; when it is not initialized and ``WORLD_SIZE > 1`` streaming would
    initialize it itself, so initialize it (DeepSpeed) before calling this.

    With a ``remote``, ``local`` is its cache folder, which must already hold ``index.json``
    (:func:`curriculum_ds.data.remote.sync_stream_metadata`): ``ds[i]`` downloads the sample's
    shard on first use (one process per node; the node's others wait for it), checked against
    the hash ``index.json`` records for it (``validate_hash``,
    :func:`~curriculum_ds.data.remote.hash_algorithm`). streaming refuses a cache folder that
    another live dataset with a remote uses.

    Args:
        local: A local MDS dataset folder, or the cache folder of ``remote``.
        remote: ``s3://...``, ``gs://...`` or a folder holding the shards; None: all local.

    Returns:
        The dataset; ``len(ds)`` is per rank, ``ds.num_samples`` is the global count, and
        ``ds[i]`` takes any global index ``i`` in ``[0, ds.num_samples)``.

    Raises:
        DataError: ``local`` is not a readable MDS dataset, or streaming refuses it.
    """
    from streaming import StreamingDataset

    from curriculum_ds.data.remote import hash_algorithm

    local = Path(local)
    ensure_local_world_size()
    index = read_index(local, require_shards=remote is None)
    before = {id(h) for h in _live_shared_memory()}
    try:
        ds = StreamingDataset(
            local=str(local.resolve()),
            remote=remote,
            batch_size=1,
            shuffle=False,
            validate_hash=hash_algorithm(index) if remote is not None else None,
        )
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


_HANDLES: weakref.WeakSet[Any] = weakref.WeakSet()
"""Every mosaicml-streaming SharedMemory handle made since :func:`_track_shared_memory`."""


def _track_shared_memory() -> None:
    """Record every SharedMemory handle streaming makes from now on in :data:`_HANDLES`.

    Wraps ``SharedMemory.__init__`` once per process. Scanning ``gc.get_objects()`` instead costs
    about a second per opened stream in a process that imported torch and transformers.
    """
    from streaming.base.shared.memory import SharedMemory

    if getattr(SharedMemory, "_curriculum_ds_tracked", False):
        return
    original = SharedMemory.__init__

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _HANDLES.add(self)

    SharedMemory.__init__ = init  # type: ignore[method-assign]
    SharedMemory._curriculum_ds_tracked = True  # type: ignore[attr-defined]


def _live_shared_memory() -> list[Any]:
    """Every live mosaicml-streaming SharedMemory handle made since the first call (phase swaps)."""
    _track_shared_memory()
    return list(_HANDLES)


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
    Holds :func:`shared_memory_lock` (shared) while it unlinks, so that another job's ranks
    registering at that moment all see the same free prefixes.
    """
    handles = _dataset_shared_memory(ds)
    with shared_memory_lock(exclusive=False):
        _release_shared_memory(handles)


def drop_cached_shard(ds: StreamingDataset, sample_idx: int) -> None:
    """Remove the cached files of the shard holding ``sample_idx`` (after a failed download).

    mosaicml-streaming 0.13 leaves a downloaded shard that failed its hash check in the cache
    folder under its final name; the next run would find it there and read it unchecked. Called
    when reading a sample of a remote stream failed, so that the shard is downloaded again on the
    next run. Best effort: never raises.
    """
    with contextlib.suppress(Exception):
        shard_id, _ = ds.spanner[sample_idx]
        stream = ds.streams[ds.stream_per_shard[shard_id]]
        folder = Path(stream.local) / (stream.split or "")
        for pair in ds.shards[shard_id].file_pairs:
            for info in pair:
                if info is not None:
                    (folder / info.basename).unlink(missing_ok=True)


@contextlib.contextmanager
def streaming_registration() -> Iterator[None]:
    """Open streams as one step with respect to other curriculum_ds jobs on this node.

    mosaicml-streaming picks a shared-memory prefix by scanning for the first free one, and the
    node's local leader then creates it: two jobs that start at once pick the same prefix and one
    fails with ``FileExistsError: '/00000N_locals'``, and a prefix freed by another job between two
    ranks' scans makes them disagree ("prefix was not registered by local leader"). Every rank of
    a job scans, so the whole job's registration is serialised: once every rank has released its
    previous streams (first barrier: a release takes the same lock, shared), local rank 0 holds
    :func:`~curriculum_ds.data.streams.shared_memory_lock` exclusively while every rank opens its
    streams, between two more barriers.
    """
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if distributed:
        dist.barrier()  # every rank's close_stream (which takes the lock, shared) is done
    leader = int(os.environ.get("LOCAL_RANK", "0") or 0) == 0
    with shared_memory_lock(exclusive=True) if leader else contextlib.nullcontext():
        if distributed:
            dist.barrier()  # no rank of this job scans before the lock is held
        yield
        if distributed:
            dist.barrier()  # every rank has registered before the lock goes


def sync_remote_stream(name: str, local: str, remote: str) -> None:
    """Bring a remote stream's metadata into its cache folder.

    Raises:
        DownloadError: naming the stream (a verdict of this rank: each rank syncs on its own).
    """
    from curriculum_ds.data.remote import sync_stream_metadata
    from curriculum_ds.errors import DataError, DownloadError

    try:
        sync_stream_metadata(local, remote)
    except DataError as err:
        raise DownloadError(f"stream {name!r}: {err}") from None
