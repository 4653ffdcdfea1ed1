"""The learning rate as a function of progress (``curriculum.lr_schedule``): warmup, then decay.

Progress is the count the ``tok``/``ep`` durations use: non-padding input tokens of every global
batch so far (summed over dp ranks), or passes over the phases' datamixes. With ``W`` the warmup,
``T`` ``max_duration``, ``r`` ``min_lr_ratio`` and ``p`` the progress, the factor the peak lr is
multiplied by is::

    warmup   p < W:        p / W                               (linear from 0)
    cosine   W <= p < T:   r + (1 - r) · ½ (1 + cos(π (p - W) / (T - W)))
    linear   W <= p < T:   r + (1 - r) · (1 - (p - W) / (T - W))
    wsd      W <= p < S:   1                                   (stable; S = T - D)
             S <= p < T:   1 - (1 - r) · (p - S) / D           (linear decay over the last D)
    all      p >= T:       r                                   (the floor)

Cosine decay: SGDR (Loshchilov & Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts",
ICLR 2017), one cycle without restart, annealed to ``r × peak`` as in the GPT/Chinchilla recipes.
Warmup-stable-decay: Hu et al. 2024, "MiniCPM: Unveiling the Potential of Small Language Models
with Scalable Training Strategies" (its decay given as the last phase is the annealing phase of
modern pre-training recipes).

**Which point of a step.** A step's lr is the schedule at the step's END progress: the progress
once its own tokens (``Step.step_tokens``) or passes are counted, known when the step is drawn.
So the first step of a warmup from 0 has lr ``peak × step_tokens / W`` (never 0), and the step
that reaches ``max_duration`` has the floor exactly. The step's lr lies between the schedule's
values at its start and end progress, as the lr schedule's contract asks (docs/config.md).

The peak is each optimizer param group's own initial ``lr`` (``optimizer.params.lr`` of the
ds_config, or a client optimizer's per-group lrs): each group's lr is ``its peak × factor``, so
groups keep their ratios. Everything here is a pure function of progress and the config:
identical on every rank, exact on resume (progress is in the checkpoint), no RNG.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from curriculum_ds.errors import ConfigError

if TYPE_CHECKING:
    from curriculum_ds.config.models import CurriculumConfig

__all__ = ["BASE_LR_KEY", "LRSchedule", "apply_lr", "optimizer_lr"]

BASE_LR_KEY = "initial_lr"
"""The param-group key that holds a group's peak lr: torch's own ``LRScheduler`` convention
(``group.setdefault("initial_lr", group["lr"])``). Set once, at the first step drawn; it is part
of the optimizer's ``state_dict``, so a resumed run reads the same peak back (the ``lr`` saved
beside it is the last step's scheduled value, not the peak)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class LRSchedule:
    """The lr factor (0..1 of the peak) as a pure function of progress; see the module docstring.

    Attributes:
        type: ``"cosine"``, ``"linear"`` or ``"wsd"``.
        warmup: ``W``, warmup length in the run's unit (0: none); int tokens or Fraction passes.
        decay_start: where the decay starts: ``W`` for cosine/linear, ``T - D`` for wsd.
        total: ``T``, ``max_duration``'s value (the floor is reached there).
        min_lr_ratio: ``r``, the floor as a fraction of the peak, in [0, 1].
    """

    type: Literal["cosine", "linear", "wsd"]
    warmup: int | Fraction
    decay_start: int | Fraction
    total: int | Fraction
    min_lr_ratio: float

    @classmethod
    def from_config(cls, cfg: CurriculumConfig) -> LRSchedule | None:
        """The schedule of a validated ``curriculum`` section; None without ``lr_schedule``.

        ``"decay": "last_phase"`` starts the wsd decay where the last phase starts.
        """
        lr = cfg.lr_schedule
        if lr is None:
            return None
        total = cfg.max_duration.value
        warmup = lr.warmup.value if lr.warmup is not None else 0
        decay_start: int | Fraction = warmup
        if lr.type == "wsd":
            decay = (
                cfg.schedule[-1].duration.value
                if lr.decay == "last_phase" or lr.decay is None
                else lr.decay.value
            )
            decay_start = total - decay
        return cls(
            type=lr.type,
            warmup=warmup,
            decay_start=decay_start,
            total=total,
            min_lr_ratio=lr.min_lr_ratio,
        )

    def factor(self, progress: int | Fraction) -> float:
        """The lr as a fraction of the peak after ``progress`` units (a step's END progress).

        Args:
            progress: cumulative progress in the run's unit, >= 0 (int tokens or Fraction
                passes); past ``total`` it is the floor.

        Returns:
            A float in [0, 1]: 0 only at progress 0 with a warmup. Exact ratios (``Fraction``)
            up to the final float operations; deterministic.
        """
        r = self.min_lr_ratio
        if progress >= self.total:
            return r
        if progress < self.warmup:
            return float(Fraction(progress) / self.warmup)
        if progress < self.decay_start:  # wsd's stable part
            return 1.0
        t = float(Fraction(progress - self.decay_start) / (self.total - self.decay_start))
        if self.type == "cosine":
            return r + (1 - r) * 0.5 * (1 + math.cos(math.pi * t))
        return r + (1 - r) * (1 - t)  # linear, and wsd's decay

    def describe(self, unit: str, *, peak: float | None = None, last_phase: bool = False) -> str:
        """One line for ``curriculum-ds validate``: warmup, decay shape, floor, which point.

        Args:
            unit: the run's unit (``"tok"`` or ``"ep"``).
            peak: the optimizer's ``lr`` when the ds_config gives it (shown as the peak).
            last_phase: the wsd decay was given as ``"last_phase"`` (said so).
        """
        from curriculum_ds.core.schedule import duration_str

        def show(value: int | Fraction) -> str:
            return duration_str(unit, value) if value else f"0{unit}"

        top = f"peak {peak:g}" if peak is not None else "peak (the optimizer's lr)"
        floor = f"{self.min_lr_ratio:g} x peak"
        if self.type == "wsd":
            where = " (the last phase)" if last_phase else ""
            decay = (
                f"stable to {show(self.decay_start)}, linear decay{where} to {floor} at "
                f"{show(self.total)}"
            )
        else:
            decay = f"{self.type} decay to {floor} at {show(self.total)}"
        return (
            f"lr_schedule {self.type}: warmup {show(self.warmup)} from 0 to {top}, {decay}; "
            "each step's lr is the schedule at the step's end progress"
        )


def apply_lr(optimizer: Any, factor: float) -> None:
    """Set every param group's ``lr`` to its own peak × ``factor``.

    The peak is remembered in each group under :data:`BASE_LR_KEY` the first time (the group's
    ``lr`` then); later calls read it back. Called when a step is drawn, before the step reads
    its lr.

    Args:
        optimizer: ``engine.optimizer`` (a torch optimizer or DeepSpeed's wrapper of one: both
            expose the inner ``param_groups``).
        factor: :meth:`LRSchedule.factor` at the step's end progress.

    Raises:
        ConfigError: the engine has no optimizer with param groups to schedule.
    """
    groups = getattr(optimizer, "param_groups", None)
    if not groups:
        raise ConfigError(
            "curriculum.lr_schedule: the engine has no optimizer with param_groups to schedule "
            '(give the ds_config an "optimizer" or pass one to initialize)'
        )
    for group in groups:
        peak = float(group.setdefault(BASE_LR_KEY, group["lr"]))
        group["lr"] = peak * factor


def optimizer_lr(engine: Any) -> float:
    """The learning rate the engine's next optimizer update uses: its first param group's.

    Read from the optimizer rather than ``engine.get_lr()``, which asks the scheduler and, before
    its first step, warns and answers 0 whatever the optimizer holds; ``get_lr()`` only when the
    optimizer has no ``param_groups``. DeepSpeed's scheduler moves the lr only after an update,
    so read when a step is drawn this is the lr of that step's update.

    Args:
        engine: a DeepSpeed engine (:class:`~curriculum_ds.plugin.engine_like.EngineLike`).
    """
    optimizer = getattr(engine, "optimizer", None)
    groups = getattr(optimizer, "param_groups", None)
    if groups:
        return float(groups[0]["lr"])
    return float(engine.get_lr()[0])
