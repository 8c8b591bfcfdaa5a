"""Simple GLA: a linear recurrence with a scalar decay per token and head.

Per sequence and value head, with state ``S`` of shape ``[K, V]``::

    S_t = exp(g_t + g_gamma) S_{t-1} + k_t v_t^T
    o_t = scale * S_t^T q_t

where ``g_t`` is a per-token gate and ``g_gamma`` a constant per-head log decay; either or
both may be given (neither: no decay).
"""

from __future__ import annotations

from typing import Optional

import torch

from ._args import (align_qkv_dtypes, check_chunk_size, finish_output, refuse_head_first, state_in_float32,
                    run_reversed, state_layout, take_kwargs)
from ._decode import run_decode, short_no_grad_call
from ._torch_ops import run_chunked, run_forward_split
from .ops import FAMILIES

__all__ = ["chunk_simple_gla", "fused_chunk_simple_gla", "fused_recurrent_simple_gla", "parallel_simple_gla"]

_SGLA = FAMILIES["simple_gla"]


def chunk_simple_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    g_gamma: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    *,
    chunk_size: Optional[int] = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    intermediate_states_dtype: Optional[torch.dtype] = None,
    backward_precision: str = "auto",
    keep_chunk_local: Optional[bool] = None,
    **kwargs,
):
    r"""Chunked simple GLA, forward and backward (a drop-in for
    ``fla.ops.simple_gla.chunk_simple_gla``).

    Args:
        q, k: ``[B, T, H, K]``.
        v: ``[B, T, HV, V]`` (``HV`` a multiple of ``H``); q, k and v may differ in dtype
            (computed in the promoted one; ``o`` in v's).
        g: optional per-token log decay ``[B, T, HV]``.
        g_gamma: optional constant log decay per head ``[HV]``; receives a gradient too.
        scale: query scale, ``None`` for ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` (``[N, HV, V, K]`` with ``state_v_first``), float32
            (float16 / bfloat16 are read as float32).
        output_final_state: also return the last state of each sequence.
        state_v_first: states use the ``[.., V, K]`` layout.
        cu_seqlens: ``[N + 1]`` int32/int64 boundaries of packed sequences (``B == 1``).
        cu_seqlens_cpu: optional host copy of ``cu_seqlens``.
        chunk_size: None or a power of two, as in FLA; the function is the same (linattn
            runs 64-token chunks).
        disable_recompute: (linattn extra) keep forward intermediates for the backward, the
            chunk states included (in float32). On CUDA (Hopper, 16-bit, K = 128) a training
            call keeps the chunk-local ones and 16-bit chunk states without it
            (``keep_chunk_local``), which is faster.
        keep_chunk_local: (linattn extra) what a training call on CUDA (Hopper, 16-bit,
            K = 128, computed in the 16-bit type: not with a ``g_gamma`` that requires grad under
            ``backward_precision="auto"``) keeps for the backward: ``None`` (default) or ``True``
            the chunk-local intermediates and the chunk states (580 MiB at B=2, T=8192, H=32,
            K=V=128; the backward then recomputes nothing before its passes); ``False`` nothing
            beyond the inputs (the backward recomputes them). Gradients are bitwise the same
            either way. A kept call's ``o`` and final state come from the backward's operands
            (the gated q and k in the input type), not from the inference forward's raw rows: equal
            within rounding, not bitwise. Elsewhere nothing is kept.
        return_intermediate_states: (linattn extra) also return the chunk-boundary states
            ``h`` (no gradient), in k's dtype or ``intermediate_states_dtype``.
        backward_precision: (linattn extra) the CUDA backward's compute form,
            ``linattn.ops.BACKWARD_PRECISIONS``: without the delta rule ``"split"`` and
            ``"fast16"`` compute in the 16-bit input type (as FLA), ``"float32"`` in float32;
            ``"auto"`` computes in the 16-bit type, or in float32 when ``g_gamma`` requires grad (its
            gradient sums every token of a head and cancels, as dA_log does); float32 inputs
            always compute in float32. The CPU backend ignores it.

    Returns:
        ``(o, final_state)``: ``o: [B, T, HV, V]`` in v's dtype; ``final_state`` or None.
        ``h`` follows when ``return_intermediate_states``.

    Example::

        >>> import torch
        >>> from linattn import chunk_simple_gla
        >>> B, T, H, D = 1, 256, 4, 64
        >>> q, k, v = (torch.randn(B, T, H, D, requires_grad=True) for _ in range(3))
        >>> g_gamma = -torch.rand(H) / 8
        >>> o, _ = chunk_simple_gla(q, k, v, g_gamma=g_gamma)
        >>> o.sum().backward()
    """
    name = "chunk_simple_gla"
    refuse_head_first(name, kwargs)
    take_kwargs(name, kwargs, {})
    check_chunk_size(name, "simple GLA", chunk_size, return_intermediate_states)
    return run_chunked(
        _SGLA, name, q, k, v, split_k=True, g=g, g_gamma=g_gamma, cu_seqlens=cu_seqlens,
        cu_seqlens_cpu=cu_seqlens_cpu, scale=scale, state_v_first=state_v_first,
        output_final_state=output_final_state, disable_recompute=disable_recompute,
        backward_precision=backward_precision, keep_chunk_local=keep_chunk_local,
        initial_state=initial_state, return_intermediate_states=return_intermediate_states,
        intermediate_states_dtype=intermediate_states_dtype)


def fused_chunk_simple_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    g_gamma: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    *,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
):
    r"""Simple GLA with FLA's ``fused_chunk_simple_gla`` interface.

    Same computation as :func:`chunk_simple_gla` (same kernels), with autograd. Arguments
    as there; ``cu_seqlens_cpu`` is an optional host copy of ``cu_seqlens``.

    Returns:
        ``(o, final_state)``; ``final_state`` is None unless ``output_final_state``.
    """
    q, k, v, o_dtype = align_qkv_dtypes(q, k, v)
    o, fs, _ = run_forward_split(
        _SGLA, q, k, v, split_k=True, g=g, g_gamma=g_gamma, initial_state=state_in_float32(initial_state),
        cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, scale=scale,
        output_final_state=output_final_state, fn_name="fused_chunk_simple_gla")
    return finish_output(o, o_dtype, None), fs


def fused_recurrent_simple_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    g_gamma: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    reverse: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    **kwargs,
):
    r"""Simple GLA with FLA's ``fused_recurrent_simple_gla`` interface: the same function as
    :func:`chunk_simple_gla` (the chunked kernels, with autograd); short calls that need no
    gradient (decoding) run the recurrent decode kernels, as :func:`fused_recurrent_kda` does.
    ``reverse=True`` runs each sequence from its last token to its first (FLA's semantics: the
    kernels on the time-reversed sequences, ``o`` reversed back; the final state is the state
    after each sequence's first token). ``cu_seqlens_cpu`` may be passed as a keyword.

    Returns:
        ``(o, final_state)``; ``final_state`` is None unless ``output_final_state``.
    """
    name = "fused_recurrent_simple_gla"
    state_v_first = state_layout(name, state_v_first, kwargs)
    extra = take_kwargs(name, kwargs, {"cu_seqlens_cpu": None})
    if reverse and all(isinstance(x, torch.Tensor) and x.dim() >= 2 for x in (q, k, v)):
        def forward(*x):
            return fused_recurrent_simple_gla(*x, g_gamma, scale, initial_state, output_final_state, False,
                                              state_v_first, cu_seqlens, cu_seqlens_cpu=extra["cu_seqlens_cpu"])
        return run_reversed(name, q, k, v, g, cu_seqlens, extra["cu_seqlens_cpu"], forward)
    q, k, v, o_dtype = align_qkv_dtypes(q, k, v)
    if short_no_grad_call(name, q, v, cu_seqlens, q, k, v, g, g_gamma, initial_state):
        # short calls without gradients (decoding): the recurrent decode kernels, as fused_recurrent_kda
        o, fs = run_decode(_SGLA, q, k, v, g=g, g_gamma=g_gamma, scale=scale,
                           initial_state=state_in_float32(initial_state), output_final_state=output_final_state,
                           cu_seqlens=cu_seqlens, cu_seqlens_cpu=extra["cu_seqlens_cpu"],
                           state_v_first=state_v_first)
        return finish_output(o, o_dtype, None), fs
    o, fs, _ = run_forward_split(
        _SGLA, q, k, v, split_k=True, g=g, g_gamma=g_gamma, initial_state=state_in_float32(initial_state),
        cu_seqlens=cu_seqlens, cu_seqlens_cpu=extra["cu_seqlens_cpu"], scale=scale,
        state_v_first=state_v_first, output_final_state=output_final_state, fn_name=name)
    return finish_output(o, o_dtype, None), fs


def parallel_simple_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    output_attentions: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
):
    r"""Simple GLA with FLA's ``parallel_simple_gla`` interface (``fla.ops.simple_gla``).

    The same function as :func:`chunk_simple_gla` without states (the chunked kernels, with
    autograd through ``q``, ``k``, ``v`` and ``g``), and optionally the attention scores.

    Args:
        q, k: ``[B, T, H, K]``; v: ``[B, T, HV, V]``.
        g: optional per-token log decay ``[B, T, HV]``.
        scale: query scale, ``None`` for ``K ** -0.5``.
        output_attentions: also return the scores ``A[b, h, i, j] = scale · q_i·k_j ·
            exp(G_i − G_j)`` for ``j <= i`` (0 above the diagonal), ``G`` the running sum of
            ``g``: ``[B, HV, T, T]`` in q's dtype, formed in float32. As in FLA they carry no
            gradient (FLA's backward ignores theirs; here they are detached), and they are
            refused with ``cu_seqlens``.
        cu_seqlens: ``[N + 1]`` boundaries of packed sequences (``B == 1``).
        cu_seqlens_cpu: optional host copy of ``cu_seqlens``.

    Returns:
        ``(o, attn)``: ``o: [B, T, HV, V]`` in v's dtype; ``attn`` or None.
    """
    name = "parallel_simple_gla"
    if cu_seqlens is not None and isinstance(q, torch.Tensor) and q.dim() > 0 and q.shape[0] != 1:
        raise ValueError(f"{name}: the batch size must be 1 with cu_seqlens (got {q.shape[0]}); "
                         "flatten variable-length inputs first")
    if output_attentions and cu_seqlens is not None:
        raise ValueError(f"{name}: output_attentions=True is not supported with cu_seqlens (as in FLA)")
    o, _ = chunk_simple_gla(q, k, v, g=g, scale=scale, cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu)
    attn = None
    if output_attentions:
        attn = _attention_scores(q, k, v.shape[2], g, k.shape[-1] ** -0.5 if scale is None else scale)
    return o, attn


def _attention_scores(q: torch.Tensor, k: torch.Tensor, HV: int, g: Optional[torch.Tensor], scale: float):
    """``[B, HV, T, T]``: scale · q_i·k_j · exp(G_i − G_j) on and below the diagonal, in q's dtype.

    G is the running sum of g raised to the kernels' gate floor (-110: a -inf gate is a full
    forget, and floored gates keep G_i − G_j from becoming -inf − (-inf)), in float64 so that its
    differences stay exact over long sequences. Rows go in blocks (~256 MB of temporaries)."""
    with torch.no_grad():
        B, T, H, _ = q.shape
        G = HV // H  # value heads per query/key head (GVA)
        qf = q.float().repeat_interleave(G, dim=2).transpose(1, 2)  # [B, HV, T, K]
        kf = k.float().repeat_interleave(G, dim=2).transpose(1, 2)
        cg = None
        if g is not None:
            cg = g.double().clamp_min(_GATE_FLOOR).cumsum(dim=1).transpose(1, 2)  # [B, HV, T]
        attn = torch.zeros(B, HV, T, T, dtype=q.dtype, device=q.device)
        rows = max(1, (1 << 28) // max(1, B * HV * T * 20))
        cols = torch.arange(T, device=q.device)
        for i0 in range(0, T, rows):
            i1 = min(T, i0 + rows)
            causal = cols[None, :] <= torch.arange(i0, i1, device=q.device)[:, None]  # [rows, T]
            s = torch.matmul(qf[:, :, i0:i1], kf.transpose(-1, -2)) * scale  # [B, HV, rows, T]
            if cg is not None:
                d = (cg[..., i0:i1, None] - cg[..., None, :]).masked_fill(~causal, float("-inf"))
                s = s * torch.exp(d).float()
            attn[:, :, i0:i1] = s.masked_fill(~causal, 0.0).to(q.dtype)
        return attn


# The gate floor of the kernels (src/common/transforms.hpp, kGateFloor)
_GATE_FLOOR = -110.0
