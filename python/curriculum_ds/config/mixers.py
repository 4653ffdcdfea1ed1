"""The published mixing methods' own keys: ``curriculum.dynamic.<method>``, one model per method.

``dynamic.method`` names the re-weighting rule (:mod:`curriculum_ds.dynamic.registry`); every
method but ``softmax`` re-weights the phase's streams (``unit: "streams"``) and reads its own
section, named as the method (``dynamic.doremi``, ``dynamic.odm``, ...), whose defaults are the
reference implementation's unless its docstring says otherwise. ``window`` and
``recompute_every_n_steps`` of ``dynamic`` apply to every method; ``temperature``, ``floor`` and
``signal`` only to ``softmax`` (``docs/adaptive-mixing.md`` has the table).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from curriculum_ds.config.base import (
    MAX_GLOBAL_BATCH_SIZE,
    EvalStreamConfig,
    _Model,
    _unique_names,
)
from curriculum_ds.config.messages import custom_error

if TYPE_CHECKING:
    from curriculum_ds.config.models import CurriculumConfig

__all__ = [
    "METHODS",
    "ADOConfig",
    "AioliConfig",
    "DoReMiConfig",
    "FileMixConfig",
    "MethodConfig",
    "ODMConfig",
    "ReadsHeldOutLosses",
    "SkillitConfig",
    "check_methods_fit_the_schedule",
]


class DoReMiConfig(_Model):
    """``dynamic.doremi``: DoReMi's exponentiated-gradient step on the per-stream excess loss.

    Reference: ``sangmichaelxie/doremi``, ``doremi/trainer.py`` ``update_domain_weights`` (commit
    7cde52d); the excess is over ``dynamic.reference_metric``, clipped at 0 per sample
    (:mod:`curriculum_ds.dynamic.doremi`).
    """

    eta: float = Field(default=1.0, gt=0)
    """The step size η of ``log w ← log w + η·s`` (> 0; the reference's ``reweight_eta``; its
    author suggests 0.1 where the weights collapse onto one stream)."""
    epsilon: float = Field(default=1e-4, ge=0, lt=1)
    """The smoothing ε of ``w ← (1 − ε)·w + ε/K``, in [0, 1) (the reference's ``reweight_eps``):
    every stream keeps at least ε/K. > 0 with ``apply: "sampling"`` (the sampler needs every
    weight > 0)."""
    apply: Literal["sampling", "loss"] = "sampling"
    """``"sampling"``: the sampler follows the weights (they replace the phase's proportions);
    ``"loss"``: the sampling mix stays the phase's proportions and each stream's loss is weighted
    by its weight over its proportion, as DoReMi's proxy trains (the step's loss is
    ``Σ w·ℓ / Σ w``)."""
    initial_score: float = 0.0
    """The score (nats of excess loss) of a stream that has had no sample in the window yet:
    an absent stream keeps its last score, and this is its score before the first. The reference
    starts at ``ln V`` (V: the vocabulary size), which pushes an unseen stream up; 0 leaves its
    log-weight where it is."""

    @model_validator(mode="after")
    def _sampling_needs_smoothing(self) -> DoReMiConfig:
        if self.epsilon == 0 and self.apply == "sampling":
            raise custom_error(
                'must be > 0 with apply "sampling": without smoothing a weight can reach 0, and '
                'the sampler needs every stream\'s weight > 0 (use apply "loss" for epsilon 0)',
                ("epsilon",),
            )
        return self


class ODMConfig(_Model):
    """``dynamic.odm``: Online Data Mixing's smoothed-mean EXP3 bandit.

    Reference: ``alon-albalak/online-data-mixing``, ``megatron/data/data_sampling_utils.py``
    (``SmoothedMeanWeightUpdater``). An update runs at every ``recompute_every_n_steps``-th step
    from that step's per-stream losses (1, the reference's ``update_frequency``, is
    recommended); the rolling ``window`` is not read.
    """

    alpha: float = Field(default=0.9, gt=0, lt=1)
    """The smoothing α of ``R̂ ← α·R̂ + (1 − α)·exp(r)``, in (0, 1) (the reference's
    ``data_sampling_smoothing_factor``)."""
    warmup_steps: int = Field(default=0, ge=0)
    """Optimizer steps of the phase before the first update (the reference's
    ``data_sampling_warmup_steps``)."""


class ADOConfig(_Model):
    """``dynamic.ado``: Adaptive Data Optimization's per-stream scaling-law fit and policy.

    Reference: ``yidingjiang/ado``, ``src/data_selectors/ado.py`` (``AdoSelector``), whose
    defaults are for 60k-step runs (``ignore_steps``/``start_step`` 1,000, ``update_interval``
    1,000, Savitzky–Golay window 101, every 10th step fitted, 512 starts). The defaults here are
    scaled down for runs of a few hundred steps; the reference's values are given per key. The
    policy runs at every ``recompute_every_n_steps``-th step (1, as the reference, is
    recommended).
    """

    skip_steps: int = Field(default=5, ge=0)
    """Leading optimizer steps of the phase whose losses the fit leaves out (the reference's
    ``ignore_steps``, 1,000): the first steps' fast drop is not a power law."""
    warmup_steps: int = Field(default=20, ge=1)
    """Optimizer steps of the phase before the first fit and the first policy step: the phase's
    proportions hold until then (the reference's ``start_step``, 1,000)."""
    refit_every: int = Field(default=10, ge=1)
    """The laws are refitted every this many optimizer steps from ``warmup_steps`` on (the
    reference's ``update_interval``, 1,000)."""
    fit_stride: int = Field(default=1, ge=1)
    """Every this many steps' (smoothed) loss is a point of the fit (the reference: 10)."""
    savgol_window: int = Field(default=21, ge=1)
    """The Savitzky–Golay window that smooths each stream's loss curve (odd; the reference:
    101); cut to the curve's length while it is shorter."""
    fit_starts: int = Field(default=8, ge=1, le=512)
    """L-BFGS runs per fit, from the points of the reference's 8×8×8 grid of lowest objective
    (512: the whole grid, as the reference)."""

    @field_validator("savgol_window")
    @classmethod
    def _odd_window(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError(f"must be odd (a Savitzky–Golay window), got {value}")
        return value


class ReadsHeldOutLosses(_Model):
    """The held-out streams a method that steers by eval losses reads (Aioli, Skill-it).

    Its evaluations are its own (at its own steps, on every rank, exact over ranks as
    ``curriculum.eval``'s) and are not written to ``eval.jsonl``. Deciding the mixture on the
    streams the run's final eval reports biases that eval in the method's favour: for an
    ablation give the method a separate set (``eval_streams``).
    """

    eval_streams: list[EvalStreamConfig] | None = Field(default=None, min_length=1)
    """The held-out streams the method evaluates, matched to the phase's train streams by
    name (every train stream needs one of its name), in the shape of ``curriculum.eval.streams``;
    None: ``curriculum.eval``'s streams of those names."""
    eval_max_samples: int | None = Field(default=None, ge=1, le=MAX_GLOBAL_BATCH_SIZE)
    """Samples taken from the start of each of those streams at every evaluation; None:
    ``curriculum.eval.max_samples`` (512 without ``curriculum.eval``)."""

    @model_validator(mode="after")
    def _unique_eval_names(self) -> ReadsHeldOutLosses:
        if self.eval_streams is not None:
            _unique_names(self.eval_streams)
        return self


class AioliConfig(ReadsHeldOutLosses):
    """``dynamic.aioli``: Aioli's probe rounds and interaction matrix.

    Reference: ``HazyResearch/aioli``, ``trainer/aioli_trainer.py`` (defaults: its
    ``scripts/arxiv_stackexchange/aioli/run.sh``, 250-step rounds). A round is
    ``recompute_every_n_steps`` steps, starting at every multiple of it: ``K × lp_rounds ×
    probe_steps`` probe steps, then the learned mixture for the rest.
    """

    eta: float = Field(default=0.2, gt=0)
    """The step size η of ``w = w_init·exp(η·Σ_rows A)`` (> 0)."""
    ema: float | None = Field(default=0.1, ge=0, lt=1)
    """The weight of the previous interaction matrix in ``A ← (1 − ema)·A_new + ema·A_old``,
    in [0, 1); None: no EMA, the weights multiply instead (``w ← w·exp(η·Σ_rows A_new)``, the
    reference without ``--ema``)."""
    lp_rounds: int = Field(default=4, ge=1)
    """Sweeps over the streams per round (each probes every stream once, in a seeded random
    order); the drops are averaged over them."""
    probe_steps: int = Field(default=4, ge=1)
    """Optimizer steps of one probe (the reference's ``lp_steps``)."""
    one_hot_factor: float = Field(default=0.625, gt=0, le=1)
    """A probe's weight on its stream; the rest is spread evenly over the others (1: one-hot
    probes, no un-mixing)."""


class SkillitConfig(ReadsHeldOutLosses):
    """``dynamic.skillit``: Skill-it's multiplicative weights over a skills graph.

    Reference: ``HazyResearch/skill-it``, ``trainer/mw_trainer.py`` (defaults: its
    ``scripts/lego/pt/skillit.sh``). The held-out streams are evaluated at every recompute.
    """

    eta: float = Field(default=0.5, gt=0)
    """The step size η of ``w = w_init ⊙ exp(η·A·Σ L_eval)`` (> 0)."""
    graph: Literal["identity"] | list[list[float]] = "identity"
    """The skills graph ``A``: a K×K matrix over the phase's streams, in their order, finite
    entries ≥ 0 (``A[i][j]``: how much training on stream ``i`` lowers stream ``j``'s loss), or
    ``"identity"``. Every phase needs K streams."""
    window: int = Field(default=3, ge=1)
    """Evaluations summed in ``Σ L_eval`` (the reference's ``mw_window``)."""

    @field_validator("graph")
    @classmethod
    def _square_non_negative(cls, value: Any) -> Any:
        if value == "identity":
            return value
        size = len(value)
        for i, row in enumerate(value):
            if len(row) != size:
                raise custom_error(
                    f"row {i} has {len(row)} entries: the graph must be {size}×{size} (one row "
                    "and one column per stream)"
                )
            for j, entry in enumerate(row):
                if not math.isfinite(entry) or entry < 0:
                    raise custom_error(f"entry [{i}][{j}] is {entry:g}: entries must be ≥ 0")
        return value


class FileMixConfig(_Model):
    """``dynamic.file``: the weights come from a JSON file an operator edits during the run.

    It is read at each recompute boundary, journaled, and replayed on a resume.
    """

    path: str | None = Field(default=None, min_length=1)
    """The weights file (relative to the working directory of rank 0)."""


MethodConfig = DoReMiConfig | ODMConfig | ADOConfig | AioliConfig | SkillitConfig | FileMixConfig
"""The section of one named method."""

METHODS: dict[str, type[MethodConfig] | None] = {
    "softmax": None,
    "doremi": DoReMiConfig,
    "odm": ODMConfig,
    "ado": ADOConfig,
    "aioli": AioliConfig,
    "skillit": SkillitConfig,
    "file": FileMixConfig,
}
"""Every ``dynamic.method`` name → its section's model (None: ``softmax`` reads ``dynamic``'s
own keys)."""


def check_methods_fit_the_schedule(cfg: CurriculumConfig) -> None:
    """The checks of a method's section against the phases and the held-out streams.

    Aioli and Skill-it: every train stream of every phase has a held-out stream of its name
    (in ``eval_streams``, else in ``curriculum.eval``); Skill-it: a graph given as a matrix is
    K×K for every phase's K streams; Aioli: a round's probes (``K × lp_rounds × probe_steps``)
    leave at least one step of ``recompute_every_n_steps`` to the learned mixture. A phase of
    one stream is left out (the method leaves it alone).

    Raises:
        ValueError: pydantic's custom error naming the key (the config's one line).
    """
    dynamic = cfg.dynamic
    section = dynamic.method_config if dynamic.enabled else None
    if not isinstance(section, ReadsHeldOutLosses):
        return
    where = (dynamic.method, "eval_streams")
    if section.eval_streams is not None:
        names = [s.name or s.local for s in section.eval_streams]
        source = f"dynamic.{dynamic.method}.eval_streams"
    elif cfg.eval is not None:
        names = [s.name or s.local for s in cfg.eval.streams]
        source = "curriculum.eval.streams"
    else:
        raise custom_error(
            f'method "{dynamic.method}" reads held-out losses: give it "eval_streams" (or a '
            "curriculum.eval section with a stream of each train stream's name)",
            ("dynamic", *where),
        )
    for i, phase in enumerate(cfg.schedule):
        streams = phase.train_loader.streams
        num_streams = len(streams)
        if num_streams == 1:  # nothing to mix: the method leaves the phase alone
            continue
        for s in streams:
            if s.name not in names:
                raise custom_error(
                    f'train stream "{s.name}" of schedule[{i}] ("{phase.name}") has no held-out '
                    f"stream of its name in {source} ({', '.join(names)})",
                    ("dynamic", *where),
                )
        graph = section.graph if isinstance(section, SkillitConfig) else "identity"
        if graph != "identity" and len(graph) != num_streams:
            raise custom_error(
                f"a {len(graph)}×{len(graph)} graph, but schedule[{i}] ("
                f'"{phase.name}") has {num_streams} streams: it must be '
                f"{num_streams}×{num_streams}",
                ("dynamic", "skillit", "graph"),
            )
        if isinstance(section, AioliConfig):
            probes = num_streams * section.lp_rounds * section.probe_steps
            if probes >= dynamic.recompute_every_n_steps:
                raise custom_error(
                    f'a probe round of schedule[{i}] ("{phase.name}") takes {num_streams} '
                    f"streams × lp_rounds {section.lp_rounds} × probe_steps "
                    f"{section.probe_steps} = {probes} steps, which does not fit in a round "
                    f"of recompute_every_n_steps {dynamic.recompute_every_n_steps} (the "
                    "learned mixture needs at least one step)",
                    ("dynamic", "aioli", "probe_steps"),
                )
