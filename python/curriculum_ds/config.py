"""The ``curriculum`` section of a ds_config: typed models, loading and validation.

The user's ds_config is one JSON file: the usual DeepSpeed keys plus a ``curriculum`` object
(see DESIGN.md). :func:`load_config` splits it into the DeepSpeed part (passed untouched to
``deepspeed.initialize``) and a validated, frozen :class:`CurriculumConfig`.

Every validation failure is raised as a :class:`~curriculum_ds.errors.ConfigError` whose message is
ONE line that starts with the JSON path of the offending field and, inside the schedule, the phase
name, e.g. ``curriculum.schedule[1] ("mix").duration: expected "<int>tok" or "<number>ep", got
"12 tokens"``. pydantic's structured errors are converted into that form in one place
(:func:`_format_validation_error`); nothing here ever surfaces a traceback or a tuple.

Sizes have documented upper bounds (:data:`MAX_SEQ_LEN`, :data:`MAX_PROPORTION`,
:data:`MAX_MICRO_BATCH_TOKENS`, :data:`MAX_GLOBAL_BATCH_SIZE`): a value past them cannot train on
any machine (or overflows a float), and is refused here rather than inside the ranks.

Validation is deterministic and touches no RNG. Only :func:`check_streams` reads the file system
beyond the config file itself.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import types
import typing
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from curriculum_ds.errors import ConfigError, DataError

if TYPE_CHECKING:
    from curriculum_ds.data import StreamInfo

__all__ = [
    "MAX_GLOBAL_BATCH_SIZE",
    "MAX_MICRO_BATCH_TOKENS",
    "MAX_PROPORTION",
    "MAX_SEQ_LEN",
    "CurriculumConfig",
    "Duration",
    "DynamicConfig",
    "LoaderConfig",
    "PhaseConfig",
    "RunConfig",
    "StreamConfig",
    "check_streams",
    "load_config",
    "parse_curriculum",
    "read_stream_info_checked",
    "stream_infos",
    "verify_stream_checked",
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

_TOK_RE = re.compile(r"^([0-9]+)tok$")
_EP_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)ep$")
_DURATION_HINT = 'expected "<int>tok" or "<number>ep"'

# Custom error type used by every hand-written check; ``ctx["subloc"]`` (optional) is a loc
# relative to the model that raised it, so a model-level check can point at one field.
_ERR = "curriculum"


def _err(msg: str, subloc: tuple[str | int, ...] = ()) -> PydanticCustomError:
    return PydanticCustomError(_ERR, "{msg}", {"msg": msg, "subloc": subloc})


def _show(value: Any) -> str:
    """Render a user-supplied value the way it appeared in JSON (strings quoted)."""
    if isinstance(value, Fraction):
        return str(value)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        return repr(value)


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
                raise _err(f"must be positive, got {value}{unit}")
            return data
        if not isinstance(data, str):
            raise _err(f"{_DURATION_HINT}, got {_show(data)}")
        text = data.strip()
        if m := _TOK_RE.match(text):
            tokens = int(m.group(1))
            if tokens <= 0:
                raise _err(f"must be positive, got {_show(data)}")
            return {"unit": "tok", "value": tokens}
        if m := _EP_RE.match(text):
            epochs = Fraction(m.group(1))
            if epochs <= 0:
                raise _err(f"must be positive, got {_show(data)}")
            return {"unit": "ep", "value": epochs}
        if text.startswith("-") and (_TOK_RE.match(text[1:]) or _EP_RE.match(text[1:])):
            raise _err(f"must be positive, got {_show(data)}")
        if text.endswith("tok") and _EP_RE.match(text[: -len("tok")] + "ep"):
            raise _err(f"a tok duration is a whole number of tokens, got {_show(data)}")
        hint = " (no unit)" if re.fullmatch(r"[0-9.]+", text) else ""
        raise _err(f"{_DURATION_HINT}, got {_show(data)}{hint}")

    @model_validator(mode="after")
    def _check_value_type(self) -> Duration:
        if self.unit == "tok" and not isinstance(self.value, int):
            raise _err(f"a tok duration is a whole number of tokens, got {self.value}")
        if self.unit == "ep" and not isinstance(self.value, Fraction):
            raise _err(f"an ep duration is stored as a Fraction, got {self.value!r}")
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
            raise ConfigError(_format_validation_error(exc, {}, root="duration")) from None

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

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and data.get("name") is None
            and isinstance(data.get("local"), str)
        ):
            local = data["local"].rstrip("/\\")
            name = PurePosixPath(local.replace("\\", "/")).name or data["local"]
            data = {**data, "name": name}
        return data


class LoaderConfig(_Model):
    """A phase's ``train_loader``: its datamix and sequence length."""

    streams: list[StreamConfig] = Field(min_length=1)
    """The datamix: one or more streams with their proportions."""
    max_seq_len: int = Field(default=1024, ge=2, le=MAX_SEQ_LEN)
    """Maximum tokens per sample (per sequence), in [2, 2^20]; longer samples are truncated."""
    epoch_size: int | None = Field(default=None, ge=1)
    """Samples per pass over the datamix (global, all dp ranks); None = the sum of the streams'
    sample counts."""

    @model_validator(mode="after")
    def _unique_stream_names(self) -> LoaderConfig:
        seen: dict[str, int] = {}
        for i, stream in enumerate(self.streams):
            name = stream.name or stream.local
            if name in seen:
                raise _err(
                    f'duplicate stream name "{name}" (also streams[{seen[name]}]); '
                    'give the streams distinct "name"s',
                    ("streams", i, "name"),
                )
            seen[name] = i
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
            raise _err(f"must not be blank, got {_show(value)}")
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
            raise _err(
                f"{self.floor:g} × num_buckets {self.num_buckets} = {total:.6g} > 1",
                ("floor",),
            )
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

    @model_validator(mode="after")
    def _check_schedule(self) -> CurriculumConfig:
        unit = self.max_duration.unit
        names: dict[str, int] = {}
        for i, phase in enumerate(self.schedule):
            if phase.duration.unit != unit:
                raise _err(
                    f'unit "{phase.duration.unit}" differs from max_duration\'s "{unit}" '
                    f"({phase.duration} vs {self.max_duration}); every phase must use it",
                    ("schedule", i, "duration"),
                )
            if phase.name in names:
                raise _err(
                    f'duplicate phase name "{phase.name}" (also schedule[{names[phase.name]}])',
                    ("schedule", i, "name"),
                )
            names[phase.name] = i
        total = sum((p.duration.value for p in self.schedule), start=Fraction(0))
        if total != self.max_duration.value:
            shown = Duration(unit=unit, value=int(total) if unit == "tok" else total)
            raise _err(
                f"the schedule's durations sum to {shown}, not {self.max_duration}",
                ("max_duration",),
            )
        return self


# --------------------------------------------------------------------------------------------
# Error formatting
# --------------------------------------------------------------------------------------------


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside ``X``, ``list[X]``, ``X | None``; else None."""
    stack = [annotation]
    while stack:
        ann = stack.pop()
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
        if typing.get_origin(ann) in (list, typing.Union, types.UnionType):
            stack.extend(typing.get_args(ann))
    return None


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    cls: type[BaseModel] | None = CurriculumConfig
    for item in loc:
        if isinstance(item, int) or cls is None:
            continue
        field = cls.model_fields.get(item)
        if field is None:
            return None
        cls = _unwrap_model(field.annotation)
    return cls


def _format_loc(loc: tuple[str | int, ...], raw: Any, root: str) -> str:
    parts = [root] if root else []
    node = raw
    prev: str | int | None = None
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            node = node[item] if isinstance(node, list) and 0 <= item < len(node) else None
            if prev == "schedule" and isinstance(node, dict) and isinstance(node.get("name"), str):
                label += f" ({_show(node['name'])})"
            if parts:
                parts[-1] += label
            else:
                parts.append(label)
        elif isinstance(node, dict) or node is raw:
            parts.append(item)
            node = node.get(item) if isinstance(node, dict) else None
        else:
            continue  # a pydantic union tag ("int", "is-instance[...]") below a scalar value
        prev = item
    return ".".join(parts)


def _error_message(err: Any, loc: tuple[str | int, ...]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == _ERR:
        return str(ctx.get("msg", err["msg"]))
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        if close:
            return f'unknown key (did you mean "{close[0]}"?)'
        return "unknown key (allowed: " + ", ".join(allowed) + ")" if allowed else "unknown key"
    if kind == "missing":
        return "required field is missing"
    bounds = {
        "greater_than": (">", "gt"),
        "greater_than_equal": (">=", "ge"),
        "less_than": ("<", "lt"),
        "less_than_equal": ("<=", "le"),
    }
    if kind in bounds:
        op, key = bounds[kind]
        bound = ctx.get(key)
        if isinstance(bound, float) and bound.is_integer() and abs(bound) < 1e6:
            bound = int(bound)
        shown = f"{bound:g}" if isinstance(bound, float) else bound  # 1e15, not 1000000000000000.0
        return f"must be {op} {shown}, got {_show(got)}"
    if kind == "string_too_short":
        return f"must not be empty, got {_show(got)}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s), got {len(got or [])}"
    if kind == "finite_number":
        return f"must be a finite number, got {_show(got)}"
    if kind == "literal_error":
        expected_values = str(ctx.get("expected", "")).replace("'", '"')
        return f"expected one of {expected_values}, got {_show(got)}"
    expected = {
        "int_type": "an integer",
        "int_from_float": "an integer",
        "float_type": "a number",
        "bool_type": "true or false",
        "string_type": "a string",
        "list_type": "a list",
        "dict_type": "an object",
        "model_type": "an object",
        "model_attributes_type": "an object",
    }
    if kind in expected:
        return f"expected {expected[kind]}, got {_show(got)}"
    return f"{err['msg']}, got {_show(got)}"


def _format_validation_error(exc: ValidationError, raw: Any, root: str = "curriculum") -> str:
    messages: list[str] = []
    # an unknown key first: a typo ("max_duraton") explains the "required field" error it causes
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    for err in errors:
        loc = tuple(err["loc"])
        ctx = err.get("ctx") or {}
        if err["type"] == _ERR and ctx.get("subloc"):
            loc = loc + tuple(ctx["subloc"])
        path = _format_loc(loc, raw, root) or root
        if messages and any(m.startswith(f"{path}: ") for m in messages):
            continue  # one field failing several union branches is one problem
        messages.append(f"{path}: {_error_message(err, loc)}")
    message = messages[0]
    if len(messages) > 1:
        more = len(messages) - 1
        message += f" (+{more} more error{'s' if more > 1 else ''})"
    return message.replace("\n", " ")


def parse_curriculum(raw: Any) -> CurriculumConfig:
    """Validate a ``curriculum`` section (the parsed JSON object) into a CurriculumConfig.

    Args:
        raw: the JSON value of the ``curriculum`` key.

    Returns:
        The frozen, validated config.

    Raises:
        ConfigError: one line ``curriculum.<path> [("<phase>")]...: <problem>``; only the first
            problem is reported, with ``(+N more errors)`` when there are several.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"curriculum: expected an object, got {_show(raw)}")
    try:
        return CurriculumConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, raw)) from None


# --------------------------------------------------------------------------------------------
# The whole ds_config
# --------------------------------------------------------------------------------------------


def _positive_int(ds_config: dict[str, Any], key: str, default: int | None) -> int:
    value = ds_config.get(key, default)
    if value is None:
        raise ConfigError(f"{key}: required field is missing (a positive integer)")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key}: must be a positive integer, got {_show(value)}")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """A loaded ds_config: the DeepSpeed part and the validated curriculum."""

    ds_config: dict[str, Any]
    """The ds_config WITHOUT the ``curriculum`` key: what goes to ``deepspeed.initialize``."""
    curriculum: CurriculumConfig
    """The validated ``curriculum`` section."""
    path: Path
    """The file it was loaded from."""

    @property
    def micro_batch_size(self) -> int:
        """``train_micro_batch_size_per_gpu``: samples per micro-batch per dp rank (required).

        At most :data:`MAX_MICRO_BATCH_TOKENS` (2^24) tokens per micro-batch with the schedule's
        largest ``max_seq_len`` (checked by :func:`load_config`).
        """
        return _positive_int(self.ds_config, "train_micro_batch_size_per_gpu", None)

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per optimizer step per dp rank (default 1).

        ``micro_batch_size × gradient_accumulation_steps`` is at most
        :data:`MAX_GLOBAL_BATCH_SIZE` (2^24) samples (checked by :func:`load_config`).
        """
        return _positive_int(self.ds_config, "gradient_accumulation_steps", 1)

    def check_batch_sizes(self) -> None:
        """Refuse a micro-batch or an accumulated batch too large to train on any machine.

        Raises:
            ConfigError: ``train_micro_batch_size_per_gpu`` × the largest ``max_seq_len`` of the
                schedule exceeds :data:`MAX_MICRO_BATCH_TOKENS` tokens, or
                ``gradient_accumulation_steps`` × the micro batch size exceeds
                :data:`MAX_GLOBAL_BATCH_SIZE` samples (one rank's share of a global batch).
        """
        mbs, gas = self.micro_batch_size, self.gradient_accumulation_steps
        phase_idx, phase = max(
            enumerate(self.curriculum.schedule), key=lambda p: p[1].train_loader.max_seq_len
        )
        seq = phase.train_loader.max_seq_len
        if mbs * seq > MAX_MICRO_BATCH_TOKENS:
            raise ConfigError(
                f"train_micro_batch_size_per_gpu: {mbs} samples × max_seq_len {seq} "
                f"(curriculum.schedule[{phase_idx}] ({_show(phase.name)})) = {mbs * seq:,} "
                f"tokens per micro-batch, more than {MAX_MICRO_BATCH_TOKENS:,} (2^24); use a "
                "smaller micro-batch and more gradient_accumulation_steps"
            )
        if mbs * gas > MAX_GLOBAL_BATCH_SIZE:
            raise ConfigError(
                f"gradient_accumulation_steps: {gas} × train_micro_batch_size_per_gpu {mbs} = "
                f"{mbs * gas:,} samples per optimizer step per rank, more than "
                f"{MAX_GLOBAL_BATCH_SIZE:,} (2^24)"
            )

    def global_batch_size(self, dp_world_size: int) -> int:
        """Samples per optimizer step, global across dp ranks.

        Equals ``micro_batch_size × gradient_accumulation_steps × dp_world_size``, at most
        :data:`MAX_GLOBAL_BATCH_SIZE` (2^24).

        Raises:
            ConfigError: ``train_batch_size`` is given and differs from that product, or the
                product exceeds :data:`MAX_GLOBAL_BATCH_SIZE`.
            ValueError: ``dp_world_size`` < 1.
        """
        if dp_world_size < 1:
            raise ValueError(f"dp_world_size must be >= 1, got {dp_world_size}")
        mbs, gas = self.micro_batch_size, self.gradient_accumulation_steps
        product = mbs * gas * dp_world_size
        if product > MAX_GLOBAL_BATCH_SIZE:
            raise ConfigError(
                f"train_batch_size: train_micro_batch_size_per_gpu {mbs} × "
                f"gradient_accumulation_steps {gas} × dp_world_size {dp_world_size} = "
                f"{product:,} samples per optimizer step, more than {MAX_GLOBAL_BATCH_SIZE:,} "
                "(2^24)"
            )
        if "train_batch_size" in self.ds_config:
            given = _positive_int(self.ds_config, "train_batch_size", None)
            if given != product:
                raise ConfigError(
                    f"train_batch_size: {given} != train_micro_batch_size_per_gpu {mbs} × "
                    f"gradient_accumulation_steps {gas} × dp_world_size {dp_world_size} = "
                    f"{product}"
                )
        return product


def load_config(
    path: str | Path,
    *,
    check_data: bool = False,
    model: str | Path | None = None,
    strict: bool = False,
) -> RunConfig:
    """Read a ds_config JSON file and validate its ``curriculum`` section and batch sizes.

    Args:
        path: the ds_config JSON file.
        check_data: also run :func:`check_streams` (every stream exists and is an MDS dataset
            whose shards match its index, whose token ids fit the vocabulary when it is known).
        model: with ``check_data``: the ``--model`` folder the run will use; see
            :func:`check_streams`.
        strict: with ``check_data``: the checks of ``curriculum-ds validate``; see
            :func:`check_streams`.

    Returns:
        The RunConfig (DeepSpeed part without ``curriculum``, validated curriculum, path).

    Raises:
        ConfigError: one line naming the file (missing, unreadable, bad JSON with line:col), the
            JSON path of the invalid field, or the batch-size key that is too large
            (:meth:`RunConfig.check_batch_sizes`).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        from curriculum_ds.data import json_limit_reason

        raise ConfigError(f"{path}: invalid JSON: {json_limit_reason(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a JSON object at the top level, got {_show(raw)}")
    if "curriculum" not in raw:
        raise ConfigError(f'curriculum: required field is missing (no "curriculum" in {path})')
    curriculum = parse_curriculum(raw["curriculum"])
    ds_config = {k: v for k, v in raw.items() if k != "curriculum"}
    run = RunConfig(ds_config=ds_config, curriculum=curriculum, path=path)
    run.check_batch_sizes()  # also validates the two keys' types
    if check_data:
        check_streams(curriculum, model=model, strict=strict)
    return run


# --------------------------------------------------------------------------------------------
# Data checks
# --------------------------------------------------------------------------------------------


def read_stream_info_checked(local: str) -> StreamInfo:
    """``curriculum_ds.data.read_stream_info(local)``: num_samples, vocab_size, metrics.

    Imported lazily so that validating a config does not import streaming until data is read.

    Raises:
        DataError: the directory is missing or not a readable MDS dataset.
    """
    from curriculum_ds.data import read_stream_info

    return read_stream_info(local)


def stream_infos(cfg: CurriculumConfig) -> dict[str, Any]:
    """Read every distinct stream's info once, keyed by its ``local`` string.

    Each stream's shard files are checked first (:func:`verify_stream_checked`, no hashes).

    Raises:
        ConfigError: naming the first stream (JSON path and phase) that is missing or unreadable
            (a shard file missing, truncated or corrupt).
    """
    return _read_streams(cfg, verify_hashes=False)[0]


def _read_streams(
    cfg: CurriculumConfig, *, verify_hashes: bool
) -> tuple[dict[str, Any], dict[str, tuple[int, int] | None]]:
    """Each distinct stream's info and probed token-id range, keyed by ``local``; see above."""
    infos: dict[str, Any] = {}
    token_ranges: dict[str, tuple[int, int] | None] = {}
    for i, phase in enumerate(cfg.schedule):
        for j, stream in enumerate(phase.train_loader.streams):
            if stream.local in infos:
                continue
            where = f"{_stream_path(i, phase, j)}.local"
            if not Path(stream.local).exists():
                raise ConfigError(f"{where}: {_show(stream.local)} does not exist")
            if not Path(stream.local).is_dir():
                raise ConfigError(f"{where}: {_show(stream.local)} is not a directory")
            if not (Path(stream.local) / "index.json").is_file():
                raise ConfigError(
                    f"{where}: {_show(stream.local)} is not an MDS dataset (no index.json; "
                    "build one with `curriculum-ds prepare`)"
                )
            try:
                # the shards first: reading a foreign dataset's info decodes every sample
                token_ranges[stream.local] = verify_stream_checked(
                    stream.local, verify_hashes=verify_hashes
                )
                infos[stream.local] = read_stream_info_checked(stream.local)
            except DataError as exc:
                detail = str(exc).replace("\n", " ")
                raise ConfigError(
                    f"{where}: {_show(stream.local)} is not a readable MDS dataset: {detail}"
                ) from None
    return infos, token_ranges


def verify_stream_checked(local: str, *, verify_hashes: bool = False) -> tuple[int, int] | None:
    """``curriculum_ds.data.verify_stream(local)``: shard files and a probe of decoded samples.

    Imported lazily, like :func:`read_stream_info_checked`.

    Returns:
        ``(min_id, max_id)`` of the probed samples' token ids, or ``None`` when they hold none.

    Raises:
        DataError: naming the shard file that is missing, truncated, corrupt or undecodable.
    """
    from curriculum_ds.data import verify_stream

    return verify_stream(local, verify_hashes=verify_hashes)


def _model_vocab_size(model: str | Path) -> int:
    """``vocab_size`` of a local HF model folder's ``config.json`` (or of its ``text_config``).

    Raises:
        ConfigError: ``--model ...``: not a folder, no readable config.json, no vocab_size.
    """
    folder = Path(model)
    if not folder.is_dir():
        raise ConfigError(f"--model {model}: not a local model folder (no download at run time)")
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--model {model}: no config.json in the model folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(f"--model {model}: cannot read config.json: {detail}") from None
    vocab = raw.get("vocab_size") if isinstance(raw, dict) else None
    if vocab is None and isinstance(raw, dict) and isinstance(raw.get("text_config"), dict):
        vocab = raw["text_config"].get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise ConfigError(
            f"--model {model}: config.json has no positive integer vocab_size, got {_show(vocab)}"
        )
    return vocab


def _stream_path(i: int, phase: PhaseConfig, j: int) -> str:
    return f"curriculum.schedule[{i}] ({_show(phase.name)}).train_loader.streams[{j}]"


def check_streams(
    cfg: CurriculumConfig, *, model: str | Path | None = None, strict: bool = False
) -> None:
    """Check that every stream is a readable, intact MDS dataset that the run's model can read.

    * Each stream's shard files must match its ``index.json`` and a probe of its samples must
      decode (:func:`curriculum_ds.data.verify_stream`; with ``strict``, recorded shard hashes
      are verified too, which reads every hashed shard once).
    * Streams made by ``curriculum-ds prepare`` must all share one vocabulary size and one
      tokenizer (the byte tokenizer, or one ``tokenizer.json`` by its recorded sha256); streams
      of unknown vocabulary are not compared. Every stream must hold at least one sample.
    * Token ids (a stream's recorded or scanned range, and its probed samples) must be in
      ``[0, vocab_size)`` of the embedding that will read them: ``model``'s ``config.json``
      ``vocab_size`` when ``model`` is given; else, with ``strict`` (the run gets no ``--model``
      and builds its default model sized to the recorded ``vocab_size``), that recorded size;
      else each stream's own recorded ``vocab_size`` (a stream of unknown vocabulary is then not
      range-checked: the run may be given a ``--model`` this check does not know).
    * With ``strict`` and no ``model``, at least one stream must record its ``vocab_size``
      (else the run needs ``--model``).
    * With dynamic re-weighting, every stream must have the ``static_metric`` column, and its
      values must be finite (the bucketing refuses a NaN or an infinity).

    Relative ``local`` paths are resolved against the current working directory. Reads the
    streams' metadata, shard headers and a few samples; deterministic.

    Args:
        cfg: The validated curriculum.
        model: The ``--model`` folder the run will use (a local HF model), or ``None``.
        strict: The checks of ``curriculum-ds validate``: hashes, and the run's vocabulary must
            be known (``model``, or a recorded ``vocab_size``).

    Raises:
        ConfigError: naming the JSON path and phase of the first bad stream (missing, not MDS,
            unreadable, empty, a shard file missing/truncated/corrupt, another vocab_size or
            tokenizer, a token id out of range, no known vocab_size), ``--model`` when its folder
            or ``vocab_size`` cannot be read, or ``curriculum.dynamic.static_metric`` when dynamic
            re-weighting is enabled and a stream lacks that metric column or holds a non-finite
            value in it (naming the stream, the column and the sample index).
    """
    infos, token_ranges = _read_streams(cfg, verify_hashes=strict)
    streams = [
        (_stream_path(i, phase, j), stream)
        for i, phase in enumerate(cfg.schedule)
        for j, stream in enumerate(phase.train_loader.streams)
    ]
    first_seen: dict[str, str] = {}  # local -> the path of its first use
    for where, stream in streams:
        first_seen.setdefault(stream.local, where)

    first_vocab: tuple[int, str, str] | None = None  # (vocab_size, local, where)
    first_tok: tuple[str, str, str, str] | None = None  # (identity, shown, local, where)
    for where, stream in streams:
        info = infos[stream.local]
        vocab = getattr(info, "vocab_size", None)
        if not isinstance(vocab, int):
            continue  # not made by `prepare`: the tokenizer is unknown
        if first_vocab is None:
            first_vocab = (vocab, stream.local, where.removeprefix("curriculum."))
        elif vocab != first_vocab[0]:
            raise ConfigError(
                f"{where}.local: {_show(stream.local)} was tokenized with "
                f"vocab_size {vocab} but {_show(first_vocab[1])} ({first_vocab[2]}) with "
                f"{first_vocab[0]}; all streams must share one tokenizer"
            )
        identity = _tokenizer_identity(info)
        if identity is None:
            continue
        if first_tok is None:
            first_tok = (*identity, stream.local, where.removeprefix("curriculum."))
        elif identity[0] != first_tok[0]:
            raise ConfigError(
                f"{where}.local: {_show(stream.local)} was prepared with tokenizer "
                f"{identity[1]} but {_show(first_tok[2])} ({first_tok[3]}) with tokenizer "
                f"{first_tok[1]}; all streams must share one tokenizer"
            )

    run_vocab: tuple[int, str] | None = None  # (vocab_size, where it comes from)
    if model is not None:
        run_vocab = (_model_vocab_size(model), f"of --model {model}")
    elif strict:
        if first_vocab is None:
            where, stream = streams[0]
            raise ConfigError(
                f"{where}.local: {_show(stream.local)} has no vocab_size (no stream of the "
                "schedule was made by `curriculum-ds prepare`); pass --model DIR, the local HF "
                "model folder the run will use"
            )
        run_vocab = (first_vocab[0], "recorded by `curriculum-ds prepare`, the default model's")
    for local, where in first_seen.items():
        info = infos[local]
        own = getattr(info, "vocab_size", None)
        if run_vocab is not None:
            vocab, source = run_vocab
        elif isinstance(own, int):
            vocab, source = own, "recorded by `curriculum-ds prepare`"
        else:
            continue
        lows = [getattr(info, "min_token_id", None)]
        highs = [getattr(info, "max_token_id", None)]
        probed = token_ranges[local]
        if probed is not None:
            lows.append(probed[0])
            highs.append(probed[1])
        low = min((v for v in lows if v is not None), default=None)
        high = max((v for v in highs if v is not None), default=None)
        if low is not None and low < 0:
            raise ConfigError(
                f"{where}.local: {_show(local)} holds token id {low}; token ids must be >= 0"
            )
        if high is not None and high >= vocab:
            raise ConfigError(
                f"{where}.local: {_show(local)} holds token id {high}, out of range for "
                f"vocab_size {vocab} ({source}); ids must be < vocab_size"
            )

    if not cfg.dynamic.enabled:
        return
    metric = cfg.dynamic.static_metric
    for where, stream in streams:
        metrics = getattr(infos[stream.local], "metrics", None)
        if not isinstance(metrics, Mapping):
            continue
        if metric not in metrics:
            have = ", ".join(sorted(metrics)) or "none"
            raise ConfigError(
                f"curriculum.dynamic.static_metric: stream {_show(stream.local)} "
                f"({where.removeprefix('curriculum.')}) has no "
                f"metric column {_show(metric)} (it has: {have})"
            )
        bad = _first_non_finite(metrics[metric])
        if bad is not None:
            raise ConfigError(
                f"curriculum.dynamic.static_metric: stream {_show(stream.local)} "
                f"({where.removeprefix('curriculum.')}): metric column {_show(metric)} of "
                f"metrics.npz is {bad[1]} at sample {bad[0]}; every value must be finite "
                "(re-run `curriculum-ds prepare`)"
            )


def _first_non_finite(values: Any) -> tuple[int, float] | None:
    """``(sample_idx, value)`` of the first NaN or infinite value of a metric column, or None."""
    import numpy as np

    arr = np.asarray(values, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size == 0:
        return None
    return int(bad[0]), float(arr[bad[0]])


def _tokenizer_identity(info: Any) -> tuple[str, str] | None:
    """``(identity, shown)`` of the tokenizer a stream was prepared with, or None if unknown.

    The byte tokenizer is ``"byte"``; a ``tokenizer.json`` is its recorded sha256 (the same file
    at another path is the same tokenizer), else its path.
    """
    tokenizer = getattr(info, "tokenizer", None)
    sha = getattr(info, "tokenizer_sha256", None)
    if tokenizer == "byte":
        return "byte", '"byte"'
    if isinstance(sha, str):
        return f"sha256:{sha}", f"{_show(tokenizer)} (sha256 {sha[:12]})"
    if isinstance(tokenizer, str):
        return f"path:{tokenizer}", _show(tokenizer)
    return None
