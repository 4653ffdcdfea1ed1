"""The facts generator of ``configs/experiments/facts/`` (``curriculum-ds demo --facts``).

* Deterministic: the same seed writes the same bytes; another seed other people.
* Every person's every attribute is stated in training and asked once in the held-out questions,
  whose templates never occur in training: no QA prompt template's text (its fixed parts) is
  in any training document, and no QA template is a training template.
* The questions prepare as QA records and the biographies as packed text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from curriculum_ds.commands.facts import (
    ATTRIBUTES,
    QA_TEMPLATES,
    TRAIN_TEMPLATES,
    build_facts_data,
    write_facts,
)
from curriculum_ds.data import read_stream_info


def test_same_seed_same_bytes_other_seed_other_people(tmp_path: Path) -> None:
    a = write_facts(tmp_path / "a", num_people=60, seed=3)
    b = write_facts(tmp_path / "b", num_people=60, seed=3)
    c = write_facts(tmp_path / "c", num_people=60, seed=4)
    assert a.train.read_bytes() == b.train.read_bytes()
    assert a.qa.read_bytes() == b.qa.read_bytes()
    assert a.qa.read_bytes() != c.qa.read_bytes()
    assert (a.num_people, a.num_documents, a.num_questions) == (60, 240, 240)


def _fixed_parts(template: str) -> list[str]:
    return [part for part in re.split(r"\{[a-z]+\}", template) if part.strip()]


def test_every_fact_is_trained_and_asked_with_templates_never_in_training(tmp_path: Path) -> None:
    files = write_facts(tmp_path, num_people=50, seed=0)
    docs = [json.loads(line)["text"] for line in files.train.read_text().splitlines()]
    records = [json.loads(line) for line in files.qa.read_text().splitlines()]
    corpus = "\n".join(docs)
    # the held-out wording never occurs in training, as a template or as text
    train_templates = {t for ts in TRAIN_TEMPLATES.values() for t in ts}
    for prompt, _ in QA_TEMPLATES.values():
        assert prompt not in train_templates
        for part in _fixed_parts(prompt):
            assert part.strip() not in corpus, part
    # each record's answer is a fact its person's biographies state
    assert len(records) == 50 * len(ATTRIBUTES)
    for record in records:
        name = re.search(r"(?:was|is|did) ([A-Z][a-z]+ [A-Z][a-z]+)(?:'s)? ", record["prompt"])
        assert name is not None, record
        theirs = [d for d in docs if name.group(1) in d]
        assert len(theirs) == 4  # docs_per_person biographies each
        assert all(record["answer"].strip() in d for d in theirs)


def test_the_data_folders_are_prepared(tmp_path: Path) -> None:
    data = build_facts_data(tmp_path, num_people=20, seed=1)
    facts, qa = (
        read_stream_info(data / "train" / "facts"),
        read_stream_info(data / "val" / "facts_qa"),
    )
    assert facts.packed
    assert not facts.qa
    assert qa.qa
    assert qa.num_samples == 80
    again = build_facts_data(tmp_path, num_people=20, seed=1)  # reused: the same sources
    assert again == data
