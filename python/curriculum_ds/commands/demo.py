"""``curriculum-ds demo``: the whole job on real text, no download.

1. Corpus: docstrings (short prose) and module sources (long code) of the Python standard
   library installed on this machine.
2. ``prepare``: two MDS datamixes, ``docstrings`` (easy) and ``code`` (hard), byte-level tokens,
   each with a held-out split (every :data:`HELD_OUT_EVERY`-th document) under ``data/val/``.
   The docstrings (79 tokens each on average) are packed into full rows of 128 tokens, the first
   phase's ``max_seq_len`` (``prepare --pack``): unpacked, 38% of a micro-batch's token slots
   were padding. The code (long modules) is split into rows of 256 tokens. A third datamix,
   ``noise`` (random printable characters, the docstrings' lengths, packed the same way), is
   prepared for the noisy-domain ablation (configs/experiments/noisy_domain.json); the demo's own
   run does not use it.
3. A ds_config with a two-phase schedule (docstrings only, then a 30/70 mix at longer sequence
   length), dynamic bucket re-weighting on, a token-based lr schedule (``lr_schedule``: warmup
   over 5% of the tokens, then cosine to 10% of the peak), and an evaluation of both held-out
   streams (``eval``: every 10% of the tokens and at each phase end).
4. The DeepSpeed launcher on 2 ranks (CPU/gloo without a GPU, CUDA/NCCL with one).
5. The curve of the bucket weights, as a table and a PNG, then the run report
   (``curriculum-ds report``): its per-phase summary and ``run/report.png``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import click

__all__ = [
    "DOCSTRINGS_ROW_LEN",
    "HELD_OUT_EVERY",
    "build_demo_data",
    "demo_ds_config",
    "run_demo",
    "split_held_out",
]

DOCSTRINGS_ROW_LEN = 128
"""Tokens per packed row of the docstrings stream: the first phase's ``max_seq_len``."""

DEFAULT_MAX_DURATION = 600_000
"""Tokens of the default demo run (global, non-padding): a few minutes on 2 CPU cores."""
HELD_OUT_EVERY = 20
"""Every this-many-th document of each mix (the last of each group) is held out for evaluation."""
EVAL_MAX_SAMPLES = 64
"""Held-out samples evaluated per stream (the first of the held-out split)."""


def demo_ds_config(data_dir: Path, *, max_duration: int, cuda: bool) -> dict[str, Any]:
    """The demo's ds_config: DeepSpeed keys plus the ``curriculum`` section."""
    first = max_duration // 3
    train, val = data_dir / "train", data_dir / "val"
    return {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0,
        "steps_per_print": 1_000_000,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": 2e-3, "betas": [0.9, 0.95], "weight_decay": 0.0},
        },
        "zero_optimization": {"stage": 1},
        "bf16": {"enabled": bool(cuda)},
        "curriculum": {
            "max_duration": f"{max_duration}tok",
            "loss_weighting": "token",
            "seed": 1234,
            # the lr by tokens: warmup over the first 5% to the optimizer's lr, cosine to 10%
            "lr_schedule": {
                "type": "cosine",
                **({"warmup": f"{max_duration // 20}tok"} if max_duration >= 20 else {}),
                "min_lr_ratio": 0.1,
            },
            "schedule": [
                {
                    "name": "docstrings",
                    "duration": f"{first}tok",
                    "train_loader": {
                        "streams": [{"local": str(train / "docstrings"), "proportion": 1.0}],
                        "max_seq_len": DOCSTRINGS_ROW_LEN,
                    },
                },
                {
                    "name": "mix",
                    "duration": f"{max_duration - first}tok",
                    "train_loader": {
                        "streams": [
                            {"local": str(train / "docstrings"), "proportion": 0.3},
                            {"local": str(train / "code"), "proportion": 0.7},
                        ],
                        "max_seq_len": 256,
                    },
                },
            ],
            # held-out loss per stream every 10% of the tokens and at each phase end
            "eval": {
                "streams": [{"local": str(val / "docstrings")}, {"local": str(val / "code")}],
                **({"interval": f"{max_duration // 10}tok"} if max_duration >= 10 else {}),
                "max_samples": EVAL_MAX_SAMPLES,
            },
            "dynamic": {
                "enabled": True,
                "num_buckets": 4,
                "window": 4096,
                "recompute_every_n_steps": 5,
                "temperature": 0.5,
                "floor": 0.05,
                # the packed docstrings rows all hold 128 tokens: bucket by compressibility
                "static_metric": "compression_ratio",
            },
        },
    }


def split_held_out(jsonl: Path, every: int = HELD_OUT_EVERY) -> tuple[Path, Path]:
    """Split a JSONL corpus file into ``<stem>.train.jsonl`` and ``<stem>.val.jsonl``.

    Line ``i`` (0-based) is held out when ``i % every == every - 1``: deterministic, spread over
    the whole file. Both files are written beside ``jsonl`` (replaced when present).

    Returns:
        ``(train, val)`` paths.
    """
    lines = jsonl.read_text(encoding="utf-8").splitlines(keepends=True)
    train = jsonl.with_name(f"{jsonl.stem}.train.jsonl")
    val = jsonl.with_name(f"{jsonl.stem}.val.jsonl")
    train.write_text("".join(x for i, x in enumerate(lines) if i % every != every - 1), "utf-8")
    val.write_text("".join(x for i, x in enumerate(lines) if i % every == every - 1), "utf-8")
    return train, val


def build_demo_data(out: Path, *, stdlib: Path | None = None, max_docs: int | None = None) -> Path:
    """Prepare the demo's datamixes under ``out/data``; returns that folder.

    ``train/`` and held-out ``val/``, each with ``docstrings``, ``code`` and ``noise``, from the
    stdlib corpus in ``out/corpus`` (``noise``: :func:`~curriculum_ds.commands.corpus.
    write_noise_corpus`, unlearnable text as long as the docstrings); reused when present and
    prepared the same way. Also the data of bench/bench_dynamic_overhead.py. ``stdlib`` and
    ``max_docs``: the corpus's (tests).
    """
    from curriculum_ds.commands.corpus import build_stdlib_corpus, write_noise_corpus
    from curriculum_ds.data import prepare

    data_dir = out / "data"
    mixes = build_stdlib_corpus(out / "corpus", max_docs=max_docs, stdlib=stdlib)
    noise = write_noise_corpus(out / "corpus" / "noise.jsonl", mixes["easy"])
    for name, source, row_len, pack in (
        ("docstrings", mixes["easy"], DOCSTRINGS_ROW_LEN, True),
        ("code", mixes["hard"], 256, False),
        ("noise", noise, DOCSTRINGS_ROW_LEN, True),
    ):
        splits = dict(zip(("train", "val"), split_held_out(source), strict=True))
        for split, path in splits.items():
            target = data_dir / split / name
            meta_path = target / "curriculum_meta.json"
            # reused when present and prepared the same way (a demo_run/ of an older version is
            # not)
            if not meta_path.is_file() or json.loads(meta_path.read_text()).get("packed") != pack:
                shutil.rmtree(target, ignore_errors=True)
                prepared = prepare([path], target, max_seq_len=row_len, pack=pack)
                rows = "packed rows" if pack else "samples"
                click.echo(
                    f"prepared {split}/{name}: {prepared.num_samples:,} {rows}, "
                    f"{prepared.num_tokens:,} tokens; " + prepared.describe_padding()
                )
    return data_dir


def run_demo(out: Path, *, num_gpus: int | None = None, max_duration: str | None = None) -> int:
    """Build the corpus and datamixes (reused when present), then train; returns the exit code."""
    from curriculum_ds.commands.curve import load_curve, render_png, render_table
    from curriculum_ds.commands.launch import build_command, default_num_gpus, has_cuda, run_command
    from curriculum_ds.commands.report import load_report, render_report, summary
    from curriculum_ds.config import Duration
    from curriculum_ds.errors import ConfigError

    total = DEFAULT_MAX_DURATION
    if max_duration is not None:
        parsed = Duration.parse(max_duration)
        if parsed.unit != "tok":
            raise ConfigError(f"--max-duration: the demo counts tokens, got {max_duration!r}")
        total = int(parsed.value)
    out = out.resolve()
    data_dir = build_demo_data(out)
    cuda = has_cuda()
    config_path = out / "ds_config.json"
    config_path.write_text(
        json.dumps(demo_ds_config(data_dir, max_duration=total, cuda=cuda), indent=2)
    )
    run_dir = out / "run"
    shutil.rmtree(run_dir, ignore_errors=True)  # the demo always starts a fresh run
    cmd = build_command(
        config_path,
        num_gpus=num_gpus or default_num_gpus(),
        train_args=["--run-dir", str(run_dir), "--save-interval", "50"],
    )
    click.echo(("" if cuda else "DS_ACCELERATOR=cpu ") + " ".join(cmd), err=True)
    code = run_command(cmd, cuda=cuda)
    if code != 0:
        return code
    curve = load_curve(run_dir)
    click.echo(render_table(curve, max_rows=12))
    png = render_png(curve, run_dir / "curriculum_curve.png")
    click.echo(
        f"\nbucket weights over steps: {png}\n(re-plot any time: curriculum-ds curve {run_dir})"
    )
    report = load_report(run_dir)
    click.echo(f"\n{summary(report)}")
    picture = render_report(report, run_dir / "report.png")
    click.echo(
        f"\nrun report (train and eval loss per stream, token shares, lr, bucket probabilities, "
        f"phases shaded): {picture}\n(re-draw any time: curriculum-ds report {run_dir})"
    )
    return 0
