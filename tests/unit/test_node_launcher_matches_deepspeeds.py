"""The tests' node launcher (``tests/node_launcher.py``) starts ranks as DeepSpeed's does.

Both launchers start the same two-rank job of a script that writes its command line and its whole
environment; each rank of ours gets exactly what the same rank of ``python -m
deepspeed.launcher.launch`` gets. And a rank that fails ends the job with its exit code, the other
rank's process terminated, as DeepSpeed's launcher ends it.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from helpers import launched_env

OURS = Path(__file__).resolve().parents[1] / "node_launcher.py"
WORLD = base64.urlsafe_b64encode(json.dumps({"localhost": [0, 1]}).encode()).decode()

RANK_SCRIPT = """
import json, os, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
rank = os.environ["RANK"]
with open(f"{out}.rank{rank}", "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
if "--fail" in sys.argv:
    if rank == "0":
        sys.exit(3)
    time.sleep(120)  # terminated by the launcher when rank 0 fails
"""


def _run(
    launcher: list[str], script: Path, out: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    cmd = [*launcher, f"--world_info={WORLD}", "--master_addr=127.0.0.1", "--master_port=29611"]
    cmd += [str(script), "--out", str(out), *extra]
    return subprocess.run(cmd, env=launched_env(), capture_output=True, text=True, timeout=300)


def _ranks(out: Path) -> list[dict[str, object]]:
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in (0, 1)]


def test_each_rank_gets_deepspeeds_environment_and_command(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    deepspeed = _run(
        [sys.executable, "-u", "-m", "deepspeed.launcher.launch"], script, tmp_path / "ds"
    )
    ours = _run([sys.executable, "-u", str(OURS)], script, tmp_path / "ours")
    assert deepspeed.returncode == 0, deepspeed.stderr[-3000:]
    assert ours.returncode == 0, ours.stderr[-3000:]
    for theirs, mine in zip(_ranks(tmp_path / "ds"), _ranks(tmp_path / "ours"), strict=True):
        assert [a.replace("/ds", "/ours") for a in theirs["argv"]] == mine["argv"]  # type: ignore[union-attr]
        assert theirs["env"] == mine["env"]
    assert "'--local_rank=1'" in ours.stdout  # the spawned command, logged as DeepSpeed logs it


def test_a_failed_rank_ends_the_job_with_its_code(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    ours = _run([sys.executable, "-u", str(OURS)], script, tmp_path / "ours", "--fail")
    assert ours.returncode == 3
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _is_rank(p, tmp_path)]


def _is_rank(proc: Path, tmp_path: Path) -> bool:
    try:
        return str(tmp_path) in (proc / "cmdline").read_text()
    except OSError:
        return False
