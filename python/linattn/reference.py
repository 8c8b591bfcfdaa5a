"""float64 reference (token-by-token recurrence of SPEC.md) on PyTorch CPU tensors.

The ground truth the tests compare every backend with. Inputs are copied to CPU float64
first (they are the same values, so the reference evaluates exactly the given inputs); all
results are float64 CPU tensors. No autograd.

Example::

    >>> from linattn import reference
    >>> o, ht, _ = reference.forward("kda", q, k, v, g=g, beta=beta, output_final_state=True)
    >>> grads = reference.backward("kda", q, k, v, do, g=g, beta=beta)
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

from . import ops

__all__ = ["forward", "backward"]


def _np(t: Optional[torch.Tensor]):
    if t is None:
        return None
    t = t.detach().cpu()
    if t.is_floating_point():
        t = t.double()
    return t.contiguous().numpy()


def _t(a):
    return None if a is None else torch.from_numpy(a)


def _split(kwargs):
    tensors, options = {}, {}
    for n, x in kwargs.items():
        (tensors if isinstance(x, torch.Tensor) or n in ops._INPUT_NAMES else options)[n] = x
    return {n: _np(x) for n, x in tensors.items()}, options


def forward(family, q, k, v, *, output_final_state: bool = False,
            return_intermediate_states: bool = False, **kwargs):
    """Reference forward. Keywords: the optional tensors (``g, g_gamma, beta, A_log, dt_bias,
    initial_state, cu_seqlens``) and options (``scale, use_qk_l2norm_in_kernel, ...``).
    Returns ``(o, final_state, h)`` (None where not requested)."""
    tensors, options = _split(kwargs)
    o, fs, h = ops.reference_forward_numpy(
        family, _np(q), _np(k), _np(v), output_final_state=output_final_state,
        return_intermediate_states=return_intermediate_states, **tensors, **options)
    return _t(o), _t(fs), _t(h)


def backward(family, q, k, v, do, *, dht=None, **kwargs) -> Dict[str, torch.Tensor]:
    """Reference gradients: dict with ``dq, dk, dv`` and ``dg, dg_gamma, dbeta, dA_log,
    ddt_bias, dh0`` for the optional inputs given."""
    tensors, options = _split(kwargs)
    grads = ops.reference_backward_numpy(family, _np(q), _np(k), _np(v), _np(do), dht=_np(dht),
                                         **tensors, **options)
    return {n: _t(x) for n, x in grads.items()}
