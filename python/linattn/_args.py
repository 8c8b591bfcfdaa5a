"""Argument handling shared by the FLA-compatible functions."""

from __future__ import annotations

import warnings

import torch


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


# The chunk sizes FLA 0.6.0 accepts per family (None: any power of two). The chunk size does not
# change the function computed, only how a kernel tiles it: linattn accepts FLA's values and
# always runs 64-token chunks.
FLA_CHUNK_SIZES = {
    "KDA": (32, 64),
    "Gated Delta Rule": (16, 32, 64),
    "simple GLA": None,
}


def check_chunk_size(fn_name: str, family: str, chunk_size, return_intermediate_states: bool = False) -> None:
    """FLA's chunk_size rule for ``family`` (same ValueError text as FLA)."""
    if chunk_size is None:
        return
    allowed = FLA_CHUNK_SIZES[family]
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"{fn_name}: chunk_size must be an int, got {type(chunk_size).__name__}")
    if allowed is None:
        if chunk_size < 1 or chunk_size & (chunk_size - 1):
            raise ValueError(f"{fn_name}: `chunk_size` must be a power of 2, got {chunk_size}.")
    elif chunk_size not in allowed:
        names = ", ".join(str(c) for c in allowed[:-1]) + f" or {allowed[-1]}"
        raise ValueError(f"{fn_name}: `chunk_size` must be either {names} for {family}, got {chunk_size}. "
                         "(linattn computes the same function with any of them, in 64-token chunks)")
    if return_intermediate_states and chunk_size != 64:
        raise NotImplementedError(
            f"{fn_name}: return_intermediate_states returns the states at 64-token chunk boundaries "
            f"(linattn's chunk size); chunk_size={chunk_size} would ask for other boundaries. "
            "Pass chunk_size=64 (or leave it out)")


def align_qkv_dtypes(q, k, v):
    """FLA accepts q, k and v of different float dtypes (e.g. float32 q/k with a float16 v) and
    returns ``o`` in v's dtype. The C++ core takes one dtype, so compute in the promoted one
    (never less precise than any input) and let the caller cast ``o`` back.

    Returns ``(q, k, v, o_dtype)``; ``o_dtype`` is None when nothing was cast."""
    ts = (q, k, v)
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in ts):
        return q, k, v, None  # the core's validation names the bad argument
    if q.dtype == k.dtype == v.dtype:
        return q, k, v, None
    common = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    return q.to(common), k.to(common), v.to(common), v.dtype


def state_in_float32(initial_state):
    """FLA's kernels read a float16 / bfloat16 ``initial_state`` and accumulate in float32; the
    core takes float32 states, so convert (autograd returns ``dh0`` in the given dtype)."""
    if (isinstance(initial_state, torch.Tensor)
            and initial_state.dtype in (torch.float16, torch.bfloat16)):
        return initial_state.float()
    return initial_state


def intermediate_states_as(fn_name: str, h, k, dtype):
    """``h`` in FLA's dtype (that of k) by default, or in ``dtype`` when given."""
    if h is None:
        return None
    target = k.dtype if dtype is None else dtype
    if not isinstance(target, torch.dtype) or not target.is_floating_point:
        raise ValueError(f"{fn_name}: intermediate_states_dtype must be a floating torch.dtype or None, "
                         f"got {dtype!r}")
    return h if h.dtype == target else h.to(target)


def refuse(fn_name: str, name: str, value) -> None:
    if value is not None:
        raise NotImplementedError(f"{fn_name}: {name} is not supported by linattn (got a non-None value)")


def refuse_graph_mode(fn_name: str, use_graph, max_num_seqs) -> None:
    if use_graph:
        raise NotImplementedError(
            f"{fn_name}: use_graph (FLA's fixed-shape varlen mode for CUDA graph capture) is not "
            "supported by linattn's chunked kernels; for captured decode steps use the "
            "fused_recurrent_* functions, whose decode path needs no host synchronisation")
    # max_num_seqs without use_graph is ignored, as in FLA.


def fused_recurrent_states(initial_state, pooled: bool):
    """A float16 / bfloat16 ``initial_state`` becomes float32 as in :func:`state_in_float32`,
    except for a state pool (``ssm_state_indices`` / ``inplace_final_state``), which is read and
    written where it lies (float32 or bfloat16 pools)."""
    return initial_state if pooled else state_in_float32(initial_state)


def finish_output(o, o_dtype, out):
    """``o`` back in v's dtype after :func:`align_qkv_dtypes`, into ``out`` when one was given."""
    if o_dtype is None:
        return o
    if out is not None:
        out.copy_(o)
        return out
    return o.to(o_dtype)


def time_reversal(fn_name: str, q, cu_seqlens, cu_seqlens_cpu):
    """FLA's ``reverse=True`` (the recurrence run from each sequence's last token to its first)
    as a permutation of the time axis: the forward recurrence of the reversed sequences is exactly
    the reverse one (same gate per step, same initial and final state). Returns ``flip``, which
    reverses every sequence of a ``[B, T, ...]`` tensor (None passes through) and is its own
    inverse. Packed sequences are reversed one by one, from cu_seqlens' host copy."""
    if cu_seqlens is None:
        return lambda x: None if x is None else torch.flip(x, dims=[1])
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{fn_name}: cu_seqlens must be a torch.Tensor, not {type(cu_seqlens).__name__}")
    host = cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens.detach().cpu()
    offs = [int(x) for x in host.reshape(-1).tolist()]
    T = q.shape[1]
    if len(offs) < 2 or offs[0] != 0 or offs[-1] != T or any(b < a for a, b in zip(offs, offs[1:])):
        raise ValueError(f"{fn_name}: cu_seqlens must rise from 0 to the packed length {T}; got "
                         f"{offs[:6]}{' ...' if len(offs) > 6 else ''}")
    parts = [torch.arange(b - 1, a - 1, -1, dtype=torch.long) for a, b in zip(offs[:-1], offs[1:])]
    idx = torch.cat(parts).to(q.device)
    return lambda x: None if x is None else x.index_select(1, idx)


def run_reversed(fn_name: str, q, k, v, gate, cu_seqlens, cu_seqlens_cpu, run):
    """``reverse=True`` of a fused_recurrent function: ``run(q, k, v, gate)`` (the forward call)
    on the time-reversed sequences, its ``o`` reversed back; returns ``(o, final_state)``."""
    flip = time_reversal(fn_name, q, cu_seqlens, cu_seqlens_cpu)
    o, fs = run(flip(q), flip(k), flip(v), flip(gate))
    return flip(o), fs
