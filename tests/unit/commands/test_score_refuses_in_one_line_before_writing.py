"""`curriculum-ds score` refuses bad input in one line, exit 1, before writing in any folder.

A model folder that does not load, a DATA path that is not a prepared MDS folder, a model whose
vocabulary or context is too small for the data (the largest id recorded by prepare, or read
when not recorded), a --column that is empty, not a plain identifier or one of prepare's own, or
one a folder has already without --overwrite: each is its exact line, and every file of every
DATA folder keeps its bytes (the metric store included). A model folder whose model needs its
own code, or whose pickled weights carry a code payload, is refused the same way and the code
never runs (issue 31: transformers' ``trust_remote_code`` stays off, its weights loader is
``weights_only``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from crafted_checkpoints import CodePayload
from helpers import one_error_line
from score_fixtures import folder_bytes, invoke, tiny_gpt2, two_folders


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    broken = root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no_such_architecture"}')
    return {
        "ok": tiny_gpt2(root),
        "small_vocab": tiny_gpt2(root, vocab_size=200),
        "short": tiny_gpt2(root, n_positions=32),
        "broken": broken,
        "missing": root / "no_such_folder",
    }


def _refused(args: list[Any], line: str, *folders: Path) -> None:
    """``score ARGS`` prints exactly ``Error: <line>``, exits 1 and leaves every folder as is."""
    before = {folder: folder_bytes(folder) for folder in folders}
    assert one_error_line(invoke(*args)) == f"Error: {line}"
    assert {folder: folder_bytes(folder) for folder in folders} == before


def _foreign(root: Path) -> Path:
    """An MDS folder written by mosaicml-streaming directly: no curriculum_meta.json."""
    from streaming import MDSWriter

    out = root / "foreign"
    with MDSWriter(out=str(out), columns={"input_ids": "ndarray:int32"}, progress_bar=False) as w:
        w.write({"input_ids": np.arange(5, dtype=np.int32)})
    return out


def test_a_model_folder_that_does_not_load(tmp_path: Path, models: dict[str, Path]) -> None:
    code, prose = two_folders(tmp_path)
    missing, broken = models["missing"], models["broken"]
    _refused(
        [code, prose, "--model", missing, "--column", "ref_loss"],
        f"score: --model {missing} is not a folder (no download ever)",
        code,
        prose,
    )
    before = {f: folder_bytes(f) for f in (code, prose)}
    line = one_error_line(invoke(code, prose, "--model", broken, "--column", "ref_loss"))
    assert line.startswith(f"Error: score: --model {broken} is not a loadable causal-LM folder: ")
    assert "no_such_architecture" in line
    assert "Should have" not in line  # not HF's list of every model type it knows
    assert {f: folder_bytes(f) for f in (code, prose)} == before


def _custom_code(root: Path, marker: Path) -> Path:
    """A model folder whose config maps its model type to code of its own (``auto_map``)."""
    folder = root / "custom"
    folder.mkdir()
    config = {
        "model_type": "curriculum_ds_custom",
        "auto_map": {"AutoConfig": "custom.Config", "AutoModelForCausalLM": "custom.Model"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "custom.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    return folder


def _pickled_weights(root: Path, marker: Path) -> Path:
    """A tiny GPT-2 folder whose weights are a ``pytorch_model.bin`` carrying a code payload."""
    import torch

    folder = tiny_gpt2(root)
    (folder / "model.safetensors").unlink()
    torch.save({"payload": CodePayload(marker)}, folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("make", [_custom_code, _pickled_weights], ids=["auto_map", "payload"])
def test_a_model_folder_that_would_run_code_is_refused(
    tmp_path: Path, make: Callable[[Path, Path], Path]
) -> None:
    code, prose = two_folders(tmp_path)
    marker = tmp_path / "MARKER"
    model = make(tmp_path, marker)
    line = one_error_line(invoke(code, prose, "--model", model, "--column", "ref_loss"))
    assert line.startswith(f"Error: score: --model {model} is not a loadable causal-LM folder: ")
    assert not marker.exists()


def test_a_checkpoints_folder_as_model_is_told_to_export(tmp_path: Path) -> None:
    code, prose = two_folders(tmp_path)
    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "global_step4").mkdir(parents=True)
    (checkpoints / "latest").write_text("global_step4")
    line = one_error_line(invoke(code, prose, "--model", checkpoints, "--column", "ref_loss"))
    assert line.startswith(f"Error: score: --model {checkpoints} is not a loadable causal-LM ")
    assert line.endswith(
        f"; it holds checkpoints: `curriculum-ds export {checkpoints} OUT` makes one"
    )


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda root: root / "nothing_here", "no such folder"),
        (lambda root: (root / "empty").mkdir() or root / "empty", "no index.json"),
        (_foreign, "no curriculum_meta.json, where prepare lists the metric columns"),
    ],
    ids=["missing", "empty-folder", "foreign-mds"],
)
def test_a_data_path_that_is_not_a_prepared_mds_folder(
    tmp_path: Path, models: dict[str, Path], make: Callable[[Path], Path], why: str
) -> None:
    code, _ = two_folders(tmp_path)
    bad = make(tmp_path)
    _refused(
        [code, bad, "--model", models["ok"], "--column", "ref_loss"],
        f"score: {bad} is not a prepared MDS folder ({why}; make one with `curriculum-ds prepare`)",
        code,
    )


def test_a_truncated_shard_is_named(tmp_path: Path, models: dict[str, Path]) -> None:
    code, prose = two_folders(tmp_path)
    shard = next(prose.glob("shard.*.mds"))
    shard.write_bytes(shard.read_bytes()[:-3])
    size = shard.stat().st_size
    _refused(
        [code, prose, "--model", models["ok"], "--column", "ref_loss"],
        f"score: {prose} is not a prepared MDS folder: MDS dataset {prose}: shard file "
        f"{shard.name} has {size} bytes but index.json records {size + 3} (truncated or corrupt)",
        code,
        prose,
    )


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded-by-prepare", "read"])
def test_a_vocabulary_smaller_than_the_data(
    tmp_path: Path, models: dict[str, Path], recorded: bool
) -> None:
    code, prose = two_folders(tmp_path)
    if not recorded:  # a dataset prepared before max_token_id was recorded
        meta_path = code / "curriculum_meta.json"
        meta = json.loads(meta_path.read_text())
        del meta["max_token_id"]
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    model = models["small_vocab"]
    _refused(
        [code, prose, "--model", model, "--column", "ref_loss"],
        f"score: model {model} has vocab_size 200, but {code} holds token id 256",
        code,
        prose,
    )


def test_a_context_shorter_than_the_longest_sample(tmp_path: Path, models: dict[str, Path]) -> None:
    code, prose = two_folders(tmp_path)
    model = models["short"]
    _refused(
        [code, prose, "--model", model, "--column", "ref_loss"],
        f"score: model {model} has 32 positions (n_positions), but {code} holds a sample of "
        "64 tokens",
        code,
        prose,
    )


@pytest.mark.parametrize(
    ("column", "line"),
    [
        ("", "score: --column is empty; name the metric column to write"),
        (
            "ref-loss",
            'score: --column "ref-loss" is not a plain identifier (ASCII letters, digits and _, '
            "not starting with a digit)",
        ),
        (
            "1st",
            'score: --column "1st" is not a plain identifier (ASCII letters, digits and _, '
            "not starting with a digit)",
        ),
        (
            "token_entropy",
            'score: --column "token_entropy" is one of prepare\'s own columns (input_ids, '
            "num_tokens, token_entropy, compression_ratio); choose another name",
        ),
    ],
    ids=["empty", "hyphen", "digit-first", "prepares-own"],
)
def test_a_bad_column_name(tmp_path: Path, models: dict[str, Path], column: str, line: str) -> None:
    code, _ = two_folders(tmp_path)
    _refused([code, "--model", models["ok"], "--column", column], line, code)


def test_an_existing_column_needs_overwrite(tmp_path: Path, models: dict[str, Path]) -> None:
    code, prose = two_folders(tmp_path)
    first = invoke(prose, "--model", models["ok"], "--column", "ref_loss", "--device", "cpu")
    assert first.exit_code == 0, first.output
    # code has no such column yet, prose has: nothing is written in either
    _refused(
        [code, prose, "--model", models["ok"], "--column", "ref_loss"],
        f'score: {prose} already has a metric column "ref_loss" (pass --overwrite to replace it)',
        code,
        prose,
    )


def test_a_folder_given_twice_and_a_bad_batch_size(tmp_path: Path, models: dict[str, Path]) -> None:
    code, _ = two_folders(tmp_path)
    _refused(
        [code, code, "--model", models["ok"], "--column", "ref_loss"],
        f"score: {code} is given twice",
        code,
    )
    _refused(
        [code, "--model", models["ok"], "--column", "ref_loss", "--batch-size", 0],
        "score: --batch-size must be an integer >= 1, got 0",
        code,
    )


def test_a_non_finite_loss_writes_nothing(tmp_path: Path, models: dict[str, Path]) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    code, _ = two_folders(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(models["ok"], local_files_only=True)
    with torch.no_grad():
        model.transformer.ln_f.weight[0] = float("nan")  # every logit NaN
    nan_model = tmp_path / "nan_model"
    model.save_pretrained(nan_model)
    _refused(
        [code, "--model", nan_model, "--column", "ref_loss", "--device", "cpu"],
        f"score: the model gives a non-finite loss (nan) on sample 0 of {code}; nothing "
        "written there",
        code,
    )


def _bert(root: Path) -> Path:
    """A 1-layer BERT masked LM folder: AutoModelForCausalLM loads it (BertLMHeadModel)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    folder = root / "bert"
    BertForMaskedLM(config).save_pretrained(folder)
    return folder


def test_a_model_that_is_not_causal(tmp_path: Path) -> None:
    """A bidirectional model sees the token it predicts: its "loss" is no reference loss."""
    code, prose = two_folders(tmp_path)
    bert = _bert(tmp_path)
    _refused(
        [code, prose, "--model", bert, "--column", "ref_loss", "--device", "cpu"],
        f"score: --model {bert} is not a causal LM: its logits at position 0 change when a "
        "later token changes (a bidirectional model such as BERT?); the reference loss needs "
        "a model that sees only earlier tokens",
        code,
        prose,
    )


def test_the_cache_folder_of_a_remote_stream(tmp_path: Path, models: dict[str, Path]) -> None:
    """A sync replaces the cache's sidecar files with the remote's: a column written there
    would vanish at the next launch, so scoring a cache folder is refused."""
    import shutil

    from curriculum_ds.data.remote import SYNC_STAMP, sync_stream_metadata

    code, prose = two_folders(tmp_path / "remote")
    cache = tmp_path / "cache" / "prose"
    sync_stream_metadata(cache, str(prose))
    for shard in prose.glob("shard.*.mds"):  # as if a run had downloaded them
        shutil.copy(shard, cache / shard.name)
    _refused(
        [code, cache, "--model", models["ok"], "--column", "ref_loss", "--device", "cpu"],
        f"score: {cache} is the cache folder of a remote stream (it has {SYNC_STAMP}): the next "
        "sync replaces its metrics.npz and curriculum_meta.json with the remote's, without the "
        "column; score the prepared folder, then upload it",
        code,
        cache,
    )


def test_a_folder_that_cannot_be_written(
    tmp_path: Path, models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only DATA folder is refused before the first folder is written (as root, where
    chmod does not stop a write, the refusal of the folder's file system is simulated)."""
    import tempfile

    code, prose = two_folders(tmp_path)
    real = tempfile.mkstemp

    def mkstemp(*args: Any, **kwargs: Any) -> Any:
        if Path(kwargs.get("dir") or ".") == prose:
            raise PermissionError(13, "Permission denied")
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    _refused(
        [code, prose, "--model", models["ok"], "--column", "ref_loss", "--device", "cpu"],
        f"score: cannot write in {prose} (Permission denied); nothing written in any folder",
        code,
        prose,
    )


def test_a_failed_write_is_one_line_and_leaves_the_metric_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails midway (disk full) is a DataError; metrics.npz keeps its bytes and no
    temporary file is left."""
    import curriculum_ds.data.metric_store as store
    import curriculum_ds.files.atomic as atomic_files
    from curriculum_ds.errors import DataError

    code, _ = two_folders(tmp_path)
    before = folder_bytes(code)

    def full(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_files.os, "replace", full)
    num_samples = json.loads((code / "curriculum_meta.json").read_text())["num_samples"]
    with pytest.raises(DataError, match=r"^cannot write .*metrics\.npz: .*No space left on device"):
        store.write_metric_column(code, "ref_loss", np.zeros(num_samples))
    assert folder_bytes(code) == before
    assert sorted(p.name for p in code.iterdir()) == sorted(before)
