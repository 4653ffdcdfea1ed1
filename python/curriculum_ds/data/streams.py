"""Opening and closing prepared datasets with mosaicml-streaming, and its shared-memory workarounds.

mosaicml-streaming 0.13 keeps every shared-memory handle a dataset touches open until the
interpreter exits (``atexit``), and its prefix search attaches to the handles of every other live
dataset of the process. :func:`open_stream` and :func:`close_stream` release them as soon as they
are not needed, so a run that swaps loaders at phase boundaries (or a test session opening
hundreds of datasets) does not run out of file descriptors. A process killed with SIGKILL
releases nothing: :func:`remove_stale_shared_memory` removes what it left in ``/dev/shm``, once
per process at the first :func:`streaming_registration`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
import time
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
    "remove_stale_shared_memory",
    "shared_memory_lock",
    "streaming_registration",
    "sync_remote_stream",
]

SHARED_MEMORY_LOCK = Path(tempfile.gettempdir()) / "curriculum_ds_streaming_shm.lock"
"""The node-wide lock file that orders shared-memory registrations and releases (POSIX flock)."""
SHM_DIR = Path("/dev/shm")
"""Where POSIX shared memory (``shm_open``) lives on Linux."""
STALE_MIN_AGE_S = 2.0
"""A segment younger than this (seconds since its last change) is never stale: a process of
another job may have created it this moment and not mapped it yet."""
_stale_removed = False
"""Whether this process ran :func:`remove_stale_shared_memory` at its first registration."""


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
        # the handles the failed attempt attached to would keep those segments in use
        _release_shared_memory(h for h in _live_shared_memory() if id(h) not in before)
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


def _stale_candidates() -> re.Pattern[str]:
    """The ``/dev/shm`` names a killed process leaves: streaming's and DeepSpeed's.

    mosaicml-streaming 0.13 names its segments ``f"{prefix:06}_{name}"`` for ``name`` in
    ``streaming.base.constant.SHM_TO_CLEAN`` (``locals``, ``barrier``, ``shard_states``...;
    ``streaming.base.shared.prefix._get_path``). DeepSpeed's CPU all-reduce buffers
    (``deepspeed_allreduce_buffer_*``, ~70 MB each) are left the same way.
    """
    from streaming.base.constant import SHM_TO_CLEAN

    names = "|".join(re.escape(n) for n in SHM_TO_CLEAN)
    return re.compile(rf"^(\d{{6}}_({names})|deepspeed_allreduce_buffer_.*)$")


def _segments_in_use(uid: int) -> set[str] | None:
    """The ``/dev/shm`` names any process of user ``uid`` maps or holds open.

    None when a process of that user cannot be inspected (its ``maps`` or ``fd`` unreadable):
    then nothing can be called unused. Not counted: a process that ends meanwhile, and one that
    holds capabilities this process lacks (the kernel refuses to show a more privileged process,
    e.g. a container's init; the ranks of a job hold the capabilities of the launcher, no more).
    """
    prefix = f"{SHM_DIR}/"
    in_use: set[str] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.stat().st_uid != uid:
                continue  # another user's process cannot open this user's 0600 segments
            for line in _read_maps(proc).splitlines():
                if (i := line.find(prefix)) >= 0:
                    in_use.add(line[i + len(prefix) :].split(" ")[0])
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(FileNotFoundError):  # closed meanwhile
                    target = str(fd.readlink())
                    if target.startswith(prefix):
                        in_use.add(target[len(prefix) :])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the process ended meanwhile
        except OSError:
            if _more_privileged(proc):
                continue
            return None  # a process of this user that cannot be read (e.g. another namespace)
    return in_use


def _more_privileged(proc: Path) -> bool:
    """Whether ``proc`` holds permitted capabilities this process lacks (``CapPrm``)."""

    def permitted(status: Path) -> int:
        for line in status.read_text(encoding="utf-8").splitlines():
            if line.startswith("CapPrm:"):
                return int(line.split()[1], 16)
        raise ValueError("no CapPrm")

    try:
        return permitted(proc / "status") & ~permitted(Path("/proc/self/status")) != 0
    except (OSError, ValueError):
        return False


def _read_maps(proc: Path) -> str:
    return (proc / "maps").read_text(encoding="utf-8", errors="replace")


def remove_stale_shared_memory(*, min_age_s: float | None = None) -> list[str]:
    """Remove the shared memory that killed processes of this user left in ``/dev/shm``.

    A rank killed with SIGKILL never runs streaming's ``atexit`` cleanup and leaves its
    ``/dev/shm/NNNNNN_*`` segments (and DeepSpeed's all-reduce buffers) behind; streaming's search
    for a free prefix then attaches to them, and a stream whose cache folder a dead process had
    registered is refused ("Reused local directory") until they go. Removed: the segments with
    streaming's or DeepSpeed's names (:func:`_stale_candidates`) owned by this user that no process
    of this user maps or holds open, older than ``min_age_s``. Nothing is removed when a process
    of this user cannot be inspected. Holds :func:`shared_memory_lock` exclusively, so that no
    curriculum_ds job registers streams meanwhile. Prints one line naming what it removed.

    Args:
        min_age_s: see :data:`STALE_MIN_AGE_S` (the default).

    Returns:
        The names removed (none when nothing was stale, or the check was skipped).
    """
    with shared_memory_lock(exclusive=True):
        return _remove_stale_shared_memory(min_age_s)


def _remove_stale_shared_memory(min_age_s: float | None) -> list[str]:
    """:func:`remove_stale_shared_memory` with :func:`shared_memory_lock` already held."""
    age = STALE_MIN_AGE_S if min_age_s is None else min_age_s
    uid = os.getuid()
    pattern = _stale_candidates()
    try:
        candidates = [e for e in os.scandir(SHM_DIR) if pattern.match(e.name) and _owned_by(e, uid)]
    except OSError:
        return []  # no /dev/shm (not Linux)
    if not candidates:
        return []
    in_use = _segments_in_use(uid)
    if in_use is None:
        return []
    removed = []
    now = time.time()
    for entry in candidates:
        with contextlib.suppress(OSError):  # gone meanwhile
            if entry.name not in in_use and now - entry.stat().st_mtime >= age:
                os.unlink(entry.path)
                removed.append(entry.name)
    if removed:
        print(
            f"curriculum_ds: note: removed {len(removed)} stale shared-memory segment(s) of "
            f"killed processes from {SHM_DIR}: {', '.join(sorted(removed))}",
            file=sys.stderr,
            flush=True,
        )
    return removed


def _owned_by(entry: os.DirEntry[str], uid: int) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_uid == uid
    except OSError:
        return False


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
    streams, between two more barriers. The first time in a process, local rank 0 first removes
    the stale shared memory of killed processes (:func:`remove_stale_shared_memory`), under the
    same lock.
    """
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if distributed:
        dist.barrier()  # every rank's close_stream (which takes the lock, shared) is done
    global _stale_removed
    leader = int(os.environ.get("LOCAL_RANK", "0") or 0) == 0
    with shared_memory_lock(exclusive=True) if leader else contextlib.nullcontext():
        if leader and not _stale_removed:
            _stale_removed = True
            _remove_stale_shared_memory(None)
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
