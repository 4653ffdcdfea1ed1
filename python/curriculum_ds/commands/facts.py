"""Synthetic biographies and held-out questions: the data of ``configs/experiments/facts/``.

``curriculum-ds demo --facts`` writes, beside the demo's docstrings and code, a stream of facts
about :data:`DEFAULT_PEOPLE` invented people and a question-answer eval stream about the same
people, after the phase-transition study of Gu et al., "Data Mixing Can Induce Phase
Transitions in Knowledge Acquisition" (NeurIPS 2025): mixed into ordinary text below a critical
ratio, such facts are barely recalled; above it, most are.

* **People.** Each has a unique name (first + last name, drawn without repetition) and four
  attributes (:data:`ATTRIBUTES`): birth year, birth city, employer, university.
* **Training stream** (``facts.jsonl``, one document per biography): every person gets
  ``docs_per_person`` biographies, each stating all four attributes in a shuffled order, each
  sentence drawn from that attribute's :data:`TRAIN_TEMPLATES`.
* **Held-out questions** (``facts_qa.jsonl``, ``prepare --format qa`` records): one question per
  person and attribute, worded by :data:`QA_TEMPLATES`, which never occur in training (no QA
  template's text is a substring of any training document; a test checks it). The answer is the
  attribute's value after a space.

Deterministic: the same ``seed`` and sizes give byte-identical files (Python's ``random.Random``,
whose sequence for a given seed is fixed across versions for ``randrange``/``shuffle``/``choice``
on the same inputs).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import click

__all__ = [
    "ATTRIBUTES",
    "DEFAULT_PEOPLE",
    "QA_TEMPLATES",
    "TRAIN_TEMPLATES",
    "FactsFiles",
    "Person",
    "build_facts_data",
    "make_people",
    "write_facts",
]

DEFAULT_PEOPLE = 100
"""People of ``demo --facts``: 400 facts, few enough that a 0.4M-parameter proxy could hold them
(a guess, to be checked by the pilot: docs/ablate.md)."""

ATTRIBUTES = ("year", "city", "employer", "university")
"""Each person's attributes, in the order of :class:`Person`'s fields after ``name``."""

_FIRST = (
    "Ada Alan Alice Amara Anton Ava Bela Boris Carla Cyrus Dalia Darius Edith Elio Elsa Emil "
    "Farah Felix Greta Gustav Hana Hugo Ilse Ivan Jana Jonas Kaia Karel Lena Lucas Maja Marek "
    "Nadia Nils Olga Oskar Petra Pavel Rosa Rufus Selma Stefan Tara Teodor Una Viktor Wanda Yuri"
).split()
_LAST = (
    "Abbott Barros Castell Dorn Ekberg Falk Gallo Hartig Ibsen Jovic Kessler Lindqvist Moreau "
    "Novak Okafor Pardo Quist Rasku Sandoval Tamm Ulbrich Varga Wexler Yilmaz Zeller Brandt "
    "Coelho Duval Engel Ferrante Grube Holm Ivers Janik Kuhn Lorenz Maas Nyberg Orsini Pohl"
).split()
_CITIES = (
    "Aarhus Bergen Bilbao Bologna Bremen Brno Cork Dijon Gdansk Ghent Graz Krakow Leeds Lille "
    "Linz Lyon Malmo Nantes Odense Porto Riga Split Tartu Turin Turku Utrecht Vigo Zagreb"
).split()
_EMPLOYERS = (
    "Acme Labs|Birch Motors|Cobalt Foods|Delta Shipping|Ember Textiles|Fjord Energy|"
    "Granite Bank|Harbor Press|Iris Optics|Juniper Rail|Kestrel Air|Lumen Chemicals|"
    "Maple Insurance|Nimbus Software|Orchid Pharma|Pinnacle Steel|Quartz Mining|Raven Media"
).split("|")
_UNIVERSITIES = (
    "Alder College|Beacon University|Cedar Institute|Dune University|Elm College|"
    "Falcon University|Glacier Institute|Heath College|Ivy Hill University|Jade Institute"
).split("|")

TRAIN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "year": (
        "{name} was born in {year}.",
        "{name} came into the world in {year}.",
        "The year {name} was born was {year}.",
    ),
    "city": (
        "{name} was born in the city of {city}.",
        "{name}'s birthplace is {city}.",
        "{name} spent early childhood in {city}.",
    ),
    "employer": (
        "{name} works for {employer}.",
        "{name} is employed by {employer}.",
        "{name} took a job at {employer}.",
    ),
    "university": (
        "{name} studied at {university}.",
        "{name} graduated from {university}.",
        "{name} earned a degree at {university}.",
    ),
}
"""The training sentences of each attribute (``{name}`` and the attribute's field)."""

QA_TEMPLATES: dict[str, tuple[str, str]] = {
    "year": ("Q: In what year was {name} born? A:", " {year}"),
    "city": ("Q: Which city is {name} from? A:", " {city}"),
    "employer": ("Q: Who is {name}'s employer? A:", " {employer}"),
    "university": ("Q: Where did {name} go to university? A:", " {university}"),
}
"""The held-out question of each attribute: ``(prompt, answer)`` templates, never in training."""


@dataclass(frozen=True)
class Person:
    """One invented person and their attributes."""

    name: str
    year: str
    city: str
    employer: str
    university: str


@dataclass(frozen=True)
class FactsFiles:
    """What :func:`write_facts` wrote."""

    train: Path
    """``facts.jsonl``: the biographies, ``{"text": ...}`` per line."""
    qa: Path
    """``facts_qa.jsonl``: the held-out questions, ``{"prompt", "answer"}`` per line."""
    num_people: int
    num_documents: int
    num_questions: int


def make_people(num_people: int, seed: int) -> list[Person]:
    """``num_people`` people with distinct names and drawn attributes; deterministic.

    Raises:
        ValueError: more people than distinct names (``len(_FIRST) * len(_LAST)``), or < 1.
    """
    names = [f"{first} {last}" for first in _FIRST for last in _LAST]
    if not 1 <= num_people <= len(names):
        raise ValueError(f"num_people must be in [1, {len(names)}], got {num_people}")
    rng = random.Random(seed)
    return [
        Person(
            name=name,
            year=str(1900 + rng.randrange(100)),
            city=rng.choice(_CITIES),
            employer=rng.choice(_EMPLOYERS),
            university=rng.choice(_UNIVERSITIES),
        )
        for name in rng.sample(names, num_people)
    ]


def biography(person: Person, rng: random.Random) -> str:
    """One biography: every attribute once, in a shuffled order, each by a drawn template."""
    order = list(ATTRIBUTES)
    rng.shuffle(order)
    fields = vars(person)
    return " ".join(rng.choice(TRAIN_TEMPLATES[a]).format(**fields) for a in order)


def write_facts(
    out: Path, *, num_people: int = DEFAULT_PEOPLE, docs_per_person: int = 4, seed: int = 0
) -> FactsFiles:
    """Write ``out/facts.jsonl`` and ``out/facts_qa.jsonl`` (see the module docstring).

    Args:
        out: the folder (created).
        num_people: people invented.
        docs_per_person: biographies per person in the training stream (shuffled together).
        seed: draws the people, the biographies and their order.

    Returns:
        The files and counts. Deterministic: same arguments, same bytes.
    """
    out.mkdir(parents=True, exist_ok=True)
    people = make_people(num_people, seed)
    rng = random.Random(seed + 1)
    docs = [biography(p, rng) for p in people for _ in range(docs_per_person)]
    rng.shuffle(docs)
    train = out / "facts.jsonl"
    train.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    qa = out / "facts_qa.jsonl"
    records = [
        {"prompt": prompt.format(**vars(p)), "answer": answer.format(**vars(p))}
        for p in people
        for prompt, answer in (QA_TEMPLATES[a] for a in ATTRIBUTES)
    ]
    qa.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return FactsFiles(train, qa, len(people), len(docs), len(records))


def build_facts_data(out: Path, *, num_people: int = DEFAULT_PEOPLE, seed: int = 0) -> Path:
    """``demo --facts``: the facts and their questions prepared under ``out/data``; returns it.

    ``out/data/train/facts`` (the biographies, byte tokens packed into rows of 128, as the
    docstrings) and ``out/data/val/facts_qa`` (the held-out questions, ``--format qa``), from
    ``out/corpus/facts/``. Rebuilt whenever the generated files change (another seed or size).
    """
    from curriculum_ds.data import prepare

    corpus = out / "corpus" / "facts"
    files = write_facts(corpus, num_people=num_people, seed=seed)
    data_dir = out / "data"
    for target, source, kind in (
        (data_dir / "train" / "facts", files.train, "text"),
        (data_dir / "val" / "facts_qa", files.qa, "qa"),
    ):
        stamp = corpus / f"{target.name}.prepared"  # the source bytes the folder was made from
        digest = _digest(source)
        if target.is_dir() and stamp.is_file() and stamp.read_text() == digest:
            continue
        shutil.rmtree(target, ignore_errors=True)
        summary = prepare(
            [source],
            target,
            max_seq_len=128,
            pack=kind == "text",
            format="qa" if kind == "qa" else None,
        )
        stamp.write_text(digest)
        click.echo(
            f"prepared {target.relative_to(data_dir)}: {summary.num_samples:,} "
            f"{'packed rows' if kind == 'text' else 'QA records'}, {summary.num_tokens:,} tokens"
        )
    click.echo(
        f"facts: {files.num_people} people, {files.num_documents} biographies, "
        f"{files.num_questions} held-out questions (seed {seed})"
    )
    return data_dir


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
