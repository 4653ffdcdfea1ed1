"""prepare with a Hugging Face tokenizer.json: its ids, its EOS (or none) and the recorded meta."""

from __future__ import annotations

import json
from pathlib import Path

from prepared_mds import documents_of, read_all, write

from curriculum_ds.data import HFTokenizer, prepare, read_stream_info


def make_wordlevel(path: Path, specials: list[str]) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["the cat sat on the mat", "a dog ate the cat food", "hello world"]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]", *specials]))
    tok.save(str(path))
    return path


def test_hf_tokenizer_json(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok_path = make_wordlevel(tmp_path / "tokenizer.json", ["</s>"])
    ref = Tokenizer.from_file(str(tok_path))
    eos = ref.token_to_id("</s>")
    texts = ["the cat sat on the mat", "hello world the dog", "unknown words here"]
    src = write(tmp_path / "d.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in texts))
    summary = prepare([src], tmp_path / "ds", tokenizer=tok_path, max_seq_len=4, min_tokens=1)
    assert summary.vocab_size == ref.get_vocab_size()
    rows = read_all(tmp_path / "ds")
    assert all(r["num_tokens"] <= 4 for r in rows)
    docs = documents_of(rows, eos_id=eos)
    assert docs == [ref.encode(t, add_special_tokens=False).ids for t in texts]
    assert ref.decode(docs[0]) == texts[0]
    meta = json.loads((tmp_path / "ds" / "curriculum_meta.json").read_text())
    assert meta["vocab_size"] == ref.get_vocab_size()
    assert meta["eos_id"] == eos
    assert meta["tokenizer"]["path"] == str(tok_path.resolve())
    assert len(meta["tokenizer"]["sha256"]) == 64
    info = read_stream_info(tmp_path / "ds")
    assert info.eos_id == eos
    assert info.tokenizer == str(tok_path.resolve())


def test_hf_tokenizer_eos_candidates_and_none(tmp_path: Path) -> None:
    assert HFTokenizer(make_wordlevel(tmp_path / "sep.json", ["[SEP]"])).eos_id is not None
    t = HFTokenizer(make_wordlevel(tmp_path / "end.json", ["<|endoftext|>"]))
    assert t.eos_id == t._tok.token_to_id("<|endoftext|>")
    plain = make_wordlevel(tmp_path / "plain.json", [])
    assert HFTokenizer(plain).eos_id is None
    src = write(tmp_path / "a.txt", "the cat sat")
    prepare([src], tmp_path / "ds", tokenizer=plain)
    rows = read_all(tmp_path / "ds")
    assert [int(i) for i in rows[0]["input_ids"]] == HFTokenizer(plain)._tok.encode(
        "the cat sat"
    ).ids
    assert json.loads((tmp_path / "ds" / "curriculum_meta.json").read_text())["eos_id"] is None
