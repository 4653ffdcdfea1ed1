"""``curriculum-ds prepare``, ``score`` and ``validate``: data in, scored, checked before a run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from curriculum_ds.cli.group import main


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
    type=click.Choice(["text", "jsonl", "json", "parquet", "qa"]),
    default=None,
    help="read every input file in this format, whatever its suffix "
    "(default: by suffix; files inside folders with other suffixes read as text by content); "
    "qa: JSONL question-answer records with 'prompt' and 'answer' (only the answer bears loss)",
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
@click.option(
    "--shard",
    default=None,
    metavar="I/N",
    help="prepare only part I (0-based) of N: a contiguous range of the documents, written as a "
    "part folder for `curriculum-ds merge OUT PART...` (one part per job of a Slurm array, host, "
    "...)",
)
@click.option(
    "--num-workers",
    default=1,
    show_default=True,
    type=int,
    help="processes on this machine, each preparing a contiguous range of the documents; the "
    "parts are merged into --out (the same samples and columns as one process)",
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
    shard: str | None,
    num_workers: int,
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
    skipped), a file with another suffix or none (.h, .pm, LICENSE, changelog.Debian.gz,
    decompressed) is read as plain text when its content is UTF-8 text; binary and non-UTF-8
    files are skipped and counted. The summary line says what was skipped. A bad row is one
    line naming the file and row; nothing is left under --out.

    Each sample carries its metric columns. The summary gives the padding fraction at
    --max-seq-len, unpacked and packed: the share of token slots that are padding when every
    row is padded to --max-seq-len.

    An --out of s3://... or gs://... (an empty prefix) is written to a temporary folder and
    uploaded with mosaicml-streaming's uploaders, index.json last; endpoint and credentials come
    from the environment (S3_ENDPOINT_URL, AWS_*; GCS_KEY/GCS_SECRET).

    --val-fraction F holds out round(F x documents) whole documents, drawn by --seed, in the MDS
    folder OUT_val beside --out (the same tokenizer and options); the rest go to --out.

    --format qa reads JSONL records {"prompt": ..., "answer": ...}, one sample each: the
    prompt's tokens, the answer's, EOS. Its prompt_len column marks the prompt, whose tokens
    bear no loss in training and evaluation; an eval stream of QA records also reports
    exact_match. A record without a prompt or answer, with an empty one, or whose answer does
    not fit in --max-seq-len after its prompt is refused in one line naming file:line.

    --shard I/N prepares part I (0-based) of N: the documents [I*n/N, (I+1)*n/N) of the n
    non-empty documents in reading order (every part reads the inputs once to count them), into
    a part folder; `curriculum-ds merge OUT PART...` joins the N parts into the stream one
    process would have written (with --pack: the same documents and tokens, in at most N-1 more
    rows). --num-workers M spreads a prepare (or a part) over M processes of this machine.
    """
    import tempfile

    from curriculum_ds.data import prepare as prepare_fn
    from curriculum_ds.data.parts import parse_shard
    from curriculum_ds.data.remote import check_upload_target, upload_dataset
    from curriculum_ds.data.sharded import check_num_workers, prepare_parts
    from curriculum_ds.data.split import check_val_fraction, prepare_split, val_folder
    from curriculum_ds.errors import DataError

    if val_fraction is not None:
        check_val_fraction(val_fraction)  # before anything is read or written
        if format_ == "qa":
            raise DataError(
                "--val-fraction and --format qa: split the QA records into two files and "
                "prepare each"
            )
    part = None if shard is None else parse_shard(shard)
    check_num_workers(num_workers)
    if format_ == "qa" and (part is not None or num_workers > 1):
        raise DataError(
            "--shard/--num-workers and --format qa: QA records are prepared by one process; "
            "split the records into files and prepare each"
        )
    remote = out if "://" in out else None
    if part is not None and remote is not None:
        raise DataError(
            f"--shard with --out {out}: a part is a local folder that `curriculum-ds merge` "
            "joins; write the parts to local folders, merge them, then upload the stream"
        )
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
        if part is not None or num_workers > 1:
            summaries = prepare_parts(
                list(inputs),
                local[0] if local else Path(out),
                shard=part,
                num_workers=num_workers,
                val_fraction=val_fraction,
                val_out=(local[1] if local else Path(targets[1])) if val_fraction else None,
                seed=seed,
                **kwargs,
            )
        elif val_fraction is None:
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
            f"{summary.num_documents:,} {'records' if format_ == 'qa' else 'documents'} to "
            f"{target if remote else summary.out}"
        )
    summary = summaries[0]
    click.echo(summary.describe_padding())
    skipped = summary.describe_skipped()
    if skipped:
        click.echo(f"skipped in folders: {skipped}")
    if part is not None:
        click.echo(
            f"part {part} written; join the {part.count} parts with `curriculum-ds merge OUT "
            "PART...`"
        )


@main.command()
@click.argument("out", type=click.Path(path_type=Path))
@click.argument("parts", nargs=-1, required=True, type=click.Path(path_type=Path))
def merge(out: Path, parts: tuple[Path, ...]) -> None:
    """Join the part folders of `prepare --shard I/N` into one MDS stream OUT.

    OUT holds the samples, in order, with the metric columns, token counts and max_token_id of
    a one-process prepare of the same inputs (with --pack: the same documents and tokens, in at
    most N-1 more rows). The parts' shard files are hard-linked into OUT where the file system
    allows, else copied; the parts are left as they are. Refused in one line, before anything
    is written: a folder that is not a part, a part missing or given twice, parts whose
    document ranges overlap, parts prepared with different tokenizers or options.
    """
    from curriculum_ds.data.merge import merge_parts

    click.echo(merge_parts(out, list(parts)).describe())


@main.command()
@click.argument("data", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--model",
    required=True,
    type=click.Path(path_type=Path),
    help="the reference model: a local Hugging Face causal-LM folder (e.g. what "
    "`curriculum-ds export` writes); never downloaded",
)
@click.option(
    "--column",
    required=True,
    help="the metric column to write (a plain identifier), what dynamic.reference_metric names",
)
@click.option(
    "--batch-size",
    default=16,
    show_default=True,
    type=int,
    help="samples per forward pass (right-padded, attention-masked)",
)
@click.option(
    "--device",
    default=None,
    help="a torch device, e.g. cpu or cuda:1 (default: cuda if available, else cpu)",
)
@click.option("--overwrite", is_flag=True, help="replace the column where it exists already")
@click.option(
    "--num-gpus",
    type=int,
    default=None,
    help="score over N ranks per node started by the DeepSpeed launcher (CUDA devices, or CPU "
    "ranks without CUDA); rank 0 writes the column (default: this process alone)",
)
@click.option(
    "--hostfile",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="a DeepSpeed hostfile: score on every node it lists, as training does (with --num-gpus)",
)
def score(
    data: tuple[Path, ...],
    model: Path,
    column: str,
    batch_size: int,
    device: str | None,
    overwrite: bool,
    num_gpus: int | None,
    hostfile: Path | None,
) -> None:
    """Write each sample's mean token loss under a reference model as a metric column.

    For every sample of every prepared MDS folder DATA: its mean next-token cross-entropy (nats)
    over its loss-bearing tokens under --model, the same per-sample loss the training step
    gathers, written as metric column --column of the folder (metrics.npz, atomically; the
    shards, index.json and the other columns unchanged). It is what
    `dynamic.signal: "excess_loss"` subtracts (`dynamic.reference_metric: NAME`).

    Refused in one line, before anything is written in any folder: a --model that does not
    load or is not causal, a DATA that is not a folder made by `curriculum-ds prepare` (or is a
    remote stream's cache folder, or cannot be written), a model vocabulary or
    context too small for the data, a --column that is empty, not a plain identifier or one of
    prepare's own, or that a folder has already (without --overwrite).

    With --num-gpus N (and --hostfile H for several nodes) the DeepSpeed launcher starts the
    ranks (`deepspeed --num_gpus N --module curriculum_ds.commands.score ...`, printed first):
    every rank checks everything, the ranks agree on the data (ranks reading different data are
    refused in one line), each scores its slice of the samples, and rank 0 writes the column
    once, atomically; a rank that dies leaves the old column as it was.
    """
    from curriculum_ds.commands.score import check_column_name
    from curriculum_ds.commands.score import score as score_fn

    if num_gpus is not None or hostfile is not None:
        from curriculum_ds.commands.launch import has_cuda, run_command
        from curriculum_ds.commands.score_ranks import score_command

        check_column_name(column)  # the user's quick mistakes before any rank starts
        for folder in data:
            if not folder.is_dir():
                raise click.ClickException(f"score: {folder} is not a folder")
        cmd = score_command(
            data,
            model,
            column,
            num_gpus=num_gpus if num_gpus is not None else 1,
            hostfile=hostfile,
            batch_size=batch_size,
            device=device,
            overwrite=overwrite,
        )
        click.echo(" ".join(cmd), err=True)
        sys.exit(run_command(cmd, cuda=has_cuda()))

    score_fn(
        list(data),
        model,
        column,
        batch_size=batch_size,
        device=device,
        overwrite=overwrite,
        progress=sys.stderr.isatty(),  # a bar only on a terminal, as prepare's
        on_folder=lambda summary: click.echo(summary.describe()),
    )


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
@click.option(
    "--hf-args",
    type=click.Path(path_type=Path),
    default=None,
    help="a TrainingArguments.to_json_string() dump: CurriculumTrainer's checks of it against "
    "the ds_config (batch sizes, group_by_length), and the schedule at its batch sizes",
)
def validate(
    ds_config: Path,
    resume_from: Path | None,
    num_gpus: int,
    model: str | None,
    hf_args: Path | None,
) -> None:
    """Check a whole ds_config, the model's context and the data; print the schedule.

    The config checks: the `curriculum` section, and the DeepSpeed part by DeepSpeed's own
    config models (unknown top-level keys, ZeRO, scheduler params, monitor packages). The model
    check: every phase's max_seq_len fits the --model's positions. The data checks: every shard
    file matches its index (size, recorded hashes, header), a probe of samples decodes, and the
    token ids fit the vocabulary the run will use, and with dynamic re-weighting its metric
    columns (static_metric for buckets, reference_metric for excess_loss) are there and finite.
    Every problem is one line; nothing is written.
    With --hf-args (a TrainingArguments.to_json_string() dump, --num-gpus its world size): the
    HF Trainer's checks of those arguments, without starting ranks.
    With --resume-from: the resume rules' verdict, and the resume's own note line when the
    global batch at --num-gpus differs from the checkpoint's, or, with dynamic re-weighting, a
    note of what is kept and what can differ when only the world size does.
    """
    from curriculum_ds.commands.schedule_table import describe_schedule
    from curriculum_ds.config import load_config
    from curriculum_ds.config.hf_auto import hf_auto_keys, hf_auto_note

    run = load_config(ds_config, check_data=True, model=model, strict=True, hf_auto=True)
    if hf_args is not None:  # what CurriculumTrainer's constructor checks, at HF's batch sizes
        from curriculum_ds.config.hf_args import arguments_from_json, curriculum_run

        args = arguments_from_json(hf_args, deepspeed=ds_config, world_size=num_gpus)
        run = curriculum_run(args, check_data=False)  # the data was checked above
    verdict = note = None
    if resume_from is not None:  # a refused resume is one line: decided before any output
        from curriculum_ds.checkpoint.engine_io import elastic_dynamic_note, global_batch_note
        from curriculum_ds.checkpoint.files import locate_checkpoint, open_tag
        from curriculum_ds.checkpoint.rules import resume_verdict
        from curriculum_ds.errors import ResumeError

        if not resume_from.exists():
            raise ResumeError(f"--resume-from {resume_from}: no such folder")

        saved = open_tag(*locate_checkpoint(resume_from))  # every file, by the safe loader
        verdict = resume_verdict(run, saved)
        # another global batch (world size, micro-batch, GAS): the resume's own note line
        note = global_batch_note(saved, run.global_batch_size(num_gpus))
        # another world size, the same batch, dynamic on: what is kept and what can differ
        note = note or elastic_dynamic_note(
            saved,
            num_gpus,
            run.global_batch_size(num_gpus),
            dynamic=run.curriculum.dynamic.enabled,
        )
    click.echo(describe_schedule(run, dp_world_size=num_gpus))
    auto = hf_auto_keys(run.ds_config)
    if auto:
        click.echo(f"curriculum_ds: note: {hf_auto_note(auto)}")
    if verdict is not None:
        click.echo(verdict)
    if note is not None:
        click.echo(f"curriculum_ds: note: {note}")
