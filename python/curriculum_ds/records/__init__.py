"""What a run writes about itself: the rows of its run directory and where else they go.

Every row a run writes has one typed shape, defined once in :mod:`~curriculum_ds.records.schema`
and read by every writer and reader (the JSONL files, DeepSpeed's monitors, the log lines, the
``report`` command). Nothing here imports torch or DeepSpeed at import time.

Modules, one concern each: ``schema`` (the rows: :class:`~curriculum_ds.records.schema.
MetricsRow`, ``EvalRow``, ``HistoryRow``, ``TraceRow``, and :func:`~curriculum_ds.records.schema.
metrics_row`, the one function that builds a step's metrics row), ``jsonl`` (the run directory's
append-only JSONL files: :class:`~curriculum_ds.records.jsonl.RunLog`, ``read_jsonl``, and
their cut back to a resumed checkpoint's step, one row per step: ``truncate_records``,
``last_row_per_step``), ``monitors`` (the rows as events of DeepSpeed's ``tensorboard``,
``wandb`` and ``csv_monitor``: :class:`~curriculum_ds.records.monitors.CurriculumMonitor`, and
their cut back on a resume: ``resume_monitors``), ``method_quantities`` (a mixing method's own
quantities in a history row, named once for the monitors, ``curve`` and ``report``), ``progress``
(for humans: the start banner and one log line per interval, :class:`~curriculum_ds.records.
progress.StepLogger`).
"""
