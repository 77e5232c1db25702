"""The keyword that passes a key/value cache to a transformers module's ``forward``.

transformers 5.x renamed ``past_key_values`` to ``cache`` on its decoder models, layers and attention modules (the
old name still works until 5.40, with a FutureWarning on every run); the supported range (``transformers>=5.0,<5.40``)
spans both names.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from torch import nn

_NAMES = ("cache", "past_key_values")


@functools.cache
def _name(cls: type) -> str:
    params = inspect.signature(cls.forward).parameters
    for name in _NAMES:
        if name in params:
            return name
    # a wrapper that forwards **kwargs (e.g. peft): the name of the installed transformers' Llama decoder
    from transformers.models.llama.modeling_llama import LlamaModel

    return "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else "past_key_values"


def cache_kwarg(module: nn.Module, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``module(...)``: ``cache`` or ``past_key_values``, whichever its ``forward`` takes."""
    return {_name(type(module)): cache}


def output_cache(output: Any) -> Any:
    """The cache a transformers model output returns (``output.cache``, formerly ``output.past_key_values``)."""
    return output.cache if hasattr(output, "cache") else output.past_key_values
