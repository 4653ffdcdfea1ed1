"""``CurriculumTrainer`` refuses a user's mistake in one line, in its constructor, before HF builds
anything: a ``train_dataset`` passed as well, batch sizes that disagree with ``TrainingArguments``
(``"auto"`` takes HF's), ``group_by_length=True``, a ds_config without a ``curriculum`` section or
no ds_config at all, ``lr_schedule`` beside a ds_config ``scheduler``. One process, world size 1
(the ds_config is set on the arguments after they are built, so HF starts no DeepSpeed here).
And ``train(resume_from_checkpoint=...)`` refuses a ``checkpoint-N`` carrying a code payload (in
the curriculum state, or in the DeepSpeed tag's model or optimizer states) in one line before HF
loads anything, the payload never run.

From issues 21 and 31.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crafted_checkpoints import MODEL_STATES, OPTIM_STATES, CodePayload, crafted_tag
from helpers import fixed_docs, make_dataset, write_ds_config
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from curriculum_ds.errors import ConfigError, UnsafeCheckpointError
from curriculum_ds.hf import CurriculumTrainer
from curriculum_ds.hf.arguments import curriculum_run, estimated_steps, step_bound
from curriculum_ds.hf.checkpoint import STATE_FILE, write_state


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("hf_bad"), "d", fixed_docs(32, 16))


@pytest.fixture(scope="module")
def model():
    config = GPT2Config(vocab_size=257, n_positions=64, n_embd=16, n_layer=1, n_head=2)
    return GPT2LMHeadModel(config)


def section(data: Path, **extra) -> dict:
    return {
        "max_duration": "640tok",
        "schedule": [{"name": "all", "duration": "640tok",
                      "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 16}}],
        **extra,
    }  # fmt: skip


def arguments(tmp_path: Path, ds, **kw) -> TrainingArguments:
    kw = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2} | kw
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], **kw)
    args.deepspeed = ds  # after __post_init__: HF's DeepSpeed set-up is not reached here
    return args


def refusal(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_train_dataset_is_refused(tmp_path, data, model):
    args = arguments(tmp_path, str(write_ds_config(tmp_path / "ds.json", section(data))))
    with pytest.raises(ConfigError) as exc:
        CurriculumTrainer(model=model, args=args, train_dataset=[{"input_ids": [1, 2]}])
    assert refusal(exc).startswith("train_dataset: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("key", "value", "hf_name"),
    [
        ("train_micro_batch_size_per_gpu", 4, "per_device_train_batch_size"),
        ("gradient_accumulation_steps", 1, "gradient_accumulation_steps"),
        ("train_batch_size", 8, "world_size 1"),
    ],
)
def test_batch_sizes_that_disagree_are_refused(tmp_path, data, model, key, value, hf_name):
    cfg = write_ds_config(tmp_path / "ds.json", section(data), **{key: value})
    with pytest.raises(ConfigError) as exc:
        CurriculumTrainer(model=model, args=arguments(tmp_path, str(cfg)))
    message = refusal(exc)
    assert message.startswith(f"{key}: the ds_config has {value}")
    assert hf_name in message


def test_auto_batch_sizes_take_the_training_arguments(tmp_path, data):
    cfg = write_ds_config(
        tmp_path / "ds.json", section(data), train_batch_size="auto",
        train_micro_batch_size_per_gpu="auto", gradient_accumulation_steps="auto",
    )  # fmt: skip
    run = curriculum_run(arguments(tmp_path, str(cfg), per_device_train_batch_size=4))
    assert (run.micro_batch_size, run.gradient_accumulation_steps) == (4, 2)
    assert run.global_batch_size(1) == 8
    # 640 tokens of 16-token samples over a global batch of 8: 5 steps; at most 81
    assert estimated_steps(run, 1) == 5
    assert step_bound(run, 1) == 81


def test_group_by_length_is_refused(tmp_path, data, model):
    cfg = write_ds_config(tmp_path / "ds.json", section(data))
    with pytest.raises(ConfigError) as exc:
        CurriculumTrainer(model=model, args=arguments(tmp_path, str(cfg), group_by_length=True))
    assert refusal(exc).startswith("TrainingArguments.group_by_length: not supported")


def test_a_ds_config_without_a_curriculum_section_is_refused(tmp_path, model):
    cfg = tmp_path / "plain.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2}))
    with pytest.raises(ConfigError) as exc:
        CurriculumTrainer(model=model, args=arguments(tmp_path, str(cfg)))
    assert refusal(exc).startswith("curriculum: the ds_config of TrainingArguments.deepspeed")
    with pytest.raises(ConfigError) as exc:
        CurriculumTrainer(model=model, args=arguments(tmp_path, None))
    assert refusal(exc).startswith("TrainingArguments.deepspeed: CurriculumTrainer needs")


def test_an_lr_schedule_beside_a_ds_scheduler_is_refused(tmp_path, data, model):
    schedule = {"lr_schedule": {"type": "cosine", "warmup": "64tok"}}
    raw = json.loads(write_ds_config(tmp_path / "ds.json", section(data, **schedule)).read_text())
    raw["scheduler"] = {"type": "WarmupLR", "params": {"warmup_num_steps": 2}}
    with pytest.raises(ConfigError) as exc:
        CurriculumTrainer(model=model, args=arguments(tmp_path, raw))
    assert refusal(exc).startswith("scheduler: the ds_config has a scheduler section beside")


def test_a_phase_longer_than_the_model_is_refused(tmp_path, data):
    cfg = write_ds_config(tmp_path / "ds.json", section(data))
    short = GPT2LMHeadModel(
        GPT2Config(vocab_size=257, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    )
    with pytest.raises(ConfigError) as exc:
        CurriculumTrainer(model=short, args=arguments(tmp_path, str(cfg)))
    assert "max_seq_len" in refusal(exc)


@pytest.mark.parametrize(
    ("payload_in", "name"),
    [
        ("curriculum_state", STATE_FILE),
        ("model_states", f"global_step2/{MODEL_STATES}"),
        ("optimizer_states", f"global_step2/{OPTIM_STATES}"),
    ],
)
def test_a_crafted_checkpoint_is_refused_before_hf_loads_it(
    tmp_path, data, model, payload_in, name
):
    cfg = write_ds_config(tmp_path / "ds.json", section(data))
    trainer = CurriculumTrainer(model=model, args=arguments(tmp_path, str(cfg)))
    marker = tmp_path / "MARKER"
    folder = tmp_path / "out" / "checkpoint-2"  # as HF and CurriculumTrainer write it
    crafted_tag(
        folder, marker, payload_in="none" if payload_in == "curriculum_state" else payload_in
    )
    bad = payload_in == "curriculum_state"
    write_state(folder, {"payload": CodePayload(marker)} if bad else {"global_step": 2})
    for resume in (str(folder), True):
        with pytest.raises(UnsafeCheckpointError) as exc:
            trainer.train(resume_from_checkpoint=resume)
        assert refusal(exc).startswith(
            f"resume_from_checkpoint: {folder / name}: refused: it needs the global posix.system,"
        )
    assert not marker.exists()
    assert trainer.feed.curriculum is None  # HF built nothing: the refusal came first
