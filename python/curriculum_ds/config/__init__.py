"""The ``curriculum`` section of a ds_config: typed models, loading and validation.

The user's ds_config is one JSON file: the usual DeepSpeed keys plus a ``curriculum`` object
(see docs/config.md). :func:`load_config` splits it into the DeepSpeed part (passed untouched to
``deepspeed.initialize``) and a validated, frozen :class:`CurriculumConfig`.

Every validation failure is raised as a :class:`~curriculum_ds.errors.ConfigError` whose message is
ONE line that starts with the JSON path of the offending field and, inside the schedule, the phase
name, e.g. ``curriculum.schedule[1] ("mix").duration: expected "<int>tok" or "<number>ep", got
"12 tokens"``; nothing here ever surfaces a traceback or a tuple.

Modules: ``base`` (the base model, size bounds and :class:`Duration`), ``models`` (streams,
loaders, phases, :class:`CurriculumConfig`), ``sections`` (``dynamic``, ``lr_schedule``,
``eval``), ``messages`` (the one-line wording of pydantic's errors), ``run`` (:class:`RunConfig`,
:func:`load_config` = :func:`parse_run`, the file alone, then the preflight's ``check_run``;
:func:`parse_curriculum`), ``deepspeed`` (the DeepSpeed part, by
DeepSpeed's own models), ``legacy`` (``migrate``), ``hf_auto`` (HF's ``"auto"`` values),
``hf_args`` (``TrainingArguments`` against the ds_config),
``ramps``. The data checks live in
:mod:`curriculum_ds.preflight`; their names are re-exported here too, loaded on first use
(``preflight`` imports ``messages`` from this package, so importing it here eagerly would be
circular).

Validation is deterministic and touches no RNG. Only the data checks read the file system beyond
the config file itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from curriculum_ds.config.base import (
    MAX_GLOBAL_BATCH_SIZE,
    MAX_MICRO_BATCH_TOKENS,
    MAX_PROPORTION,
    MAX_SEQ_LEN,
    Duration,
)
from curriculum_ds.config.models import (
    CurriculumConfig,
    LoaderConfig,
    PhaseConfig,
    StreamConfig,
)
from curriculum_ds.config.run import (
    RunConfig,
    load_config,
    parse_curriculum,
    parse_run,
    read_json_object,
)
from curriculum_ds.config.sections import DynamicConfig, EvalConfig, EvalStreamConfig

if TYPE_CHECKING:
    from curriculum_ds.preflight import (
        check_streams,
        read_stream_info_checked,
        stream_infos,
        verify_stream_checked,
    )

__all__ = [
    "MAX_GLOBAL_BATCH_SIZE",
    "MAX_MICRO_BATCH_TOKENS",
    "MAX_PROPORTION",
    "MAX_SEQ_LEN",
    "CurriculumConfig",
    "Duration",
    "DynamicConfig",
    "EvalConfig",
    "EvalStreamConfig",
    "LoaderConfig",
    "PhaseConfig",
    "RunConfig",
    "StreamConfig",
    "check_streams",
    "load_config",
    "parse_curriculum",
    "parse_run",
    "read_json_object",
    "read_stream_info_checked",
    "stream_infos",
    "verify_stream_checked",
]

_PREFLIGHT_NAMES = frozenset(
    {"check_streams", "read_stream_info_checked", "stream_infos", "verify_stream_checked"}
)


def __getattr__(name: str) -> Any:
    """The data-check names of :mod:`curriculum_ds.preflight`, imported on first use (PEP 562)."""
    if name in _PREFLIGHT_NAMES:
        from curriculum_ds import preflight

        return getattr(preflight, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
