"""Saved state: what a checkpoint holds, how it is read, checked, loaded, converted and pruned.

A resume reads a tag once (:func:`~curriculum_ds.checkpoint.files.open_tag`, one
:class:`~curriculum_ds.checkpoint.files.SavedTag`), checks the resume rules once
(:func:`~curriculum_ds.checkpoint.rules.check_resume`, one
:class:`~curriculum_ds.checkpoint.rules.ResumePlan`) and hands both on: DeepSpeed's load
(:func:`~curriculum_ds.checkpoint.engine_io.load`) and the curriculum take them as they are.

Modules, one concern each:

* ``state``: the schema, :class:`CurriculumState` (``client_state["curriculum"]`` of a DeepSpeed
  checkpoint), a pydantic model of one :class:`~curriculum_ds.core.position.Position`, the
  loader's :class:`~curriculum_ds.core.loader_state.LoaderState` and the re-weighting's state
  (:data:`~curriculum_ds.dynamic.state.DynamicState`), refusing a malformed one in one line
  naming the key;
* ``rules``: the resume rules (:func:`check_resume` → :class:`ResumePlan`, and the
  ``validate --resume-from`` verdict), pure;
* ``safe_load``: every checkpoint file unpickled by torch's ``weights_only`` loader with one
  allow-list, and each file DeepSpeed will open checked that way before it does;
* ``files``: finding and reading a tag without DeepSpeed (``latest``, ``--resume``,
  :func:`open_tag`);
* ``engine_io``: DeepSpeed save/load of a tag with the curriculum inside, and the ``latest``
  protocol;
* ``universal``: a ZeRO checkpoint of another data-parallel world size, via DeepSpeed's universal
  format;
* ``retention``: keeping the newest N tags (``--keep-last``), safely;
* ``export``: a tag's model as a Hugging Face folder or a plain state dict (``curriculum-ds
  export``, ``--export-final``; the CLI keeps only the command).

Nothing is re-exported here: import from the module (``engine_io`` and ``universal`` import
``torch.distributed``; ``state``, ``rules`` and ``files`` do not).
"""
