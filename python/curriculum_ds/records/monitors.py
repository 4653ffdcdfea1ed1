"""Curriculum metrics to DeepSpeed's own monitors: ``tensorboard``, ``wandb``, ``csv_monitor``.

When the ds_config enables one of DeepSpeed's monitors, the engine holds a
``deepspeed.monitor.monitor.MonitorMaster`` as ``engine.monitor`` (its writers exist on global
rank 0 only). :class:`CurriculumMonitor` writes the curriculum's figures through it, with the
optimizer step as x-axis, under tags a user can guess:

=================================== ==========================================================
tag                                 value
=================================== ==========================================================
``curriculum/loss``                 the step's loss (what the optimizer saw, nats); not written
                                    for a skipped step
``curriculum/lr``                   the learning rate of the step's update
``curriculum/tokens``               consumed non-padding input tokens, cumulative, global
``curriculum/phase``                the phase index of the step's samples
``curriculum/streams/<name>/loss``  the stream's token-mean loss in the step (nats); not
                                    written when the stream had no loss-bearing token
``curriculum/streams/<name>/tokens`` the step's non-padding input tokens from the stream
``curriculum/bucket_probs/<i>``     bucket i's sampling probability after a re-weighting
                                    recompute (dynamic re-weighting), at the recompute's step
``curriculum/stream_weights/<name>`` with ``dynamic.unit: "streams"``, instead: stream
                                    ``name``'s weight after a recompute, at its step (only the
                                    streams of the recompute's phase)
``curriculum/average_weights/<name>`` ``method: "doremi"``: the running mean of stream
                                    ``name``'s weight over the phase (DoReMi's output)
``curriculum/loss_weights/<name>``  ``apply: "loss"``: stream ``name``'s loss weight from the
                                    next step on
``curriculum/epsilon_t``            ``method: "odm"``: the exploration rate ε_t of the update
``curriculum/alpha/<name>``         ``method: "ado"``: stream ``name``'s fitted exponent α
``curriculum/interaction/<j>/<i>``  ``method: "aioli"``: ``A[j][i]``, stream ``j``'s loss drop
                                    from training on stream ``i`` (and ``curriculum/
                                    interaction_sum/<i>``, ``Σ_j A``)
``curriculum/skillit_scores/<name>`` ``method: "skillit"``: ``A · Σ L_eval`` of the stream
``curriculum/eval/loss``            an evaluation's loss over all eval tokens (nats)
``curriculum/eval/<name>/loss``     an evaluation's loss on eval stream ``name`` (nats)
``curriculum/eval/<name>/exact_match`` a QA eval stream's share of records answered exactly
=================================== ==========================================================

The values are those of the ``metrics.jsonl`` row, the ``curriculum_history.jsonl`` row and the
``eval.jsonl`` row. DeepSpeed itself writes only ``Train/Samples/lr`` (the scheduler's lr, x =
samples; with ``curriculum.lr_schedule`` it does not know the schedule),
``Train/Samples/loss_scale`` (fp16) and, with ``wall_clock_breakdown``, ``Train/Samples/
elapsed_time_ms_*``; none is under ``curriculum/``, so nothing is written twice.

W&B needs one care: DeepSpeed logs with ``step=`` global samples, and ``wandb.log`` drops a row
whose ``step`` is below the run's current step, so rows logged with ``step=`` optimizer step
would be lost. The W&B writer therefore logs each step's values as one row with
``curriculum/step`` beside them, declared the x-axis of ``curriculum/*`` with
``wandb.define_metric`` (W&B's way for a custom step). TensorBoard, CSV and Comet get
``(tag, value, optimizer step)`` events through their ``write_events``.

Where they write: the reference loop passes the ds_config through
:func:`default_monitor_paths`, so an enabled monitor without an ``output_path`` writes under
``--run-dir/monitors/`` (``tensorboard/<job_name>``, ``csv/<job_name>``, ``wandb/``) instead of
DeepSpeed's default (the working directory) — one config serves many runs.

On a resume, :func:`resume_monitors` cuts DeepSpeed's monitors back to the checkpoint's step N:
each ``csv_monitor`` file is cut back atomically, keeping its one header, and the monitor is told
the file has its header (so DeepSpeed does not write a second one); the TensorBoard writer is
reopened with ``purge_step=N + 1``, TensorBoard's own way to hide the events a crashed run
logged past the step it restarts from. :meth:`Curriculum.load_checkpoint
<curriculum_ds.plugin.Curriculum.load_checkpoint>` calls it on global rank 0, so a user loop gets
it without a call of its own. The x-axis of a record is the optimizer step, except DeepSpeed's
own ``Train/Samples/*`` tags, whose x is the global sample count (cut at the checkpoint's
``engine.global_samples``). TensorBoard's purge is one step number for the whole event file: it
hides every event at x ≥ N + 1, so the ``Train/Samples/*`` curves from before the resume are
hidden too (their x are sample counts, mostly above N); the ``curriculum/*`` tags, whose x is the
step, are exact.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.records import method_quantities

if TYPE_CHECKING:
    from curriculum_ds.records.schema import EvalRow, HistoryRow, MetricsRow

__all__ = [
    "MONITORS_DIR",
    "PREFIX",
    "CurriculumMonitor",
    "bucket_events",
    "default_monitor_paths",
    "eval_events",
    "resume_monitors",
    "step_events",
    "truncate_csv",
]

PREFIX = "curriculum"
"""The first component of every tag written."""

Event = tuple[str, float, int]
"""A DeepSpeed monitor event: ``(tag, value, optimizer step)``."""

MONITORS_DIR = "monitors"
"""The folder of a run dir the monitors write to when their ``output_path`` is absent."""

_PATH_SECTIONS = {"tensorboard": "tensorboard", "csv_monitor": "csv"}
"""ds_config monitor sections with an ``output_path``, and their default folder under
:data:`MONITORS_DIR`."""


def default_monitor_paths(
    ds_config: Mapping[str, Any],
    run_dir: str | os.PathLike[str],
    environ: MutableMapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ds_config with each enabled monitor's output defaulted under ``run_dir/monitors/``.

    ``tensorboard`` and ``csv_monitor`` sections that are enabled and have no ``output_path``
    (absent or ``""``, DeepSpeed's default: the working directory) get
    ``RUN_DIR/monitors/tensorboard`` and ``RUN_DIR/monitors/csv`` (DeepSpeed adds its
    ``job_name`` folder below). An enabled ``wandb`` section has no ``output_path`` in
    DeepSpeed; W&B reads ``WANDB_DIR``, so it is set to ``RUN_DIR/monitors`` (created) when
    ``environ`` has none. An explicit ``output_path`` or ``WANDB_DIR`` is kept.

    Args:
        ds_config: the DeepSpeed part of the ds_config (parsed JSON). Not modified.
        run_dir: the run directory (``--run-dir``).
        environ: the environment to set ``WANDB_DIR`` in; default ``os.environ``.

    Returns:
        A copy of ``ds_config`` (the changed sections copied, the rest shared).
    """
    env = os.environ if environ is None else environ
    monitors = Path(run_dir) / MONITORS_DIR
    out = dict(ds_config)
    for section, folder in _PATH_SECTIONS.items():
        cfg = out.get(section)
        if isinstance(cfg, Mapping) and cfg.get("enabled") and not cfg.get("output_path"):
            out[section] = {**cfg, "output_path": str(monitors / folder)}
    wandb = out.get("wandb")
    if isinstance(wandb, Mapping) and wandb.get("enabled") and not env.get("WANDB_DIR"):
        monitors.mkdir(parents=True, exist_ok=True)  # W&B falls back to /tmp for a missing dir
        env["WANDB_DIR"] = str(monitors)
    return out


def step_events(record: MetricsRow) -> list[Event]:
    """The events of one ``metrics.jsonl`` row (what :meth:`Step.finish` returns).

    Args:
        record: a metrics row: ``step``, ``loss`` (None when skipped), ``lr``, ``tokens``,
            ``phase`` and ``streams`` (``{name: {"tokens", "loss"}}``, loss None allowed).

    Returns:
        ``curriculum/loss`` (when not None), ``curriculum/lr``, ``curriculum/tokens``,
        ``curriculum/phase``, ``curriculum/data_wait_s`` (when the row has it), then per stream
        ``curriculum/streams/<name>/loss`` (when not None) and ``.../tokens``; x =
        ``record["step"]``. Deterministic.
    """
    step = int(record["step"])
    events: list[Event] = []
    if (loss := record.get("loss")) is not None:
        events.append((f"{PREFIX}/loss", float(loss), step))
    events += [
        (f"{PREFIX}/lr", float(record["lr"]), step),
        (f"{PREFIX}/tokens", float(record["tokens"]), step),
        (f"{PREFIX}/phase", float(record["phase"]), step),
    ]
    if (wait := record.get("data_wait_s")) is not None:
        events.append((f"{PREFIX}/data_wait_s", float(wait), step))
    for name, stream in record.get("streams", {}).items():
        if (stream_loss := stream.get("loss")) is not None:
            events.append((f"{PREFIX}/streams/{name}/loss", float(stream_loss), step))
        events.append((f"{PREFIX}/streams/{name}/tokens", float(stream["tokens"]), step))
    return events


def bucket_events(record: HistoryRow) -> list[Event]:
    """The events of one ``curriculum_history.jsonl`` row (a re-weighting recompute).

    Args:
        record: ``step`` and ``weights`` (summing to 1): the bucket probabilities, or with
            ``unit: "streams"`` the weights of the phase's streams, named by ``streams`` in
            the same order.

    Returns:
        ``curriculum/bucket_probs/<i>`` for each bucket i, or ``curriculum/stream_weights/
        <name>`` for each stream of a streams row and the method's own quantities
        (:mod:`~curriculum_ds.records.method_quantities`: ``curriculum/<field>/<name>``,
        ``curriculum/epsilon_t``, ``curriculum/interaction/<j>/<i>``; a None value left
        out); x = ``record["step"]``. Deterministic.
    """
    step = int(record["step"])
    weights = record["weights"]
    if record.get("unit") == "streams":
        names = record.get("streams") or []
        per_stream: list[tuple[str, list[Any]]] = [("stream_weights", weights)]
        per_stream += method_quantities.per_stream(record)
        events = [
            (f"{PREFIX}/{tag}/{name}", float(w), step)
            for tag, values in per_stream
            for name, w in zip(names, values, strict=True)
            if w is not None
        ]
        events += [(f"{PREFIX}/{tag}", v, step) for tag, v in method_quantities.scalars(record)]
        a = method_quantities.matrix(record) or []
        events += [
            (f"{PREFIX}/interaction/{names[j]}/{names[i]}", v, step)
            for j, row in enumerate(a)
            for i, v in enumerate(row)
        ]
        return events
    return [(f"{PREFIX}/bucket_probs/{i}", float(p), step) for i, p in enumerate(weights)]


def eval_events(row: EvalRow) -> list[Event]:
    """The events of one ``eval.jsonl`` row.

    Args:
        row: ``step`` (the optimizer step evaluated after), ``loss`` (all eval tokens, nats)
            and ``streams`` (``{name: {"loss", "tokens"}}``, a QA stream's with
            ``exact_match``); a None value is left out.

    Returns:
        ``curriculum/eval/loss`` and ``curriculum/eval/<name>/loss`` per stream, and
        ``curriculum/eval/<name>/exact_match`` per QA stream, x = ``row["step"]``.
    """
    step = int(row["step"])
    events: list[Event] = []
    if (loss := row.get("loss")) is not None:
        events.append((f"{PREFIX}/eval/loss", float(loss), step))
    for name, stream in row.get("streams", {}).items():
        if (stream_loss := stream.get("loss")) is not None:
            events.append((f"{PREFIX}/eval/{name}/loss", float(stream_loss), step))
        if (exact := stream.get("exact_match")) is not None:
            events.append((f"{PREFIX}/eval/{name}/exact_match", float(exact), step))
    return events


class CurriculumMonitor:
    """Writes curriculum events through a DeepSpeed ``MonitorMaster`` (on global rank 0).

    Built by :meth:`for_engine`; the curriculum writes every step, recompute and evaluation
    itself (``Curriculum.monitor``: ``Step.finish`` and ``Curriculum.evaluate``).

    Args:
        monitor: ``engine.monitor``, with its writers built (rank 0).
    """

    def __init__(self, monitor: Any) -> None:
        self.monitor = monitor
        self._wandb_ready = False

    @classmethod
    def for_engine(cls, engine: Any) -> CurriculumMonitor | None:
        """The writer for ``engine.monitor``, or None.

        None when the ds_config enables no monitor, or on a rank other than global rank 0
        (where DeepSpeed builds no writer).
        """
        monitor = getattr(engine, "monitor", None)
        if monitor is None or not getattr(monitor, "enabled", False):
            return None
        writers = ("tb_monitor", "wandb_monitor", "csv_monitor", "comet_monitor")
        if all(getattr(monitor, w, None) is None for w in writers):
            return None
        return cls(monitor)

    def write_step(self, record: MetricsRow, history: HistoryRow | None = None) -> None:
        """Write a metrics row (:func:`step_events`) and its step's recompute, if any."""
        self.write(step_events(record))
        if history is not None:
            self.write_buckets(history)

    def write_buckets(self, record: HistoryRow) -> None:
        """Write a re-weighting recompute (:func:`bucket_events`)."""
        self.write(bucket_events(record))

    def write_eval(self, row: EvalRow) -> None:
        """Write an ``eval.jsonl`` row (:func:`eval_events`)."""
        self.write(eval_events(row))

    def write(self, events: list[Event]) -> None:
        """Write ``(tag, value, optimizer step)`` events to every enabled writer."""
        if not events:
            return
        monitor = self.monitor
        for writer in (monitor.tb_monitor, monitor.csv_monitor, monitor.comet_monitor):
            if writer is not None:
                writer.write_events(events)
        if monitor.wandb_monitor is not None:
            self._write_wandb(events)

    def _write_wandb(self, events: list[Event]) -> None:
        """One ``wandb.log`` row per step, x-axis ``curriculum/step`` (see the module doc)."""
        import wandb

        if not self._wandb_ready:
            wandb.define_metric(f"{PREFIX}/step")
            wandb.define_metric(f"{PREFIX}/*", step_metric=f"{PREFIX}/step")
            self._wandb_ready = True
        rows: dict[int, dict[str, float]] = {}
        for tag, value, step in events:
            rows.setdefault(step, {f"{PREFIX}/step": step})[tag] = value
        for row in rows.values():
            self.monitor.wandb_monitor.log(row)


_SAMPLES_PREFIX = "Train_Samples_"
"""DeepSpeed's own CSV monitor files whose x-axis is the global sample count."""


def truncate_csv(path: Path, max_x: float) -> bool:
    """Keep the header and the rows of a ``step,value`` CSV file whose x is ≤ ``max_x``.

    The header is the first row whose first cell is not a number (DeepSpeed writes ``step,<tag>``
    whenever its monitor opens a file it has not written in this process, so a resumed run used
    to add a second one); later non-numeric rows are dropped. Atomic rewrite.

    Args:
        path: a ``csv_monitor`` file.
        max_x: the last x (the step, or the sample count for ``Train_Samples_*``) to keep.

    Returns:
        Whether the file has a header now.
    """
    header: list[str] | None = None
    kept: list[list[str]] = []
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.reader(f):
            if not row:
                continue
            try:
                x = float(row[0])
            except ValueError:
                if header is None and not kept:
                    header = row
                continue
            if x <= max_x:
                kept.append(row)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if header is not None:
            writer.writerow(header)
        writer.writerows(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return header is not None


def resume_monitors(monitor: Any, step: int, samples: int) -> None:
    """Cut DeepSpeed's CSV and TensorBoard monitors back to a resumed checkpoint.

    Args:
        monitor: ``engine.monitor`` (a ``deepspeed.monitor.monitor.MonitorMaster``) with its
            writers built (global rank 0); None or one without writers is a no-op.
        step: the checkpoint's optimizer step.
        samples: the checkpoint's global sample count (``engine.global_samples``): the cut of
            DeepSpeed's own ``Train/Samples/*`` CSV files.
    """
    if monitor is None or not getattr(monitor, "enabled", False):
        return
    csv_monitor = getattr(monitor, "csv_monitor", None)
    log_dir = getattr(csv_monitor, "log_dir", None)
    if csv_monitor is not None and log_dir is not None and Path(log_dir).is_dir():
        for path in sorted(Path(log_dir).glob("*.csv")):
            cut = samples if path.stem.startswith(_SAMPLES_PREFIX) else step
            if truncate_csv(path, cut) and path.stem not in csv_monitor.filenames:
                csv_monitor.filenames.append(path.stem)  # its header is there: not again
    tb = getattr(monitor, "tb_monitor", None)
    writer = getattr(tb, "summary_writer", None)
    if tb is not None and writer is not None:
        from torch.utils.tensorboard import SummaryWriter

        log_dir = writer.log_dir
        writer.close()
        tb.summary_writer = SummaryWriter(log_dir=log_dir, purge_step=step + 1)
