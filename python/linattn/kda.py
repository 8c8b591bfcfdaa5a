"""Kimi delta attention (KDA): a delta-rule recurrence with a per-channel decay.

Per sequence and value head, with state ``S`` of shape ``[K, V]``::

    S' = Diag(exp(g_t)) S_{t-1}
    S_t = S' + beta_t k_t (v_t - S'^T k_t)^T
    o_t = scale * S_t^T q_t
"""

from __future__ import annotations

from typing import Optional

import torch

from ._args import (align_qkv_dtypes, check_chunk_size, refuse_graph_mode, finish_output,
                    fused_recurrent_states, state_layout, take_kwargs)
from ._decode import run_decode, selects_decode
from ._torch_ops import run_chunked, run_forward_split
from .ops import FAMILIES

__all__ = ["chunk_kda", "fused_recurrent_kda", "fused_recurrent_kda_fwd"]

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
    use_graph: bool = False,
    max_num_seqs: Optional[int] = None,
    *,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    chunk_size: int = 64,
    backward_precision: str = "auto",
    intermediate_states_dtype: Optional[torch.dtype] = None,
    **kwargs,
):
    r"""Chunked KDA, forward and backward (a drop-in for ``fla.ops.kda.chunk_kda``).

    CUDA backward: the chunked form on tensor cores. For bfloat16 / float16 inputs it computes
    in the input type with hi + lo halves of the operands whose rounding matters, and in float32
    when ``A_log`` or ``dt_bias`` is given and takes a gradient (theirs are per-head sums over all tokens);
    gradients come back in the inputs' dtypes. The keyword ``backward_precision`` picks another
    form: ``"split"`` (the hi + lo form always; the A_log / dt_bias gradients can then miss
    SPEC's 1e-2), ``"fast16"`` (the 16-bit type alone: fastest; dβ can miss it too),
    ``"float32"`` (float32 compute, float32-grade operands); ``"auto"`` is the default; any other value raises
    ``ValueError``. The CPU backend ignores it.

    Shapes (``HV`` value heads, a multiple of the ``H`` query/key heads; with
    ``cu_seqlens``, ``B`` is 1 and ``N`` sequences are packed along ``T``, otherwise
    ``N = B``):

    Args:
        q, k: queries and keys, ``[B, T, H, K]``.
        v: values, ``[B, T, HV, V]``; value head ``i`` reads query/key head ``i // (HV // H)``.
            bfloat16, float16, float32 or float64; as in FLA q, k and v may differ in dtype
            (then they are computed in the promoted dtype and ``o`` comes back in v's).
        g: log-space decay per channel, ``[B, T, HV, K]`` (≤ 0 in normal use). With
            ``use_gate_in_kernel=True`` it is the raw gate pre-activation instead.
        beta: delta-rule step sizes, ``[B, T, HV]`` (raw logits with
            ``use_beta_sigmoid_in_kernel=True``).
        scale: multiplies ``q``; ``None`` means ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` state to start from (``[N, HV, V, K]`` with
            ``state_v_first``); float32, or float16 / bfloat16 (read as float32, as FLA's kernels
            do). It receives a gradient (in its own dtype).
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
        safe_gate: promise that the decay lies in ``[lower_bound, 0)``, which lets GPU kernels
            take a faster path. With ``use_gate_in_kernel`` it needs ``lower_bound``; without,
            ``lower_bound`` defaults to FLA's -5.
        lower_bound: the bound ``L`` in ``[-5, 0)`` of the lower-bound gate above.
        disable_recompute: keep forward intermediates for the backward instead of
            recomputing them: a faster backward (bitwise the same gradients) for a slower
            forward and more memory held until the backward (on CUDA about 1.4 GiB at
            B=2, T=8192, H=32, K=V=128, bf16).
        return_intermediate_states: also return ``h``, the state before each 64-token chunk:
            ``[B, NT, HV, K, V]`` with ``NT = ceil(T / 64)``, or ``[1, NT_total, HV, K, V]``
            with ``cu_seqlens``, in k's dtype as in FLA (``intermediate_states_dtype`` picks
            another, e.g. ``torch.float32``: the states are computed in float32). Meant for
            inference; ``h`` has no gradient. Cannot be combined with ``disable_recompute``.
        state_v_first: states (initial, final, ``h``) use the ``[.., V, K]`` layout.
        cu_seqlens: ``[N + 1]`` int32/int64 sequence boundaries on the tensors' device.
        cu_seqlens_cpu: the same values in CPU memory; for CUDA tensors it saves a
            device-to-host copy (made with ``.cpu()`` when omitted).
        cp_context: context parallelism over a ``torch.distributed`` group: this rank's part of one
            packed stream (batch 1), a context from :func:`linattn.cp.build_cp_context` (or FLA's
            ``fla.ops.cp.build_cp_context``, contiguous layout). It replaces ``cu_seqlens``. Unlike
            FLA, ``initial_state`` / ``output_final_state`` work, per local sequence (see
            :mod:`linattn.cp` and ``docs/context_parallel.md``); ``return_intermediate_states``
            is refused.
        use_graph, max_num_seqs: FLA's fixed-shape varlen mode for graph capture; not
            supported (``use_graph`` must be False; :func:`fused_recurrent_kda`'s decode path
            is graph-capturable).
        A_log: gate parameter for ``use_gate_in_kernel``, ``HV`` elements in any shape (``[HV]``,
            ``[1, 1, HV, 1]``, ...; FLA reads it with ``.view``); its gradient has its shape.
        dt_bias: gate bias for ``use_gate_in_kernel`` (optional), ``HV * K`` elements in any
            shape (``[HV * K]``, ``[HV, K]``, ...).
        chunk_size: 32 or 64, as in FLA (any other value raises ``ValueError``); the
            function computed is the same, linattn runs 64-token chunks.
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
    refuse_graph_mode(name, use_graph, max_num_seqs)
    check_chunk_size(name, "KDA", chunk_size, return_intermediate_states)
    if cp_context is not None:  # context parallelism: linattn.cp (docs/context_parallel.md)
        from .cp import cp_forward
        opts = dict(scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                    use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                    allow_neg_eigval=allow_neg_eigval, safe_gate=safe_gate, lower_bound=lower_bound,
                    disable_recompute=disable_recompute,
                    chunk_size=chunk_size, backward_precision=backward_precision)
        return cp_forward(chunk_kda, name, q, k, v, g, beta, cp_context=cp_context, A_log=A_log,
                          dt_bias=dt_bias, initial_state=initial_state, output_final_state=output_final_state,
                          state_v_first=state_v_first, return_intermediate_states=return_intermediate_states,
                          opts=opts)
    return run_chunked(
        _KDA, name, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu_seqlens,
        cu_seqlens_cpu=cu_seqlens_cpu, scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        safe_gate=safe_gate, lower_bound=lower_bound, state_v_first=state_v_first,
        output_final_state=output_final_state, disable_recompute=disable_recompute,
        backward_precision=backward_precision,
        initial_state=initial_state, return_intermediate_states=return_intermediate_states,
        intermediate_states_dtype=intermediate_states_dtype)


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
    inplace_final_state: bool = False,
    ssm_state_indices: Optional[torch.Tensor] = None,
    num_accepted_tokens: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    status: Optional[torch.Tensor] = None,
    safe_gate: bool = False,
    **kwargs,
):
    r"""KDA with FLA's ``fused_recurrent_kda`` interface (decode and serving).

    Without gradients and with short sequences (at most 16 tokens per sequence on average) it
    runs the recurrent decode kernels: one pass over each state, no host synchronisation, so a
    decode step can be captured in a CUDA graph. Otherwise it runs the chunked kernels (the
    same function as :func:`chunk_kda`, with autograd). Arguments are those of
    :func:`chunk_kda`, in FLA's ``fused_recurrent_kda`` order; ``lower_bound`` takes effect
    with ``use_gate_in_kernel`` (passing it without raises ``ValueError``); ``safe_gate`` is
    accepted and ignored, as FLA's ``fused_recurrent_kda`` ignores it (the recurrent form needs
    no bound). q, k and v may differ in dtype and a float16 / bfloat16 ``initial_state`` is read
    as float32, as in :func:`chunk_kda` (a state pool is used where it lies). ``cu_seqlens_cpu``
    is an optional host copy of ``cu_seqlens`` (the decode path does not need it).

    Serving (FLA's ``fused_recurrent_kda_fwd`` keywords; these select the decode path, which
    has no backward):
        initial_state: a state pool ``[P, HV, K, V]`` (float32 or bfloat16; its slot stride may
            be larger than one state) when ``ssm_state_indices`` is given.
        ssm_state_indices: int32/int64 ``[N]`` (sequence n reads, and in place writes, slot
            ``idx[n]``) or ``[N, T_max]`` (speculative decoding: the state after token t goes to
            ``idx[n, t]``). Negative entries are padding: a negative read slot skips the
            sequence (its ``o`` rows are 0), a negative write slot skips that write.
        num_accepted_tokens: int32/int64 ``[N]``: sequence n starts from ``idx[n, a_n - 1]``.
        inplace_final_state: write the new states into ``initial_state`` (returned as the final
            state) instead of a new tensor.
        beta: may also be per value channel, ``[B, T, HV, V]``.
        out: optional preallocated ``o``.
        status: optional int32 ``[1]`` tensor on the inputs' device into which the kernels OR
            flags for what only the device can see (an index past the pool: 1, a bad accepted
            count: 2, a sequence longer than T_max: 4, a bad cu_seqlens: 8); such a sequence is
            skipped without any out-of-bounds access.

    Returns:
        ``(o, final_state)``; ``final_state`` is None unless ``output_final_state`` or
        ``inplace_final_state``.

    Example::

        >>> o, ht = fused_recurrent_kda(q, k, v, g, beta, initial_state=h0,
        ...                             output_final_state=True)
    """
    name = "fused_recurrent_kda"
    state_v_first = state_layout(name, state_v_first, kwargs)
    take_kwargs(name, kwargs, {})
    del safe_gate  # accepted for FLA's callers; the recurrent form has no tensor-core path to unlock
    q, k, v, o_dtype = align_qkv_dtypes(q, k, v)
    initial_state = fused_recurrent_states(
        initial_state, ssm_state_indices is not None or bool(inplace_final_state))
    if selects_decode(name, q, v, beta, cu_seqlens, ssm_state_indices, num_accepted_tokens,
                      inplace_final_state, out, k, v, g, beta, A_log, dt_bias, initial_state):
        o, fs = run_decode(
            _KDA, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, scale=scale,
            initial_state=initial_state, output_final_state=output_final_state,
            inplace_final_state=inplace_final_state, ssm_state_indices=ssm_state_indices,
            num_accepted_tokens=num_accepted_tokens, cu_seqlens=cu_seqlens,
            cu_seqlens_cpu=cu_seqlens_cpu, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
            allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound, state_v_first=state_v_first,
            out=None if o_dtype is not None else out, status=status)
        return finish_output(o, o_dtype, out), fs
    o, fs, _ = run_forward_split(
        _KDA, q, k, v, g=g, beta=beta, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state,
        cu_seqlens=cu_seqlens, cu_seqlens_cpu=cu_seqlens_cpu, scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel, allow_neg_eigval=allow_neg_eigval,
        safe_gate=False, lower_bound=lower_bound, state_v_first=state_v_first,
        output_final_state=output_final_state, fn_name=name)
    return finish_output(o, o_dtype, None), fs


def fused_recurrent_kda_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    A_log: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_state: Optional[torch.Tensor] = None,
    scale: Optional[float] = None,
    output_final_state: bool = False,
    inplace_final_state: bool = True,
    state_v_first: bool = False,
    cu_seqlens: Optional[torch.Tensor] = None,
    ssm_state_indices: Optional[torch.Tensor] = None,
    num_accepted_tokens: Optional[torch.Tensor] = None,
    use_qk_l2norm_in_kernel: bool = False,
    use_gate_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    lower_bound: Optional[float] = None,
    out: Optional[torch.Tensor] = None,
    **kwargs,
):
    r"""FLA's serving entry point ``fla.ops.kda.fused_recurrent_kda_fwd`` (same arguments and
    defaults; note ``inplace_final_state=True``): the forward of :func:`fused_recurrent_kda`
    without autograd, e.g. one decode step over a state pool (``initial_state`` with
    ``ssm_state_indices``), updated in place.

    Returns:
        ``(o, final_state)``: with ``inplace_final_state`` the updated ``initial_state`` itself.
    """
    if inplace_final_state and initial_state is None:
        raise ValueError("fused_recurrent_kda_fwd: inplace_final_state=True (the default) needs initial_state, "
                         "the states to update; pass inplace_final_state=False for a new final state")
    with torch.no_grad():
        return fused_recurrent_kda(
            q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, scale=scale, initial_state=initial_state,
            output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
            allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound, state_v_first=state_v_first,
            cu_seqlens=cu_seqlens, inplace_final_state=inplace_final_state,
            ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens, out=out,
            **kwargs)
