"""``curriculum-ds score --num-gpus N [--hostfile H]``: the reference loss scored over ranks.

Scoring 10⁹ samples with a reference model on one device takes weeks; a team spreads it over the
GPUs it trains on. ``score --num-gpus N`` starts N ranks per node through the DeepSpeed launcher
itself, as ``launch`` does (:func:`score_command`; multi-node with a ``--hostfile`` like
training), each running ``python -m curriculum_ds.commands.score`` (:func:`main`), which is also
runnable as ``deepspeed --num_gpus N --module curriculum_ds.commands.score DATA... --model DIR
--column NAME``.

On each rank :func:`~curriculum_ds.commands.score.score` with :class:`Ranks`:

* every rank runs every check; the ranks then agree (one ``all_gather_object``) on the first
  refusal of any rank, which every rank raises (rank 0 prints it, one line), and on the data: a
  digest of each DATA folder's ``index.json`` (which records every shard file's size and sha1),
  so ranks that read other data (another host's copy, another folder list) are refused in one
  line before anything is scored;
* each rank scores every ``world_size``-th sample of each folder's length order (slices of like
  lengths, so like work), and one ``all_reduce`` (sum) of the per-sample loss sums and counts,
  0 where another rank scored, gives every rank the whole column exactly;
* rank 0 writes the column, once, atomically
  (:func:`~curriculum_ds.data.metric_store.write_metric_column`). A rank that dies mid-score
  fails the others' ``all_reduce`` (gloo) and the launcher stops the job: the old column, or
  none, stays as it was.

The collectives are a few arrays of ``num_samples`` values per folder, on the CPU (``gloo``),
whatever device the model runs on (``cuda:LOCAL_RANK`` where there is CUDA).
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from curriculum_ds.errors import ConfigError, CurriculumError, DataError

__all__ = ["Ranks", "data_digest", "main", "score_command"]

_MODULE = "curriculum_ds.commands.score"


def data_digest(folder: Path) -> str:
    """sha256 of the folder's ``index.json`` (every shard's name, size, sample count and sha1)."""
    try:
        return hashlib.sha256((folder / "index.json").read_bytes()).hexdigest()
    except OSError as err:
        return f"unreadable: {err.strerror}"


class Ranks:
    """The ranks scoring together: this rank, the world size, and their two collectives.

    Attributes:
        rank: This process's global rank.
        world_size: Ranks in the job.
    """

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size

    @classmethod
    def from_environment(cls) -> Ranks:
        """Join the job the launcher started (``RANK``, ``WORLD_SIZE``, ``MASTER_*``; gloo)."""
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="gloo")
        return cls(dist.get_rank(), dist.get_world_size())

    def _gather(self, entry: Any) -> list[Any]:
        import torch.distributed as dist

        entries: list[Any] = [None] * self.world_size
        dist.all_gather_object(entries, entry)
        return entries

    def refuse(self, err: CurriculumError) -> NoReturn:
        """Tell the other ranks this rank refused (:meth:`agree`'s partner), then raise ``err``."""
        self._gather((type(err).__name__, str(err), None))
        raise err

    def agree(self, folders: Sequence[Path]) -> None:
        """Check that no rank refused and that every rank reads the same data.

        Raises:
            ConfigError | DataError: the refusal of the lowest rank that refused; or
                ``score: the ranks disagree on the data: ...`` naming the rank and the folder.
        """
        mine = [(str(folder), data_digest(folder)) for folder in folders]
        entries = self._gather((None, None, mine))
        for kind, message, _ in entries:
            if message is not None:
                raise (ConfigError if kind == "ConfigError" else DataError)(message)
        first = entries[0][2]
        for rank, (_, _, theirs) in enumerate(entries):
            if len(theirs) != len(first):
                raise DataError(
                    f"score: the ranks disagree on the data: rank {rank} has {len(theirs)} DATA "
                    f"folders, rank 0 has {len(first)}; every rank must read the same folders"
                )
            for (name, digest), (name0, digest0) in zip(theirs, first, strict=True):
                if digest != digest0:
                    raise DataError(
                        f"score: the ranks disagree on the data: rank {rank}'s {name} is not "
                        f"rank 0's {name0} (their index.json differ); every rank must read the "
                        "same DATA folders (a shared file system, or identical copies)"
                    )

    def sum(self, values: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The element-wise sum of ``values`` over the ranks (same dtype and shape)."""
        import torch
        import torch.distributed as dist

        tensor = torch.from_numpy(np.ascontiguousarray(values).copy())
        dist.all_reduce(tensor)
        return tensor.numpy()


def score_command(
    data: Sequence[Path],
    model: Path,
    column: str,
    *,
    num_gpus: int,
    hostfile: Path | None = None,
    batch_size: int = 16,
    device: str | None = None,
    overwrite: bool = False,
    master_port: int | None = None,
) -> list[str]:
    """The launcher command of ``score --num-gpus N``.

    ``deepspeed --num_gpus N [--hostfile H] --master_port P --module
    curriculum_ds.commands.score DATA... --model DIR --column NAME --batch-size B [--device D]
    [--overwrite]`` (the launcher appends ``--local_rank=K``).

    Raises:
        ConfigError: ``num_gpus`` < 1.
    """
    from curriculum_ds.commands.launch import launcher_prefix

    if num_gpus < 1:
        raise ConfigError(f"score: --num-gpus must be >= 1, got {num_gpus}")
    return [
        *launcher_prefix(num_gpus, master_port, hostfile),
        "--module",
        _MODULE,
        *(str(folder) for folder in data),
        "--model",
        str(model),
        "--column",
        column,
        "--batch-size",
        str(batch_size),
        *(["--device", device] if device is not None else []),
        *(["--overwrite"] if overwrite else []),
    ]


def _parse(argv: Sequence[str]) -> Any:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {_MODULE}")
    parser.add_argument("data", nargs="+", type=Path)
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--column", required=True)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default=None)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None)  # the launcher's
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> int:
    """One rank of ``score --num-gpus N``; returns the exit code.

    Joins the launcher's process group (gloo), unless the caller has one already (which it
    keeps). A refusal is one line on rank 0's stderr (``Error: ...``), exit code 1 on every
    rank.
    """
    from curriculum_ds.commands.score import score
    from curriculum_ds.distributed import prepare_environment

    args = _parse(argv)
    cuda = prepare_environment()  # LOCAL_WORLD_SIZE for streaming, a world of one unlaunched
    device = args.device
    if device is None and cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    import torch.distributed as dist

    joined = not dist.is_initialized()  # this call made the group: it ends it too
    ranks = Ranks.from_environment()
    try:
        score(
            args.data,
            args.model,
            args.column,
            batch_size=args.batch_size,
            device=device,
            overwrite=args.overwrite,
            progress=ranks.rank == 0 and sys.stderr.isatty(),
            on_folder=lambda summary: print(summary.describe(), flush=True),
            ranks=ranks,
        )
    except CurriculumError as err:
        if ranks.rank == 0:
            print(f"Error: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        if joined and dist.is_initialized():
            dist.destroy_process_group()
    return 0
