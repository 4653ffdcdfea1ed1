"""The one check of a parsed run before it trains: the model's context, then the data.

:func:`check_run` is what :func:`curriculum_ds.config.load_config`, ``curriculum-ds validate``,
the reference loop and :func:`curriculum_ds.initialize` run after parsing
(:func:`curriculum_ds.config.parse_run`, which checks the file alone).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from curriculum_ds.errors import ConfigError
from curriculum_ds.preflight.data import check_streams
from curriculum_ds.preflight.model import check_model_context

if TYPE_CHECKING:
    from curriculum_ds.config import CurriculumConfig, RunConfig

__all__ = ["check_mix_file", "check_run"]


def check_run(
    run: RunConfig,
    *,
    model: str | Path | None = None,
    check_data: bool = False,
    strict: bool = False,
) -> None:
    """Check a parsed run against its model and data, before anything is written.

    Args:
        run: the parsed config (:func:`curriculum_ds.config.parse_run`).
        model: the ``--model`` folder the run will use: every phase's ``max_seq_len`` must fit
            its context (:func:`~curriculum_ds.preflight.check_model_context`).
        check_data: check every stream's data (:func:`~curriculum_ds.preflight.check_streams`).
        strict: with ``check_data``: the checks of ``curriculum-ds validate``.

    Raises:
        ConfigError: one line per problem naming the JSON path (and phase).
        DataError: a stream's data is missing or malformed (names the file).
    """
    check_mix_file(run.curriculum)
    if model is not None:
        check_model_context(run.curriculum, model)
    if check_data:
        check_streams(run.curriculum, model=model, strict=strict)


def check_mix_file(cfg: CurriculumConfig) -> None:
    """``dynamic.method: "file"``: its ``file.path`` may be absent, not a folder.

    A missing file is no refusal: the phase's proportions hold until it appears (the method
    reads it at every recompute boundary, :mod:`curriculum_ds.dynamic.steering`). Relative paths
    are read from this process's working directory, as rank 0 will read them.

    Raises:
        ConfigError: ``curriculum.dynamic.file.path`` names a folder.
    """
    dynamic = cfg.dynamic
    if not dynamic.enabled or dynamic.method != "file" or dynamic.file is None:
        return
    path = dynamic.file.path
    if path is not None and Path(path).is_dir():
        raise ConfigError(
            f"curriculum.dynamic.file.path: {path} is a folder, not a weights file (a JSON "
            'object of stream name → weight, e.g. {"code": 3, "web": 1})'
        )
