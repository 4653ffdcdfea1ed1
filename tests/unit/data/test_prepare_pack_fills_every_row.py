"""``prepare --pack`` (issue 12 part 1): documents concatenated, EOS-separated, into full rows.

Every row but the last holds exactly ``max_seq_len`` tokens; the rows, concatenated, are the
unpacked token stream (no token lost or duplicated), so removing EOS gives back each document's
bytes; per-row metrics are the metrics of the row; ``curriculum_meta.json`` says ``packed``; the
padding fraction of both layouts is reported, and a packed row longer than a phase's
``max_seq_len`` is refused in one line before training. Each row records where its documents
start (issue 32, document masking).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import make_dataset, one_error_line, ragged_docs, two_phase_curriculum, write_ds_config
from prepared_mds import BYTE, read_all, write
from test_prepare_with_an_hf_tokenizer_json import make_wordlevel

from curriculum_ds.cli import main
from curriculum_ds.config import load_config
from curriculum_ds.data import compression_ratio, prepare, read_stream_info, token_entropy
from curriculum_ds.data.packing import PaddingTally, pack_documents, pack_rows
from curriculum_ds.errors import ConfigError, DataError

EOS = BYTE.eos_id
DOCS = [*ragged_docs(200, seed=5, min_len=3, max_len=150), "ünï — ✓ 🦊", "y" * 333]


def _stream(docs: list[str]) -> np.ndarray:
    """The unpacked token stream: every document's bytes followed by EOS, in order."""
    return np.concatenate([np.asarray(BYTE.encode_documents([d])[0]) for d in docs])


@pytest.mark.parametrize("max_seq_len", [2, 7, 64, 128, 4096])
def test_every_row_but_the_last_is_full_and_the_stream_is_unchanged(
    tmp_path: Path, max_seq_len: int
) -> None:
    out = make_dataset(tmp_path, "packed", DOCS, max_seq_len=max_seq_len, pack=True)
    rows = [np.asarray(r["input_ids"]) for r in read_all(out)]
    assert all(row.size == max_seq_len for row in rows[:-1])
    assert 1 <= rows[-1].size <= max_seq_len
    joined = np.concatenate(rows)
    assert joined.tobytes() == _stream(DOCS).astype(joined.dtype).tobytes()  # byte for byte
    # removing EOS gives back the text of the documents, in order
    assert bytes(joined[joined != EOS].astype(np.uint8)) == "".join(DOCS).encode()
    assert int((joined == EOS).sum()) == len(DOCS)
    expected_rows = -(-joined.size // max_seq_len)
    assert len(rows) == expected_rows


def test_per_row_metrics_and_meta(tmp_path: Path) -> None:
    out = make_dataset(tmp_path, "packed", DOCS, max_seq_len=128, pack=True)
    rows = read_all(out)
    info = read_stream_info(out)
    assert info.packed is True
    assert info.max_seq_len == 128
    meta = json.loads((out / "curriculum_meta.json").read_text())
    assert (meta["packed"], meta["max_seq_len"], meta["min_tokens"]) == (True, 128, 1)
    assert meta["num_documents"] == len(DOCS)
    assert meta["num_tokens"] == _stream(DOCS).size
    for i, row in enumerate(rows):
        ids = np.asarray(row["input_ids"])
        assert row["num_tokens"] == ids.size == info.metrics["num_tokens"][i]
        assert row["token_entropy"] == token_entropy(ids) == info.metrics["token_entropy"][i]
        ratio = compression_ratio(ids, eos_id=EOS, pack_dtype=np.uint8)
        assert row["compression_ratio"] == ratio == info.metrics["compression_ratio"][i]
    unpacked = make_dataset(tmp_path, "unpacked", DOCS, max_seq_len=128)
    assert read_stream_info(unpacked).packed is False
    assert json.loads((unpacked / "curriculum_meta.json").read_text())["packed"] is False


def test_pack_rows_holds_the_stream_for_any_cut() -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50, size=n).astype(np.int32) for n in rng.integers(0, 40, size=300)]
    for row_len in (1, 3, 16, 39, 10_000):
        rows = list(pack_rows(iter(docs), row_len))
        assert [r.size for r in rows[:-1]] == [row_len] * (len(rows) - 1)
        assert np.array_equal(np.concatenate(rows), np.concatenate(docs))


def test_pack_documents_records_where_every_document_starts() -> None:
    rng = np.random.default_rng(1)
    docs = [rng.integers(0, 50, size=n).astype(np.int32) for n in rng.integers(0, 40, size=300)]
    doc_starts = np.cumsum([0, *(d.size for d in docs if d.size)])[:-1]  # in the whole stream
    for row_len in (1, 3, 16, 39, 10_000):
        offset, found = 0, []
        for row, starts in pack_documents(iter(docs), row_len):
            assert starts.dtype == np.int32
            assert starts[0] == 0  # the row's first token opens a segment, always
            assert (np.diff(starts) > 0).all()
            assert starts[-1] < row.size
            found += [offset + int(s) for s in starts]
            offset += row.size
        # every document start, plus each row's first token where a document continues
        row_firsts = set(range(0, offset, row_len))
        assert sorted(set(found)) == found
        assert set(found) == set(doc_starts.tolist()) | row_firsts


def test_padding_fraction_of_both_layouts(tmp_path: Path) -> None:
    # documents of 10, 10 and 25 tokens (EOS included) at max_seq_len 20, min_tokens 2
    tally = PaddingTally(20, 2)
    for n in (10, 10, 25):
        tally.add(n)
    # unpacked: rows 10, 10, 20, 5 -> 45 tokens in 80 slots; packed: 45 tokens in 3 rows (60)
    assert tally.unpacked == pytest.approx(1 - 45 / 80)
    assert tally.packed == pytest.approx(1 - 45 / 60)
    docs = ["a" * 9, "b" * 9, "c" * 24]
    src = write(tmp_path / "d.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in docs))
    for pack, word in ((False, "unpacked"), (True, "packed")):
        result = CliRunner().invoke(
            main,
            ["prepare", str(src), "--out", str(tmp_path / word), "--max-seq-len", "20"]
            + (["--pack"] if pack else []),
        )
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        what = "3 packed rows" if pack else "4 samples"
        assert lines[0].startswith(f"wrote {what} (45 tokens, vocab 257) from 3 documents")
        assert lines[1] == (
            "padding at max_seq_len 20 (rows padded to it): 43.8% unpacked, 25.0% packed; "
            f"written {word}"
        )


def test_pack_needs_an_eos_token(tmp_path: Path) -> None:
    plain = make_wordlevel(tmp_path / "plain.json", [])
    src = write(tmp_path / "d.jsonl", '{"text": "the cat"}\n')
    with pytest.raises(DataError, match=r"^--pack needs a tokenizer with an end-of-document"):
        prepare([src], tmp_path / "ds", tokenizer=plain, pack=True)
    assert not (tmp_path / "ds").exists()


def test_packed_rows_longer_than_a_phase_are_refused_before_training(tmp_path: Path) -> None:
    packed = make_dataset(tmp_path, "packed", DOCS, max_seq_len=64, pack=True)
    short = make_dataset(tmp_path, "short", DOCS[:50], max_seq_len=32)
    curriculum = two_phase_curriculum(short, packed)
    curriculum["schedule"][1]["train_loader"]["max_seq_len"] = 32
    cfg = write_ds_config(tmp_path / "ds.json", curriculum)
    with pytest.raises(ConfigError) as info:
        load_config(cfg, check_data=True)
    message = str(info.value)
    assert message.startswith("curriculum.schedule[1] (")
    assert "is packed into rows of 64 tokens, longer than the phase's max_seq_len 32" in message
    line = one_error_line(CliRunner().invoke(main, ["validate", str(cfg)]))
    assert "is packed into rows of 64 tokens" in line
    # a phase at least as long as the rows reads them whole
    curriculum["schedule"][1]["train_loader"]["max_seq_len"] = 64
    load_config(write_ds_config(tmp_path / "ok.json", curriculum), check_data=True)


def test_num_tokens_cannot_bucket_packed_rows(tmp_path: Path) -> None:
    packed = make_dataset(tmp_path, "packed", DOCS, max_seq_len=64, pack=True)
    short = make_dataset(tmp_path, "short", DOCS[:50], max_seq_len=64)
    curriculum = two_phase_curriculum(short, packed, static_metric="num_tokens")
    with pytest.raises(
        ConfigError,
        match=r'^curriculum\.dynamic\.static_metric: "num_tokens" is the same for every row of '
        r"the packed stream .*packed\" \(schedule\[1\] \(\"mix\"\)\.train_loader\.streams\[1\]\), ",
    ):
        load_config(write_ds_config(tmp_path / "ds.json", curriculum), check_data=True)
    curriculum["dynamic"]["static_metric"] = "compression_ratio"
    load_config(write_ds_config(tmp_path / "ok.json", curriculum), check_data=True)


def test_phase_loader_refuses_packed_rows_longer_than_its_phase(tmp_path: Path) -> None:
    from curriculum_ds.config import PhaseConfig
    from curriculum_ds.core.loader import PhaseLoader

    packed = make_dataset(tmp_path, "packed", DOCS, max_seq_len=64, pack=True)

    def phase(max_seq_len: int) -> PhaseConfig:
        return PhaseConfig.model_validate(
            {
                "name": "p",
                "duration": "1000tok",
                "train_loader": {"streams": [{"local": str(packed)}], "max_seq_len": max_seq_len},
            }
        )

    with pytest.raises(ConfigError, match=r"^curriculum\.schedule\[2\] \('p'\)\.train_loader"):
        PhaseLoader(phase(32), 2, seed=0)
    loader = PhaseLoader(phase(64), 2, seed=0)
    batch = loader.next_global_batch(16)
    lengths = read_stream_info(packed).metrics["num_tokens"]
    assert [r.size for r in loader.fetch(batch)] == [lengths[i] for _, i in batch]  # whole rows
    loader.close()
