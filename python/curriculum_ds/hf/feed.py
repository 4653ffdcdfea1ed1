"""The batches the Trainer iterates: this rank's micro-batches, drawn one step at a time.

``CurriculumTrainer.get_train_dataloader`` (the Trainer's extension point for its training
data) returns a :class:`CurriculumFeed`. Iterating it draws the plugin's next
:class:`~curriculum_ds.plugin.step.Step` (every rank the same global batch, each its own slice)
when the Trainer asks for the first micro-batch of an optimizer step, and yields that step's
micro-batches as dicts: ``input_ids`` and ``attention_mask`` (what HF counts tokens and flops
from; the tensors are already on the engine's device) and the plugin's
:class:`~curriculum_ds.core.loader.MicroBatch` under :data:`MICRO_BATCH_KEY`. There is no ``labels``
key, so HF counts no ``num_items_in_batch``: the loss normaliser is the plugin's. The feed has no
length: the Trainer runs up to its ``max_steps`` bound and the callback stops it at
``max_duration``. It is not wrapped by ``accelerate.prepare`` (each rank already holds only its
slice) and never skipped into on a resume (``ignore_data_skip``): the curriculum's restored
counters continue the uninterrupted run's batches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import StepError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from curriculum_ds.plugin.curriculum import Curriculum
    from curriculum_ds.plugin.step import Step

__all__ = ["MICRO_BATCH_KEY", "CurriculumFeed"]

MICRO_BATCH_KEY = "curriculum_micro_batch"
"""The key of a batch dict holding the plugin's ``MicroBatch``."""


class CurriculumFeed:
    """An iterable of micro-batch dicts over the curriculum's steps (the Trainer's dataloader).

    Args:
        build: builds the :class:`~curriculum_ds.Curriculum` once the engine exists (called by
            :meth:`start`, from the Trainer's ``on_train_begin``).

    Attributes:
        curriculum: the curriculum, None before :meth:`start`.
        step: the step whose micro-batches are being yielded (drawn, maybe not finished).
    """

    def __init__(self, build: Callable[[], Curriculum]) -> None:
        self._build = build
        self.curriculum: Curriculum | None = None
        self.step: Step | None = None

    def start(self) -> Curriculum:
        """Build the curriculum (the engine and any resumed state are ready); once."""
        if self.curriculum is None:
            self.curriculum = self._build()
        return self.curriculum

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.curriculum is None:
            raise StepError("CurriculumFeed: iterated before the Trainer started training")
        for step in self.curriculum:  # one optimizer step each, until max_duration
            self.step = step
            for mb in step.micro_batches:
                yield {
                    "input_ids": mb.input_ids,
                    "attention_mask": mb.attention_mask,
                    MICRO_BATCH_KEY: mb,
                }
