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


@functools.cache
def _name(cls: type) -> str:
    params = inspect.signature(cls.forward).parameters
    # every version in the supported range still takes the old name
    return "cache" if "cache" in params else "past_key_values"


def cache_kwarg(module: nn.Module, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``module(...)``: ``cache`` or ``past_key_values``, whichever its ``forward`` takes."""
    return {_name(type(module)): cache}


def output_cache(output: Any) -> Any:
    """The cache a transformers model output returns (``output.cache``, formerly ``output.past_key_values``)."""
    return output.cache if hasattr(output, "cache") else output.past_key_values
