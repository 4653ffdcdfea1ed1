"""The commands behind the ``curriculum-ds`` CLI: back-ends a user reaches through ``cli/``.

Modules, one concern each:
- ``launch``: builds and runs the ``deepspeed`` command, forwarding signals to the ranks.
- ``demo``: the demo's corpus, data, config and run, end to end.
- ``facts``: ``demo --facts``: synthetic biographies and held-out questions (the facts
  experiments).
- ``corpus``: the standard library's docstrings and sources as a corpus (no download).
- ``schedule_table``: the phase table ``validate`` prints.
- ``report``: ``curriculum-ds report``, one picture and a per-phase summary of a run.
- ``curve``: ``curriculum-ds curve``, the bucket (or stream) weights over steps (table and PNG).
- ``stream_weights``: the stream weights of ``dynamic.unit: "streams"``, for ``curve`` and
  ``report``.
- ``export``: the old place of :mod:`curriculum_ds.checkpoint.export` (deprecated alias).
- ``score``: ``curriculum-ds score``, each sample's loss under a reference model as a column.
- ``kernel_bench``: ``curriculum-ds bench``, the Rust kernels against numpy and torch.
"""
