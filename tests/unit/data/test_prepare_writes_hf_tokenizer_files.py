"""``prepare`` writes the tokenizer it used as Hugging Face files (``tokenizer.json`` in the
``tokenizers`` format, ``tokenizer_config.json``), so ``AutoTokenizer.from_pretrained`` on the
data folder (and on an export, which copies them) encodes a text to the ids the data holds.

From issue 32, item 5.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers import make_dataset

from curriculum_ds.data.tokenizers import HF_TOKENIZER_FILES, ByteTokenizer, HFTokenizer

TEXTS = [
    "plain ascii",
    "héllo wörld — ✓ 日本語 🎉",
    "tabs\tand\nnewlines\r\n and a NUL \x00 byte",
    "  leading spaces and combining e\u0301",
    "",
]


def test_the_byte_tokenizers_hf_files_encode_to_the_utf8_bytes(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    byte = ByteTokenizer()
    for name, text in byte.hf_files().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    hf = AutoTokenizer.from_pretrained(tmp_path)
    assert hf.eos_token_id == byte.eos_id == 256
    assert len(hf) == byte.vocab_size
    for text in TEXTS:
        ids = hf(text)["input_ids"]
        assert ids == byte.encode(text)[:-1].tolist()  # ours appends EOS, HF's does not
        assert hf.decode(ids) == text
    assert hf.decode([104, 105, 256], skip_special_tokens=True) == "hi"


def test_prepare_writes_them_into_the_data_folder(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    data = make_dataset(tmp_path, "d", ["a first document", "ein zweites Dokument ü"])
    assert all((data / name).is_file() for name in HF_TOKENIZER_FILES)
    hf = AutoTokenizer.from_pretrained(data)
    assert hf("ü")["input_ids"] == list("ü".encode())


def test_a_given_tokenizer_json_is_written_as_given(tmp_path: Path) -> None:
    byte_files = ByteTokenizer().hf_files()  # any valid tokenizer.json will do
    given = tmp_path / "given.json"
    given.write_text(byte_files["tokenizer.json"], encoding="utf-8")
    files = HFTokenizer(given).hf_files()
    assert files["tokenizer.json"] == given.read_text(encoding="utf-8")
    assert json.loads(files["tokenizer_config.json"]) == {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
    }
