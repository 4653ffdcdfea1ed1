"""A 2-rank run streams a 2-phase schedule from a local S3 server.

A moto S3 server started by the test (tests/object_store.py) holds the two prepared streams;
the ranks read them through mosaicml-streaming into per-stream cache folders. Run A trains on
the local copy of the same data, uninterrupted (in one launched job with B's last resume). Run
B trains from S3:

1. the "long" stream's shard on S3 is corrupted at its recorded size, so ``validate`` passes
   and its download fails the recorded sha1 when phase "mix" first reads it: one line naming
   the stream, a non-zero exit, and ``latest`` stays the last checkpoint;
2. the shard is restored; resumed, the run is killed (SIGKILL) after step 7;
3. resumed again, it runs to the end.

B's sample trace equals A's, step for step. With the S3 server stopped, a launch fails before
training with one line naming the stream.

From issue 12, part 3.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    launch,
    launch_many,
    make_dataset,
    metrics,
    ragged_docs,
    trace,
    two_phase_curriculum,
)
from helpers import write_ds_config as write_config
from object_store import s3_server, upload_folder

pytestmark = pytest.mark.distributed

SAVE_INTERVAL = 3


def _remote(curriculum: dict[str, Any], cache: Path, urls: dict[str, str]) -> dict[str, Any]:
    """The same curriculum with every stream read from ``urls[name]`` through ``cache/name``."""
    out = copy.deepcopy(curriculum)
    for phase in out["schedule"]:
        for stream in phase["train_loader"]["streams"]:
            name = Path(stream["local"]).name
            stream["local"] = str(cache / name)
            stream["remote"] = urls[name]
    return out


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "curriculum_ds: error:" in line]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("remote_runs")
    short = make_dataset(base / "data", "short", ragged_docs(120, seed=5, min_len=10, max_len=40))
    long = make_dataset(base / "data", "long", ragged_docs(160, seed=6, min_len=40, max_len=60))
    curriculum = two_phase_curriculum(short, long)
    curriculum["seed"] = 11
    a, b = base / "A", base / "B"
    common = ["--save-interval", str(SAVE_INTERVAL), "--trace-samples"]
    local_cfg = write_config(base / "local.json", curriculum)

    mp = pytest.MonkeyPatch()
    try:
        with s3_server(mp) as server:
            urls = {
                name: upload_folder(server, folder, f"s3://corpus/v1/{name}")
                for name, folder in (("short", short), ("long", long))
            }
            cfg = write_config(base / "remote.json", _remote(curriculum, base / "cache", urls))
            shard = next(p for p in long.iterdir() if p.suffix == ".mds")
            bad = base / "bad" / shard.name
            bad.parent.mkdir()
            data = bytearray(shard.read_bytes())
            data[-1] ^= 0xFF
            bad.write_bytes(bytes(data))
            server.client().upload_file(str(bad), "corpus", f"v1/long/{shard.name}")
            corrupt = launch(cfg, b, *common, check=False)
            after_corrupt = {
                "latest": (b / "checkpoints" / "latest").read_text(),
                "cached": (base / "cache" / "long" / shard.name).exists(),
                "steps": [r["step"] for r in metrics(b)],
                "phases": {r["phase"] for r in metrics(b)},
                "prefetched": [r["prefetched"] for r in metrics(b)],
            }
            server.client().upload_file(str(shard), "corpus", f"v1/long/{shard.name}")
            resume = [*common, "--resume", "auto"]
            killed = launch(cfg, b, *resume, "--kill-after-step", "7", check=False)
            latest_killed = (b / "checkpoints" / "latest").read_text()
            # the local run A and B's last resume share one launched job (launch_many)
            outputs = launch_many([(local_cfg, a, tuple(common)), (cfg, b, tuple(resume))])
            resumed = outputs[b]
            server.stop()
            shutil.rmtree(base / "cache")
            down = launch(cfg, base / "C", *common, check=False)
    finally:
        mp.undo()
    return {
        "A": a,
        "B": b,
        "corrupt": corrupt,
        "after_corrupt": after_corrupt,
        "killed": killed,
        "latest_killed": latest_killed,
        "resumed": resumed,
        "down": down,
    }


def test_a_corrupt_shard_mid_run_is_one_line_and_keeps_the_checkpoint(scenario):
    corrupt = scenario["corrupt"]
    assert corrupt.returncode != 0
    lines = _error_lines(corrupt.stderr)
    assert len(lines) == 1, corrupt.stderr[-3000:]
    assert "stream 'long' (remote s3://corpus/v1/long, cache " in lines[0]
    assert "Checksum failure" in lines[0]
    # phase "short" trained and checkpointed ("long" is first read in "mix"); the shard that
    # failed is not left in the cache
    after = scenario["after_corrupt"]
    assert after["phases"] == {0}
    assert after["steps"][-1] >= SAVE_INTERVAL
    assert after["latest"] == f"global_step{after['steps'][-1] // SAVE_INTERVAL * SAVE_INTERVAL}"
    assert not after["cached"]
    # issue 23: the run read ahead (default prefetch 2) until the failure; the failing read is
    # the first of phase "mix", which a phase swap has the training thread read when drawn (as
    # the first step's first micro-batch, issue 35: the thread read its second)
    assert after["prefetched"] == [1] + [2] * (len(after["prefetched"]) - 1)


def test_killed_and_resumed_from_s3_equals_the_local_run(scenario):
    assert scenario["killed"].returncode != 0
    assert scenario["latest_killed"] == "global_step6"
    assert "finished at step" in scenario["resumed"].output
    a, b = trace(scenario["A"]), trace(scenario["B"])
    assert len(a) >= 8
    assert {r["phase"] for r in a} == {0, 1}
    assert b == a  # step for step, sample for sample


def test_the_kill_came_with_the_next_steps_micro_batches_read_ahead(scenario):
    # issue 23: step 8 (same phase as 7, no re-weighting, no eval) was decided and read ahead at
    # step 7's draw, in A and so in B's process killed after step 7: those pending reads were
    # not counted (latest stayed at step 6) and the resume drew step 8 again, the same (above)
    rows = {r["step"]: r for r in metrics(scenario["A"])}
    assert rows[7]["phase"] == rows[8]["phase"]
    assert rows[8]["prefetched"] == 2
    assert metrics(scenario["B"])[7]["prefetched"] == 2  # step 8 of B's last process, too
    assert [r["tokens"] for r in metrics(scenario["B"])] == [
        r["tokens"] for r in metrics(scenario["A"])
    ]


def test_a_stopped_s3_server_fails_the_launch_in_one_line(scenario):
    down = scenario["down"]
    assert down.returncode != 0
    lines = _error_lines(down.stderr)
    assert len(lines) == 1, down.stderr[-3000:]
    assert lines[0].startswith(
        'curriculum_ds: error: curriculum.schedule[0] ("short").train_loader.streams[0].remote: '
        'stream "short" (s3://corpus/v1/short): remote s3://corpus/v1/short cannot be listed: '
        "Could not connect to the endpoint URL"
    ), lines[0]
    assert not (scenario["A"].parent / "C" / "metrics.jsonl").exists()
