"""The Hugging Face Trainer on the curriculum: :class:`CurriculumTrainer` (docs/hf-trainer.md).

``CurriculumTrainer(model=..., args=TrainingArguments(deepspeed="ds.json", ...))`` trains from the
``curriculum`` section of that ds_config through the plugin (:mod:`curriculum_ds.plugin`): the
same global batches, token-weighted loss, phase swaps, re-weighting, evaluation, records and
checkpoint state as the reference loop. Importing this package imports ``transformers``;
``import curriculum_ds`` does not.

Modules, one concern each: ``arguments`` (the checks of ``TrainingArguments`` and the ds_config
before anything is built, the run's step bound and the HF scheduler's horizon), ``feed`` (the
micro-batch dicts ``get_train_dataloader`` hands the Trainer, drawn step by step from the
curriculum), ``callbacks`` (records, ``curriculum/...`` logs, evaluation, stop and the
curriculum state written into ``checkpoint-N/``), ``checkpoint`` (that state's file and which
checkpoint a resume continues from), ``trainer`` (``CurriculumTrainer``, the subclass that ties
them to the Trainer's extension points).
"""

from curriculum_ds.hf.trainer import CurriculumTrainer

__all__ = ["CurriculumTrainer"]
