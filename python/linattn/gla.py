"""Gated linear attention (GLA): a linear recurrence with a per-channel decay.

Per sequence and value head, with state ``S`` of shape ``[K, V]``::

    S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T
    o_t = scale * S_t^T q_t
"""

from __future__ import annotations

from typing import Optional

import torch

from ._args import (align_qkv_dtypes, finish_output, run_reversed, state_in_float32, state_layout,
                    take_kwargs)
from ._decode import run_decode, short_no_grad_call
from ._torch_ops import run_chunked
from .ops import FAMILIES

__all__ = ["chunk_gla", "fused_recurrent_gla"]

_GLA = FAMILIES["gla"]


def chunk_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    *,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    intermediate_states_dtype: Optional[torch.dtype] = None,
    backward_precision: str = "auto",
    keep_chunk_local: Optional[bool] = None,
):
    r"""Chunked GLA, forward and backward (a drop-in for ``fla.ops.gla.chunk_gla``).

    Args:
        q, k: ``[B, T, H, K]``.
        v: ``[B, T, HV, V]`` (``HV`` a multiple of ``H``; FLA requires ``HV == H``). q, k
            and v may differ in dtype (computed in the promoted one; ``o`` in v's).
        g: log-space decay per channel, ``[B, T, HV, K]``.
        scale: query scale, ``None`` for ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` starting state (``[N, HV, V, K]`` with
            ``state_v_first``), float32 (float16 / bfloat16 are read as float32).
            Differentiable.
        output_final_state: also return the last state of each sequence.
        state_v_first: states use the ``[.., V, K]`` layout.
        cu_seqlens: ``[N + 1]`` int32/int64 boundaries of packed sequences (``B == 1``).
        cu_seqlens_cpu: optional host copy of ``cu_seqlens``.
        disable_recompute: (linattn extra) keep forward intermediates for the backward, the
            chunk states included (in float32). On
            CUDA (Hopper, 16-bit, K = 128) a training call keeps the chunk-local ones and 16-bit
            chunk states without it (``keep_chunk_local``), which is faster.
        keep_chunk_local: (linattn extra) what a training call on CUDA (Hopper, 16-bit,
            K = 128) keeps for the backward: ``None`` (default) or ``True`` the chunk-local intermediates
            and the chunk states (the backward recomputes nothing before its passes; 580 MiB at
            B=2, T=8192, H=32, K=V=128, where FLA's GLA keeps ~384); ``False`` nothing beyond
            the inputs (the backward recomputes them: ~5% slower, less memory held between the
            forward and the backward). Results are bitwise the same either way; elsewhere
            nothing is kept.
        return_intermediate_states: (linattn extra) also return the states ``h`` before each
            64-token chunk (no gradient), in k's dtype or ``intermediate_states_dtype``.
        backward_precision: (linattn extra) the CUDA backward's compute form,
            ``linattn.ops.BACKWARD_PRECISIONS``: without the delta rule ``"auto"``, ``"split"``
            and ``"fast16"`` compute in the 16-bit input type (as FLA), ``"float32"`` in
            float32; float32 inputs always compute in float32. The CPU backend ignores it.

    Returns:
        ``(o, final_state)``: ``o: [B, T, HV, V]``; ``final_state`` or None. ``h`` follows
        when ``return_intermediate_states``.

    Example::

        >>> import torch, torch.nn.functional as F
        >>> from linattn import chunk_gla
        >>> B, T, H, K, V = 2, 128, 2, 64, 64
        >>> q = torch.randn(B, T, H, K, requires_grad=True)
        >>> k = torch.randn(B, T, H, K, requires_grad=True)
        >>> v = torch.randn(B, T, H, V, requires_grad=True)
        >>> g = F.logsigmoid(torch.randn(B, T, H, K)).div(16).requires_grad_()
        >>> o, ht = chunk_gla(q, k, v, g, output_final_state=True)
        >>> o.sum().backward()
    """
    name = "chunk_gla"
    return run_chunked(
        _GLA, name, q, k, v, g=g, g_per_key=True, split_k=True, cu_seqlens=cu_seqlens,
        cu_seqlens_cpu=cu_seqlens_cpu, scale=scale, state_v_first=state_v_first,
        output_final_state=output_final_state, disable_recompute=disable_recompute,
        backward_precision=backward_precision, keep_chunk_local=keep_chunk_local,
        initial_state=initial_state, return_intermediate_states=return_intermediate_states,
        intermediate_states_dtype=intermediate_states_dtype)


def fused_recurrent_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gk: Optional[torch.Tensor] = None,
    gv: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    reverse: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    **kwargs,
):
    r"""GLA with FLA's ``fused_recurrent_gla`` interface: the same function as :func:`chunk_gla`
    (the chunked kernels, with autograd) with the per-key decay ``gk: [B, T, H, K]`` (None: no
    decay); short calls that need no gradient (decoding) run the recurrent decode kernels, as
    :func:`fused_recurrent_kda` does. ``reverse=True`` runs each sequence from its last token to
    its first (FLA's semantics: the kernels on the time-reversed sequences, ``o`` reversed back;
    the final state is the state after each sequence's first token). FLA's per-value decay ``gv``
    is not supported (``NotImplementedError``). ``cu_seqlens_cpu`` may be passed as a keyword.

    Returns:
        ``(o, final_state)``; ``final_state`` is None unless ``output_final_state``.
    """
    name = "fused_recurrent_gla"
    state_v_first = state_layout(name, state_v_first, kwargs)
    extra = take_kwargs(name, kwargs, {"cu_seqlens_cpu": None})
    if gv is not None:
        raise NotImplementedError(f"{name}: the per-value decay gv is not supported by linattn; "
                                  "pass the per-key decay gk (chunk_gla's g)")
    if reverse and all(isinstance(x, torch.Tensor) and x.dim() >= 2 for x in (q, k, v)):
        def forward(*x):
            return fused_recurrent_gla(*x, None, scale, initial_state, output_final_state, False, state_v_first,
                                       cu_seqlens, cu_seqlens_cpu=extra["cu_seqlens_cpu"])
        return run_reversed(name, q, k, v, gk, cu_seqlens, extra["cu_seqlens_cpu"], forward)
    if gk is None and isinstance(k, torch.Tensor):
        gk = torch.zeros(k.shape, dtype=torch.float64 if k.dtype == torch.float64 else torch.float32,
                         device=k.device)
    if (isinstance(q, torch.Tensor) and isinstance(v, torch.Tensor)
            and short_no_grad_call(name, q, v, cu_seqlens, q, k, v, gk, initial_state)):
        # short calls without gradients (decoding): the recurrent decode kernels, as fused_recurrent_kda
        q, k, v, o_dtype = align_qkv_dtypes(q, k, v)
        o, fs = run_decode(_GLA, q, k, v, g=gk, scale=scale, initial_state=state_in_float32(initial_state),
                           output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                           cu_seqlens_cpu=extra["cu_seqlens_cpu"], state_v_first=state_v_first)
        return finish_output(o, o_dtype, None), fs
    return chunk_gla(q, k, v, gk, scale=scale, initial_state=initial_state,
                     output_final_state=output_final_state, state_v_first=state_v_first,
                     cu_seqlens=cu_seqlens, cu_seqlens_cpu=extra["cu_seqlens_cpu"])
