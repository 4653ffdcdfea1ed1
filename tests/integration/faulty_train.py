"""The reference loop with fault injection and a state dump, for the integration tests only.

Run by the launcher as ``--module faulty_train`` (tests/ on PYTHONPATH) with the arguments of
``curriculum_ds.train`` plus:

* ``--kill-after-step N``: SIGKILL every rank once step N is finished and logged, before its
  checkpoint (if any) is written: at the next ``save_checkpoint`` or the next draw.
* ``--kill-during-save N``: SIGKILL every rank after DeepSpeed wrote the tag of step N, before
  ``latest`` moves to it.
* ``--kill-during-prune N``: SIGKILL rank 0 (the launcher then stops the others) while
  ``--keep-last`` deletes a tag after the save of step N: the tag is already renamed to its
  trash name and part of it is removed.
* ``--nan-loss RANK:STEP[,STEP...]``: on dp rank RANK only, the logits of the first micro-batch
  of each listed step are multiplied by NaN before ``step.backward`` (a NaN loss on one rank).
* ``--sigterm-at RANK:STEP``: dp rank RANK sends itself SIGTERM while step STEP is in progress
  (before its first micro-batch goes backward), and a second SIGTERM while the checkpoint that
  the preemption writes is being published (``latest`` not yet moved).
* ``--truncate-shard STEP:PATH``: once step STEP is finished, rank 0 truncates the shard file
  PATH to 1000 bytes in place (``truncate -s 1000``: a shard changed under the run).
* ``--dump-state DIR``: when the run ends, write the full parameters (gathered under ZeRO-3) to
  ``DIR/params.pt`` and each rank's dynamic re-weighting state to ``DIR/rank{r}_dynamic.pt``;
  for a HF model also ``DIR/logits.pt``: the engine's logits on a fixed batch
  (``{"input_ids", "logits"}``, fp32, from rank 0; every rank runs the forward under ZeRO-3).
* ``--dump-sample-losses FILE``: rank 0 appends, after every finished step, ``{"step",
  "losses"}`` to the JSONL ``FILE``: ``Step.sample_losses`` (each sample's token-mean loss in
  global batch order, NaN without loss-bearing tokens; gathered when dynamic re-weighting is on).
* ``--dump-history DIR``: every rank appends each recompute's history row it computed (the row
  ``step.finish()`` hands back, on every rank) to ``DIR/rank{r}_history.jsonl``: the weights each
  rank decided at every recompute, where ``curriculum_history.jsonl`` has rank 0's.

The product loop has none of these: they are installed here by wrapping public methods.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

import curriculum_ds.plugin as plugin
from curriculum_ds import train
from curriculum_ds.checkpoint import engine_io
from curriculum_ds.plugin import Curriculum, Step

_captured: dict[str, Any] = {}


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def install(kill_after_step: int | None, kill_during_save: int | None) -> None:
    initialize = plugin.initialize

    def capturing_initialize(**kwargs: Any) -> Any:
        engine, curriculum = initialize(**kwargs)
        _captured.update(engine=engine, curriculum=curriculum)
        return engine, curriculum

    plugin.initialize = capturing_initialize  # curriculum_ds.initialize resolves to it

    if kill_after_step is not None:
        save, draw = Curriculum.save_checkpoint, Curriculum.__next__

        def save_checkpoint(self: Curriculum, *args: Any, **kwargs: Any) -> Any:
            if self.global_step == kill_after_step:
                _kill()
            return save(self, *args, **kwargs)

        def next_step(self: Curriculum) -> Any:
            if self.global_step == kill_after_step:
                _kill()
            return draw(self)

        Curriculum.save_checkpoint = save_checkpoint  # type: ignore[method-assign]
        Curriculum.__next__ = next_step  # type: ignore[method-assign]

    if kill_during_save is not None:
        publish = engine_io.publish_latest

        def publish_latest(save_dir: Path, tag: str) -> None:
            if tag == f"global_step{kill_during_save}":
                _kill()  # the tag exists but `latest` never points at it
            publish(save_dir, tag)

        engine_io.publish_latest = publish_latest


def install_kill_during_prune(step: int) -> None:
    import curriculum_ds.checkpoint.retention as retention

    remove = retention._remove_trash

    def remove_trash(path: Path) -> None:
        curriculum = _captured.get("curriculum")
        if curriculum is not None and curriculum.global_step == step:
            files = sorted(p for p in path.rglob("*") if p.is_file())
            if files:
                files[0].unlink()  # half-deleted trash
            _kill()
        remove(path)

    retention._remove_trash = remove_trash  # type: ignore[assignment]


def install_nan_loss(spec: str) -> None:
    """``RANK:STEP,STEP``: NaN logits in the first micro-batch of those steps on that rank."""
    import torch.distributed as dist

    rank_text, steps_text = spec.split(":")
    rank, steps = int(rank_text), {int(s) for s in steps_text.split(",")}
    backward = Step.backward

    def nan_backward(self: Step, logits: Any, mb: Any, **kwargs: Any) -> Any:
        first = mb is self.micro_batches[0]
        if first and self.global_step in steps and dist.get_rank() == rank:
            tensor = getattr(logits, "logits", logits)
            logits = tensor * float("nan")  # still in the graph: the loss and gradients are NaN
        return backward(self, logits, mb, **kwargs)

    Step.backward = nan_backward  # type: ignore[method-assign]


def install_truncate_shard(spec: str) -> None:
    """``STEP:PATH``: truncate the shard file PATH to 1000 bytes once step STEP is finished."""
    import torch.distributed as dist

    step_text, path = spec.split(":", 1)
    step = int(step_text)
    finish = Step.finish

    def finish_and_truncate(self: Step) -> dict[str, Any]:
        record = finish(self)
        if self.global_step == step and dist.get_rank() == 0:
            os.truncate(path, 1000)
        return record

    Step.finish = finish_and_truncate  # type: ignore[method-assign]


def install_sigterm(spec: str) -> None:
    """``RANK:STEP``: SIGTERM to this process mid-step, and again during the preemption save."""
    import torch.distributed as dist

    rank_text, step_text = spec.split(":")
    rank, step = int(rank_text), int(step_text)
    backward, publish = Step.backward, engine_io.publish_latest

    def sigterm_backward(self: Step, logits: Any, mb: Any, **kwargs: Any) -> Any:
        if mb is self.micro_batches[0] and self.global_step == step and dist.get_rank() == rank:
            os.kill(os.getpid(), signal.SIGTERM)
        return backward(self, logits, mb, **kwargs)

    def publish_latest(save_dir: Path, tag: str) -> None:
        if tag == f"global_step{step}" and dist.get_rank() == rank:
            os.kill(os.getpid(), signal.SIGTERM)  # a second one, during the save
        publish(save_dir, tag)

    Step.backward = sigterm_backward  # type: ignore[method-assign]
    engine_io.publish_latest = publish_latest


def dump_logits(engine: Any, out: Path) -> None:
    """The engine's logits on a fixed batch (every rank runs the forward; rank 0 writes)."""
    import torch
    import torch.distributed as dist

    config = getattr(engine.module, "config", None)
    if config is None or not hasattr(config, "vocab_size"):
        return
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, int(config.vocab_size), (2, 16), generator=gen)
    engine.eval()
    with torch.no_grad():
        output = engine(input_ids.to(engine.device))
    logits = getattr(output, "logits", output)
    if dist.get_rank() == 0:
        torch.save(
            {"input_ids": input_ids, "logits": logits.detach().float().cpu()}, out / "logits.pt"
        )


def dump_state(out: Path) -> None:
    import deepspeed
    import torch
    import torch.distributed as dist

    engine, curriculum = _captured["engine"], _captured["curriculum"]
    out.mkdir(parents=True, exist_ok=True)
    named = list(engine.module.named_parameters())
    zero3 = engine.zero_optimization_stage() == 3
    with deepspeed.zero.GatheredParameters([p for _, p in named], enabled=zero3):
        if dist.get_rank() == 0:
            torch.save({n: p.detach().float().cpu().clone() for n, p in named}, out / "params.pt")
    dump_logits(engine, out)
    if curriculum.dynamic is not None:
        dynamic = curriculum.dynamic
        window = getattr(dynamic, "window", None)  # a method without a window: its state only
        torch.save(
            dynamic.state().to_dict()
            | ({} if window is None else {"window_values": window.values()}),
            out / f"rank{dist.get_rank()}_dynamic.pt",
        )
    dist.barrier()


def install_dump_sample_losses(out: Path) -> None:
    import json

    import torch.distributed as dist

    from curriculum_ds.plugin.step import Step

    finish = Step.finish

    def finish_and_dump(self: Step) -> dict[str, Any]:
        record = finish(self)
        if dist.get_rank() == 0:
            losses = None if self.sample_losses is None else self.sample_losses.tolist()
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps({"step": self.global_step, "losses": losses}) + "\n")
        return record

    Step.finish = finish_and_dump  # type: ignore[method-assign]


def install_dump_history(out: Path) -> None:
    """Every rank appends each recompute's history row it computed to ``out/rank{R}_history.jsonl``
    (rank 0 alone writes ``curriculum_history.jsonl``: this shows what every rank decided)."""
    import json

    import torch.distributed as dist

    from curriculum_ds.plugin.step import Step

    finish = Step.finish

    def finish_and_dump(self: Step) -> dict[str, Any]:
        record = finish(self)
        row = getattr(record, "history", None)
        if row is not None:
            out.mkdir(parents=True, exist_ok=True)
            with open(out / f"rank{dist.get_rank()}_history.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
        return record

    Step.finish = finish_and_dump  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--kill-after-step", type=int)
    p.add_argument("--kill-during-save", type=int)
    p.add_argument("--kill-during-prune", type=int)
    p.add_argument("--dump-state", type=Path)
    p.add_argument("--dump-sample-losses", type=Path)
    p.add_argument("--dump-history", type=Path)
    p.add_argument("--nan-loss")
    p.add_argument("--sigterm-at")
    p.add_argument("--truncate-shard")
    faults, rest = p.parse_known_args(sys.argv[1:] if argv is None else argv)
    install(faults.kill_after_step, faults.kill_during_save)
    if faults.sigterm_at is not None:
        install_sigterm(faults.sigterm_at)
    if faults.nan_loss is not None:
        install_nan_loss(faults.nan_loss)
    if faults.kill_during_prune is not None:
        install_kill_during_prune(faults.kill_during_prune)
    if faults.dump_sample_losses is not None:
        install_dump_sample_losses(faults.dump_sample_losses)
    if faults.dump_history is not None:
        install_dump_history(faults.dump_history)
    if faults.truncate_shard is not None:
        install_truncate_shard(faults.truncate_shard)
    code = train.main(rest)
    if code == 0 and faults.dump_state is not None:
        dump_state(faults.dump_state)
    train.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
