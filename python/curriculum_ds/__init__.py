"""curriculum_ds: curriculum learning for LLM training on DeepSpeed."""

from curriculum_ds._native import __version__

__all__ = ["__version__"]
