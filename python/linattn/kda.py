"""Kimi delta attention (KDA): a delta-rule recurrence with a per-channel decay.

Per sequence and value head, with state ``S`` of shape ``[K, V]``::

    S' = Diag(exp(g_t)) S_{t-1}
    S_t = S' + beta_t k_t (v_t - S'^T k_t)^T
    o_t = scale * S_t^T q_t
"""

from __future__ import annotations

from typing import Optional

import torch

from ._args import check_chunk_size, refuse, state_layout, take_kwargs
from ._torch_ops import run_forward
from .ops import FAMILIES

__all__ = ["chunk_kda", "fused_recurrent_kda"]

_KDA = FAMILIES["kda"]


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    safe_gate: bool = False,
    lower_bound: Optional[float] = None,
    disable_recompute: bool = False,
    return_intermediate_states: bool = False,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    cp_context=None,
    *,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    chunk_size: int = 64,
    backward_precision: str = "auto",
    **kwargs,
):
    r"""Chunked KDA, forward and backward (a drop-in for ``fla.ops.kda.chunk_kda``).

    CUDA backward: the chunked form on tensor cores. For bfloat16 / float16 inputs it computes
    in the input type with hi + lo halves of the operands whose rounding matters, and in float32
    when ``A_log`` or ``dt_bias`` is given (their gradients are per-head sums over all tokens);
    gradients come back in the inputs' dtypes. The keyword ``backward_precision`` picks another
    form: ``"split"`` (the hi + lo form always; the A_log / dt_bias gradients can then miss
    SPEC's 1e-2), ``"fast16"`` (the 16-bit type alone: fastest; dβ can miss it too),
    ``"float32"`` (float32 throughout); ``"auto"`` is the default; any other value raises
    ``ValueError``. The CPU backend ignores it.

    Shapes (``HV`` value heads, a multiple of the ``H`` query/key heads; with
    ``cu_seqlens``, ``B`` is 1 and ``N`` sequences are packed along ``T``, otherwise
    ``N = B``):

    Args:
        q, k: queries and keys, ``[B, T, H, K]``.
        v: values, ``[B, T, HV, V]``; value head ``i`` reads query/key head ``i // (HV // H)``.
            q, k and v share one dtype (bfloat16, float16, float32 or float64).
        g: log-space decay per channel, ``[B, T, HV, K]`` (≤ 0 in normal use). With
            ``use_gate_in_kernel=True`` it is the raw gate pre-activation instead.
        beta: delta-rule step sizes, ``[B, T, HV]`` (raw logits with
            ``use_beta_sigmoid_in_kernel=True``).
        scale: multiplies ``q``; ``None`` means ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` float32 state to start from (``[N, HV, V, K]``
            with ``state_v_first``). It receives a gradient.
        output_final_state: return the state after the last token of each sequence.
        use_qk_l2norm_in_kernel: L2-normalise ``q`` and ``k`` per token and head first
            (the gradient flows through the normalisation).
        use_gate_in_kernel: compute the decay from the raw ``g``:
            ``g = -exp(A_log) * softplus(g + dt_bias)``, or with ``lower_bound`` set
            ``g = lower_bound * sigmoid(exp(A_log) * (g + dt_bias))`` (``A_log`` may then be
            None: ``lower_bound * sigmoid(g + dt_bias)``). Gradients go to the raw ``g``,
            ``A_log`` and ``dt_bias``.
        use_beta_sigmoid_in_kernel: ``beta = sigmoid(beta)`` inside the kernel.
        allow_neg_eigval: with the sigmoid, ``beta = 2 * sigmoid(beta)``.
        safe_gate: promise that the decay lies in ``[lower_bound, 0)`` (needs ``lower_bound``),
            which lets GPU kernels take a faster path.
        lower_bound: the bound ``L`` in ``[-5, 0)`` of the lower-bound gate above.
        disable_recompute: keep forward intermediates for the backward instead of
            recomputing them: a faster backward (bitwise the same gradients) for a slower
            forward and more memory held until the backward (on CUDA about 1.4 GiB at
            B=2, T=8192, H=32, K=V=128, bf16).
        return_intermediate_states: also return ``h``, the float32 state before each
            64-token chunk: ``[B, NT, HV, K, V]`` with ``NT = ceil(T / 64)``, or
            ``[1, NT_total, HV, K, V]`` with ``cu_seqlens``. Meant for inference; ``h`` has no
            gradient. Cannot be combined with ``disable_recompute``.
        state_v_first: states (initial, final, ``h``) use the ``[.., V, K]`` layout.
        cu_seqlens: ``[N + 1]`` int32/int64 sequence boundaries on the tensors' device.
        cu_seqlens_cpu: the same values in CPU memory; for CUDA tensors it saves a
            device-to-host copy (made with ``.cpu()`` when omitted).
        cp_context: context parallelism is not supported; must be None.
        A_log: ``[HV]`` gate parameter for ``use_gate_in_kernel``.
        dt_bias: ``[HV * K]`` gate bias for ``use_gate_in_kernel`` (optional).
        chunk_size: only 64 is supported.
        backward_precision: the CUDA backward's compute form (above; ``linattn.ops.BACKWARD_PRECISIONS``).
            With ``disable_recompute`` the forward keeps its intermediates in that form.

    Returns:
        ``(o, final_state)``: ``o`` is ``[B, T, HV, V]`` in v's dtype; ``final_state`` is
        ``[N, HV, K, V]`` float32, or None unless ``output_final_state``. With
        ``return_intermediate_states`` a third element ``h`` follows.

    Example::

        >>> import torch, torch.nn.functional as F
        >>> from linattn import chunk_kda
        >>> B, T, H, K, V = 2, 300, 4, 64, 64
        >>> q = torch.randn(B, T, H, K, requires_grad=True)
        >>> k = F.normalize(torch.randn(B, T, H, K), dim=-1).requires_grad_()
        >>> v = torch.randn(B, T, H, V, requires_grad=True)
        >>> g = F.logsigmoid(torch.randn(B, T, H, K)).div(16).requires_grad_()
        >>> beta = torch.rand(B, T, H).requires_grad_()
        >>> o, ht = chunk_kda(q, k, v, g, beta, output_final_state=True)
        >>> (o.sum() + ht.sum()).backward()
        >>> q.grad.shape
        torch.Size([2, 300, 4, 64])
    """
    name = "chunk_kda"
    state_v_first = state_layout(name, state_v_first, kwargs)
    take_kwargs(name, kwargs, {})
    refuse(name, "cp_context", cp_context)
    check_chunk_size(name, chunk_size)
    o, fs, h = run_forward(
        _KDA, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state,
        cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        safe_gate=safe_gate, lower_bound=lower_bound, state_v_first=state_v_first,
        output_final_state=output_final_state, return_intermediate_states=return_intermediate_states,
        disable_recompute=disable_recompute, backward_precision=backward_precision, fn_name=name)
    if return_intermediate_states:
        return o, fs, h
    return o, fs


def fused_recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: Optional[float] = None,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    *,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    **kwargs,
):
    r"""KDA with FLA's ``fused_recurrent_kda`` interface (inference-style entry point).

    Computes exactly what :func:`chunk_kda` computes (it runs the same chunked kernels) and
    also supports autograd. Arguments are those of :func:`chunk_kda`, in FLA's
    ``fused_recurrent_kda`` order; ``lower_bound`` takes effect with ``use_gate_in_kernel``
    (passing it without raises ``ValueError``). ``cu_seqlens_cpu`` is an optional host copy
    of ``cu_seqlens``.

    Returns:
        ``(o, final_state)``; ``final_state`` is None unless ``output_final_state``.

    Example::

        >>> o, ht = fused_recurrent_kda(q, k, v, g, beta, initial_state=h0,
        ...                             output_final_state=True)
    """
    name = "fused_recurrent_kda"
    state_v_first = state_layout(name, state_v_first, kwargs)
    take_kwargs(name, kwargs, {})
    o, fs, _ = run_forward(
        _KDA, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state,
        cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        safe_gate=False, lower_bound=lower_bound, state_v_first=state_v_first,
        output_final_state=output_final_state, fn_name=name)
    return o, fs
