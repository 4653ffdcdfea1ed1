"""The documents of the adaptive-mixing runs: learnable cycles of characters, and noise."""

from __future__ import annotations

import random


def cycle_docs(num_docs: int, alphabet: str, *, seed: int) -> list[str]:
    """Runs of ``alphabet`` in order, from a random start, of 20-60 characters."""
    rng = random.Random(seed)
    docs = []
    for _ in range(num_docs):
        start, length = rng.randrange(len(alphabet)), rng.randint(20, 60)
        docs.append("".join(alphabet[(start + i) % len(alphabet)] for i in range(length)))
    return docs


def noise_docs(num_docs: int, *, seed: int) -> list[str]:
    """Random printable characters: nothing to learn beyond their uniform distribution."""
    rng = random.Random(seed)
    alphabet = [chr(c) for c in range(33, 127)]
    return [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(20, 60))) for _ in range(num_docs)
    ]
