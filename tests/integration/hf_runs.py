"""Several ``CurriculumTrainer`` (and reference-loop) runs in ONE launched job, for the tests only.

Run by the launcher as ``--module hf_runs --plan FILE`` (tests/ on PYTHONPATH). ``FILE`` is a
JSON list of runs, one after the other in the same 2-rank processes (the launcher and the
torch/DeepSpeed/transformers imports are paid once; the gloo group is made once):

- ``{"kind": "ref", "argv": [...]}``: ``curriculum_ds.train.main(argv)``, the reference loop;
- ``{"kind": "doc", "script": PATH, "argv": [...]}``: a script (the one printed in
  docs/hf-trainer.md) run as ``__main__`` with ``sys.argv = [PATH, *argv]``;
- ``{"kind": "hf", "ds": PATH, "out": DIR, "model": DIR, "mb": int, "gas": int, ...}``: a
  ``CurriculumTrainer`` run with AdamW at a constant lr from the ds_config, and optionally
  ``"save_steps"``, ``"resume": true``, ``"trace": true``, ``"grads": PATH`` (the first update's
  gradients, this rank's partition, saved to ``PATH.rank{R}``), ``"kill_after_save": N`` (SIGKILL of
  every rank once ``checkpoint-N`` and its curriculum state are written: the job ends there),
  ``"sigterm_at": [RANK, STEP]`` (that rank sends itself SIGTERM while step STEP is in progress,
  before its first micro-batch goes backward, as a scheduler signals a rank), ``"nan_loss": [RANK,
  [STEP, ...]]`` (NaN logits in that rank's first micro-batch of those steps: a NaN loss on one
  rank), ``"max_consecutive_nonfinite": N`` (set in the ds_config's section) and ``"may_fail":
  true`` with ``"error": PATH`` (the exception's message goes there), ``"save_model": true``
  (``trainer.save_model(OUT/saved)`` after ``train()``). Every run also checks that
  ``CurriculumTrainer`` left the caller's ``TrainingArguments`` as they were.

Each rank's exceptions outside ``may_fail`` runs end the job with exit code 1.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import runpy
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def _faults(spec: dict[str, Any]) -> Any:
    """``Step.backward`` with the run's SIGTERM / NaN injections (the original if none)."""
    from curriculum_ds.plugin.step import Step

    backward = Step.backward
    sigterm, nan = spec.get("sigterm_at"), spec.get("nan_loss")

    def faulty_backward(self: Step, logits: Any, mb: Any, **kwargs: Any) -> Any:
        first, rank = mb is self.micro_batches[0], dist.get_rank()
        if sigterm and first and rank == sigterm[0] and self.global_step == sigterm[1]:
            os.kill(os.getpid(), signal.SIGTERM)
        if nan and first and rank == nan[0] and self.global_step in nan[1]:
            logits = getattr(logits, "logits", logits) * float("nan")  # still in the graph
        return backward(self, logits, mb, **kwargs)

    return faulty_backward if sigterm or nan else backward


def _hf_run(spec: dict[str, Any]) -> None:
    from transformers import GPT2LMHeadModel, TrainerCallback, TrainingArguments
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    from curriculum_ds.hf import CurriculumTrainer
    from curriculum_ds.plugin.step import Step

    ds: Any = spec["ds"]
    if spec.get("max_consecutive_nonfinite"):
        ds = json.loads(Path(ds).read_text())
        ds["curriculum"]["max_consecutive_nonfinite"] = spec["max_consecutive_nonfinite"]

    args = TrainingArguments(  # before the model: HF's ZeRO-3 set-up reads it in from_pretrained
        output_dir=spec["out"],
        deepspeed=ds,
        per_device_train_batch_size=spec["mb"],
        gradient_accumulation_steps=spec["gas"],
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        save_strategy="steps" if spec.get("save_steps") else "no",
        save_steps=spec.get("save_steps") or 500,
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
    )
    model = GPT2LMHeadModel.from_pretrained(spec["model"])
    trainer = CurriculumTrainer(model=model, args=args, trace_samples=spec.get("trace", False))
    # the caller's arguments are left as they were: the Trainer works on a copy
    assert trainer.args is not args, "CurriculumTrainer did not copy TrainingArguments"
    assert (args.max_steps, args.ignore_data_skip) == (-1, False), (args.max_steps, args)

    class Probe(TrainerCallback):
        """The first update's gradients; the SIGKILL after a save (after the state is written)."""

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            if spec.get("grads"):
                engine = trainer.model_wrapped
                inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
                step, path = inner.step, f"{spec['grads']}.rank{dist.get_rank()}"

                def recording_step(*a: Any, **k: Any) -> Any:
                    if not Path(path).exists():
                        grads = [
                            p.grad.detach().flatten().double()
                            for g in inner.param_groups
                            for p in g["params"]
                            if p.grad is not None
                        ]
                        torch.save(torch.cat(grads), path)
                    return step(*a, **k)

                inner.step = recording_step

        def on_train_end(self, args: Any, state: Any, *_: Any, **__: Any) -> None:
            if dist.get_rank() == 0:  # HF's logs, as the console and TensorBoard got them
                Path(spec["out"], "log_history.json").write_text(json.dumps(state.log_history))

        def on_save(self, args: Any, state: Any, *_: Any, **__: Any) -> None:
            if state.global_step == spec.get("kill_after_save"):
                dist.barrier()  # rank 0 wrote the curriculum state
                os.kill(os.getpid(), signal.SIGKILL)

    trainer.add_callback(Probe())  # after CurriculumTrainer's own callback
    backward, Step.backward = Step.backward, _faults(spec)  # type: ignore[method-assign]
    try:
        trainer.train(resume_from_checkpoint=True if spec.get("resume") else None)
        if spec.get("save_model"):  # collective: under ZeRO-3 without gathering, a DS tag
            trainer.save_model(str(Path(spec["out"], "saved")))
    finally:
        Step.backward = backward  # type: ignore[method-assign]
        if trainer.feed.curriculum is not None:
            trainer.feed.curriculum.close()  # a failed run's SIGTERM handler goes too
        trainer.feed.curriculum = None  # the run is over: its streams and engine can go
        unset_hf_deepspeed_config()  # the next run's from_pretrained must not see this ZeRO stage
        gc.collect()


def _run(spec: dict[str, Any]) -> None:
    if spec["kind"] == "ref":
        from curriculum_ds import train

        code = train.main(spec["argv"])
        if code != 0:
            raise SystemExit(f"hf_runs: reference run {spec['argv']} exited {code}")
    elif spec["kind"] == "doc":
        saved = sys.argv
        sys.argv = [spec["script"], *spec["argv"]]
        try:
            runpy.run_path(spec["script"], run_name="__main__")
        finally:
            sys.argv = saved
            from transformers.integrations.deepspeed import unset_hf_deepspeed_config

            unset_hf_deepspeed_config()
    else:
        _hf_run(spec)


def main() -> int:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--plan", type=Path, required=True)
    args, _ = p.parse_known_args()  # the launcher's --deepspeed_config and --local_rank
    for spec in json.loads(args.plan.read_text()):
        try:
            _run(spec)
        except Exception as exc:
            if not spec.get("may_fail"):
                traceback.print_exc()
                return 1
            Path(spec["error"]).write_text(f"{type(exc).__name__}: {exc}")
        sys.stdout.flush()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
