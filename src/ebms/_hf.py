"""Private: what the Hugging Face adapters share — the lazy ``transformers`` import and the check that a
model is a ``transformers`` module of the right family (:class:`~ebms.models.lm.HuggingFaceLM`,
:class:`~ebms.nets.HFTextEnergy`). ``ebms`` imports without ``transformers``."""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["hf_config", "transformers_module"]


def transformers_module(install: str) -> Any:
    """The ``transformers`` module, imported on first use; ``ImportError(install)`` (one line) when missing."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(install) from err
    return transformers


def hf_config(model: Any, what: str, example: str, family: str) -> Any:
    """``model.config`` of a Hugging Face ``what`` (e.g. ``"causal LM"``), refusing encoder-decoders.

    Raises:
        TypeError: ``model`` is not a torch module with a ``config`` (the message names ``example``).
        ValueError: an encoder-decoder model (the message says it expected ``family``).
    """
    config = getattr(model, "config", None)
    if not isinstance(model, nn.Module) or config is None:
        raise TypeError(f"model: expected a Hugging Face {what} (a torch module with a .config, e.g. {example}); got "
                        f"{type(model).__name__}")
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"model: expected {family}; got an encoder-decoder {type(model).__name__}")
    return config
