"""Bad inputs to the public API found by the breaker pass, in one process (a world of one).

``python refusal_scenarios.py --config ds.json --work DIR --out R.json`` trains
``user_loop_script.TinyLM`` (dynamic re-weighting on) and records, for each bad input, what was
raised and what moved. Scenarios (keys of the JSON written to ``--out``):

* ``bad_backward_inputs``: ``aux_loss`` a Python float, detached logits, 2-D logits, a non-scalar
  ``aux_loss``: each refused before anything goes backward (gradients, engine micro-steps and
  the micro-batch's claim unchanged: it then goes backward normally);
* ``malformed_state``: ``load_state_dict`` of a state whose loader or re-weighting part is
  malformed: refused then, counters and the next batch unchanged;
* ``no_curriculum_checkpoint``: ``load_checkpoint`` of a plain DeepSpeed checkpoint after some
  steps: the schedule restarts (counters 0, the first batch of a fresh run), the step count kept;
* ``foreign_model``: ``load_checkpoint`` of another model's checkpoint: one ``ResumeError`` line;
* ``no_optimizer``: ``initialize`` with a ds_config without optimizer: one ``ConfigError`` line;
* ``engine_step_in_loop``: the loop calls ``engine.step()`` itself beside ``step.backward``.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import deepspeed
import torch
from misuse_scenarios import attempt, backward, counters, grads, same
from user_loop_script import TinyLM, build_model

import curriculum_ds


def bad_backward_inputs(engine: Any, curriculum: Any) -> dict[str, Any]:
    step = next(curriculum)
    mb = step.micro_batches[0]
    logits = engine(mb.input_ids, attention_mask=mb.attention_mask)
    grads_before, micro_steps = grads(engine), engine.micro_steps
    out = {
        "aux_float": attempt(lambda: step.backward(logits, mb, aux_loss=0.5)),
        "aux_vector": attempt(lambda: step.backward(logits, mb, aux_loss=logits[0, 0])),
        "detached_logits": attempt(lambda: step.backward(logits.detach(), mb)),
        "logits_2d": attempt(lambda: step.backward(logits[..., 0], mb)),
        "grads_unchanged": same(grads(engine), grads_before),
        "engine_micro_steps_unchanged": engine.micro_steps == micro_steps,
    }
    for m in step.micro_batches:  # nothing was claimed: every micro-batch goes backward once
        backward(engine, step, m)
    out["then_finished_step"] = step.finish()["step"]
    return out


def malformed_state(curriculum: Any) -> dict[str, Any]:
    state = curriculum.state_dict()
    before = counters(curriculum)
    out: dict[str, Any] = {}
    for name, edit in {
        "loader_num_samples": lambda s: s["loader"].__setitem__("num_samples", "x"),
        "loader_without_samplers": lambda s: s["loader"].pop("samplers"),
        "loader_stream_counts": lambda s: s["loader"].__setitem__("stream_counts", [1, 2, 3]),
        "dynamic_without_probs": lambda s: s["dynamic"].pop("probs"),
        "dynamic_window": lambda s: s["dynamic"].__setitem__(
            "window",
            {"capacity": s["dynamic"]["window"]["capacity"]},  # no values
        ),
    }.items():
        bad = copy.deepcopy(state)
        edit(bad)
        out[name] = attempt(lambda bad=bad: curriculum.load_state_dict(bad))
    out["counters_unchanged"] = counters(curriculum) == before
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}

    engine, curriculum = curriculum_ds.initialize(
        model=build_model(args.config), config=args.config
    )
    first_samples = None
    out["bad_backward_inputs"] = bad_backward_inputs(engine, curriculum)
    for _ in range(2):
        step = next(curriculum)
        first_samples = first_samples or step.samples.tolist()
        for mb in step.micro_batches:
            backward(engine, step, mb)
        step.finish()
    good_state = curriculum.state_dict()
    out["malformed_state"] = malformed_state(curriculum)
    # the refusals left the position alone: the next batch is the one the good state gives
    control = curriculum_ds.attach(engine, args.config)
    control.load_state_dict(good_state)
    out["malformed_state"]["next_batch_unchanged"] = (
        next(curriculum).samples.tolist() == next(control).samples.tolist()
    )
    control.close()

    # a plain DeepSpeed checkpoint (no curriculum state), loaded after some steps
    fresh_model = build_model(args.config)
    plain, *_ = deepspeed.initialize(
        model=fresh_model,
        model_parameters=fresh_model.parameters(),
        config=curriculum_ds.deepspeed_config(args.config),
    )
    plain.global_steps = 7
    plain.save_checkpoint(str(args.work / "plain"), tag="global_step7")
    fresh = curriculum_ds.attach(plain, args.config)
    fresh_first = next(fresh).samples.tolist()
    fresh.close()
    resumed = curriculum_ds.attach(engine, args.config)
    for _ in range(3):
        step = next(resumed)
        for mb in step.micro_batches:
            backward(engine, step, mb)
        step.finish()
    resumed.load_checkpoint(args.work / "plain")
    out["no_curriculum_checkpoint"] = {
        "counters": counters(resumed),
        "next_samples_are_a_fresh_runs_first": next(resumed).samples.tolist() == fresh_first,
    }

    # another model's checkpoint
    other = TinyLM(300, 16, dim=8)
    foreign, *_ = deepspeed.initialize(
        model=other,
        model_parameters=other.parameters(),
        config=curriculum_ds.deepspeed_config(args.config),
    )
    foreign.save_checkpoint(str(args.work / "foreign"), tag="global_step1")
    target = curriculum_ds.attach(engine, args.config)
    before = {n: t.detach().clone() for n, t in engine.module.named_parameters()}
    out["foreign_model"] = {
        "load_checkpoint": attempt(lambda: target.load_checkpoint(args.work / "foreign")),
        "params_unchanged": all(
            torch.equal(t, before[n]) for n, t in engine.module.named_parameters()
        ),
    }

    # a ds_config without an optimizer
    no_opt = json.loads(args.config.read_text())
    no_opt.pop("optimizer")
    out["no_optimizer"] = attempt(
        lambda: curriculum_ds.initialize(model=build_model(args.config), config=no_opt)
    )
    # the loop's own engine.step() beside step.backward (last: it leaves the engine a micro-step
    # ahead of any curriculum)
    stepping = curriculum_ds.attach(engine, args.config)
    step = next(stepping)
    backward(engine, step, step.micro_batches[0])
    engine.step()
    out["engine_step_in_loop"] = attempt(lambda: backward(engine, step, step.micro_batches[1]))
    for c in (curriculum, resumed, target, stepping):
        c.close()
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
