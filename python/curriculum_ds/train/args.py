"""The command line of ``curriculum_ds.train`` (DeepSpeed launcher compatible).

``--deepspeed_config`` and ``--run-dir`` are required; ``--local_rank`` (set by the DeepSpeed
launcher) is reconciled with ``LOCAL_RANK``. A usage error is argparse's exit code 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "parse_args"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the training module (DeepSpeed launcher compatible)."""
    p = argparse.ArgumentParser(
        prog="python -m curriculum_ds.train",
        description="Curriculum training on DeepSpeed; launch with "
        "`deepspeed --num_gpus N --module curriculum_ds.train --deepspeed_config ds.json ...`.",
    )
    p.add_argument(
        "--deepspeed_config",
        "--deepspeed-config",
        type=Path,
        required=True,
        help="ds_config JSON with a `curriculum` section",
    )
    p.add_argument(
        "--run-dir",
        "--run_dir",
        type=Path,
        required=True,
        help="where metrics.jsonl, curriculum_history.jsonl and checkpoints/ go",
    )
    p.add_argument(
        "--model",
        default=None,
        help="local HF model folder; default: a small GPT-2 built from a config",
    )
    p.add_argument(
        "--model-preset",
        default="proxy",
        choices=["proxy", "proxy_10x"],
        help="the size of the default GPT-2 (docs/ablate.md): proxy (2 layers, width 128) or "
        "proxy_10x (6 layers, width 256, ~10x the parameters)",
    )
    p.add_argument(
        "--model-factory",
        default=None,
        metavar="MODULE:FUNCTION",
        help="your own model: FUNCTION(vocab_size=V, max_seq_len=L) returns a torch.nn.Module, "
        "or (module, forward) with forward(engine, mb) -> logits (e.g. "
        "curriculum_ds.model_factory.nanogpt_forward)",
    )
    p.add_argument(
        "--save-interval",
        type=int,
        default=0,
        help="checkpoint every N optimizer steps (0: only at the end)",
    )
    p.add_argument(
        "--resume",
        default=None,
        help="`auto` (latest checkpoint of --run-dir, if any) or a checkpoint folder",
    )
    p.add_argument(
        "--trace-samples",
        action="store_true",
        help="write sample_trace.jsonl: the global batch of every step",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop after this global step (a checkpoint is written), for smoke runs",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: log lines instead (the default when stderr is not a terminal)",
    )
    p.add_argument(
        "--log-interval",
        type=int,
        default=0,
        help="without a progress bar, one log line every N optimizer steps "
        "(0, the default: the first step, then about every 10 s of wall time)",
    )
    p.add_argument(
        "--keep-last",
        type=int,
        default=None,
        help="keep only the newest N checkpoint tags (never the one `latest` names; "
        "default: keep all)",
    )
    p.add_argument(
        "--export-final",
        type=Path,
        default=None,
        help="at the end, write the model of the last checkpoint to this folder "
        "(HF save_pretrained; as `curriculum-ds export`)",
    )
    p.add_argument(
        "--local_rank",
        "--local-rank",
        type=int,
        default=None,
        help="set by the DeepSpeed launcher; must agree with LOCAL_RANK",
    )
    p.add_argument("--deepspeed", action="store_true", help="accepted for DeepSpeed compatibility")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the module's arguments and reconcile ``--local_rank`` with ``LOCAL_RANK``.

    Raises:
        SystemExit: On a usage error (argparse's exit code 2).
        curriculum_ds.distributed.LocalRankError: If the two local ranks disagree.
    """
    from curriculum_ds.distributed import resolve_local_rank

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_interval < 0:
        parser.error(f"--log-interval: must be >= 0 (0: about every 10 s), got {args.log_interval}")
    if args.keep_last is not None and args.keep_last < 1:
        parser.error(f"--keep-last: must be >= 1, got {args.keep_last}")
    if args.model is not None and args.model_factory is not None:
        parser.error("--model and --model-factory: give one of them")
    if args.model_preset != "proxy" and (args.model or args.model_factory):
        parser.error("--model-preset sizes the default model: not with --model or --model-factory")
    args.local_rank = resolve_local_rank(args.local_rank)
    return args
