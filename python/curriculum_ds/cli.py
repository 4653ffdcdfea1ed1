"""The ``curriculum-ds`` command line: prepare, validate, launch, demo, curve, report, bench, ...

Thin by design: each command parses options and calls one plain function. A
:class:`~curriculum_ds.errors.CurriculumError` becomes one clean line on stderr and exit code 1,
in one place (:class:`_Group`).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from curriculum_ds.errors import CurriculumError

__all__ = ["main"]


class _Group(click.Group):
    """Turns a CurriculumError (or a bad value) raised by any command into one line and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (CurriculumError, ValueError) as exc:
            if isinstance(exc, click.ClickException):
                raise
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Group)
@click.version_option(package_name="curriculum_ds")
def main() -> None:
    """Curriculum learning for LLM training on DeepSpeed."""


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    required=True,
    help="output MDS folder (must not exist or be empty), or an empty s3://bucket/prefix or "
    "gs://bucket/prefix to upload to",
)
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="a HF tokenizer.json (default: byte-level)",
)
@click.option(
    "--max-seq-len",
    default=1024,
    show_default=True,
    help="max tokens per sample (with --pack: tokens per row); longer documents are split",
)
@click.option(
    "--pack",
    is_flag=True,
    help="concatenate the documents (EOS-separated) into rows of exactly --max-seq-len tokens; "
    "only the last row may be shorter",
)
@click.option(
    "--format",
    "format_",
    type=click.Choice(["text", "jsonl", "json", "parquet"]),
    default=None,
    help="read every input file in this format, whatever its suffix "
    "(default: by suffix, files inside folders with other suffixes skipped)",
)
@click.option(
    "--text-field",
    default="text",
    show_default=True,
    help="the field holding the text in JSONL lines and JSON objects, the text column of "
    "Parquet files and saved datasets",
)
@click.option(
    "--val-fraction",
    type=float,
    default=None,
    help="hold out this share of the documents, in (0, 1), in a second MDS folder OUT_val beside "
    "--out (split by document)",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="draws which documents --val-fraction holds out",
)
def prepare(
    inputs: tuple[Path, ...],
    out: str,
    tokenizer: Path | None,
    max_seq_len: int,
    pack: bool,
    format_: str | None,
    text_field: str,
    val_fraction: float | None,
    seed: int,
) -> None:
    """Tokenize text, JSONL, JSON or Parquet files, saved datasets, or folders, into MDS shards.

    The suffix decides how a file is read: .txt and .md are plain UTF-8 text, one document per
    file; .jsonl holds one JSON object per line, its --text-field is a document; .json holds one
    JSON array of documents, strings or objects with --text-field; .parquet rows hold the text
    in their --text-field column. A .gz or .zst suffix after these (d.jsonl.gz) is decompressed
    while reading. A folder written by datasets' save_to_disk is read row by row (--text-field).
    JSONL, Parquet and saved datasets are streamed: memory does not grow with the input.

    A named file with another suffix (.csv, .py, ...) is refused before anything is
    written; --format reads it anyway. Inside a folder (walked recursively, hidden entries
    skipped), files with other suffixes are skipped and counted, as are text files that are
    binary or not UTF-8; a file with no suffix (LICENSE, COPYING) is read as plain text when it
    is UTF-8 text. The summary line says what was skipped. A bad row is one line naming
    the file and row; nothing is left under --out.

    Each sample carries its metric columns. The summary gives the padding fraction at
    --max-seq-len, unpacked and packed: the share of token slots that are padding when every
    row is padded to --max-seq-len.

    An --out of s3://... or gs://... (an empty prefix) is written to a temporary folder and
    uploaded with mosaicml-streaming's uploaders, index.json last; endpoint and credentials come
    from the environment (S3_ENDPOINT_URL, AWS_*; GCS_KEY/GCS_SECRET).

    --val-fraction F holds out round(F x documents) whole documents, drawn by --seed, in the MDS
    folder OUT_val beside --out (the same tokenizer and options); the rest go to --out.
    """
    import tempfile

    from curriculum_ds.data import prepare as prepare_fn
    from curriculum_ds.data.remote import check_upload_target, upload_dataset
    from curriculum_ds.data.split import check_val_fraction, prepare_split, val_folder

    if val_fraction is not None:
        check_val_fraction(val_fraction)  # before anything is read or written
    remote = out if "://" in out else None
    targets = [out] if val_fraction is None else [out, val_folder(out)]
    with tempfile.TemporaryDirectory(prefix="curriculum_ds_prepare_") as tmp:
        if remote is not None:
            for target in targets:
                check_upload_target(target)  # before tokenizing anything
        local = [Path(tmp) / f"dataset{i}" for i in range(len(targets))] if remote else None
        kwargs: dict[str, Any] = {
            "tokenizer": tokenizer,
            "max_seq_len": max_seq_len,
            "format": format_,
            "text_field": text_field,
            "pack": pack,
            "progress": sys.stderr.isatty(),  # a bar only on a terminal, else one long line
        }
        if val_fraction is None:
            summaries = [prepare_fn(list(inputs), local[0] if local else Path(out), **kwargs)]
        else:
            summaries = list(
                prepare_split(
                    list(inputs),
                    local[0] if local else Path(out),
                    val_out=local[1] if local else Path(targets[1]),
                    val_fraction=val_fraction,
                    seed=seed,
                    **kwargs,
                )
            )
        if remote is not None:
            for summary, target in zip(summaries, targets, strict=True):
                upload_dataset(summary.out, target)
    for summary, target in zip(summaries, targets, strict=True):
        click.echo(
            f"wrote {summary.num_samples:,} {'packed rows' if pack else 'samples'} "
            f"({summary.num_tokens:,} tokens, vocab {summary.vocab_size}) from "
            f"{summary.num_documents:,} documents to {target if remote else summary.out}"
        )
    summary = summaries[0]
    click.echo(summary.describe_padding())
    skipped = summary.describe_skipped()
    if skipped:
        click.echo(f"skipped in folders: {skipped} (--format reads other suffixes)")


@main.command()
@click.argument("ds_config", type=click.Path(path_type=Path))
@click.option(
    "--resume-from",
    type=click.Path(path_type=Path),
    help="a checkpoint folder: report whether the schedule can resume from it",
)
@click.option(
    "--num-gpus",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="data-parallel ranks, for the step estimate",
)
@click.option(
    "--model",
    default=None,
    help="the local HF model folder the run will get (its vocab_size bounds the token ids, its "
    "n_positions/max_position_embeddings every phase's max_seq_len); "
    "default: the small GPT-2 sized to the data's recorded vocab_size",
)
def validate(ds_config: Path, resume_from: Path | None, num_gpus: int, model: str | None) -> None:
    """Check a whole ds_config, the model's context and the data; print the schedule.

    The config checks: the `curriculum` section, and the DeepSpeed part by DeepSpeed's own
    config models (unknown top-level keys, ZeRO, scheduler params, monitor packages). The model
    check: every phase's max_seq_len fits the --model's positions. The data checks: every shard
    file matches its index (size, recorded hashes, header), a probe of samples decodes, and the
    token ids fit the vocabulary the run will use. Every problem is one line; nothing is written.
    With --resume-from: the resume rules' verdict, and the resume's own note line when the
    global batch at --num-gpus differs from the checkpoint's, or, with dynamic re-weighting, a
    note of what is kept and what can differ when only the world size does.
    """
    from curriculum_ds.commands.schedule_table import describe_schedule
    from curriculum_ds.config import load_config

    run = load_config(ds_config, check_data=True, model=model, strict=True)
    verdict = note = None
    if resume_from is not None:  # a refused resume is one line: decided before any output
        from curriculum_ds.checkpoint.engine_io import elastic_dynamic_note, global_batch_note
        from curriculum_ds.checkpoint.files import locate_checkpoint, open_tag, resume_verdict
        from curriculum_ds.errors import ResumeError

        if not resume_from.exists():
            raise ResumeError(f"--resume-from {resume_from}: no such folder")

        verdict = resume_verdict(run, resume_from)
        # another global batch (world size, micro-batch, GAS): the resume's own note line
        saved = open_tag(*locate_checkpoint(resume_from))
        note = global_batch_note(saved, run.global_batch_size(num_gpus))
        # another world size, the same batch, dynamic on: what is kept and what can differ
        note = note or elastic_dynamic_note(
            saved,
            num_gpus,
            run.global_batch_size(num_gpus),
            dynamic=run.curriculum.dynamic.enabled,
        )
    click.echo(describe_schedule(run, dp_world_size=num_gpus))
    if verdict is not None:
        click.echo(verdict)
    if note is not None:
        click.echo(f"curriculum_ds: note: {note}")


def _train_option(train_args: Sequence[str], name: str) -> str | None:
    """The value of the trainer option ``name`` (``NAME VALUE`` or ``NAME=VALUE``), if given."""
    for i, arg in enumerate(train_args):
        if arg == name and i + 1 < len(train_args):
            return train_args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("ds_config", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--num-gpus",
    type=int,
    default=None,
    help="ranks on this node (default: all GPUs, or 2 CPU ranks)",
)
@click.option("--master-port", type=int, default=None, help="rendezvous port (default: a free one)")
@click.option(
    "--script",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="your own training script, started on every rank with --deepspeed_config DS_CONFIG and "
    "the arguments after `--` (default: the reference loop, curriculum_ds.train)",
)
@click.argument("train_args", nargs=-1, type=click.UNPROCESSED)
def launch(
    ds_config: Path,
    num_gpus: int | None,
    master_port: int | None,
    script: Path | None,
    train_args: tuple[str, ...],
) -> None:
    """Print and run `deepspeed --num_gpus N --module curriculum_ds.train ...` (its exit code).

    With --script, `deepspeed --num_gpus N SCRIPT --deepspeed_config DS_CONFIG ...`: the same
    environment, port choice and signal forwarding (SIGTERM reaches every rank of the script).
    First the checks of `validate --model` (the trainer's --model; without it for a script), so a
    bad config, model or data is refused in one line per problem before any rank starts.
    """
    from curriculum_ds.commands.launch import build_command, default_num_gpus, has_cuda, run_command
    from curriculum_ds.config import load_config

    # refuse a bad config or data before starting any rank: the checks of `validate --model`
    model = _train_option(train_args, "--model") if script is None else None
    run = load_config(ds_config, check_data=True, model=model, strict=True)
    ranks = default_num_gpus() if num_gpus is None else num_gpus
    if ranks < 1:
        raise click.BadParameter(f"must be >= 1, got {ranks}", param_hint="--num-gpus")
    run.global_batch_size(ranks)  # train_batch_size must agree with this many ranks
    cmd = build_command(
        ds_config,
        num_gpus=ranks,
        train_args=train_args,
        master_port=master_port,
        script=script,
    )
    cuda = has_cuda()
    click.echo(("" if cuda else "DS_ACCELERATOR=cpu ") + shlex.join(cmd))
    sys.exit(run_command(cmd, cuda=cuda))


@main.command()
@click.option(
    "--out",
    default=Path("demo_run"),
    show_default=True,
    type=click.Path(path_type=Path),
    help="folder for corpus, shards, config and the run",
)
@click.option(
    "--num-gpus", type=int, default=None, help="ranks (default: all GPUs, or 2 CPU ranks)"
)
@click.option(
    "--max-duration", default=None, help="override the demo's total tokens, e.g. 400000tok"
)
def demo(out: Path, num_gpus: int | None, max_duration: str | None) -> None:
    """Real text from Python's stdlib → two datamixes → a 2-phase dynamic curriculum run."""
    from curriculum_ds.commands.demo import run_demo

    sys.exit(run_demo(out, num_gpus=num_gpus, max_duration=max_duration))


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--png",
    type=click.Path(path_type=Path),
    default=None,
    help="write the plot here (default: RUN_DIR/curriculum_curve.png)",
)
def curve(run_dir: Path, png: Path | None) -> None:
    """Print each bucket's weight over steps and plot it with phase boundaries."""
    from curriculum_ds.commands.curve import load_curve, render_png, render_table

    c = load_curve(run_dir)
    click.echo(render_table(c))
    click.echo(f"plot: {render_png(c, png or run_dir / 'curriculum_curve.png')}")


@main.command()
@click.argument("ds_config", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="write the migrated ds_config here (default: print it)",
)
@click.option(
    "--num-gpus",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="data-parallel ranks, for the global batch when the file has no train_batch_size",
)
@click.option(
    "--total-steps",
    default=None,
    type=click.IntRange(min=1),
    help="optimizer steps of the whole run (a phase at the full length follows the warmup); "
    "default: the curriculum's own steps",
)
@click.option(
    "--data",
    default="data/train",
    show_default=True,
    help="the stream folder (prepared MDS) of the migrated phases",
)
def migrate(
    ds_config: Path, out: Path | None, num_gpus: int, total_steps: int | None, data: str
) -> None:
    """Translate DeepSpeed's sequence-length curriculum into the curriculum section.

    DS_CONFIG's `curriculum_learning` (seqlen: fixed_linear, fixed_root, fixed_discrete) or
    data-efficiency seqlen curriculum becomes a `max_seq_len` ramp, DeepSpeed's steps tokens at
    the global batch and the schedule's lengths (one line on stderr says how).
    """
    import json

    from curriculum_ds.commands.migrate import migrate_config, read_ds_config

    migrated, note = migrate_config(
        read_ds_config(ds_config), num_gpus=num_gpus, local=data, total_steps=total_steps
    )
    text = json.dumps(migrated, indent=2)
    if out is None:
        click.echo(text)
    else:
        out.write_text(text + "\n")
    click.echo(f"curriculum_ds: note: {note}", err=True)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--png",
    type=click.Path(path_type=Path),
    default=None,
    help="write the picture here (default: RUN_DIR/report.png)",
)
def report(run_dir: Path, png: Path | None) -> None:
    """Plot a run's losses, token shares, lr and bucket probabilities; print a phase summary.

    One PNG with phases shaded: train and eval loss per stream, realised token share per stream,
    lr, and the bucket probabilities of dynamic re-weighting.
    """
    from curriculum_ds.commands.report import load_report, render_report, summary

    r = load_report(run_dir)
    click.echo(summary(r))
    click.echo(f"picture: {render_report(r, png or run_dir / 'report.png')}")


@main.command()
@click.argument("experiment", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--out", required=True, type=click.Path(path_type=Path), help="results folder")
@click.option(
    "--num-gpus", type=int, default=None, help="ranks per run (default: all GPUs, or 2 CPU ranks)"
)
@click.option(
    "--save-interval", default=50, show_default=True, help="checkpoint every N steps of a run"
)
def ablate(experiment: Path, out: Path, num_gpus: int | None, save_interval: int) -> None:
    """Run an experiment's arms × seeds at equal tokens; print the table (docs/ablate.md)."""
    from curriculum_ds.ablate import ablate as run_ablation

    table = run_ablation(experiment, out, num_gpus=num_gpus, save_interval=save_interval)
    click.echo(f"\n{table}\nresults: {out / 'summary.json'}  picture: {out / 'ablation.png'}")


@main.command()
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--model",
    default=None,
    type=click.Path(path_type=Path),
    help="the run's --model (a local HF folder): its config is the architecture",
)
@click.option(
    "--deepspeed-config",
    "ds_config",
    default=None,
    type=click.Path(path_type=Path),
    help="the run's ds_config: rebuilds the reference loop's default GPT-2 (when no --model)",
)
def export(checkpoint: Path, out: Path, model: Path | None, ds_config: Path | None) -> None:
    """Write a checkpoint's model to OUT: a HF save_pretrained folder, or OUT/state_dict.pt.

    CHECKPOINT is a checkpoints folder (its `latest` tag) or one tag folder. ZeRO shards are
    consolidated to fp32 with DeepSpeed's zero_to_fp32, on CPU. With --model or
    --deepspeed-config OUT loads with AutoModelForCausalLM.from_pretrained; with neither it holds
    a plain state_dict for model.load_state_dict.
    """
    from curriculum_ds.commands.export import export_checkpoint

    done = export_checkpoint(checkpoint, out, model=model, ds_config=ds_config)
    what = "a HF model folder" if done.format == "hf" else "a plain state_dict"
    click.echo(
        f"exported {done.tag_dir} ({done.num_parameters:,} parameters) as {what}: {done.out}"
    )


@main.command()
@click.option(
    "--sizes", default="1e6", show_default=True, help="comma-separated N values, e.g. 1e6,1e7"
)
@click.option("--repeats", default=5, show_default=True, help="timed repetitions per row")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.option(
    "--no-extras",
    is_flag=True,
    help="skip the fixed-size cases (BucketSampler at 1e7, 2^24 + 1): a quick smoke run",
)
def bench(sizes: str, repeats: int, as_json: bool, no_extras: bool) -> None:
    """Microbenchmarks: our kernels vs numpy and torch on the same data, in one run."""
    from curriculum_ds.commands.kernel_bench import run

    try:
        parsed = [int(float(s)) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise click.BadParameter(
            f"expected numbers like 1e6,1e7, got {sizes!r}", param_hint="--sizes"
        ) from None
    run(parsed, as_json, repeats=repeats, extras=not no_extras)  # prints the table (or JSON) itself


if __name__ == "__main__":
    main()
