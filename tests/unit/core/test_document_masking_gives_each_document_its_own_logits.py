"""Document masking of packed rows: each document of a row gets the logits it gets alone.

From issue 32 (item 6). Three documents packed by ``prepare --pack`` into one row of 32 tokens
are read by the phase loader as the trainer reads them: ``position_ids`` restart at 0 at each
document, the label of each document's first token (past the row's first) is ignored, and the
row's logits, document by document, equal each document's logits alone (1e-5) with the
default model (a HF GPT-2, SDPA) and an HF GPT-2 built from a tiny config under
``attn_implementation`` ``"sdpa"`` and ``"eager"``, through ``position_ids`` with
``attention_mask=None`` and through the 4-D block mask. A packed stream prepared before the
``doc_starts`` column existed, an unpacked one, and ``document_masking: false`` give today's
micro-batches; a phase resumed from a loader state of before (no ``document_masking`` key) stays
unmasked.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from helpers import make_dataset

from curriculum_ds.config import PhaseConfig
from curriculum_ds.core.loader import PhaseLoader
from curriculum_ds.core.loader_state import LoaderState
from curriculum_ds.core.loss import IGNORE_INDEX
from curriculum_ds.core.microbatch import MicroBatch
from curriculum_ds.data import close_stream, open_stream, read_stream_info
from curriculum_ds.data.streams import streaming_registration
from curriculum_ds.default_model import build_model

DOCS = ["first doc", "the second document", "third!"]  # + EOS each: 10 + 20 + 7 = 37 tokens
ROW = 32  # the first row: all of the first two documents, 2 tokens of the third
STARTS = [0, 10, 30]


def _phase(local: Path, **loader: Any) -> PhaseConfig:
    return PhaseConfig.model_validate(
        {
            "name": "p",
            "duration": "100tok",
            "train_loader": {"streams": [{"local": str(local)}], "max_seq_len": ROW, **loader},
        }
    )


def _first_row(local: Path, **loader: Any) -> MicroBatch:
    phase_loader = PhaseLoader(_phase(local, **loader), 0, seed=0)
    try:
        batch = np.array([[0, 0], [0, 1]], dtype=np.int64)  # the full row, then the short one
        (mb,) = phase_loader.micro_batches(batch, dp_rank=0, dp_world_size=1, micro_batch_size=2)
    finally:
        phase_loader.close()
    return mb


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("docs"), "packed", DOCS, max_seq_len=ROW, pack=True)


def test_prepare_pack_records_each_rows_document_starts(packed: Path) -> None:
    info = read_stream_info(packed)
    assert (info.packed, info.doc_starts) == (True, True)
    with streaming_registration():  # other jobs on this node may open streams at the same time
        ds = open_stream(packed)
    try:
        rows = [(np.asarray(ds[i]["input_ids"]), ds[i]["doc_starts"]) for i in range(2)]
    finally:
        close_stream(ds)
    assert [r.size for r, _ in rows] == [ROW, 5]
    assert rows[0][1].tolist() == STARTS
    assert rows[0][1].dtype == np.int32
    assert rows[1][1].tolist() == [0]  # the second row begins inside the third document
    eos = info.eos_id
    assert [i for i, t in enumerate(rows[0][0].tolist()) if t == eos] == [9, 29]


def test_positions_restart_per_document_and_boundary_labels_are_ignored(packed: Path) -> None:
    mb = _first_row(packed)
    assert mb.position_ids is not None
    expected = [*range(10), *range(20), 0, 1]
    assert mb.position_ids[0].tolist() == expected
    assert mb.position_ids[1].tolist() == [*range(5), *range(ROW - 5)]  # padding: own segment
    labels, ids = mb.labels[0], mb.input_ids[0]
    assert [i for i, v in enumerate(labels.tolist()) if v == IGNORE_INDEX] == [10, 30]
    keep = torch.ones(ROW, dtype=torch.bool)
    keep[[10, 30]] = False
    assert torch.equal(labels[keep], ids[keep])
    assert mb.loss_mask[0].sum().item() == ROW - 1 - 2  # two predictions across a boundary
    assert mb.forward_kwargs() == {"attention_mask": None, "position_ids": mb.position_ids}
    mask = mb.block_causal_mask()
    assert mask.shape == (2, 1, ROW, ROW)
    assert mask.dtype == torch.bool
    assert mask[0, 0, 12, 10].item()  # its own document
    assert not mask[0, 0, 12, 9].item()  # not the one before
    assert not mask[0, 0, 3, 4].item()  # causal


def _logits_match_alone(model: Any, mb: MicroBatch, **kwargs: Any) -> float:
    """Largest |logit difference| between each document in the row and the document alone."""
    model.eval()
    with torch.no_grad():
        row = model(mb.input_ids, use_cache=False, **kwargs).logits[0]
        worst = 0.0
        bounds = [*STARTS, ROW]
        for start, stop in itertools.pairwise(bounds):
            alone = model(mb.input_ids[:1, start:stop], use_cache=False).logits[0]
            worst = max(worst, (row[start:stop] - alone).abs().max().item())
    return worst


def _tiny_gpt2(attn_implementation: str) -> Any:
    from transformers import AutoModelForCausalLM, GPT2Config

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=257, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)


def test_the_default_model_gives_each_document_its_logits_alone(packed: Path) -> None:
    mb = _first_row(packed)
    torch.manual_seed(0)
    cfg = SimpleNamespace(schedule=[_phase(packed)])
    model = build_model(None, cfg, ROW)
    assert model.config._attn_implementation == "sdpa"
    assert _logits_match_alone(model, mb, **mb.forward_kwargs()) < 1e-5
    # without the masking the row's later documents see the earlier ones
    assert _logits_match_alone(model, mb, attention_mask=mb.attention_mask) > 1e-2


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_an_hf_gpt2_gives_each_document_its_logits_alone(
    packed: Path, attn_implementation: str
) -> None:
    mb = _first_row(packed)
    model = _tiny_gpt2(attn_implementation)
    assert model.config._attn_implementation == attn_implementation
    assert _logits_match_alone(model, mb, **mb.forward_kwargs()) < 1e-5
    # the 4-D block mask (bool for SDPA, additive for eager attention) with the positions
    dtype = None if attn_implementation == "sdpa" else torch.float32
    block = mb.block_causal_mask(dtype)
    assert _logits_match_alone(model, mb, attention_mask=block, position_ids=mb.position_ids) < 1e-5


def _strip_doc_starts(src: Path, dst: Path) -> Path:
    """``src`` as a packed stream written before the ``doc_starts`` column: same rows, same
    sidecar files (``curriculum_meta.json`` says ``packed: true``), shards without the column."""
    from streaming import MDSWriter

    shards = dst.parent / f"{dst.name}.shards"
    with streaming_registration():
        ds = open_stream(src)
    try:
        columns = {"input_ids": "ndarray:int32", "num_tokens": "int",
                   "token_entropy": "float64", "compression_ratio": "float64"}  # fmt: skip
        with MDSWriter(out=str(shards), columns=columns, hashes=["sha1"]) as writer:
            for i in range(ds.num_samples):
                writer.write({k: ds[i][k] for k in columns})
    finally:
        close_stream(ds)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("index.json", "shard.*"))
    for path in shards.iterdir():
        shutil.move(path, dst / path.name)
    return dst


def test_a_stream_packed_before_doc_starts_and_masking_off_give_todays_batches(
    packed: Path, tmp_path: Path
) -> None:
    old = _strip_doc_starts(packed, tmp_path / "old")
    info = read_stream_info(old)
    assert (info.packed, info.doc_starts) == (True, False)
    masked = _first_row(packed)
    for mb in (_first_row(old), _first_row(packed, document_masking=False)):
        assert mb.position_ids is None
        assert torch.equal(mb.input_ids, masked.input_ids)
        real = mb.attention_mask.bool()
        assert torch.equal(mb.labels[real], mb.input_ids[real])  # every token bears its loss
        assert (mb.labels[~real] == IGNORE_INDEX).all()
        assert mb.forward_kwargs() == {"attention_mask": mb.attention_mask}


def test_an_unpacked_stream_is_not_touched(tmp_path: Path) -> None:
    unpacked = make_dataset(tmp_path, "unpacked", DOCS, max_seq_len=ROW)
    assert read_stream_info(unpacked).doc_starts is False
    mb = _first_row(unpacked)
    assert mb.position_ids is None


def test_a_phase_resumed_from_a_state_of_before_stays_unmasked(packed: Path) -> None:
    loader = PhaseLoader(_phase(packed), 0, seed=0)
    try:
        loader.next_global_batch(2)
        saved = loader.state_dict()
        assert saved["document_masking"] is True
        del saved["document_masking"]  # as every checkpoint before document masking
        resumed = PhaseLoader(_phase(packed), 0, seed=0)
        try:
            resumed.load_state_dict(saved)
            assert "document_masking" not in resumed.state_dict()
            assert resumed.state_dict() == saved
            batch = resumed.next_global_batch(2)
            (mb,) = resumed.micro_batches(batch, dp_rank=0, dp_world_size=1, micro_batch_size=2)
            assert mb.position_ids is None
        finally:
            resumed.close()
        again = PhaseLoader(_phase(packed), 0, seed=0)
        try:
            again.restore(LoaderState.from_dict({**saved, "document_masking": True}))
            assert again.reader.masks_documents is True
        finally:
            again.close()
    finally:
        loader.close()
