"""The curriculum logic under the API: pure, deterministic, no engine and no ranks.

Module map:

* ``schedule.py``: the phase schedule in exact units (``Progress``, phase boundaries);
* ``position.py``: the run's four counters as one frozen ``Position``;
* ``loader.py``: ``PhaseLoader``, a phase's deterministic global batches (the deficit blend,
  per-stream samplers, moving mixtures); ``PhaseLoader.apply`` is the one place a re-weighting's
  ``MixtureUpdate`` reaches it;
* ``loader_state.py``: ``LoaderState``, the loader's typed state (``PhaseLoader.state()`` /
  ``.restore()``), checked against its phase (``LoaderState.fit``) before the loader takes it;
* ``saved.py``: the frozen pydantic base of every saved state and its one-line refusals;
* ``sample_reader.py``: ``SampleReader``, the phase's streams read by ``(stream, sample)``;
* ``microbatch.py``: ``MicroBatch`` and ``collate`` (right-padding, loss masks);
* ``documents.py``: document masking of packed rows (``position_ids`` restarting per document,
  the block-diagonal causal mask);
* ``loss.py``: the one owner of the token-weighted loss normalisation;
* ``exact_match.py``: a QA record's teacher-forced exact match (every answer token the argmax);
* ``lr_schedule.py``: the learning rate as a function of progress.

Nothing here imports the plugin, the engine or ``dynamic/``'s methods (the loader reads only
``dynamic.update``'s two value types).
"""
