"""What ``build()`` must leave alone: the ``CommonAttentionMetadata`` it is given (shared by every KV-cache
group's builder in vLLM's runner) and the builder's own settings (a later batch must not see an earlier one).

Both are read generically (every dataclass field, every plain attribute), as the poisoning finds buffers."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import numpy as np
import torch

from spec_decode_ci.sync import outside_sentinels

_SCALARS = (type(None), bool, int, float, str, torch.dtype, torch.device, enum.Enum)


def plain(value: Any) -> Any:
    """A comparable copy: tensors and arrays by dtype, shape and values; containers element-wise."""
    with outside_sentinels():
        if isinstance(value, torch.Tensor):
            return ("tensor", str(value.dtype), tuple(value.shape), value.detach().cpu().tolist())
        if isinstance(value, np.ndarray):
            return ("array", str(value.dtype), value.shape, value.tolist())
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value if isinstance(value, _SCALARS) else ("object", type(value).__qualname__, id(value))


def metadata_fields(common: Any) -> dict[str, Any]:
    """Every field of a ``CommonAttentionMetadata`` (private caches too), as plain values."""
    return {f.name: plain(getattr(common, f.name)) for f in dataclasses.fields(common)}


def metadata_changes(before: dict[str, Any], common: Any, fresh: Any) -> list[str]:
    """Fields of ``common`` that differ from ``before`` (its state when handed to ``build()``). A private cache
    that was empty and is now filled is a change only if it disagrees with what ``fresh`` (an untouched copy)
    computes for the public name it caches."""
    after = metadata_fields(common)
    changes = []
    for name, old in before.items():
        new = after[name]
        if new == old:
            continue
        public = name.lstrip("_")
        if old is None and name != public and hasattr(type(fresh), public):
            if plain(getattr(fresh, public)) == new:
                continue
        changes.append(f"{name}: {_short(old)} -> {_short(new)}")
    return changes


def builder_settings(builder: Any) -> dict[str, Any]:
    """The builder's plain attributes (numbers, flags, dtypes, names); its buffers and helper objects are not
    settings."""
    return {name: value for name, value in vars(builder).items()
            if isinstance(value, _SCALARS) or (isinstance(value, tuple) and all(isinstance(v, _SCALARS)
                                                                                  for v in value))}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."
