"""The model's side of the preflight: its context length and vocabulary, before any rank starts.

Every phase's ``max_seq_len`` (and ``eval.max_seq_len``) is checked against the positions the
model can embed (:func:`check_model_context`, from ``--model``'s ``config.json`` or a live
module); the data checks read the model folder's ``vocab_size`` here. Every refusal is a
:class:`~curriculum_ds.errors.ConfigError` of one line per problem naming the JSON path (and
phase). Reads the model's config.json only; deterministic.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curriculum_ds.config.messages import join_errors, show_value
from curriculum_ds.errors import ConfigError
from curriculum_ds.files.user_paths import path_error

if TYPE_CHECKING:
    from curriculum_ds.config.models import CurriculumConfig

__all__ = ["POSITION_KEYS", "check_model_context", "model_max_positions"]


def _model_config(model: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` of a local HF model folder.

    Raises:
        ConfigError: ``--model ...``: not a folder, no config.json, unreadable or not an object.
    """
    folder = Path(model)
    try:
        is_folder = folder.is_dir()
    except OSError as exc:  # a component over 255 bytes, no permission on a parent
        raise path_error("--model", model, exc) from None
    if not is_folder:
        raise ConfigError(f"--model {model}: not a local model folder (no download at run time)")
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--model {model}: no config.json in the model folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        detail = str(exc).replace("\n", " ")
        raise ConfigError(f"--model {model}: cannot read config.json: {detail}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--model {model}: config.json is not a JSON object")
    _refuse_custom_code(model, raw)
    return raw


def _refuse_custom_code(model: str | Path, raw: dict[str, Any]) -> None:
    """Refuse a model folder whose model type transformers builds only from the folder's code.

    Models are loaded with ``trust_remote_code=False``, so such a folder would fail later (on
    every rank, after DeepSpeed starts); it is one line here instead, and its code never runs
    (docs/security.md). An ``auto_map`` beside a model type transformers ships is ignored by
    transformers, and accepted.
    """
    if "auto_map" not in raw:
        return
    from transformers import CONFIG_MAPPING

    model_type = raw.get("model_type")
    if isinstance(model_type, str) and model_type in CONFIG_MAPPING:
        return
    raise ConfigError(
        f"--model {model}: config.json maps model type {show_value(model_type)} to the folder's "
        "own code (auto_map); curriculum_ds never runs a model folder's code "
        "(trust_remote_code stays off): a model of your own goes through --model-factory"
    )


def _model_vocab_size(model: str | Path) -> int:
    """``vocab_size`` of a local HF model folder's ``config.json`` (or of its ``text_config``).

    Raises:
        ConfigError: ``--model ...``: not a folder, no readable config.json, no vocab_size.
    """
    raw = _model_config(model)
    vocab = raw.get("vocab_size")
    if vocab is None and isinstance(raw.get("text_config"), dict):
        vocab = raw["text_config"].get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise ConfigError(
            f"--model {model}: config.json has no positive integer vocab_size, "
            f"got {show_value(vocab)}"
        )
    return vocab


POSITION_KEYS = (
    "n_positions",
    "max_position_embeddings",
    "n_ctx",
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "block_size",
)
"""The names HF configs (GPT-2, Llama/BERT, GPT-J, BLOOM-style, ChatGLM), nanoGPT's
``GPTConfig`` (``block_size``) and user models give the number of positions a model can embed,
in the order they are read."""


def _positions_in(config: Any) -> tuple[int, str] | None:
    """``(positions, key)`` of the first :data:`POSITION_KEYS` entry a config dict/object holds."""
    for key in POSITION_KEYS:
        value = config.get(key) if isinstance(config, Mapping) else getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, key
    return None


def model_max_positions(model: Any) -> tuple[int, str] | None:
    """The longest sequence a model can embed, and where that number was read.

    Args:
        model: a local HF model folder (``str``/``Path``: its ``config.json``, or the
            ``text_config`` inside it), or a live ``torch.nn.Module`` (a DeepSpeed engine's
            ``.module`` is used): its ``.config`` when it has one (a HF ``PretrainedConfig``,
            nanoGPT's ``GPTConfig`` with ``block_size``), else an attribute ``max_seq_len``,
            ``max_position_embeddings`` or ``block_size`` the user declared.

    Returns:
        ``(positions, source)``, e.g. ``(256, "n_positions in gpt2/config.json")``, or None when
        the model declares none (then its context is unchecked).

    Raises:
        ConfigError: a folder that is not a model folder or whose config.json cannot be read.
    """
    if isinstance(model, str | os.PathLike):
        raw = _model_config(Path(model))
        for config, where in ((raw, ""), (raw.get("text_config"), "text_config.")):
            found = _positions_in(config) if isinstance(config, Mapping) else None
            if found is not None:
                return found[0], f"{where}{found[1]} in {Path(model) / 'config.json'}"
        return None
    module = getattr(model, "module", model)  # a DeepSpeed engine wraps the user's module
    name = type(module).__name__
    config = getattr(module, "config", None)
    if config is not None:
        found = _positions_in(config)
        if found is not None:
            return found[0], f"{found[1]} of {name}.config"
    for attr in ("max_seq_len", "max_position_embeddings", "block_size"):
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, f"{name}.{attr}"
    return None


def check_model_context(cfg: CurriculumConfig, model: Any) -> None:
    """Refuse phases whose ``max_seq_len`` exceeds the positions the model can embed.

    A longer sample would index past the position embedding (``IndexError: index out of range
    in self``) in the middle of training, when the phase reaches it.

    Args:
        cfg: the validated curriculum.
        model: as in :func:`model_max_positions` (a folder or a live module); a model that
            declares no maximum is not checked.

    Raises:
        ConfigError: one line per phase that is too long, ``curriculum.schedule[1] ("mix")
            .train_loader.max_seq_len: 512 exceeds the model's 256 positions (n_positions in
            DIR/config.json)``, or a model folder that cannot be read.
    """
    found = model_max_positions(model)
    if found is None:
        return
    positions, source = found
    errors = [
        f"curriculum.schedule[{i}] ({show_value(phase.name)}).train_loader.max_seq_len: "
        f"{phase.train_loader.peak_seq_len} exceeds the model's {positions} positions ({source})"
        for i, phase in enumerate(cfg.schedule)
        if phase.train_loader.peak_seq_len > positions  # a warmup ramp: its largest point
    ]
    eval_len = cfg.eval.max_seq_len if cfg.eval is not None else None
    if eval_len is not None and eval_len > positions:
        errors.append(
            f"curriculum.eval.max_seq_len: {eval_len} exceeds the model's {positions} positions "
            f"({source})"
        )
    if errors:
        raise ConfigError(join_errors(errors))
