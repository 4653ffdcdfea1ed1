"""Where a run stands: the four counters every resume, checkpoint and step share.

One frozen value, as mosaicml-streaming's ``state_dict`` names its counts (``epoch``,
``sample_in_epoch``): the curriculum holds one, a step hands back the next, the checkpoint
state and the resume plan carry one. Pure Python: no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from curriculum_ds.core.schedule import Progress

__all__ = ["Position"]


@dataclass(frozen=True, kw_only=True)
class Position:
    """The run's counters after ``global_step`` optimizer steps.

    Attributes:
        global_step: optimizer steps finished (0 before the first), global.
        consumed_tokens: non-padding input tokens consumed, global (all dp ranks and
            micro-batches).
        consumed_samples: samples consumed, global.
        progress: cumulative progress in the schedule's unit: int tokens (``tok``) or an exact
            Fraction of passes (``ep``).
    """

    global_step: int = 0
    consumed_tokens: int = 0
    consumed_samples: int = 0
    progress: Progress = 0

    @classmethod
    def start(cls, unit: str, *, global_step: int = 0) -> Position:
        """The position before any step of a schedule in ``unit`` (``"tok"`` or ``"ep"``)."""
        return cls(global_step=global_step, progress=0 if unit == "tok" else Fraction(0))

    def advanced(self, *, step_tokens: int, num_samples: int, progress: Progress) -> Position:
        """The position one optimizer step later.

        Args:
            step_tokens: the step's non-padding input tokens (global).
            num_samples: the step's samples (the global batch size).
            progress: the step's progress in the schedule's unit (``step_tokens`` for ``tok``,
                a Fraction of the phase's pass for ``ep``).
        """
        return replace(
            self,
            global_step=self.global_step + 1,
            consumed_tokens=self.consumed_tokens + step_tokens,
            consumed_samples=self.consumed_samples + num_samples,
            progress=self.progress + progress,
        )
