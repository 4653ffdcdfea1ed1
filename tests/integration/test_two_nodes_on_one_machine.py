"""A 2-node run simulated on one machine (CPU, gloo), to the end and resumed.

Two torchrun "nodes" (``--nnodes 2 --node_rank {0,1} --master_addr 127.0.0.1``), 2 ranks each,
so each node has its own ``LOCAL_WORLD_SIZE`` (2) and its own local leader (local rank 0). What a
real cluster gives every node is given to each here: its own ``/dev/shm`` (a private tmpfs in a
user+mount namespace, ``unshare -rm``: mosaicml-streaming's shared memory is per node) and its own
``/tmp`` (``TMPDIR``: the node-wide streaming lock lives there) and its own disk at the remote
stream's cache path (a bind mount: the same ``local`` path, another folder per node). The run dir,
the local streams and the "remote" (a shared folder) are on the shared filesystem, as on a
cluster. The run stops at step 3 (``--max-steps``), is resumed on
the two nodes to the end of its 2-phase schedule, and equals a single-node 4-rank run: the same
global batches at every step, the same losses. Only global rank 0 takes the run-dir lock (a second
taker would be refused: flock conflicts across processes on one filesystem) and writes
``latest``.

From issue 13, item 5.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    launch,
    launched_env,
    make_dataset,
    metrics,
    ragged_docs,
    trace,
    write_ds_config,
)

from curriculum_ds.commands.launch import free_port
from curriculum_ds.distributed import RUN_DIR_LOCK_NAME

pytestmark = pytest.mark.distributed

NODES, PER_NODE = 2, 2
# each node: a private tmpfs on /dev/shm (streaming's shared memory is node-local on a cluster)
# and its own disk at the remote stream's cache path (the same path on every node)
NODE_SHELL = (
    'mount -t tmpfs -o size=64m tmpfs /dev/shm && mount --bind "$NODE_CACHE" "$CACHE" && exec "$@"'
)


def _two_nodes(cfg: Path, run_dir: Path, tmp: Path, cache: Path, *extra: str) -> None:
    port = free_port()
    procs = []
    for node in range(NODES):
        node_tmp = tmp / f"node{node}_tmp"
        node_tmp.mkdir(parents=True, exist_ok=True)
        env = launched_env()
        env["TMPDIR"] = str(node_tmp)  # the node's own /tmp
        env["CACHE"] = str(cache)
        env["NODE_CACHE"] = str(_node_cache(cache, node))
        _node_cache(cache, node).mkdir(parents=True, exist_ok=True)
        cmd = [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            NODE_SHELL,
            "sh",
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(NODES),
            "--node_rank",
            str(node),
            "--nproc_per_node",
            str(PER_NODE),
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            "-m",
            "curriculum_ds.train",
            "--deepspeed_config",
            str(cfg),
            "--run-dir",
            str(run_dir),
            "--no-progress",
            "--trace-samples",
            *extra,
        ]
        log = (tmp / f"node{node}.log").open("w")
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for proc, log in procs:
        try:
            codes.append(proc.wait(timeout=600))
        finally:
            log.close()
    logs = "\n".join(
        f"--- node {n} ---\n" + (tmp / f"node{n}.log").read_text()[-4000:] for n in range(NODES)
    )
    assert codes == [0] * NODES, logs


def _node_cache(cache: Path, node: int) -> Path:
    return cache.parent / f"{cache.name}_node{node}"


def test_two_nodes_run_to_the_end_resume_and_match_one_node(tmp_path):
    data = make_dataset(tmp_path, "docs", ragged_docs(96, seed=5, min_len=10, max_len=40))
    remote = make_dataset(tmp_path, "shared", ragged_docs(64, seed=6, min_len=20, max_len=60))
    cache = tmp_path / "cache"  # a remote stream's cache: node-local disk on a cluster
    cache.mkdir()
    curriculum = {
        "max_duration": "1000tok",
        "seed": 5,
        "schedule": [
            {
                "name": "first",
                "duration": "400tok",
                "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 64},
            },
            {
                "name": "second",
                "duration": "600tok",
                "train_loader": {
                    "streams": [
                        {"local": str(data), "proportion": 0.5},
                        {"local": str(cache), "remote": str(remote), "proportion": 0.5},
                    ],
                    "max_seq_len": 48,
                },
            },
        ],
    }
    cfg = write_ds_config(
        tmp_path / "ds.json",
        curriculum,
        train_micro_batch_size_per_gpu=1,
        gradient_accumulation_steps=2,
        zero_optimization={"stage": 1},
    )
    reference = tmp_path / "one_node"
    launch(cfg, reference, "--save-interval", "2", "--trace-samples", num_gpus=NODES * PER_NODE)

    run = tmp_path / "two_nodes"  # on the shared filesystem, as on a cluster
    _two_nodes(cfg, run, tmp_path / "first", cache, "--save-interval", "2", "--max-steps", "3")
    assert (run / "checkpoints" / "latest").read_text() == "global_step3"
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]
    _two_nodes(cfg, run, tmp_path / "second", cache, "--save-interval", "2", "--resume", "auto")

    ref_trace, got = trace(reference), trace(run)
    assert {r["phase"] for r in ref_trace} == {0, 1}
    assert got == ref_trace  # the same global batches, step for step
    a, b = metrics(reference), metrics(run)
    assert [r["step"] for r in b] == [r["step"] for r in a]
    for ra, rb in zip(a, b, strict=True):
        assert (ra["phase"], ra["tokens"]) == (rb["phase"], rb["tokens"])
        assert math.isclose(rb["loss"], ra["loss"], rel_tol=1e-5), (ra, rb)
    last = a[-1]["step"]
    assert (run / "checkpoints" / "latest").read_text() == f"global_step{last}"
    # one lock holder (global rank 0); its pid was written once
    assert len((run / RUN_DIR_LOCK_NAME).read_text().split()) == 1
    # each node downloaded the remote stream into its own cache (the same path on both nodes)
    for node in range(NODES):
        cached = {p.name for p in _node_cache(cache, node).iterdir()}
        assert "index.json" in cached, (node, cached)
        assert len(cached) >= 2, (node, cached)  # and shards
    # every rank of both nodes wrote its checkpoint shard into the one shared tag folder
    assert len(list((run / "checkpoints" / f"global_step{last}").glob("*optim_states.pt"))) == 4
