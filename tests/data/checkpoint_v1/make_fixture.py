"""Make the checkpoint-v1 fixture: 1-rank tags written by the code before issue 30, both units.

Run once, from a checkout of the commit named in ``README.md`` beside this file (the code whose
saved format the fixture pins), with that checkout's ``python/`` and this repository's
``tests/`` and ``tests/integration/`` on ``PYTHONPATH``::

    PYTHONPATH=OLD/python:tests:tests/integration python tests/data/checkpoint_v1/make_fixture.py

For each unit (``buckets``, ``streams``) it trains the reference loop 6 steps in one process
(``nanogpt_model:build``, dynamic re-weighting on, a recompute every 2 steps), saving at steps
3 and 6, and keeps the data, the config, the step-3 tag, and the uninterrupted run's
``sample_trace.jsonl``, ``metrics.jsonl`` and ``curriculum_history.jsonl``. The test resumes the
step-3 tag with today's code and compares steps 4-6 with those files.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from helpers import launch_many, make_dataset, ragged_docs, write_ds_config

HERE = Path(__file__).resolve().parent
STEPS, SAVE_AT = 6, 3


def config(unit: str, data: Path) -> dict:
    streams = [{"local": f"data/{name}", "name": name, "proportion": 0.5} for name in ("a", "b")]
    return {
        "max_duration": "20000tok",
        "seed": 11,
        "schedule": [
            {"name": "only", "duration": "20000tok",
             "train_loader": {"streams": streams, "max_seq_len": 64}},
        ],
        "dynamic": {
            "enabled": True, "unit": unit, "num_buckets": 2, "window": 64, "floor": 0.1,
            "recompute_every_n_steps": 2, "temperature": 0.5,
        },
    }  # fmt: skip


def main() -> None:
    data = HERE / "data"
    shutil.rmtree(data, ignore_errors=True)
    make_dataset(data, "a", ragged_docs(60, seed=21, min_len=6, max_len=40))
    make_dataset(data, "b", ragged_docs(60, seed=22, min_len=20, max_len=60))
    for jsonl in data.glob("*.jsonl"):
        jsonl.unlink()
    runs = []
    (HERE / "work").mkdir(exist_ok=True)
    for unit in ("buckets", "streams"):
        cfg = write_ds_config(HERE / f"ds_{unit}.json", config(unit, data))
        run = HERE / "work" / unit
        shutil.rmtree(run, ignore_errors=True)
        extra = ("--model-factory", "nanogpt_model:build", "--save-interval", str(SAVE_AT),
                 "--max-steps", str(STEPS), "--trace-samples")  # fmt: skip
        runs.append((cfg, run, extra))
    launch_many(runs, num_gpus=1, launcher=False)
    for unit in ("buckets", "streams"):
        run, out = HERE / "work" / unit, HERE / unit
        shutil.rmtree(out, ignore_errors=True)
        (out / "checkpoints").mkdir(parents=True)
        shutil.copytree(run / "checkpoints" / f"global_step{SAVE_AT}",
                        out / "checkpoints" / f"global_step{SAVE_AT}")  # fmt: skip
        (out / "checkpoints" / "latest").write_text(f"global_step{SAVE_AT}")
        for name in ("sample_trace.jsonl", "metrics.jsonl", "curriculum_history.jsonl"):
            shutil.copy(run / name, out / name)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == list(range(1, STEPS + 1)), rows
    shutil.rmtree(HERE / "work")
    print("fixture written under", HERE, file=sys.stderr)


if __name__ == "__main__":
    main()
