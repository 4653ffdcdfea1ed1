"""The building blocks of the ``curriculum`` models: base model, size bounds, durations.

Every model of the section derives from ``_Model``: frozen, strict, ``extra="forbid"`` (a typo is
an error naming the key). Sizes have documented upper bounds (:data:`MAX_SEQ_LEN`,
:data:`MAX_PROPORTION`, :data:`MAX_MICRO_BATCH_TOKENS`, :data:`MAX_GLOBAL_BATCH_SIZE`): a value
past them cannot train on any machine (or overflows a float), and is refused here rather than
inside the ranks. :class:`Duration` is the ``"<int>tok"``/``"<number>ep"`` length of phases, runs,
warmups and eval intervals; the stream-field validators are shared by train and eval streams.
Validation is deterministic, touches no RNG and reads no file; its errors are worded by
:mod:`curriculum_ds.config.messages`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from curriculum_ds.config.messages import custom_error, format_validation_error, show_value
from curriculum_ds.errors import ConfigError

__all__ = [
    "MAX_GLOBAL_BATCH_SIZE",
    "MAX_MICRO_BATCH_TOKENS",
    "MAX_PROPORTION",
    "MAX_SEQ_LEN",
    "REMOTE_SCHEMES",
    "Duration",
    "EvalStreamConfig",
]

DurationUnit = Literal["tok", "ep"]

MAX_SEQ_LEN = 2**20
"""Largest ``max_seq_len`` accepted, in tokens per sample (1,048,576)."""
MAX_PROPORTION = 1e15
"""Largest stream ``proportion`` accepted: sums of proportions stay finite (1e308 + 1e308 is
inf, and inf / inf is NaN) and exact enough to normalise."""
MAX_MICRO_BATCH_TOKENS = 2**24
"""Largest micro-batch accepted, in tokens per dp rank: ``train_micro_batch_size_per_gpu`` × the
schedule's largest ``max_seq_len`` (16,777,216; the logits alone of such a micro-batch take
terabytes)."""
MAX_GLOBAL_BATCH_SIZE = 2**24
"""Largest global batch accepted, in samples per optimizer step across dp ranks (16,777,216);
every rank draws the whole global batch each step."""

REMOTE_SCHEMES = ("s3", "gs")
"""URL schemes a stream's ``remote`` may use (besides a plain folder path)."""

_TOK_RE = re.compile(r"^([0-9]+)tok$")
_EP_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)ep$")
_DURATION_HINT = 'expected "<int>tok" or "<number>ep"'


def _fraction_to_decimal(value: Fraction) -> str:
    """Exact decimal rendering of a Fraction whose denominator is 2^a·5^b; else ``p/q``."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    digits = max(twos, fives)
    scaled = value * 10**digits
    text = str(scaled.numerator).rjust(digits + 1, "0")
    text = f"{text[:-digits]}.{text[-digits:]}".rstrip("0").rstrip(".")
    return text


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


class Duration(_Model):
    """A phase length or a run length: ``"<int>tok"`` or ``"<number>ep"``.

    Parsed from its string form (``Duration.model_validate("1.5ep")``) and rendered back to it by
    ``str()`` and by JSON serialisation. ``ep`` values are kept exactly as :class:`Fraction`, so
    sums of durations are exact.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    unit: DurationUnit
    """``"tok"``: non-padding input tokens of the global batch (all dp ranks, all micro-batches);
    ``"ep"``: passes over the phase's datamix."""
    value: int | Fraction
    """Positive amount in ``unit``: an ``int`` for ``tok``, an exact ``Fraction`` for ``ep``."""

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, data: Any) -> Any:
        if isinstance(data, Duration):
            return data
        if isinstance(data, dict):
            unit, value = data.get("unit"), data.get("value")
            if unit == "ep" and isinstance(value, int) and not isinstance(value, bool):
                data = {**data, "value": Fraction(value)}
            if (
                unit in ("tok", "ep")
                and isinstance(value, int | Fraction)
                and not isinstance(value, bool)
                and value <= 0
            ):
                raise custom_error(f"must be positive, got {value}{unit}")
            return data
        if not isinstance(data, str):
            raise custom_error(f"{_DURATION_HINT}, got {show_value(data)}")
        text = data.strip()
        if m := _TOK_RE.match(text):
            tokens = int(m.group(1))
            if tokens <= 0:
                raise custom_error(f"must be positive, got {show_value(data)}")
            return {"unit": "tok", "value": tokens}
        if m := _EP_RE.match(text):
            epochs = Fraction(m.group(1))
            if epochs <= 0:
                raise custom_error(f"must be positive, got {show_value(data)}")
            return {"unit": "ep", "value": epochs}
        if text.startswith("-") and (_TOK_RE.match(text[1:]) or _EP_RE.match(text[1:])):
            raise custom_error(f"must be positive, got {show_value(data)}")
        if text.endswith("tok") and _EP_RE.match(text[: -len("tok")] + "ep"):
            raise custom_error(
                f"a tok duration is a whole number of tokens, got {show_value(data)}"
            )
        hint = " (no unit)" if re.fullmatch(r"[0-9.]+", text) else ""
        raise custom_error(f"{_DURATION_HINT}, got {show_value(data)}{hint}")

    @model_validator(mode="after")
    def _check_value_type(self) -> Duration:
        if self.unit == "tok" and not isinstance(self.value, int):
            raise custom_error(f"a tok duration is a whole number of tokens, got {self.value}")
        if self.unit == "ep" and not isinstance(self.value, Fraction):
            raise custom_error(f"an ep duration is stored as a Fraction, got {self.value!r}")
        return self

    @model_serializer(mode="plain")
    def _serialize(self) -> str:
        return str(self)

    @classmethod
    def parse(cls, text: str) -> Duration:
        """Parse ``"<int>tok"`` / ``"<number>ep"``; raises ConfigError (path ``duration``)."""
        try:
            return cls.model_validate(text)
        except ValidationError as exc:
            raise ConfigError(
                format_validation_error(exc, {}, model=cls, root="duration")
            ) from None

    def __str__(self) -> str:
        if self.unit == "tok":
            return f"{self.value}tok"
        return f"{_fraction_to_decimal(Fraction(self.value))}ep"


def _check_remote(value: str | None) -> str | None:
    """A stream's ``remote``: None, a folder path or ``<scheme>://bucket/...`` (known scheme)."""
    if value is None:
        return value
    scheme, sep, rest = value.partition("://")
    if not sep:
        return value  # a folder path
    if scheme not in REMOTE_SCHEMES:
        raise custom_error(
            f"scheme {scheme!r} is not supported, got {show_value(value)}; use "
            + ", ".join(f"{s}://bucket/prefix" for s in REMOTE_SCHEMES)
            + " or a folder path"
        )
    if not rest.split("/", 1)[0]:
        raise custom_error(f"names no bucket, got {show_value(value)}")
    return value


def _name_from_local(data: Any) -> Any:
    """A stream's raw config with ``name`` defaulted to the final path component of ``local``."""
    if isinstance(data, dict) and data.get("name") is None and isinstance(data.get("local"), str):
        local = data["local"].rstrip("/\\")
        name = PurePosixPath(local.replace("\\", "/")).name or data["local"]
        data = {**data, "name": name}
    return data


def _unique_names(streams: list[Any]) -> None:
    """Refuse two streams of one list with the same ``name`` (error at ``streams[i].name``)."""
    seen: dict[str, int] = {}
    for i, stream in enumerate(streams):
        name = stream.name or stream.local
        if name in seen:
            raise custom_error(
                f'duplicate stream name "{name}" (also streams[{seen[name]}]); '
                'give the streams distinct "name"s',
                ("streams", i, "name"),
            )
        seen[name] = i


class EvalStreamConfig(_Model):
    """One held-out evaluation stream (an MDS folder, as a train stream without a proportion)."""

    local: str = Field(min_length=1)
    """Path to a prepared MDS dataset directory; relative to every rank's working directory."""
    name: str | None = Field(default=None, min_length=1)
    """The stream's name in ``eval.jsonl``; defaults to the final path component of ``local``.
    Unique among the eval streams."""
    remote: str | None = Field(default=None, min_length=1)
    """Where the shards live when they are not local (as a train stream's ``remote``; ``local``
    is then the cache folder). None: ``local`` holds the whole dataset."""

    @field_validator("remote")
    @classmethod
    def _known_remote(cls, value: str | None) -> str | None:
        return _check_remote(value)

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        return _name_from_local(data)
