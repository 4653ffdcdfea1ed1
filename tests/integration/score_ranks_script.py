"""Three rounds of ``curriculum-ds score`` over the ranks of one launched job.

Run by test_score_over_two_ranks.py as ``deepspeed --num_gpus 2 ... score_ranks_script.py
SPEC.json`` (one launch for the three, each a call of the rank's own entry point,
``curriculum_ds.commands.score_ranks.main``, on one process group):

1. both ranks score DATA... with ``model`` into column ``ref``;
2. rank 1 reads another folder than rank 0: every rank returns 1, rank 0 prints the line;
3. ``--overwrite`` of ``ref`` with ``other_model``, and rank 1 kills itself (SIGKILL) at its
   second batch: the job fails, the column written in round 1 must stay as it was.

Each rank writes its exit codes of rounds 1 and 2 to ``OUT/codes.RANK.json``, and rank 1 the
marker ``OUT/killed`` just before the kill.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    (path,) = [arg for arg in sys.argv[1:] if not arg.startswith("--local_rank")]  # the launcher's
    spec = json.loads(Path(path).read_text())
    from curriculum_ds.distributed import prepare_environment

    prepare_environment()
    import torch.distributed as dist

    from curriculum_ds.commands.score_ranks import main as score_main

    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    out = Path(spec["out"])
    model = ["--model", spec["model"], "--batch-size", "4"]
    codes = {"whole": score_main([*spec["data"], *model, "--column", "ref"])}
    mine = spec["data"][:1] if rank == 0 else [spec["other"]]
    codes["disagree"] = score_main([*mine, *model, "--column", "ref2"])
    (out / f"codes.{rank}.json").write_text(json.dumps(codes))
    dist.barrier()
    if rank == 1:
        import curriculum_ds.core.loss as loss

        real = loss.per_sample_token_losses
        calls: list[int] = []

        def dying(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:
                (out / "killed").write_text("after 1 batch\n")
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        loss.per_sample_token_losses = dying  # type: ignore[assignment]
    again = ["--model", spec["other_model"], "--batch-size", "4", "--overwrite"]
    score_main([*spec["data"], *again, "--column", "ref"])


if __name__ == "__main__":
    main()
