"""Turn a DeepSpeed checkpoint of a run into a model a user can load without DeepSpeed.

``curriculum-ds export CHECKPOINT OUT`` and ``train --export-final OUT`` call
:func:`export_checkpoint`. The weights are consolidated with DeepSpeed's own tools
(``deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint``: the fp32 master
weights, gathered from every rank's ZeRO 1–3 shards, on CPU, without GPUs or ranks); a ZeRO-0
checkpoint holds the whole module already (``mp_rank_00_model_states.pt``) and is read as is.

A DeepSpeed checkpoint does not record the model's architecture. The reference loop records it
beside its checkpoints (:func:`record_architecture`: ``checkpoints/model/``, a HF folder without
weights: the model's ``config.json`` and the ``--model`` folder's tokenizer files), and
``export`` of such a checkpoints folder (or of one of its tags) reads it, so it needs no flag.
Otherwise the caller says what the model was:

* ``model=DIR``: the run's ``--model`` (a local HF folder): its config builds the model, the
  weights are loaded into it, and ``save_pretrained`` writes ``OUT`` (safetensors + config, and
  the folder's tokenizer files copied beside them). Loads with
  ``AutoModelForCausalLM.from_pretrained(OUT)``.
* ``ds_config=FILE`` (without ``model``): the reference loop's default GPT-2, rebuilt from the
  run's ds_config exactly as :func:`curriculum_ds.default_model.build_model` does (its
  vocabulary comes from the data's recorded ``vocab_size``, so the streams must still be
  readable); then as above.
* neither (any other model): ``OUT/state_dict.pt``, a plain ``{name: tensor}`` for
  ``model.load_state_dict(torch.load(path))``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.errors import ConfigError, ResumeError

if TYPE_CHECKING:
    from curriculum_ds.config import RunConfig

__all__ = [
    "ARCHITECTURE_DIR",
    "STATE_DICT_FILE",
    "Exported",
    "consolidated_state_dict",
    "export_checkpoint",
    "record_architecture",
    "recorded_architecture",
]

STATE_DICT_FILE = "state_dict.pt"
"""The file written in ``OUT`` for a model that is not a HF model."""

ARCHITECTURE_DIR = "model"
"""The folder beside a run's checkpoint tags holding its model's architecture (no weights)."""

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


@dataclass(frozen=True, kw_only=True)
class Exported:
    """What :func:`export_checkpoint` wrote."""

    out: Path
    """The output folder."""
    tag_dir: Path
    """The checkpoint tag folder the weights came from."""
    format: str
    """``"hf"`` (a ``save_pretrained`` folder) or ``"state_dict"`` (``OUT/state_dict.pt``)."""
    num_tensors: int
    """Tensors in the consolidated state dict."""
    num_parameters: int
    """Elements of those tensors (tied weights counted once)."""


def consolidated_state_dict(checkpoint: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The whole model's weights from a DeepSpeed checkpoint, on CPU.

    Args:
        checkpoint: a checkpoints folder (its ``latest`` tag is used) or one tag folder.

    Returns:
        ``(tag folder, state_dict)``: fp32 master weights for ZeRO 1–3 (and for a bf16/fp16
        ZeRO-0 run, whose optimizer keeps them); for a plain fp32 ZeRO-0 run the module's own
        weights. Keys are the module's ``state_dict`` keys; tied weights share storage.

    Raises:
        UnsafeCheckpointError: a file of the tag needs a pickle global outside the safe loader's
            allow-list (:mod:`curriculum_ds.checkpoint.safe_load`); nothing unpickled it.
        ResumeError: ``checkpoint`` holds no DeepSpeed checkpoint, or its files cannot be read
            (one line naming the folder).
    """
    from curriculum_ds.checkpoint import safe_load
    from curriculum_ds.checkpoint.files import locate_checkpoint

    path = Path(checkpoint)
    if not path.is_dir():
        raise ResumeError(f"{path}: no such checkpoint folder")
    load_dir, tag = locate_checkpoint(path)  # refuses a `latest` naming no folder there
    tag_dir = load_dir / tag
    _set_deepspeed_env()
    zero = any(tag_dir.glob("*zero_pp_rank_*_optim_states.pt"))
    if zero:
        # zero_to_fp32 unpickles the tag's model and optimizer states files with
        # weights_only=False, which runs any code a crafted file names: each file goes through
        # the safe loader first (a refusal names the file and the global)
        safe_load.check_files(safe_load.tag_files(tag_dir))
    try:
        if zero:
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            quiet = io.StringIO()  # its progress prints and bars
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                state = get_fp32_state_dict_from_zero_checkpoint(str(load_dir), tag=tag)
        else:
            model_states = tag_dir / "mp_rank_00_model_states.pt"
            if not model_states.is_file():
                raise ResumeError(
                    f"{tag_dir}: no mp_rank_00_model_states.pt and no ZeRO optimizer shards: "
                    "not a DeepSpeed checkpoint tag"
                )
            state = safe_load.load(model_states)["module"]  # the one read of a ZeRO-0 tag
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ResumeError(f"{tag_dir}: cannot consolidate this checkpoint ({first})") from None
    return tag_dir, dict(state)


def record_architecture(
    model: Any, checkpoints: str | os.PathLike[str], *, source: str | os.PathLike[str] | None = None
) -> Path | None:
    """Record a HF model's architecture in ``checkpoints/model/`` for :func:`export_checkpoint`.

    One process (global rank 0), before the first save. Writes the model's ``config.json``
    (``config.save_pretrained``) and copies the tokenizer files of ``source`` (the run's local
    model folder, if any), atomically (a temporary sibling renamed into place).

    Args:
        model: The model the run trains (before ``deepspeed.initialize`` wraps it).
        checkpoints: The run's checkpoints folder (created if needed).
        source: The local HF folder the model came from, for its tokenizer files.

    Returns:
        The folder written, or None for a model without a HF ``config`` or a folder that cannot
        be written (a one-line warning; nothing is written: ``export`` then needs ``--model`` or
        writes a state dict).
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "save_pretrained"):
        return None
    folder = Path(checkpoints) / ARCHITECTURE_DIR
    tmp = folder.parent / f".{folder.name}.record-{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        config.save_pretrained(tmp)
        for name in _TOKENIZER_FILES:
            if source is not None and (Path(source) / name).is_file():
                shutil.copy2(Path(source) / name, tmp / name)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except OSError as exc:
        # an aid to `export`, not a checkpoint: the run goes on, and a checkpoints folder that
        # cannot be written fails at the first save with its own one-line error
        print(f"curriculum_ds: warning: could not record the model in {folder}: {exc}", flush=True)
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def recorded_architecture(checkpoint: str | os.PathLike[str]) -> Path | None:
    """The folder with ``checkpoint``'s architecture (``config.json``), if any.

    The one :func:`record_architecture` wrote, or the HF Trainer's ``checkpoint-N`` folder.

    Args:
        checkpoint: a checkpoints folder, or one tag folder in it.
    """
    path = Path(checkpoint)
    for folder in (path / ARCHITECTURE_DIR, path.parent / ARCHITECTURE_DIR):
        if (folder / "config.json").is_file():
            return folder
    # HF's `checkpoint-N/` (or a tag in it): the Trainer saved the model's config.json (and the
    # tokenizer it was given) beside DeepSpeed's `latest` and tag
    for folder in (path, path.parent):
        if (folder / "config.json").is_file() and (folder / "latest").is_file():
            return folder
    return None


def export_checkpoint(
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    model: str | os.PathLike[str] | None = None,
    ds_config: str | os.PathLike[str] | RunConfig | None = None,
) -> Exported:
    """Write a checkpoint's model to ``out``: a HF ``save_pretrained`` folder or a state dict.

    Deterministic; single process (no ``torch.distributed``); CPU only. ``out`` is written in a
    temporary sibling folder renamed into place at the end, so a failed export leaves nothing.

    Args:
        checkpoint: a checkpoints folder (``latest`` is used) or one tag folder.
        out: the output folder; must not exist, or be empty.
        model: the run's local HF model folder (the architecture, and tokenizer files to copy);
            default: the architecture the run recorded (:func:`recorded_architecture`).
        ds_config: the run's ds_config (path or loaded ``RunConfig``), for the reference loop's
            default GPT-2 when ``model`` is not given and the run recorded no architecture.

    Returns:
        What was written (:class:`Exported`).

    Raises:
        ConfigError: ``out`` is not empty, ``model`` is not a folder, the ds_config is invalid,
            or the weights do not fit the architecture (names the first missing/unexpected key).
        ResumeError: the checkpoint cannot be found or read.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"export: {out} exists and is not an empty folder")
    if model is not None and not Path(model).is_dir():
        raise ConfigError(f"--model {model}: not a local model folder")
    if model is None:
        model = recorded_architecture(checkpoint)
    run = None
    if model is None and ds_config is not None:
        from curriculum_ds.config import RunConfig, load_config

        run = ds_config if isinstance(ds_config, RunConfig) else load_config(Path(ds_config))
    tag_dir, state = consolidated_state_dict(checkpoint)
    import torch

    tensors = [t for t in state.values() if torch.is_tensor(t)]
    # tied weights are one storage under two names: count each (storage, size) once
    num_parameters = sum({(t.data_ptr(), t.numel()): t.numel() for t in tensors}.values())
    tmp = out.parent / f".{out.name}.export-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if model is None and run is None:
            torch.save(state, tmp / STATE_DICT_FILE)
            fmt = "state_dict"
        else:
            hf_model = _build_hf_model(model, run)
            _load_weights(hf_model, state, tag_dir)
            hf_model.save_pretrained(tmp)
            for name in _TOKENIZER_FILES:
                if model is not None and (Path(model) / name).is_file():
                    shutil.copy2(Path(model) / name, tmp / name)
            if not (tmp / "tokenizer.json").is_file() and not (tmp / "vocab.json").is_file():
                # no tokenizer of the model's own: the one the run's data was prepared with
                for name, path in _data_tokenizer_files(tag_dir).items():
                    shutil.copy2(path, tmp / name)
            fmt = "hf"
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Exported(
        out=out,
        tag_dir=tag_dir,
        format=fmt,
        num_tensors=len(state),
        num_parameters=num_parameters,
    )


def _data_tokenizer_files(tag_dir: Path) -> dict[str, Path]:
    """The tokenizer files ``prepare`` wrote into the run's streams, ``{name: path}``.

    The streams are the saved schedule's ``local`` folders that still exist; empty when none
    has the files.

    Raises:
        ConfigError: two streams were prepared with different tokenizers (one line naming both).
    """
    from curriculum_ds.checkpoint.files import saved_curriculum
    from curriculum_ds.data.tokenizers import HF_TOKENIZER_FILES

    saved = saved_curriculum(tag_dir) or {}
    found: dict[bytes, Path] = {}
    for phase in saved.get("phases") or []:
        for stream in (phase.get("train_loader") or {}).get("streams") or []:
            folder = Path(str(stream.get("local", "")))
            if (folder / HF_TOKENIZER_FILES[0]).is_file():
                found.setdefault((folder / HF_TOKENIZER_FILES[0]).read_bytes(), folder)
    if len(found) > 1:
        first, second = list(found.values())[:2]
        raise ConfigError(
            f"export: the run's streams {first} and {second} were prepared with different "
            "tokenizers; pass the run's --model folder to take its tokenizer"
        )
    if not found:
        return {}
    folder = next(iter(found.values()))
    return {n: folder / n for n in HF_TOKENIZER_FILES if (folder / n).is_file()}


def _build_hf_model(model: str | os.PathLike[str] | None, run: RunConfig | None) -> Any:
    """The architecture with fresh weights: from a HF folder's config, or the default GPT-2."""
    if model is not None:
        from transformers import AutoConfig, AutoModelForCausalLM

        # trust_remote_code off: a folder whose model needs its own code is refused, never run
        config = AutoConfig.from_pretrained(model, trust_remote_code=False)
        return AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    assert run is not None  # the caller passes one of the two
    from curriculum_ds.default_model import build_model

    cfg = run.curriculum
    return build_model(None, cfg, max(p.train_loader.peak_seq_len for p in cfg.schedule))


def _load_weights(hf_model: Any, state: dict[str, Any], tag_dir: Path) -> None:
    """Load ``state`` into ``hf_model`` strictly, tied weights aside (they are re-tied)."""
    result = hf_model.load_state_dict(state, strict=False)
    tied = set(getattr(hf_model, "_tied_weights_keys", None) or [])
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        what = (
            f"missing {len(missing)} key(s), e.g. {missing[0]!r}"
            if missing
            else f"{len(result.unexpected_keys)} unexpected key(s), e.g. "
            f"{result.unexpected_keys[0]!r}"
        )
        raise ConfigError(
            f"export: the weights of {tag_dir} do not fit {type(hf_model).__name__} ({what}); "
            "pass the run's --model folder (or its --deepspeed-config for the default GPT-2)"
        )
    hf_model.tie_weights()


def _set_deepspeed_env() -> None:
    """DeepSpeed's CPU accelerator when there is no CUDA device (before it is imported)."""
    import torch

    from curriculum_ds.distributed import set_deepspeed_env

    set_deepspeed_env(os.environ, cuda=bool(torch.cuda.is_available()))
