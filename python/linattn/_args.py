"""Argument handling shared by the FLA-compatible functions."""

from __future__ import annotations

import warnings


def take_kwargs(fn_name: str, kwargs: dict, allowed: dict) -> dict:
    """Pop the known keys of ``kwargs`` (with defaults from ``allowed``); unknown keys raise
    ``TypeError`` like an unexpected keyword argument would."""
    out = {name: kwargs.pop(name, default) for name, default in allowed.items()}
    if kwargs:
        bad = sorted(kwargs)
        raise TypeError(f"{fn_name}() got unexpected keyword argument(s) {bad}")
    return out


def state_layout(fn_name: str, state_v_first: bool, kwargs: dict) -> bool:
    """FLA's deprecated ``transpose_state_layout`` spelling of ``state_v_first``."""
    if "transpose_state_layout" not in kwargs:
        return state_v_first
    old = kwargs.pop("transpose_state_layout")
    if state_v_first:
        raise ValueError(f"{fn_name}: give state_v_first or the deprecated transpose_state_layout, not both")
    warnings.warn("transpose_state_layout is deprecated; use state_v_first", DeprecationWarning,
                  stacklevel=3)
    return bool(old)


def refuse_head_first(fn_name: str, kwargs: dict) -> None:
    if "head_first" in kwargs:
        raise ValueError(f"{fn_name}: head_first is not supported; inputs are token-major "
                         "[B, T, H, ...] as in current FLA")


def check_chunk_size(fn_name: str, chunk_size) -> None:
    if chunk_size is not None and chunk_size != 64:
        raise NotImplementedError(f"{fn_name}: linattn runs with chunk_size=64 only, got {chunk_size}")


def refuse(fn_name: str, name: str, value) -> None:
    if value is not None:
        raise NotImplementedError(f"{fn_name}: {name} is not supported by linattn (got a non-None value)")
