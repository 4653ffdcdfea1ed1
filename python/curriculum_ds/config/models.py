"""The pydantic models of the ``curriculum`` section of a ds_config.

Frozen, strict, ``extra="forbid"`` (a typo is an error naming the key); every field documents its
unit and scope. Sizes have documented upper bounds (:data:`MAX_SEQ_LEN`, :data:`MAX_PROPORTION`,
:data:`MAX_MICRO_BATCH_TOKENS`, :data:`MAX_GLOBAL_BATCH_SIZE`): a value past them cannot train on
any machine (or overflows a float), and is refused here rather than inside the ranks. Validation
is deterministic, touches no RNG and reads no file; its errors are worded by
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
    SerializerFunctionWrapHandler,
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
    "CurriculumConfig",
    "Duration",
    "DynamicConfig",
    "EvalConfig",
    "EvalStreamConfig",
    "LRScheduleConfig",
    "LoaderConfig",
    "PhaseConfig",
    "StreamConfig",
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


class StreamConfig(_Model):
    """One mosaicml-streaming stream of a datamix."""

    local: str = Field(min_length=1)
    """Path to a prepared MDS dataset directory (holds ``index.json``); a relative path is
    relative to the current working directory of every rank."""
    proportion: float = Field(default=1.0, gt=0, le=MAX_PROPORTION)
    """Relative share of this stream in the datamix, in (0, 1e15] (normalised over the loader's
    streams; the bound keeps their sum finite)."""
    name: str | None = Field(default=None, min_length=1)
    """Stream name used in traces and metrics; defaults to the final path component of
    ``local``. Unique within one loader."""
    remote: str | None = Field(default=None, min_length=1)
    """Where the shards live when they are not local: ``s3://bucket/prefix``,
    ``gs://bucket/prefix`` or a folder path (a shared file system). ``local`` is then the cache
    folder: mosaicml-streaming downloads ``index.json`` and each shard into it on first use (one
    download per node). None (the default): ``local`` holds the whole dataset."""

    @field_validator("remote")
    @classmethod
    def _known_remote(cls, value: str | None) -> str | None:
        return _check_remote(value)

    @model_serializer(mode="wrap")
    def _omit_no_remote(self, handler: Any) -> Any:
        # a local stream dumps as it did before `remote` existed: the checkpoints' phase dumps
        # (compared field by field by the resume rules) stay equal
        dumped = handler(self)
        if isinstance(dumped, dict) and dumped.get("remote") is None:
            dumped.pop("remote", None)
        return dumped

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        return _name_from_local(data)


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


class LoaderConfig(_Model):
    """A phase's ``train_loader``: its datamix and sequence length."""

    streams: list[StreamConfig] = Field(min_length=1)
    """The datamix: one or more streams with their proportions."""
    max_seq_len: int = Field(default=1024, ge=2, le=MAX_SEQ_LEN)
    """Maximum tokens per sample (per sequence), in [2, 2^20]; longer samples are truncated."""
    epoch_size: int | None = Field(default=None, ge=1)
    """Samples per pass over the datamix (global, all dp ranks); None = the sum of the streams'
    sample counts."""
    proportion_unit: Literal["samples", "tokens"] = "samples"
    """What the stream proportions count: ``"samples"`` (each stream gets its share of the slots,
    mosaicml-streaming's meaning) or ``"tokens"`` (its share of the non-padding tokens after
    truncation to ``max_seq_len``: the next slot goes to the stream with the largest token
    deficit, so at every prefix a stream is within one sample's tokens of its share)."""

    @model_serializer(mode="wrap")
    def _omit_default_unit(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave ``proportion_unit`` out of dumps while it is ``"samples"`` (the default).

        The phase fingerprints and saved phases of such loaders stay those of the releases
        before the key existed.
        """
        data = handler(self)
        if isinstance(data, dict) and data.get("proportion_unit") == "samples":
            del data["proportion_unit"]
        return data

    @model_validator(mode="after")
    def _unique_stream_names(self) -> LoaderConfig:
        _unique_names(self.streams)
        return self


class PhaseConfig(_Model):
    """One phase of the schedule: a name, a duration and the loader used during it."""

    name: str = Field(min_length=1)
    """Phase name, unique within the schedule (used in metrics and error messages)."""
    duration: Duration
    """Length of the phase, in ``max_duration``'s unit."""
    train_loader: LoaderConfig
    """The loader (datamix) used for the whole phase; swapped at the phase boundary."""

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise custom_error(f"must not be blank, got {show_value(value)}")
        return value


class DynamicConfig(_Model):
    """Dynamic bucket re-weighting of the sampler by per-sample loss."""

    enabled: bool = False
    """Turn dynamic re-weighting on (off: sample the datamix by its proportions only)."""
    num_buckets: int = Field(default=8, ge=2, le=64)
    """Number of difficulty buckets (percentile-rank buckets of the window), in [2, 64]."""
    window: int = Field(default=1_000_000, ge=1, le=10_000_000)
    """Per-sample losses kept in the rolling window, global across dp ranks, in [1, 10^7]."""
    recompute_every_n_steps: int = Field(default=50, ge=1)
    """Bucket weights are recomputed every this many optimizer steps (≥ 1)."""
    temperature: float = Field(default=1.0, gt=0)
    """Softmax temperature applied to bucket scores (> 0; lower = sharper)."""
    floor: float = Field(default=0.02, gt=0)
    """Minimum probability of every bucket; 0 < floor ≤ 1 / num_buckets."""
    static_metric: str = Field(default="num_tokens", min_length=1)
    """The prepare metric column used to bucket samples before any loss has been seen."""
    score: Literal["loss"] = "loss"
    """The per-bucket score fed to the softmax (only ``"loss"``: mean per-sample loss)."""

    @model_validator(mode="after")
    def _check_floor(self) -> DynamicConfig:
        total = self.floor * self.num_buckets
        if total > 1 + 1e-12:
            raise custom_error(
                f"{self.floor:g} × num_buckets {self.num_buckets} = {total:.6g} > 1",
                ("floor",),
            )
        return self


class LRScheduleConfig(_Model):
    """``curriculum.lr_schedule``: the learning rate as a function of progress (tok or ep).

    Warmup rises linearly from 0 to the peak (each optimizer param group's own initial ``lr``),
    then ``cosine`` or ``linear`` decay to ``min_lr_ratio × peak`` at ``max_duration``, or
    ``wsd``: stable at the peak, then linear decay over the last ``decay`` to that floor. A step's
    lr is the schedule at the step's END progress (:mod:`curriculum_ds.lr_schedule`).
    """

    type: Literal["cosine", "linear", "wsd"]
    """The decay after warmup: ``"cosine"`` (half cosine to the floor at ``max_duration``),
    ``"linear"`` (straight line to it), ``"wsd"`` (warmup-stable-decay: stable at the peak, then
    linear over the last ``decay``)."""
    warmup: Duration | None = None
    """Length of the linear warmup from lr 0, in ``max_duration``'s unit (global progress:
    non-padding tokens over all dp ranks, or passes); None (or absent): no warmup."""
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """The floor as a fraction of the peak, in [0, 1]; reached at ``max_duration``."""
    decay: Duration | Literal["last_phase"] | None = None
    """``wsd`` only (required there): length of the final linear decay, in ``max_duration``'s
    unit, or ``"last_phase"``: the decay is the schedule's last phase."""

    @field_validator("decay", mode="before")
    @classmethod
    def _decay_word(cls, value: Any) -> Any:
        if (
            isinstance(value, str)
            and value != "last_phase"
            and not value.strip().endswith(("tok", "ep"))
        ):
            raise custom_error(
                f'expected "<int>tok", "<number>ep" or "last_phase", got {show_value(value)}'
            )
        return value

    @model_validator(mode="after")
    def _check_decay(self) -> LRScheduleConfig:
        if self.type == "wsd" and self.decay is None:
            raise custom_error(
                'required with "type": "wsd" (a duration, or "last_phase")', ("decay",)
            )
        if self.type != "wsd" and self.decay is not None:
            raise custom_error(
                f'only "type": "wsd" has a decay ({self.type} decays from the end of warmup '
                "to max_duration)",
                ("decay",),
            )
        return self


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


class EvalConfig(_Model):
    """``curriculum.eval``: held-out evaluation at a fixed interval and at every phase end.

    The eval set is fixed: the first ``max_samples`` samples of each stream, the same at every
    evaluation (:mod:`curriculum_ds.plugin.evaluation`).
    """

    streams: list[EvalStreamConfig] = Field(min_length=1)
    """The held-out streams, each evaluated (and reported) on its own."""
    interval: Duration | None = None
    """Evaluate each time the run's cumulative progress crosses a multiple of this, in
    ``max_duration``'s unit (global non-padding tokens, or passes); None: at phase ends only."""
    max_samples: int = Field(default=512, ge=1, le=MAX_GLOBAL_BATCH_SIZE)
    """Samples taken from the start of each stream (fewer when the stream has fewer), global."""
    max_seq_len: int | None = Field(default=None, ge=2, le=MAX_SEQ_LEN)
    """Tokens per eval sample (longer ones are truncated); None: the schedule's longest
    ``max_seq_len``."""

    @model_validator(mode="after")
    def _unique_stream_names(self) -> EvalConfig:
        _unique_names(self.streams)
        return self


class CurriculumConfig(_Model):
    """The whole ``curriculum`` section of a ds_config."""

    max_duration: Duration
    """Length of the whole run; every phase uses its unit and the phases sum to it exactly."""
    loss_weighting: Literal["token", "sample"] = "token"
    """``"token"``: every loss-bearing token of the optimizer step weighs the same (global
    across micro-batches and dp ranks); ``"sample"``: every sample weighs the same."""
    seed: int = Field(default=1234, ge=0, lt=2**63)
    """Seed of the sample order (a pure function of seed, phase and counters), in [0, 2^63)."""
    schedule: list[PhaseConfig] = Field(min_length=1)
    """The phases, run in order."""
    dynamic: DynamicConfig = Field(default_factory=DynamicConfig)
    """Dynamic bucket re-weighting settings."""
    lr_schedule: LRScheduleConfig | None = None
    """The token- (or epoch-) based learning-rate schedule; None: the optimizer's lr as it is
    (or a ds_config ``scheduler``, which cannot be combined with this)."""
    eval: EvalConfig | None = None
    """Held-out evaluation (:class:`EvalConfig`); None: no evaluation."""
    max_consecutive_nonfinite: int = Field(default=3, ge=1)
    """Optimizer steps in a row whose global loss (or, under ZeRO/bf16, gradient norm) is NaN or
    infinite after which the run stops (``NonFiniteLossError``); each such step updates
    nothing. Counted per process from its start or resume."""

    @model_validator(mode="after")
    def _check_schedule(self) -> CurriculumConfig:
        unit = self.max_duration.unit
        names: dict[str, int] = {}
        for i, phase in enumerate(self.schedule):
            if phase.duration.unit != unit:
                raise custom_error(
                    f'unit "{phase.duration.unit}" differs from max_duration\'s "{unit}" '
                    f"({phase.duration} vs {self.max_duration}); every phase must use it",
                    ("schedule", i, "duration"),
                )
            if phase.name in names:
                raise custom_error(
                    f'duplicate phase name "{phase.name}" (also schedule[{names[phase.name]}])',
                    ("schedule", i, "name"),
                )
            names[phase.name] = i
        total = sum((p.duration.value for p in self.schedule), start=Fraction(0))
        if total != self.max_duration.value:
            shown = Duration(unit=unit, value=int(total) if unit == "tok" else total)
            raise custom_error(
                f"the schedule's durations sum to {shown}, not {self.max_duration}",
                ("max_duration",),
            )
        if self.lr_schedule is not None:
            self._check_lr_schedule(self.lr_schedule)
        interval = self.eval.interval if self.eval is not None else None
        if interval is not None and interval.unit != unit:
            raise custom_error(
                f'unit "{interval.unit}" differs from max_duration\'s "{unit}" ({interval} vs '
                f"{self.max_duration}); evaluations are due in the schedule's unit",
                ("eval", "interval"),
            )
        return self

    def _check_lr_schedule(self, lr: LRScheduleConfig) -> None:
        """Units equal to ``max_duration``'s; warmup and decay fit in the run."""
        unit, total = self.max_duration.unit, self.max_duration.value
        for name in ("warmup", "decay"):
            value = getattr(lr, name)
            if isinstance(value, Duration) and value.unit != unit:
                raise custom_error(
                    f'unit "{value.unit}" differs from max_duration\'s "{unit}" ({value} vs '
                    f"{self.max_duration}); the lr schedule counts progress in it",
                    ("lr_schedule", name),
                )
        warmup = lr.warmup.value if lr.warmup is not None else 0
        if lr.type != "wsd":
            if warmup >= total:
                raise custom_error(
                    f"{lr.warmup} is not shorter than max_duration {self.max_duration}: "
                    f"no {lr.type} decay would be left",
                    ("lr_schedule", "warmup"),
                )
            return
        if isinstance(lr.decay, Duration):
            decay, shown = lr.decay, str(lr.decay)
        else:  # "last_phase" (a wsd decay is never None: LRScheduleConfig)
            decay = self.schedule[-1].duration
            shown = f'"last_phase" ({decay}, schedule[{len(self.schedule) - 1}])'
        if decay.value > total:
            raise custom_error(
                f"{decay} is longer than max_duration {self.max_duration}",
                ("lr_schedule", "decay"),
            )
        if warmup + decay.value > total:
            raise custom_error(
                f"warmup {lr.warmup} + decay {shown} = "
                f"{Duration(unit=unit, value=warmup + decay.value)} is longer than max_duration "
                f"{self.max_duration}",
                ("lr_schedule", "decay"),
            )
