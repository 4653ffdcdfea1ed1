"""The commands that read runs and checkpoints: ``curve``, ``report``, ``mix``, ``export``..."""

from __future__ import annotations

from pathlib import Path

import click

from curriculum_ds.cli.group import main


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--png",
    type=click.Path(path_type=Path),
    default=None,
    help="write the plot here (default: RUN_DIR/curriculum_curve.png)",
)
def curve(run_dir: Path, png: Path | None) -> None:
    """Print each bucket's (or stream's) weight over steps and plot it with phase boundaries."""
    from curriculum_ds.commands.curve import load_curve, render_png, render_table

    c = load_curve(run_dir)
    click.echo(render_table(c))
    click.echo(f"plot: {render_png(c, png or run_dir / 'curriculum_curve.png')}")


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option(
    "--phase",
    type=click.IntRange(min=0),
    default=None,
    help="the phase index (default: the last phase with stream weights in the history)",
)
@click.option(
    "--last",
    is_flag=True,
    help="the phase's final weights (default: their running average, DoReMi's output)",
)
def mix(run_dir: Path, phase: int | None, last: bool) -> None:
    """Print a static train_loader whose proportions are the stream weights a run learned.

    The phase's train_loader as the run saved it (in its own proportion_unit), each stream's
    proportion the running average of its weight over the phase (DoReMi's output), or with
    --last its final weight: ready to paste into a phase of curriculum.schedule.
    """
    from curriculum_ds.commands.mix import mixed_loader, render_loader

    click.echo(render_loader(mixed_loader(run_dir, phase=phase, last=last)))


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
    lr, and the bucket probabilities (or stream weights) of dynamic re-weighting.
    """
    from curriculum_ds.commands.report import load_report, render_report, summary

    r = load_report(run_dir)
    click.echo(summary(r))
    click.echo(f"picture: {render_report(r, png or run_dir / 'report.png')}")


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
    consolidated to fp32 with DeepSpeed's zero_to_fp32, on CPU. A reference-loop run records
    its model's architecture, so its export needs no flag; else --model or --deepspeed-config
    names it. OUT then loads with AutoModelForCausalLM.from_pretrained (what `score` reads);
    without any of these (a model of your own) it holds a plain state_dict for
    model.load_state_dict.
    """
    from curriculum_ds.checkpoint.export import export_checkpoint

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
