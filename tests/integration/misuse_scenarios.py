"""Misuse of the public API in one process (a world of one), recorded for test_api_misuse.py.

``python misuse_scenarios.py --config ds.json --edited ds_edited.json --work DIR --out R.json``
trains ``user_loop_script.TinyLM`` with ``curriculum_ds.initialize`` and, on the way, misuses
the API; for each misuse it records what was raised (class, its bases, the message), whether any
file under ``DIR`` changed, and whether the curriculum's counters or the engine's parameters and
gradients moved; then it shows that the loop carries on. ``ds_edited.json`` is ``ds.json`` with
its first phase edited. Scenarios (keys of the JSON written to ``--out``):

* ``finish_early``: ``step.finish()`` after 1 of the 2 micro-batches (then also ``next``,
  ``state_dict``, ``save_checkpoint`` and ``evaluate`` mid-step; ``evaluate`` without
  ``curriculum.eval`` after the step);
* ``backward_twice``: a micro-batch sent backward a second time;
* ``past_end``: ``next`` after the schedule ended, and a second ``for step in curriculum``;
* ``edited_phase``: ``load_checkpoint`` of a checkpoint whose phase 0 is complete, under the
  edited config, into an engine built with ``deepspeed.initialize(config=
  curriculum_ds.deepspeed_config(...))`` + ``curriculum_ds.attach``;
* ``resume_controls``: the same checkpoint under the original config (``load_checkpoint``), and
  the README's manual ``engine.save_checkpoint(client_state={"curriculum":
  curriculum.state_dict()})`` / ``curriculum.load_state_dict`` round trip.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deepspeed
import torch
from user_loop_script import build_model

import curriculum_ds


def attempt(fn: Callable[[], Any]) -> dict[str, Any]:
    try:
        fn()
    except Exception as exc:
        return {
            "type": type(exc).__name__,
            "bases": [c.__name__ for c in type(exc).__mro__],
            "message": str(exc),
        }
    return {"type": None}


def snapshot(root: Path) -> dict[str, list[int]]:
    return {
        str(p.relative_to(root)): [p.stat().st_size, p.stat().st_mtime_ns]
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def counters(curriculum: Any) -> list[Any]:
    return [
        curriculum.global_step,
        curriculum.consumed_tokens,
        curriculum.consumed_samples,
        str(curriculum.progress),
        curriculum.phase_idx,
    ]


def params(engine: Any) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in engine.module.named_parameters()}


def grads(engine: Any) -> dict[str, torch.Tensor | None]:
    return {
        n: None if p.grad is None else p.grad.detach().clone()
        for n, p in engine.module.named_parameters()
    }


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        (a[k] is None and b[k] is None)
        or (a[k] is not None and b[k] is not None and torch.equal(a[k], b[k]))
        for k in a
    )


def backward(engine: Any, step: Any, mb: Any) -> None:
    step.backward(engine(mb.input_ids, attention_mask=mb.attention_mask), mb)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--edited", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    work, ckpt, manual = args.work, args.work / "checkpoints", args.work / "manual"
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}

    engine, curriculum = curriculum_ds.initialize(
        model=build_model(args.config), config=args.config
    )
    out["world_size"] = torch.distributed.get_world_size()
    out["num_micro_batches"] = curriculum.gradient_accumulation_steps

    # finish() before every micro-batch went backward (and more mid-step calls)
    step = next(curriculum)
    backward(engine, step, step.micro_batches[0])
    files, state = snapshot(work), counters(curriculum)
    out["finish_early"] = {
        "finish": attempt(step.finish),
        "next": attempt(lambda: next(curriculum)),
        "state_dict": attempt(curriculum.state_dict),
        "save_checkpoint": attempt(lambda: curriculum.save_checkpoint(ckpt)),
        "evaluate": attempt(curriculum.evaluate),
        "files_unchanged": snapshot(work) == files,
        "counters_unchanged": counters(curriculum) == state,
        "counters": state,
    }
    backward(engine, step, step.micro_batches[1])
    out["finish_early"]["then_finished_step"] = step.finish()["step"]
    # between steps, but the config has no curriculum.eval
    out["finish_early"]["evaluate_without_eval"] = attempt(curriculum.evaluate)
    out["finish_early"]["eval_due_without_eval"] = curriculum.eval_due

    # a micro-batch sent backward twice
    step = next(curriculum)
    backward(engine, step, step.micro_batches[0])
    files, state = snapshot(work), counters(curriculum)
    grads_before, micro_steps = grads(engine), engine.micro_steps
    out["backward_twice"] = {
        "backward": attempt(lambda: backward(engine, step, step.micro_batches[0])),
        "files_unchanged": snapshot(work) == files,
        "counters_unchanged": counters(curriculum) == state,
        "grads_unchanged": same(grads(engine), grads_before),
        "grads_accumulated": any(
            g is not None and bool(g.abs().sum() > 0) for g in grads_before.values()
        ),
        "engine_micro_steps_unchanged": engine.micro_steps == micro_steps,
    }
    backward(engine, step, step.micro_batches[1])
    out["backward_twice"]["then_finished_step"] = step.finish()["step"]

    # on to the end; checkpoints (ours and a manual one) right after phase 0 completes
    saved: dict[str, Any] = {}
    phases = []
    for step in curriculum:
        for mb in step.micro_batches:
            backward(engine, step, mb)
        record = step.finish()
        phases.append(record["phase_name"])
        if "step" in saved and "next_samples" not in saved:
            saved["next_samples"] = step.samples.tolist()
        if curriculum.phase_idx == 1 and "step" not in saved:
            curriculum.save_checkpoint(ckpt)
            engine.save_checkpoint(
                str(manual), client_state={"curriculum": curriculum.state_dict()}
            )
            saved.update(step=record["step"], params=params(engine))
    out["run"] = {"phases": phases, "final_step": curriculum.global_step, **saved}
    del out["run"]["params"]

    # iterating past the end
    files, state = snapshot(work), counters(curriculum)
    out["past_end"] = {
        "next": attempt(lambda: next(curriculum)),
        "for": attempt(lambda: [None for _ in curriculum]),
        "files_unchanged": snapshot(work) == files,
        "counters_unchanged": counters(curriculum) == state,
    }

    # load_checkpoint under a config whose completed phase 0 was edited: an engine of our own
    model = build_model(args.config)  # the initial weights, not the checkpoint's
    engine2, *_ = deepspeed.initialize(
        model=model,
        model_parameters=model.parameters(),
        config=curriculum_ds.deepspeed_config(args.edited),
    )
    edited = curriculum_ds.attach(engine2, args.edited)
    files, before = snapshot(work), params(engine2)
    out["edited_phase"] = {
        "load_checkpoint": attempt(lambda: edited.load_checkpoint(ckpt)),
        "files_unchanged": snapshot(work) == files,
        "params_unchanged": same(params(engine2), before),
        "params_differ_from_checkpoint": not same(before, saved["params"]),
        "counters": counters(edited),
    }

    # the same checkpoint under the original config loads; so does the manual round trip
    original = curriculum_ds.attach(engine2, args.config)
    loaded = original.load_checkpoint(ckpt)
    manual_curriculum = curriculum_ds.attach(engine2, args.config)
    _, client_state = engine2.load_checkpoint(str(manual))
    manual_curriculum.load_state_dict(client_state["curriculum"])
    out["resume_controls"] = {
        "loaded": None if loaded is None else loaded.name,
        "global_step": original.global_step,
        "params_are_the_checkpoints": same(params(engine2), saved["params"]),
        "next_samples": next(original).samples.tolist(),
        "manual_global_step": manual_curriculum.global_step,
        "manual_next_samples": next(manual_curriculum).samples.tolist(),
    }
    for c in (curriculum, edited, original, manual_curriculum):
        c.close()
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
