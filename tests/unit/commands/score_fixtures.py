"""Shared pieces of the ``curriculum-ds score`` tests: byte-level data and a tiny GPT-2 folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from helpers import make_dataset, ragged_docs

BYTE_VOCAB = 257  # the byte tokenizer: ids 0-255 are bytes, 256 is EOS


def tiny_gpt2(root: Path, *, vocab_size: int = BYTE_VOCAB, n_positions: int = 128) -> Path:
    """A 1-layer GPT-2 (n_embd 32), seeded weights, saved with save_pretrained into root/name."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=vocab_size, n_positions=n_positions, n_embd=32, n_layer=1, n_head=2
    )
    folder = root / f"gpt2_v{vocab_size}_p{n_positions}"
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def two_folders(root: Path) -> tuple[Path, Path]:
    """Two prepared byte-level folders of ragged samples (max_seq_len 64: some are cut)."""
    return (
        make_dataset(root, "code", ragged_docs(23, seed=3, min_len=4, max_len=90)),
        make_dataset(root, "prose", ragged_docs(17, seed=4, min_len=4, max_len=50)),
    )


def samples(folder: Path) -> list[np.ndarray]:
    """Every sample's ``input_ids`` of a folder, in order, read by mosaicml-streaming."""
    from curriculum_ds.data import close_stream, open_stream

    ds = open_stream(folder)
    try:
        return [np.asarray(ds[i]["input_ids"]).astype(np.int64) for i in range(ds.num_samples)]
    finally:
        close_stream(ds)


def one_at_a_time(model_dir: Path, ids: list[np.ndarray]) -> np.ndarray:
    """Each sample's mean next-token cross-entropy (nats), one unpadded sample per forward.

    The oracle: ``torch.nn.functional.cross_entropy`` of logits[:-1] against ids[1:], written
    here without the package's loss code.
    """
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    out = []
    with torch.no_grad():
        for sample in ids:
            x = torch.from_numpy(sample)[None]
            logits = model(x).logits[0].float()
            out.append(F.cross_entropy(logits[:-1], x[0, 1:]).item())
    return np.asarray(out, dtype=np.float64)


def metrics_members(folder: Path) -> dict[str, bytes]:
    """The raw bytes of each member of a folder's ``metrics.npz``."""
    import zipfile

    with zipfile.ZipFile(folder / "metrics.npz") as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file of a folder, by name, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def invoke(*args: Any) -> Any:
    """``curriculum-ds score ARGS`` through click's runner."""
    from click.testing import CliRunner

    from curriculum_ds.cli import main

    return CliRunner().invoke(main, ["score", *[str(a) for a in args]])
