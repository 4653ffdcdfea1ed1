"""``Curriculum.load_checkpoint`` never lets DeepSpeed unpickle a crafted file (issue 31, item 1).

On conftest's in-process engine, whose ``load_checkpoint`` unpickles every file of the tag the
way DeepSpeed's ``TorchCheckpointEngine.load`` does (``torch.load(weights_only=False)``): a tag
whose model states file, or whose ZeRO-2 optimizer states file, carries the break-in report's
``__reduce__`` payload (tests/crafted_checkpoints.py) is refused in one line naming the file and
the global, the engine's load is never called and the marker never appears. A tag read whole by
``open_tag`` and then given a crafted optimizer file before the load is refused too (the file is
checked again as it is when DeepSpeed would open it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from crafted_checkpoints import MODEL_STATES, OPTIM_STATES, crafted_tag, inject_payload
from helpers import fixed_docs, make_dataset, write_ds_config

import curriculum_ds
from curriculum_ds.checkpoint.files import open_tag
from curriculum_ds.errors import UnsafeCheckpointError
from curriculum_ds.plugin.engine import load_run_config


@pytest.fixture(scope="module")
def run_config(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("load_no_code")
    data = make_dataset(root, "d", fixed_docs(16, 16), max_seq_len=16)
    phase = {"name": "a", "duration": "256tok",
             "train_loader": {"streams": [{"local": str(data)}], "max_seq_len": 16}}  # fmt: skip
    cfg = write_ds_config(root / "ds.json", {"max_duration": "256tok", "schedule": [phase]})
    return load_run_config(cfg, check_data=False)


@pytest.fixture
def curriculum(fake_engine: Any, run_config: Any) -> Any:
    """A curriculum on conftest's engine, whose load unpickles like DeepSpeed's (recorded)."""
    loads: list[str] = []

    def load_checkpoint(load_dir: str, tag: str | None = None, **_: Any) -> Any:
        loads.append(tag or "")
        for path in sorted((Path(load_dir) / str(tag)).glob("*.pt")):
            torch.load(path, map_location="cpu", weights_only=False)
        return load_dir, {}

    fake_engine.load_checkpoint = load_checkpoint
    fake_engine.loads = loads
    built = curriculum_ds.attach(fake_engine, run_config, check_data=False)
    yield built
    built.close()


@pytest.mark.parametrize(("payload_in", "name"), [("model_states", MODEL_STATES),
                                                  ("optimizer_states", OPTIM_STATES)])  # fmt: skip
def test_a_crafted_tag_is_refused_before_the_engine_loads(tmp_path, curriculum, payload_in, name):
    marker = tmp_path / "MARKER"
    tag = crafted_tag(tmp_path / "checkpoints", marker, payload_in=payload_in)
    with pytest.raises(UnsafeCheckpointError) as err:
        curriculum.load_checkpoint(tmp_path / "checkpoints")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{tag / name}: refused: it needs the global posix.system,")
    assert curriculum.engine.loads == []
    assert not marker.exists()


def test_a_file_rewritten_after_the_tag_was_read_is_checked_again(tmp_path, curriculum):
    marker = tmp_path / "MARKER"
    tag = crafted_tag(tmp_path / "checkpoints", marker, payload_in="none")
    saved = open_tag(tag.parent, tag.name)  # whole: every file passed the safe loader
    inject_payload(tag / OPTIM_STATES, marker)  # then rewritten with the payload
    with pytest.raises(UnsafeCheckpointError, match=f"^{tag / OPTIM_STATES}: refused: "):
        curriculum.load_checkpoint(saved)
    assert curriculum.engine.loads == []
    assert not marker.exists()
