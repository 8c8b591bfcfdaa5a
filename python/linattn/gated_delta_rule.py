"""Gated delta rule (GDN): a delta-rule recurrence with a scalar decay per token and head.

Per sequence and value head, with state ``S`` of shape ``[K, V]``::

    S' = exp(g_t) S_{t-1}
    S_t = S' + beta_t k_t (v_t - S'^T k_t)^T
    o_t = scale * S_t^T q_t
"""

from __future__ import annotations

from typing import Optional

import torch

from ._args import (align_qkv_dtypes, check_chunk_size, finish_output, fused_recurrent_states, refuse,
                    refuse_head_first, state_layout, take_kwargs)
from ._decode import run_decode, selects_decode
from ._torch_ops import run_chunked, run_forward_split
from .ops import FAMILIES

__all__ = ["chunk_gated_delta_rule", "chunk_gdn", "fused_recurrent_gated_delta_rule",
           "fused_recurrent_gdn"]

_GDN = FAMILIES["gdn"]
_KDA = FAMILIES["kda"]


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    chunk_indices: Optional[torch.Tensor] = None,
    cp_context=None,
    *,
    use_gate_in_kernel: bool = False,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    chunk_size: int = 64,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    backward_precision: str = "auto",
    intermediate_states_dtype: Optional[torch.dtype] = None,
    **kwargs,
):
    r"""Chunked gated delta rule, forward and backward (a drop-in for
    ``fla.ops.gated_delta_rule.chunk_gated_delta_rule``; also exported as ``chunk_gdn``).

    CUDA backward: the chunked form on tensor cores. For bfloat16 / float16 inputs it computes
    in the input type with hi + lo halves of the operands whose rounding matters, and in float32
    when ``A_log`` or ``dt_bias`` is given and takes a gradient (theirs are per-head sums over all tokens);
    gradients come back in the inputs' dtypes. The keyword ``backward_precision`` picks another
    form: ``"split"`` (the hi + lo form always; the A_log / dt_bias gradients can then miss
    SPEC's 1e-2), ``"fast16"`` (the 16-bit type alone: fastest; dβ can miss it too),
    ``"float32"`` (float32 compute, float32-grade operands); ``"auto"`` is the default; any other value raises
    ``ValueError``. The CPU backend ignores it.

    Args:
        q, k: ``[B, T, H, K]``.
        v: ``[B, T, HV, V]``, ``HV`` a multiple of ``H`` (grouped value heads). As in FLA,
            q, k and v may differ in dtype (computed in the promoted one; ``o`` in v's).
        g: scalar log-space decay per token and value head, ``[B, T, HV]`` (raw
            pre-activation with ``use_gate_in_kernel``).
        beta: ``[B, T, HV]`` step sizes (logits with ``use_beta_sigmoid_in_kernel``).
        scale: query scale, ``None`` for ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` (``[N, HV, V, K]`` with ``state_v_first``);
            ``N = B``, or the number of sequences with ``cu_seqlens``. float32, or float16 /
            bfloat16 (read as float32, as FLA's kernels do). Differentiable.
        output_final_state: also return the last state of each sequence.
        use_qk_l2norm_in_kernel: L2-normalise q and k per token and head.
        use_beta_sigmoid_in_kernel: ``beta = sigmoid(beta)``; ``allow_neg_eigval`` doubles it.
        state_v_first: states use the ``[.., V, K]`` layout.
        cu_seqlens: ``[N + 1]`` int32/int64 boundaries of packed sequences (``B == 1``).
        cu_seqlens_cpu: optional host copy of ``cu_seqlens`` (avoids a device sync).
        chunk_indices: not supported; must be None.
        cp_context: context parallelism over a ``torch.distributed`` group, as in
            :func:`linattn.chunk_kda` (:mod:`linattn.cp`, ``docs/context_parallel.md``).
        use_gate_in_kernel: ``g = -exp(A_log) * softplus(g + dt_bias)`` inside the kernel,
            with ``A_log`` and optional ``dt_bias`` of ``HV`` elements each (any shape, e.g.
            ``[HV]`` or ``[1, 1, HV, 1]``, as in FLA); gradients are returned for the
            raw ``g``, ``A_log`` and ``dt_bias``.
        chunk_size: 16, 32 or 64, as in FLA (other values raise ``ValueError``); the function
            is the same, linattn runs 64-token chunks.
        disable_recompute: keep forward intermediates for a faster backward (bitwise the
            same gradients; a slower forward and more memory held until the backward).
        return_intermediate_states: also return the chunk-boundary states ``h``
            ``[B, ceil(T / 64), HV, K, V]`` (inference only; no gradient), in k's dtype as FLA's
            ``h`` (computed in float32; ``intermediate_states_dtype=torch.float32`` keeps that).
        backward_precision: the CUDA backward's compute form (above; ``linattn.ops.BACKWARD_PRECISIONS``).
            With ``disable_recompute`` the forward keeps its intermediates in that form.

    Returns:
        ``(o, final_state)`` with ``o: [B, T, HV, V]`` in v's dtype and ``final_state`` (or
        None); ``h`` third when ``return_intermediate_states``.

    Example::

        >>> import torch, torch.nn.functional as F
        >>> from linattn import chunk_gated_delta_rule
        >>> B, T, H, K, V = 2, 200, 4, 64, 64
        >>> q = torch.randn(B, T, H, K, requires_grad=True)
        >>> k = F.normalize(torch.randn(B, T, H, K), dim=-1).requires_grad_()
        >>> v = torch.randn(B, T, H, V, requires_grad=True)
        >>> g = F.logsigmoid(torch.randn(B, T, H)).requires_grad_()
        >>> beta = torch.rand(B, T, H).requires_grad_()
        >>> o, _ = chunk_gated_delta_rule(q, k, v, g, beta)
        >>> o.square().sum().backward()
    """
    name = "chunk_gated_delta_rule"
    state_v_first = state_layout(name, state_v_first, kwargs)
    refuse_head_first(name, kwargs)
    take_kwargs(name, kwargs, {})
    refuse(name, "chunk_indices", chunk_indices)
    check_chunk_size(name, "Gated Delta Rule", chunk_size, return_intermediate_states)
    if cp_context is not None:  # context parallelism: linattn.cp (docs/context_parallel.md)
        from .cp import cp_forward
        opts = dict(scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                    use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                    allow_neg_eigval=allow_neg_eigval, disable_recompute=disable_recompute,
                    chunk_size=chunk_size, backward_precision=backward_precision)
        return cp_forward(chunk_gated_delta_rule, name, q, k, v, g, beta, cp_context=cp_context, A_log=A_log,
                          dt_bias=dt_bias, initial_state=initial_state, output_final_state=output_final_state,
                          state_v_first=state_v_first, return_intermediate_states=return_intermediate_states,
                          opts=opts)
    return run_chunked(
        _GDN, name, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu_seqlens,
        cu_seqlens_cpu=cu_seqlens_cpu, scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first, output_final_state=output_final_state,
        disable_recompute=disable_recompute, backward_precision=backward_precision,
        initial_state=initial_state, return_intermediate_states=return_intermediate_states,
        intermediate_states_dtype=intermediate_states_dtype)


chunk_gdn = chunk_gated_delta_rule


def fused_recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: Optional[torch.Tensor] = None,
    gk: Optional[torch.Tensor] = None,
    gv: Optional[torch.Tensor] = None,
    beta: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    *,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    inplace_final_state: bool = False,
    ssm_state_indices: Optional[torch.Tensor] = None,
    num_accepted_tokens: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    status: Optional[torch.Tensor] = None,
    **kwargs,
):
    r"""Gated delta rule with FLA's ``fused_recurrent_gated_delta_rule`` interface.

    Without gradients and with short sequences (at most 16 tokens per sequence on average) it
    runs the recurrent decode kernels (one pass over each state, no host synchronisation: CUDA
    graph capturable); otherwise the chunked kernels (same results as
    :func:`chunk_gated_delta_rule`, with autograd). The serving keywords
    ``ssm_state_indices``, ``num_accepted_tokens``, ``inplace_final_state``, ``out`` and
    ``status`` and per-value-channel ``beta [B, T, HV, V]`` are those of
    :func:`linattn.fused_recurrent_kda` and select the decode path (no backward). Gates, as in FLA:

    * ``g: [B, T, HV]`` scalar decay (raw with ``use_gate_in_kernel``, needing ``A_log``);
    * ``gk: [B, T, HV, K]`` per-key decay (this is KDA);
    * ``g`` and ``gk`` together: both decays, ``exp(g_t) Diag(exp(gk_t))`` = the per-key decay
      ``gk + g`` (FLA multiplies the state by each in turn), with gradients for both; not with
      ``use_gate_in_kernel`` (``NotImplementedError``);
    * neither: no decay; ``gv`` (per-value decay) is not supported (``NotImplementedError``).

    ``beta: [B, T, HV]`` defaults to ones. Other arguments as in
    :func:`chunk_gated_delta_rule`; ``cu_seqlens_cpu`` is an optional host copy of
    ``cu_seqlens``.

    Returns:
        ``(o, final_state)``; ``final_state`` is None unless ``output_final_state``.
    """
    name = "fused_recurrent_gated_delta_rule"
    state_v_first = state_layout(name, state_v_first, kwargs)
    take_kwargs(name, kwargs, {})
    if gv is not None:
        raise NotImplementedError(f"{name}: the per-value gate gv is not supported by linattn")
    if not isinstance(q, torch.Tensor) or not isinstance(v, torch.Tensor):
        raise TypeError(f"{name}: q, k and v must be torch.Tensors")
    if g is not None and gk is not None:
        # FLA scales the state by exp(g_t), then by Diag(exp(gk_t)): one per-key decay gk + g
        if use_gate_in_kernel:
            raise NotImplementedError(f"{name}: gk together with the in-kernel gate (use_gate_in_kernel) is "
                                      "not supported by linattn; pass log-space g and gk, or gk alone")
        if not (isinstance(g, torch.Tensor) and isinstance(gk, torch.Tensor)) or g.dim() != 3 or \
                gk.dim() != 4 or tuple(g.shape) != tuple(gk.shape[:3]):
            shape = lambda x: tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__  # noqa: E731
            raise ValueError(f"{name}: with both gates g must be [B, T, HV] and gk [B, T, HV, K]; got g "
                             f"{shape(g)}, gk {shape(gk)}")
        gk = gk + g.unsqueeze(-1)
        g = None
    q, k, v, o_dtype = align_qkv_dtypes(q, k, v)
    initial_state = fused_recurrent_states(
        initial_state, ssm_state_indices is not None or bool(inplace_final_state))
    # v.shape[:3] never raises: a v of the wrong rank gets a beta / g of the wrong rank, and the
    # C++ core's validation then names v (checked before beta and g).
    if beta is None:
        beta = torch.ones(v.shape[:3], dtype=q.dtype, device=q.device)
    family = _GDN
    if gk is not None:
        if use_gate_in_kernel:
            raise ValueError(f"{name}: use_gate_in_kernel applies to the raw scalar gate g, "
                             "which was not given (gk is used as given)")
        family, g = _KDA, gk
    elif g is None:
        if use_gate_in_kernel:
            raise ValueError(f"{name}: use_gate_in_kernel needs the raw gate g")
        g = torch.zeros(v.shape[:3], dtype=torch.float64 if q.dtype == torch.float64
                        else torch.float32, device=q.device)
    if selects_decode(name, q, v, beta, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                      inplace_final_state, out, k, v, g, beta, A_log, dt_bias, initial_state):
        o, fs = run_decode(
            family, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, scale=scale,
            initial_state=initial_state, output_final_state=output_final_state,
            inplace_final_state=inplace_final_state, ssm_state_indices=ssm_state_indices,
            num_accepted_tokens=num_accepted_tokens, cu_seqlens=cu_seqlens,
            cu_seqlens_cpu=cu_seqlens_cpu, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
            allow_neg_eigval=allow_neg_eigval, state_v_first=state_v_first,
            out=None if o_dtype is not None else out, status=status)
        return finish_output(o, o_dtype, out), fs
    o, fs, _ = run_forward_split(
        family, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias,
        initial_state=initial_state, cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu,
        scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        state_v_first=state_v_first, output_final_state=output_final_state, fn_name=name)
    return finish_output(o, o_dtype, None), fs


fused_recurrent_gdn = fused_recurrent_gated_delta_rule
