"""Tokenizers for :func:`curriculum_ds.data.prepare`: the byte-level one and HF ``tokenizer.json``.

Both encode documents to int32 token ids with the end-of-document id appended, describe
themselves for ``curriculum_meta.json``, and give their Hugging Face tokenizer files
(:data:`HF_TOKENIZER_FILES`: ``tokenizer.json`` in the ``tokenizers`` format and a
``tokenizer_config.json``), which ``prepare`` writes into the data folder and ``export`` copies
beside the model, so ``AutoTokenizer.from_pretrained`` loads the tokenizer the data was made
with. Deterministic; no download.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from curriculum_ds.errors import DataError

__all__ = [
    "EOS_TOKEN_CANDIDATES",
    "HF_TOKENIZER_FILES",
    "MAX_VOCAB_SIZE",
    "ByteTokenizer",
    "HFTokenizer",
    "Tokenizer",
    "load_tokenizer",
]

MAX_VOCAB_SIZE = 2**31 - 1
"""Largest ``vocab_size`` accepted: token ids are int32."""

EOS_TOKEN_CANDIDATES: tuple[str, ...] = ("</s>", "<|endoftext|>", "[SEP]")
"""Tokens looked up, in this order, to find a HF tokenizer's end-of-document id."""

HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
"""The files of :meth:`Tokenizer.hf_files`, in a data folder and an exported model folder."""

BYTE_EOS_TOKEN = "<|endoftext|>"
"""The byte tokenizer's EOS (id 256) in its ``tokenizer.json``."""


class Tokenizer(Protocol):
    """What :func:`curriculum_ds.data.prepare` needs from a tokenizer."""

    @property
    def vocab_size(self) -> int:
        """Number of token ids; every id is in ``[0, vocab_size)``."""
        ...

    @property
    def eos_id(self) -> int | None:
        """Id appended after every document, or ``None`` when the tokenizer has none."""
        ...

    @property
    def pack_dtype(self) -> type[np.unsignedinteger[Any]]:
        """Narrowest unsigned dtype holding every non-EOS id (used by ``compression_ratio``)."""
        ...

    def describe(self) -> str | dict[str, str]:
        """The ``tokenizer`` entry of ``curriculum_meta.json``."""
        ...

    def hf_files(self) -> dict[str, str]:
        """``{file name: text}`` of :data:`HF_TOKENIZER_FILES`, for ``from_pretrained``."""
        ...

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text, EOS appended when there is one; int32, shape ``(n_i,)``."""
        ...


class ByteTokenizer:
    """Byte-level tokenizer: ids 0–255 are the UTF-8 bytes, 256 is EOS; ``vocab_size`` 257.

    Lossless and deterministic; needs no file. ``decode(encode(text)) == text`` for every string.
    """

    vocab_size: int = 257
    eos_id: int = 256
    pack_dtype = np.uint8

    def encode(self, text: str) -> np.ndarray:
        """Encode one document.

        Args:
            text: Any string.

        Returns:
            int32 array of shape ``(len(text.encode("utf-8")) + 1,)``: the UTF-8 bytes then EOS.
        """
        raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        ids = np.empty(raw.size + 1, dtype=np.int32)
        ids[:-1] = raw
        ids[-1] = self.eos_id
        return ids

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Encode several documents; see :meth:`encode`."""
        return [self.encode(text) for text in texts]

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decode ids back to text, dropping EOS; invalid UTF-8 (a split sample) is replaced."""
        arr = np.asarray(ids, dtype=np.int64)
        arr = arr[arr != self.eos_id]
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(
                f"byte tokenizer ids must be in [0, 256], got {arr.min()}..{arr.max()}"
            )
        return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def describe(self) -> str:
        """Return ``"byte"``, the ``tokenizer`` entry of ``curriculum_meta.json``."""
        return "byte"

    def hf_files(self) -> dict[str, str]:
        """This tokenizer in the ``tokenizers`` format: the same ids for every string.

        A byte-level BPE without merges (GPT-2's byte-to-character map, each of the 256
        characters its byte's id) and :data:`BYTE_EOS_TOKEN` as id 256, so
        ``AutoTokenizer.from_pretrained`` encodes a text to its UTF-8 bytes and decodes them
        back (``PreTrainedTokenizerFast``; no EOS appended: HF's convention).
        """
        from tokenizers import Tokenizer as _HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers
        from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

        vocab = {char: byte for byte, char in bytes_to_unicode().items()}
        vocab[BYTE_EOS_TOKEN] = self.eos_id
        tok = _HFTokenizer(models.BPE(vocab=vocab, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([BYTE_EOS_TOKEN])
        return {
            "tokenizer.json": tok.to_str(pretty=True) + "\n",
            "tokenizer_config.json": _tokenizer_config(BYTE_EOS_TOKEN),
        }


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` loaded with the ``tokenizers`` library (no download).

    Documents are encoded without the tokenizer's own special tokens (its post-processor), then the
    EOS id is appended: the first of :data:`EOS_TOKEN_CANDIDATES` in the vocabulary, else none.
    """

    def __init__(self, path: str | Path) -> None:
        """Load ``path``.

        Raises:
            DataError: the file is missing, unreadable or not a tokenizer.json.
        """
        from tokenizers import Tokenizer as _HFTokenizer

        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"tokenizer file not found: {self.path}")
        try:
            data = self.path.read_bytes()
            self._tok = _HFTokenizer.from_str(data.decode("utf-8"))
        except Exception as err:  # tokenizers raises a bare Exception
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"cannot load tokenizer {self.path}: {msg}") from err
        self.sha256 = hashlib.sha256(data).hexdigest()
        self._text = data.decode("utf-8")
        self.vocab_size: int = int(self._tok.get_vocab_size(with_added_tokens=True))
        if self.vocab_size < 1:
            raise DataError(f"tokenizer {self.path} has an empty vocabulary")
        self.eos_id: int | None = None
        for token in EOS_TOKEN_CANDIDATES:
            token_id = self._tok.token_to_id(token)
            if token_id is not None:
                self.eos_id = int(token_id)
                break
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise DataError(f"tokenizer {self.path}: vocab_size {self.vocab_size} exceeds int32")
        self.pack_dtype = np.uint16 if self.vocab_size <= 2**16 else np.uint32

    def encode_documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text (int32), EOS appended when the tokenizer has one."""
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        out = []
        for enc in encodings:
            ids = enc.ids
            if self.eos_id is not None:
                ids = [*ids, self.eos_id]
            out.append(np.asarray(ids, dtype=np.int32))
        return out

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Decode ids with the tokenizer, skipping special tokens."""
        return str(self._tok.decode([int(i) for i in ids], skip_special_tokens=True))

    def describe(self) -> dict[str, str]:
        """Return ``{"path", "sha256"}``, the ``tokenizer`` entry of ``curriculum_meta.json``."""
        return {"path": str(self.path.resolve()), "sha256": self.sha256}

    def hf_files(self) -> dict[str, str]:
        """The ``tokenizer.json`` as given, and a ``tokenizer_config.json`` naming its EOS."""
        eos = None if self.eos_id is None else self._tok.id_to_token(self.eos_id)
        return {"tokenizer.json": self._text, "tokenizer_config.json": _tokenizer_config(eos)}


def load_tokenizer(path: str | Path | None) -> ByteTokenizer | HFTokenizer:
    """Return the byte tokenizer for ``None``, else the HF ``tokenizer.json`` at ``path``.

    Raises:
        DataError: the tokenizer file is missing or invalid.
    """
    if path is None:
        return ByteTokenizer()
    return HFTokenizer(path)


def _tokenizer_config(eos_token: str | None) -> str:
    """A ``tokenizer_config.json`` loading ``tokenizer.json`` as a ``PreTrainedTokenizerFast``."""
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    if eos_token is not None:
        config["eos_token"] = eos_token
    return json.dumps(config, indent=2) + "\n"
