"""The schedule models of the ``curriculum`` section: streams, loaders, phases, the whole section.

Frozen, strict, ``extra="forbid"`` (a typo is an error naming the key); every field documents its
unit and scope. :class:`CurriculumConfig` holds the schedule and the optional sections
(:mod:`curriculum_ds.config.sections`) and checks them together: one unit for every duration,
phase durations summing to ``max_duration``, the lr schedule fitting in the run. Sizes are bounded
as :mod:`curriculum_ds.config.base` documents. Validation is deterministic, touches no RNG and
reads no file; its errors are worded by :mod:`curriculum_ds.config.messages`.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from curriculum_ds.config.base import (
    MAX_PROPORTION,
    MAX_SEQ_LEN,
    Duration,
    _check_remote,
    _Model,
    _name_from_local,
    _unique_names,
)
from curriculum_ds.config.messages import custom_error, show_value
from curriculum_ds.config.sections import DynamicConfig, EvalConfig, LRScheduleConfig

__all__ = ["CurriculumConfig", "LoaderConfig", "PhaseConfig", "StreamConfig"]


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
