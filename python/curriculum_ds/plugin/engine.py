"""``curriculum_ds.initialize``: ``deepspeed.initialize`` with a curriculum beside the engine.

Also :func:`attach` (a curriculum for an engine the user built) and :func:`deepspeed_config` (the
ds_config DeepSpeed should see: the ``curriculum`` section stripped, ``train_batch_size`` set).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from curriculum_ds.config import RunConfig
    from curriculum_ds.plugin.curriculum import Curriculum
    from curriculum_ds.plugin.engine_like import EngineLike

__all__ = ["attach", "deepspeed_config", "initialize", "load_run_config"]


def load_run_config(config: Any, *, check_data: bool = True) -> RunConfig:
    """A :class:`~curriculum_ds.config.RunConfig` from a ds_config path, dict or RunConfig.

    Args:
        config: a ds_config JSON path, the parsed dict, or an already loaded ``RunConfig``
            (returned as is).
        check_data: also run the data preflight (shards against their index, a decoded probe,
            token ids within the recorded vocabulary) as ``curriculum-ds validate`` does.

    Raises:
        ConfigError: one line per problem naming the field (JSON path) and the phase: the
            ``curriculum`` section, the DeepSpeed part (DeepSpeed's own config models, unknown
            top-level keys, scheduler params, monitor packages; :mod:`curriculum_ds.preflight`).
        DataError: a stream's data is missing or malformed (names the file).
    """
    from curriculum_ds.config import RunConfig, load_config, parse_run
    from curriculum_ds.preflight import check_run

    if isinstance(config, RunConfig):
        return config
    if isinstance(config, dict):  # relative stream paths resolve against the working dir
        run = parse_run(config)
        check_run(run, check_data=check_data, strict=True)
        return run
    if isinstance(config, str | os.PathLike):
        return load_config(Path(config), check_data=check_data, strict=True)
    raise ConfigError(
        f"config: expected a ds_config path, dict or RunConfig, got {type(config).__name__}"
    )


def deepspeed_config(config: Any, *, dp_world_size: int | None = None) -> dict[str, Any]:
    """The ds_config for ``deepspeed.initialize``: the curriculum section stripped.

    ``train_batch_size`` is set to ``micro_batch_size × gradient_accumulation_steps ×
    dp_world_size``.

    Args:
        config: as in :func:`load_run_config` (not data-checked here).
        dp_world_size: data-parallel ranks; default: ``torch.distributed``'s world size (1 when
            not initialized).

    Raises:
        ConfigError: the batch-size keys disagree with ``dp_world_size``.
    """
    run = load_run_config(config, check_data=False)
    if dp_world_size is None:
        dp_world_size = _world_size()
    ds = dict(run.ds_config)
    ds.pop("curriculum", None)
    ds["train_batch_size"] = run.global_batch_size(dp_world_size)
    return ds


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def initialize(
    *,
    model: torch.nn.Module,
    config: Any,
    model_parameters: Any = None,
    check_data: bool = True,
    **deepspeed_kwargs: Any,
) -> tuple[Any, Curriculum]:
    """``deepspeed.initialize`` plus the curriculum that feeds the engine.

    Sets what DeepSpeed and mosaicml-streaming need in the process environment (CPU accelerator
    without CUDA, ``LOCAL_WORLD_SIZE``), initialises ``torch.distributed`` when the launcher
    has not, validates the ``curriculum`` section and the data (one-line errors, before anything
    is built), strips ``curriculum`` from the config DeepSpeed sees and sets its
    ``train_batch_size``.

    Args:
        model: any ``torch.nn.Module`` whose forward maps ``input_ids`` (int64 ``(batch,
            seq_len)``, + ``attention_mask``) to logits ``(batch, seq_len, vocab)`` or an object
            with ``.logits`` (HF or not).
        config: the ds_config: a JSON path, the parsed dict, or a loaded ``RunConfig``.
        model_parameters: what ``deepspeed.initialize`` optimises; default: the model's
            parameters that require grad.
        check_data: run the data preflight (see :func:`load_run_config`).
        **deepspeed_kwargs: passed on to ``deepspeed.initialize`` (``optimizer``,
            ``lr_scheduler``, ``mpu``, ...). ``config``/``config_params`` are refused (the config
            is the one above).

    Returns:
        ``(engine, curriculum)``: the ``DeepSpeedEngine`` and a
        :class:`~curriculum_ds.Curriculum` at the start of the schedule (call its
        ``load_checkpoint`` to resume).

    Raises:
        ConfigError: the config is invalid (names the field: the curriculum, DeepSpeed's part,
            see :mod:`curriculum_ds.preflight`), a phase's ``max_seq_len`` exceeds the model's
            positions (``model.config``'s ``n_positions``/``max_position_embeddings``/
            ``block_size``, or a ``max_seq_len``/``max_position_embeddings``/``block_size``
            attribute of the model, as nanoGPT's ``GPT`` has), the config has
            no ``optimizer`` and no ``optimizer=`` is given, or a DeepSpeed ``config`` keyword
            was given.
        DataError: a stream's data is missing or malformed.
    """
    for key in ("config", "config_params"):
        if key in deepspeed_kwargs:
            raise ConfigError(
                f"initialize: pass the ds_config as config=..., not deepspeed's {key}="
            )
    run = load_run_config(config, check_data=check_data)
    _check_model_context(run, model)
    if run.curriculum.lr_schedule is not None and deepspeed_kwargs.get("lr_scheduler") is not None:
        raise ConfigError(
            "lr_scheduler: initialize got an lr_scheduler beside curriculum.lr_schedule (both "
            "would set the learning rate); pass one of them"
        )
    if "optimizer" not in run.ds_config and deepspeed_kwargs.get("optimizer") is None:
        raise ConfigError(
            "optimizer: the ds_config has no optimizer section and initialize got no optimizer=; "
            "DeepSpeed needs one to train"
        )
    _init_distributed()
    import deepspeed

    if model_parameters is None:
        model_parameters = [p for p in model.parameters() if p.requires_grad]
    engine, *_ = deepspeed.initialize(
        model=model,
        model_parameters=model_parameters,
        config=deepspeed_config(run),
        **deepspeed_kwargs,
    )
    return engine, attach(engine, run)


def attach(engine: EngineLike, config: Any, *, check_data: bool = True) -> Curriculum:
    """A curriculum for an engine built by the user's own ``deepspeed.initialize``.

    Build that engine with ``config=curriculum_ds.deepspeed_config(ds_config)`` (or any config
    whose batch sizes agree with the ``curriculum`` config's).

    Args:
        engine: a ``DeepSpeedEngine`` (``torch.distributed`` already initialised), or anything
            with its :class:`~curriculum_ds.plugin.engine_like.EngineLike` surface.
        config: the ds_config with the ``curriculum`` section (path, dict or ``RunConfig``).
        check_data: run the data preflight.

    Raises:
        ConfigError: the engine's micro-batch size, gradient accumulation steps or global batch
            size differ from the config's (names the key), or a phase's ``max_seq_len`` exceeds
            the positions ``engine.module`` declares (as in :func:`initialize`).
    """
    from curriculum_ds.distributed import Topology
    from curriculum_ds.plugin.curriculum import Curriculum

    run = load_run_config(config, check_data=check_data)
    _check_model_context(run, engine)
    dp_world_size = Topology.from_engine(engine).dp_world_size
    expected = {
        "train_micro_batch_size_per_gpu": run.micro_batch_size,
        "gradient_accumulation_steps": run.gradient_accumulation_steps,
        "train_batch_size": run.global_batch_size(dp_world_size),
    }
    actual = {
        "train_micro_batch_size_per_gpu": int(engine.train_micro_batch_size_per_gpu()),
        "gradient_accumulation_steps": int(engine.gradient_accumulation_steps()),
        "train_batch_size": int(engine.train_batch_size()),
    }
    for key, value in expected.items():
        if actual[key] != value:
            raise ConfigError(
                f"{key}: the engine has {actual[key]} but the curriculum's config needs {value} "
                f"(dp_world_size {dp_world_size}); build the engine with "
                "curriculum_ds.deepspeed_config(config)"
            )
    return Curriculum(engine, run)


def _check_model_context(run: RunConfig, model: Any) -> None:
    """Every phase's ``max_seq_len`` fits the positions the model declares (if it declares any).

    Read from ``model.config`` (a HF model; nanoGPT's ``block_size`` too), else an attribute
    ``max_seq_len``, ``max_position_embeddings`` or ``block_size`` of the module; see
    :func:`curriculum_ds.preflight.check_model_context`.
    """
    from curriculum_ds.preflight import check_model_context

    check_model_context(run.curriculum, model)


def _init_distributed() -> None:
    """Prepare the environment and ``torch.distributed`` (gloo on CPU, NCCL on CUDA)."""
    from curriculum_ds.distributed import prepare_environment

    has_cuda = prepare_environment()
    import deepspeed
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if has_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    deepspeed.init_distributed(verbose=False)
    if not has_cuda:
        _unlink_shm_allreduce_buffer()


def _unlink_shm_allreduce_buffer() -> None:
    """Unlink this rank's DeepSpeed CPU all-reduce buffer from /dev/shm (the mapping stays).

    DeepSpeed's CPU accelerator creates ``/dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>
    _<rank>`` (about 66 MiB per rank) and never unlinks it, so every CPU run leaks it until
    /dev/shm is full. After a barrier every rank has opened every buffer, so the names can go:
    the memory lives on in the mappings until the processes exit, killed or not.
    """
    import torch.distributed as dist

    dist.barrier()
    name = (
        f"deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_"
        f"{os.environ.get('MASTER_PORT', '')}_{dist.get_rank()}"
    )
    with contextlib.suppress(OSError):
        os.unlink(Path("/dev/shm") / name)
