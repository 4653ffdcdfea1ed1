"""A resume through the reference loop reads its checkpoint tag once and checks the rules once.

The loop's process (``python -m curriculum_ds.train``'s :func:`~curriculum_ds.train.main`, one
CPU rank) is run with spies wrapped around the one function that unpickles a checkpoint file
(:func:`curriculum_ds.checkpoint.safe_load.load`) and around
:func:`curriculum_ds.checkpoint.rules.check_resume`, in every module that holds them: the
pre-launch check of ``main`` is the resume's one read of each file and one check, and the load
takes both as they are (issue 18; the safe loader of issue 31 reads each file once too).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

from helpers import fixed_docs, launched_env, make_dataset, metrics, write_ds_config

_SPIED_RESUME = textwrap.dedent(
    """
    import json, sys
    import curriculum_ds.checkpoint.rules as rules
    import curriculum_ds.checkpoint.safe_load as safe_load
    import curriculum_ds.plugin  # every module that imports the two functions by name
    import curriculum_ds.train

    calls = {"loads": [], "check_resume": 0}
    read, check = safe_load.load, rules.check_resume

    def load(path):
        calls["loads"].append(str(path))
        return read(path)

    def check_resume(cfg, saved):
        calls["check_resume"] += 1
        return check(cfg, saved)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("curriculum_ds"):
            if getattr(module, "load", None) is read:
                module.load = load
            if getattr(module, "check_resume", None) is check:
                module.check_resume = check_resume
    code = curriculum_ds.train.main(sys.argv[2:])
    with open(sys.argv[1], "w") as out:
        json.dump({"code": code, **calls}, out)
    curriculum_ds.train.shutdown()
    """
)


def test_a_reference_loop_resume_reads_the_tag_once_and_checks_once(tmp_path):
    data = make_dataset(tmp_path, "a", fixed_docs(40, 25))
    cfg = write_ds_config(
        tmp_path / "ds.json",
        {
            "max_duration": "1000tok",
            "seed": 7,
            "schedule": [
                {
                    "name": "A",
                    "duration": "1000tok",
                    "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 32},
                }
            ],
            "dynamic": {"enabled": True, "num_buckets": 2, "window": 16},
        },
        train_micro_batch_size_per_gpu=1,
        gradient_accumulation_steps=2,
    )
    run_dir = tmp_path / "run"
    args = ["--deepspeed_config", str(cfg), "--run-dir", str(run_dir), "--no-progress"]
    env = launched_env() | {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    with socket.socket() as sock:  # a free port for the one-rank process group
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    first = subprocess.run(
        [sys.executable, "-m", "curriculum_ds.train", *args, "--max-steps", "3"],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-4000:]
    assert (run_dir / "checkpoints" / "latest").read_text() == "global_step3"

    out = tmp_path / "calls.json"
    resumed = subprocess.run(
        [sys.executable, "-c", _SPIED_RESUME, str(out), *args, "--resume", "auto",
         "--max-steps", "5"],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    calls = json.loads(out.read_text())
    assert calls["code"] == 0
    tag = run_dir / "checkpoints" / "global_step3"
    assert sorted(p.name for p in tag.iterdir()) == ["mp_rank_00_model_states.pt"]  # ZeRO-0
    assert calls["loads"] == [str(tag / "mp_rank_00_model_states.pt")]
    assert calls["check_resume"] == 1
    assert [r["step"] for r in metrics(run_dir)][-2:] == [4, 5]  # it did resume and train
