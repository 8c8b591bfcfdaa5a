"""The recurrent decode path behind the ``fused_recurrent_*`` functions (KDA, GDN, GLA, simple GLA).

``linattn.decode`` in C++: one pass over each state, no workspace, no host synchronisation (a
decode step can be captured in a CUDA graph), FLA's state-pool semantics (``ssm_state_indices``,
``num_accepted_tokens``, ``inplace_final_state``). Inference only: no autograd.

The FLA-style functions pick it automatically when no gradient is needed and the sequences are
short (at most ``DECODE_MAX_TOKENS`` tokens on average), and always when a state pool is used;
otherwise they run the chunked kernels (which also give gradients).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _C
from .ops import make_options

__all__ = ["DECODE_MAX_TOKENS", "use_decode", "selects_decode", "short_no_grad_call", "run_decode"]

DECODE_MAX_TOKENS = 16


def _wants_grad(*ts) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def use_decode(fn_name: str, q: Tensor, cu_seqlens: Optional[Tensor], pool_args: bool, *grad_inputs) -> bool:
    """Whether a fused_recurrent_* call runs the recurrent decode kernels (see the module doc)."""
    if pool_args:
        if _wants_grad(q, *grad_inputs):
            raise ValueError(f"{fn_name}: ssm_state_indices / num_accepted_tokens / inplace_final_state "
                             "select the inference decode path, which has no backward; call it under "
                             "torch.no_grad() or detach the inputs")
        return True
    if _wants_grad(q, *grad_inputs):
        return False
    if q.dim() != 4:
        return False  # let the chunked path's validation explain
    n = q.shape[0] if cu_seqlens is None else max(cu_seqlens.shape[0] - 1, 1)
    tokens = q.shape[0] * q.shape[1]
    return tokens <= DECODE_MAX_TOKENS * n


def selects_decode(fn_name: str, q: Tensor, v: Tensor, beta: Optional[Tensor], cu_seqlens: Optional[Tensor],
                   ssm_state_indices, num_accepted_tokens, inplace_final_state: bool, out, *grad_inputs) -> bool:
    """The fused_recurrent_* functions' choice: the serving arguments (a state pool, accepted
    tokens, in place, ``out``, per-channel beta) always select decode; otherwise use_decode."""
    serving = (ssm_state_indices is not None or num_accepted_tokens is not None or bool(inplace_final_state)
               or out is not None or (beta is not None and beta.dim() == v.dim()))
    return use_decode(fn_name, q, cu_seqlens, serving, *grad_inputs)


def short_no_grad_call(fn_name: str, q: Tensor, v: Tensor, cu_seqlens: Optional[Tensor], *grad_inputs) -> bool:
    """The choice of the fused_recurrent_* functions without state-pool arguments (GLA, simple
    GLA): decode for short calls that need no gradient, within the decode kernels' head sizes
    (larger ones stay on the chunked path, which splits them)."""
    if q.dim() != 4 or v.dim() != 4 or q.shape[-1] > 256 or v.shape[-1] > 256:
        return False
    return use_decode(fn_name, q, cu_seqlens, False, *grad_inputs)


def _stream(t: Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.device.type == "cuda" else 0


def _d(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.detach()


def run_decode(
    family: int, q: Tensor, k: Tensor, v: Tensor, *, g=None, g_gamma=None, beta=None, A_log=None,
    dt_bias=None, scale=None, initial_state=None, output_final_state=False,
    inplace_final_state=False, ssm_state_indices=None, num_accepted_tokens=None, cu_seqlens=None,
    cu_seqlens_cpu=None, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
    use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, lower_bound=None,
    state_v_first=False, out: Optional[Tensor] = None, status: Optional[Tensor] = None,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Returns ``(o, final_state)``: with ``inplace_final_state`` the updated ``initial_state``
    (the pool) itself, else a new float32 tensor when ``output_final_state``, else None."""
    opt = make_options(scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                       use_gate_in_kernel=use_gate_in_kernel,
                       use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                       allow_neg_eigval=allow_neg_eigval, lower_bound=lower_bound,
                       state_v_first=state_v_first)
    q, k, v = (x.detach().contiguous() for x in (q, k, v))
    o = torch.empty_like(v) if out is None else out
    fs = None
    if output_final_state and not inplace_final_state:
        N = q.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
        HV, K, V = v.shape[2], q.shape[3], v.shape[3]
        fs = q.new_empty((N, HV, V, K) if state_v_first else (N, HV, K, V), dtype=torch.float32)
    host_cu = cu_seqlens_cpu if (cu_seqlens is not None and q.device.type == "cuda") else None
    c = lambda t: None if t is None else t.detach().contiguous()  # noqa: E731
    with torch.cuda.device(q.device) if q.device.type == "cuda" else _null():
        _C.decode(family, q, k, v, g=c(g), g_gamma=c(g_gamma), beta=c(beta), A_log=c(A_log),
                  dt_bias=c(dt_bias), state=_d(initial_state), ssm_state_indices=c(ssm_state_indices),
                  num_accepted_tokens=c(num_accepted_tokens), cu_seqlens=c(cu_seqlens),
                  cu_seqlens_host=c(host_cu), inplace_final_state=bool(inplace_final_state), o=o,
                  final_state=fs, status=status, options=opt, stream=_stream(q))
    if inplace_final_state:
        return o, initial_state
    return o, fs


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
