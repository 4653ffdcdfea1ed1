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
from typing import Annotated, Any, Literal

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
from curriculum_ds.config.mixers import check_methods_fit_the_schedule
from curriculum_ds.config.ramps import Points, SeqLenPoints, is_ramp, parse_points, value_at
from curriculum_ds.config.sections import DynamicConfig, EvalConfig, LRScheduleConfig

__all__ = ["SEQ_LEN_MULTIPLE", "CurriculumConfig", "LoaderConfig", "PhaseConfig", "StreamConfig"]

SEQ_LEN_MULTIPLE = 8
"""The default ``train_loader.seq_len_multiple``, tokens (the rounding before the key existed)."""
_OMITTED_AT_DEFAULT: dict[str, Any] = {
    "proportion_unit": "samples",
    "seq_len_multiple": SEQ_LEN_MULTIPLE,
    "document_masking": True,
}
"""``train_loader`` keys left out of dumps (and so of phase fingerprints) at these values."""


class StreamConfig(_Model):
    """One mosaicml-streaming stream of a datamix."""

    local: str = Field(min_length=1)
    """Path to a prepared MDS dataset directory (holds ``index.json``); a relative path is
    relative to the current working directory of every rank."""
    proportion: Annotated[float, Field(gt=0, le=MAX_PROPORTION)] | Points = 1.0
    """Relative share of this stream in the datamix, in (0, 1e15] (normalised over the loader's
    streams; the bound keeps their sum finite); or a ramp, ``[[fraction_of_phase, value], ...]``
    (values in [0, 1e15], linearly interpolated; :mod:`curriculum_ds.config.ramps`): a step's
    shares are the values at its start progress, normalised over the loader's streams."""
    loss_weight: float = Field(default=1.0, gt=0, le=MAX_PROPORTION)
    """Weight of this stream's loss-bearing tokens in the objective, in (0, 1e15], separate from
    how often it is sampled: a step's loss is ``sum(w * loss) / sum(w)`` over its loss-bearing
    tokens (default 1.0: every token the same)."""
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

    @field_validator("proportion", mode="before")
    @classmethod
    def _proportion_points(cls, value: Any) -> Any:
        return parse_points(value, low=0.0, high=MAX_PROPORTION)

    @model_serializer(mode="wrap")
    def _omit_no_remote(self, handler: Any) -> Any:
        # a local stream dumps as it did before `remote` (and `loss_weight`) existed: the
        # checkpoints' phase dumps (compared field by field by the resume rules) stay equal
        dumped = handler(self)
        if isinstance(dumped, dict) and dumped.get("remote") is None:
            dumped.pop("remote", None)
        if isinstance(dumped, dict) and dumped.get("loss_weight") == 1.0:
            dumped.pop("loss_weight", None)
        return dumped

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        return _name_from_local(data)


class LoaderConfig(_Model):
    """A phase's ``train_loader``: its datamix and sequence length."""

    streams: list[StreamConfig] = Field(min_length=1)
    """The datamix: one or more streams with their proportions."""
    max_seq_len: Annotated[int, Field(ge=2, le=MAX_SEQ_LEN)] | SeqLenPoints = 1024
    """Maximum tokens per sample (per sequence), in [2, 2^20]; longer samples are truncated. Or a
    ramp ``[[fraction_of_phase, tokens], ...]`` (sequence-length warmup, values in [2, 2^20]): a
    step's samples are truncated to the value at its start progress rounded down to a multiple
    of ``seq_len_multiple`` (:meth:`seq_len_at`)."""
    seq_len_multiple: int = Field(default=SEQ_LEN_MULTIPLE, ge=1, le=MAX_SEQ_LEN)
    """Tokens, in [1, 2^20]: a ``max_seq_len`` ramp's value at a step's start is rounded down to a
    multiple of it, and is at least it (DeepSpeed's ``difficulty_step``; default 8, for tensor
    cores). Not larger than the ramp's largest point. A constant ``max_seq_len`` is used as is."""
    epoch_size: int | None = Field(default=None, ge=1)
    """Samples per pass over the datamix (global, all dp ranks); None = the sum of the streams'
    sample counts."""
    proportion_unit: Literal["samples", "tokens"] = "samples"
    """What the stream proportions count: ``"samples"`` (each stream gets its share of the slots,
    mosaicml-streaming's meaning) or ``"tokens"`` (its share of the non-padding tokens after
    truncation to ``max_seq_len``: the next slot goes to the stream with the largest token
    deficit, so at every prefix a stream is within one sample's tokens of its share)."""
    document_masking: bool = True
    """Packed rows (``prepare --pack``): a token attends only to its own document and the
    first token of a document bears no loss (it is not predicted from the previous document);
    micro-batches carry ``position_ids`` restarting at 0 per document
    (:mod:`curriculum_ds.core.documents`). A no-op for unpacked streams (a row is one document)
    and for streams packed before document starts were recorded (one document per row, as
    then). ``false``: rows attend across their documents, as before the key existed. A phase
    in progress in a checkpoint written before the key existed keeps ``false`` until it
    ends."""

    @model_serializer(mode="wrap")
    def _omit_later_keys_at_default(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave the keys added after the first release out of dumps while at their defaults.

        ``proportion_unit: "samples"``, ``seq_len_multiple: 8`` and ``document_masking: true``:
        the phase fingerprints and
        saved phases of such loaders stay those of the releases before the keys existed, so a
        checkpoint's completed phases do not look edited.
        """
        data = handler(self)
        if isinstance(data, dict):
            for key, default in _OMITTED_AT_DEFAULT.items():
                if key in data and data[key] == default:
                    del data[key]
        return data

    @field_validator("max_seq_len", mode="before")
    @classmethod
    def _seq_len_points(cls, value: Any) -> Any:
        return parse_points(value, low=2, high=MAX_SEQ_LEN, integer=True)

    @model_validator(mode="after")
    def _unique_stream_names(self) -> LoaderConfig:
        _unique_names(self.streams)
        self._check_moving_shares()
        if is_ramp(self.max_seq_len) and self.seq_len_multiple > self.peak_seq_len:
            raise custom_error(
                f"{self.seq_len_multiple} is larger than the max_seq_len ramp's largest point "
                f"{self.peak_seq_len}: its lengths would exceed the ramp",
                ("seq_len_multiple",),
            )
        return self

    def _check_moving_shares(self) -> None:
        """A ramped datamix keeps a positive total at every fraction (linear between points)."""
        if not self.is_moving_mix:
            return
        fractions = sorted(
            {x for s in self.streams if is_ramp(s.proportion) for x, _ in s.proportion}  # type: ignore[union-attr]
        )
        for x in fractions:
            if sum(value_at(s.proportion, x) for s in self.streams) <= 0:
                raise custom_error(
                    f"the streams' proportions sum to 0 at fraction {x} of the phase", ("streams",)
                )

    @property
    def is_moving_mix(self) -> bool:
        """True when a stream's ``proportion`` is a ramp."""
        return any(is_ramp(s.proportion) for s in self.streams)

    @property
    def peak_seq_len(self) -> int:
        """The largest ``max_seq_len`` of the phase (the ramp's largest point), tokens."""
        if is_ramp(self.max_seq_len):
            return max(int(v) for _, v in self.max_seq_len)  # type: ignore[union-attr]
        return int(self.max_seq_len)  # type: ignore[arg-type]

    def seq_len_at(self, fraction: float) -> int:
        """Tokens per sample of a step that starts at ``fraction`` of the phase.

        A constant ``max_seq_len`` as it is; a ramp's value at ``fraction`` rounded down to a
        multiple of ``seq_len_multiple`` (at least ``seq_len_multiple``), as DeepSpeed's
        ``difficulty_step`` rounds its sequence lengths. Deterministic.
        """
        if not is_ramp(self.max_seq_len):
            return int(self.max_seq_len)  # type: ignore[arg-type]
        value = int(value_at(self.max_seq_len, fraction) + 1e-9)
        multiple = self.seq_len_multiple
        return max(multiple, value - value % multiple)

    def proportions_at(self, fraction: float) -> list[float]:
        """The streams' shares at ``fraction`` of the phase, normalised to sum to 1.

        The target the loader tracks and the report's token-share panel draws (float64,
        deterministic; the constant shares for a datamix without ramps).
        """
        values = [value_at(s.proportion, fraction) for s in self.streams]
        total = sum(values)
        return [v / total for v in values]


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
    """Dynamic re-weighting settings (over buckets or streams)."""
    lr_schedule: LRScheduleConfig | None = None
    """The token- (or epoch-) based learning-rate schedule; None: the optimizer's lr as it is
    (or a ds_config ``scheduler``, which cannot be combined with this)."""
    eval: EvalConfig | None = None
    """Held-out evaluation (:class:`EvalConfig`); None: no evaluation."""
    max_consecutive_nonfinite: int = Field(default=3, ge=1)
    """Optimizer steps in a row whose global loss (or, under ZeRO/bf16, gradient norm) is NaN or
    infinite after which the run stops (``NonFiniteLossError``); each such step updates
    nothing. Counted per process from its start or resume."""
    prefetch_micro_batches: int = Field(default=2, ge=0, le=1024)
    """Micro-batches of the next optimizer step read and collated ahead on a background thread
    while this one computes (pinned memory on CUDA), when no re-weighting recompute, phase swap
    or evaluation is due before it; 0: every micro-batch is read when its step is drawn. The
    batches are the same either way (:mod:`curriculum_ds.plugin.prefetch`)."""

    order_version: Literal[1, 2] | None = None
    """The order of samples within a stream (:mod:`curriculum_ds.core.stream_order`): 2 computes
    each stream's per-epoch permutation per index (64-bit, O(streams) memory), 1 is the order of
    runs begun before it. None: 2 for a fresh run (1 with ``dynamic.unit: "buckets"``, which
    version 2 does not draw), the checkpoint's on a resume (1 for a checkpoint without it); a
    value that conflicts with the checkpoint is refused."""

    @property
    def bucket_unit(self) -> bool:
        """Whether re-weighting over buckets is on (its per-sample buckets need order version 1)."""
        return self.dynamic.enabled and self.dynamic.unit == "buckets"

    @property
    def fresh_order_version(self) -> Literal[1, 2]:
        """The order version of a fresh run of this config."""
        return self.order_version or (1 if self.bucket_unit else 2)

    @model_validator(mode="after")
    def _check_schedule(self) -> CurriculumConfig:
        if self.order_version == 2 and self.bucket_unit:
            raise custom_error(
                'order version 2 does not draw dynamic.unit "buckets" (its per-sample buckets '
                "need version 1): remove the key or set 1",
                ("order_version",),
            )
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
            weighted = [j for j, s in enumerate(phase.train_loader.streams) if s.loss_weight != 1.0]
            if weighted and self.loss_weighting != "token":
                raise custom_error(
                    'a stream loss_weight needs loss_weighting "token" (it weighs tokens), got '
                    f'"{self.loss_weighting}"',
                    ("schedule", i, "train_loader", "streams", weighted[0], "loss_weight"),
                )
        total = sum((p.duration.value for p in self.schedule), start=Fraction(0))
        if total != self.max_duration.value:
            shown = Duration(unit=unit, value=int(total) if unit == "tok" else total)
            raise custom_error(
                f"the schedule's durations sum to {shown}, not {self.max_duration}",
                ("max_duration",),
            )
        if self.lr_schedule is not None:
            self._check_lr_schedule(self.lr_schedule)
        self._check_stream_floor()
        check_methods_fit_the_schedule(self)
        interval = self.eval.interval if self.eval is not None else None
        if interval is not None and interval.unit != unit:
            raise custom_error(
                f'unit "{interval.unit}" differs from max_duration\'s "{unit}" ({interval} vs '
                f"{self.max_duration}); evaluations are due in the schedule's unit",
                ("eval", "interval"),
            )
        return self

    def _check_stream_floor(self) -> None:
        """``dynamic.unit: "streams"``: ``floor × streams ≤ 1`` in every phase."""
        dynamic = self.dynamic
        if not dynamic.enabled or dynamic.unit != "streams" or dynamic.method != "softmax":
            return
        for i, phase in enumerate(self.schedule):
            num_streams = len(phase.train_loader.streams)
            total = dynamic.floor * num_streams
            if total > 1 + 1e-12:
                raise custom_error(
                    f'{dynamic.floor:g} × {num_streams} streams of schedule[{i}] ("{phase.name}") '
                    f"= {total:.6g} > 1",
                    ("dynamic", "floor"),
                )

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
