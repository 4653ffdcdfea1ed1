"""``prepare --format qa``: question-answer records, one sample each, with a ``prompt_len`` column.

* A record is its prompt's tokens, then its answer's, then EOS; ``prompt_len`` (an MDS column and
  a ``metrics.npz`` column) counts the prompt's; the output is byte-identical when prepared twice.
* Refused in one line naming ``path:line``, nothing written: a record without ``prompt`` or
  ``answer``, an empty answer (or prompt), an answer longer than ``max_seq_len`` minus the prompt;
  ``--pack`` and ``--val-fraction`` with ``--format qa``.
* A phase's micro-batches of a QA stream bear loss on the answer only; the tokens counted are
  every input token.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from curriculum_ds.cli import main
from curriculum_ds.core.loss import IGNORE_INDEX
from curriculum_ds.core.sample_reader import SampleReader
from curriculum_ds.data import open_stream, prepare, read_stream_info
from curriculum_ds.errors import DataError

RECORDS = [
    {"prompt": "When was Ada born? ", "answer": "1815"},
    {"prompt": "Where does Bo live? ", "answer": "Oslo"},
    {"prompt": "Q: ", "answer": "a longer answer of several words"},
]


def _jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_record_is_prompt_answer_eos_with_its_prompt_len(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "qa.jsonl", RECORDS)
    summary = prepare([src], tmp_path / "out", max_seq_len=64, format="qa")
    assert (summary.num_documents, summary.num_samples) == (3, 3)
    info = read_stream_info(tmp_path / "out")
    assert info.qa
    ds = open_stream(tmp_path / "out")
    for i, record in enumerate(RECORDS):
        prompt, answer = (record[k].encode() for k in ("prompt", "answer"))
        sample = ds[i]
        assert list(sample["input_ids"]) == [*prompt, *answer, 256]
        assert sample["prompt_len"] == len(prompt) == info.metrics["prompt_len"][i]
        assert info.metrics["num_tokens"][i] == len(prompt) + len(answer) + 1
    assert info.metrics["prompt_len"].dtype == np.int64
    # deterministic: the same records, the same bytes
    prepare([src], tmp_path / "again", max_seq_len=64, format="qa")
    for name in ("index.json", "metrics.npz", "curriculum_meta.json", "shard.00000.mds"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    assert not read_stream_info(_plain(tmp_path)).qa


def _plain(tmp_path: Path) -> Path:
    src = tmp_path / "plain.jsonl"
    src.write_text(json.dumps({"text": "some text"}) + "\n")
    prepare([src], tmp_path / "plain", max_seq_len=64)
    return tmp_path / "plain"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"answer": "1815"}, r"qa\.jsonl:2: missing field 'prompt' \(fields: answer\)"),
        ({"prompt": "Who? "}, r"qa\.jsonl:2: missing field 'answer' \(fields: prompt\)"),
        ({"prompt": "Who? ", "answer": ""}, r"qa\.jsonl:2: field 'answer' is empty"),
        ({"prompt": "", "answer": "x"}, r"qa\.jsonl:2: field 'prompt' is empty"),
        ({"prompt": "Who? ", "answer": 3}, r"qa\.jsonl:2: field 'answer' must be a string"),
        (
            {"prompt": "p" * 50, "answer": "a" * 14},
            r"qa\.jsonl:2: the answer takes 15 tokens with its EOS but max_seq_len 64 minus the "
            r"prompt's 50 leaves 14",
        ),
    ],
)
def test_a_bad_record_is_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, record: dict[str, object], message: str
) -> None:
    src = _jsonl(tmp_path / "qa.jsonl", [RECORDS[0], record])
    with pytest.raises(DataError, match=message) as err:
        prepare([src], tmp_path / "out", max_seq_len=64, format="qa")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["qa.jsonl"]


def test_the_cli_refuses_in_one_line(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "qa.jsonl", [{"prompt": "Who? ", "answer": ""}])
    out = str(tmp_path / "out")
    for extra in ([], ["--pack"], ["--val-fraction", "0.5"]):
        result = CliRunner().invoke(
            main, ["prepare", str(src), "--out", out, "--format", "qa", *extra]
        )
        assert result.exit_code == 1, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "out").exists()
    ok = _jsonl(tmp_path / "ok.jsonl", RECORDS)
    result = CliRunner().invoke(main, ["prepare", str(ok), "--out", out, "--format", "qa"])
    assert result.exit_code == 0, result.output
    assert "from 3 records" in result.output


def test_a_qa_micro_batch_bears_loss_on_the_answer_only(tmp_path: Path) -> None:
    qa = prepare([_jsonl(tmp_path / "qa.jsonl", RECORDS)], tmp_path / "qa", format="qa").out
    plain = _plain(tmp_path)
    infos = [read_stream_info(qa), read_stream_info(plain)]
    reader = SampleReader(
        ["qa", "plain"],
        [str(qa), str(plain)],
        [None, None],
        prompt_lens=[info.metrics.get("prompt_len") for info in infos],
    )
    try:
        pairs = np.array([[0, 2], [1, 0], [0, 0]], dtype=np.int64)
        mb = reader.micro_batch(pairs, np.arange(3, dtype=np.int64), 64)
        via_streaming = reader.fetch_each(pairs, 64)
    finally:
        reader.close()
    for row, (stream, index) in enumerate(pairs.tolist()):
        length = int(infos[stream].metrics["num_tokens"][index])
        prompt = int(infos[0].metrics["prompt_len"][index]) if stream == 0 else 0
        assert int(mb.attention_mask[row].sum()) == length  # every input token is read
        assert mb.input_ids[row, :length].tolist() == via_streaming[row].tolist()
        labels = mb.labels[row]
        assert (labels[:prompt] == IGNORE_INDEX).all()
        assert labels[prompt:length].tolist() == mb.input_ids[row, prompt:length].tolist()
        assert (labels[length:] == IGNORE_INDEX).all()
    # the loss-bearing tokens: each QA record's answer and EOS, the plain text's all but the first
    answers = [len(RECORDS[2]["answer"]) + 1, len(RECORDS[0]["answer"]) + 1]
    plain_tokens = int(infos[1].metrics["num_tokens"][0]) - 1
    assert int(mb.loss_mask.sum()) == sum(answers) + plain_tokens
