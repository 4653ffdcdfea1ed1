"""The optional sections of ``curriculum``: dynamic re-weighting, lr schedule, evaluation.

Frozen, strict, ``extra="forbid"`` pydantic models (``dynamic``, ``lr_schedule``, ``eval``);
every field documents its unit and scope. The checks that need the whole section (units against
``max_duration``, warmup and decay fitting in the run) are :class:`CurriculumConfig`'s
(:mod:`curriculum_ds.config.models`). Validation is deterministic, touches no RNG and reads no
file.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from curriculum_ds.config.base import (
    MAX_GLOBAL_BATCH_SIZE,
    MAX_SEQ_LEN,
    Duration,
    EvalStreamConfig,
    _Model,
    _unique_names,
)
from curriculum_ds.config.messages import custom_error, show_value
from curriculum_ds.config.mixers import (
    METHODS,
    ADOConfig,
    AioliConfig,
    DoReMiConfig,
    FileMixConfig,
    MethodConfig,
    ODMConfig,
    SkillitConfig,
)
from curriculum_ds.data.metrics import METRIC_COLUMNS

__all__ = ["DynamicConfig", "EvalConfig", "EvalStreamConfig", "LRScheduleConfig"]


class DynamicConfig(_Model):
    """Dynamic re-weighting of the sampler: over difficulty buckets or over the phase's streams.

    ``unit`` says what is weighted, ``signal`` what drives it; every recompute the weights are
    ``floor + (1 - K * floor) * softmax(score / temperature)`` over the ``K`` buckets or streams
    (:mod:`curriculum_ds.dynamic`).
    """

    enabled: bool = False
    """Turn dynamic re-weighting on (off: sample the datamix by its proportions only)."""
    method: str = "softmax"
    """The re-weighting rule, by name (:mod:`curriculum_ds.dynamic.registry`): ``"softmax"``
    (``floor + (1 - K·floor)·softmax(score / temperature)`` over buckets or streams), or a
    published method over ``unit: "streams"``: ``"doremi"``, ``"odm"``, ``"ado"``, ``"aioli"``,
    ``"skillit"``, or ``"file"`` (an operator's weights file); each reads its own section below
    (:mod:`curriculum_ds.config.mixers`)."""
    unit: Literal["buckets", "streams"] = "buckets"
    """What the weights are over: ``"buckets"`` (percentile buckets of the signal inside each
    stream of the phase; the stream mix stays the phase's proportions) or ``"streams"`` (the
    phase's streams, i.e. domains: from each recompute on the weights replace the phase's
    ``proportion``s, in its ``proportion_unit``)."""
    signal: Literal["loss", "excess_loss", "learnability"] = "loss"
    """What a weight's score is made of: ``"loss"`` (each sample's mean token loss, nats),
    ``"excess_loss"`` (that loss minus the sample's ``reference_metric`` value, clipped at 0 as in
    DoReMi) or ``"learnability"`` (``unit: "streams"`` only: the relative drop of a stream's mean
    loss over the last ``learnability_horizon`` recomputes, as in ADO / Velocitune)."""
    reference_metric: str | None = Field(default=None, min_length=1)
    """``signal: "excess_loss"`` only (required there): the metric column holding each sample's
    mean token loss under a reference model (nats; ``curriculum-ds score`` writes it)."""
    learnability_horizon: int = Field(default=2, ge=1, le=1000)
    """``signal: "learnability"``: how many recomputes back the loss drop is measured from, in
    [1, 1000] (fewer in the phase so far: from the phase's first recompute); unused otherwise."""
    num_buckets: int = Field(default=8, ge=2, le=64)
    """Number of difficulty buckets (percentile-rank buckets of the window), in [2, 64];
    unused with ``unit: "streams"``."""
    window: int = Field(default=1_000_000, ge=1, le=10_000_000)
    """Per-sample signals kept in the rolling window, global across dp ranks, in [1, 10^7]."""
    recompute_every_n_steps: int = Field(default=50, ge=1)
    """The weights are recomputed every this many optimizer steps (≥ 1)."""
    temperature: float = Field(default=1.0, gt=0)
    """Softmax temperature applied to the scores (> 0; lower = sharper)."""
    floor: float = Field(default=0.02, gt=0)
    """Minimum weight of every bucket or stream; 0 < floor ≤ 1 / K (K: ``num_buckets``, or each
    phase's number of streams)."""
    static_metric: str = Field(default="num_tokens", min_length=1)
    """The prepare metric column used to bucket samples before any loss has been seen
    (``unit: "buckets"``)."""
    score: Literal["loss"] = "loss"
    """Kept for configs written before ``signal`` existed; only ``"loss"``."""
    doremi: DoReMiConfig | None = None
    """``method: "doremi"``'s keys (absent: its defaults)."""
    odm: ODMConfig | None = None
    """``method: "odm"``'s keys (absent: its defaults)."""
    ado: ADOConfig | None = None
    """``method: "ado"``'s keys (absent: its defaults)."""
    aioli: AioliConfig | None = None
    """``method: "aioli"``'s keys (absent: its defaults)."""
    skillit: SkillitConfig | None = None
    """``method: "skillit"``'s keys (absent: its defaults)."""
    file: FileMixConfig | None = None
    """``method: "file"``'s keys."""

    @property
    def method_config(self) -> MethodConfig | None:
        """The section ``method`` reads (its defaults when absent); None for ``softmax``."""
        model = METHODS[self.method]
        if model is None:
            return None
        section: MethodConfig | None = getattr(self, self.method)
        return model() if section is None else section

    @model_validator(mode="before")
    @classmethod
    def _doremi_signal(cls, data: Any) -> Any:
        """DoReMi's score is the excess loss: ``signal`` defaults to ``"excess_loss"`` for it."""
        if isinstance(data, dict) and data.get("method") == "doremi" and "signal" not in data:
            return {**data, "signal": "excess_loss"}
        return data

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        if value not in METHODS:
            close = difflib.get_close_matches(value, list(METHODS), n=1, cutoff=0.5)
            hint = f'did you mean "{close[0]}"?' if close else "one of " + ", ".join(METHODS)
            raise custom_error(f"unknown method {show_value(value)} ({hint})")
        return value

    @model_validator(mode="after")
    def _check_method(self) -> DynamicConfig:
        for name in METHODS:
            if name != "softmax" and name != self.method and getattr(self, name) is not None:
                raise custom_error(
                    f'the keys of method "{name}", but method is "{self.method}"; remove them',
                    (name,),
                )
        if self.method == "softmax":
            return self
        if self.unit != "streams":
            raise custom_error(
                f'method "{self.method}" re-weights streams: it needs unit "streams", not '
                f'"{self.unit}"',
                ("unit",),
            )
        for key in ("temperature", "floor"):
            if key in self.model_fields_set:
                raise custom_error(
                    f'applies only to method "softmax", not "{self.method}"; remove it', (key,)
                )
        if self.method == "doremi":
            if self.signal != "excess_loss":
                raise custom_error(
                    f'method "doremi" scores the excess loss over reference_metric, not signal '
                    f'"{self.signal}"; remove signal',
                    ("signal",),
                )
        elif self.signal != "loss":
            raise custom_error(
                f'applies only to methods "softmax" and "doremi", not "{self.method}"; remove it',
                ("signal",),
            )
        if self.method == "file" and (self.file is None or self.file.path is None):
            raise custom_error(
                'method "file" needs the weights file: "file": {"path": "mix.json"}', ("file",)
            )
        return self

    @model_validator(mode="after")
    def _check_unit_and_signal(self) -> DynamicConfig:
        if self.signal == "learnability" and self.unit != "streams":
            raise custom_error(
                'learnability needs unit "streams": a bucket keyed by the current loss changes '
                "its members every recompute, so its loss drop measures nothing",
                ("signal",),
            )
        if self.signal == "excess_loss" and self.reference_metric is None:
            raise custom_error(
                'signal "excess_loss" needs the metric column of the reference model\'s losses '
                "(`curriculum-ds score ... --column NAME`)",
                ("reference_metric",),
            )
        if self.reference_metric is not None and self.signal != "excess_loss":
            raise custom_error(
                f'applies only to signal "excess_loss", not "{self.signal}"; remove it',
                ("reference_metric",),
            )
        if self.reference_metric in ("input_ids", *METRIC_COLUMNS):
            raise custom_error(
                f'"{self.reference_metric}" is a column of `curriculum-ds prepare`, not a '
                "reference model's loss; write one with `curriculum-ds score ... --column NAME`",
                ("reference_metric",),
            )
        if self.unit == "streams":
            return self  # the floor against each phase's streams: CurriculumConfig
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
    lr is the schedule at the step's END progress (:mod:`curriculum_ds.core.lr_schedule`).
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
