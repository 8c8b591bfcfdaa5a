"""Token-by-token evaluation of SPEC.md's recurrences in torch, vectorised over heads.

Used (a) as the float64 ground truth when the linattn package does not expose its own float64
reference, and (b) in a lower precision as the mock operators of --smoke. Written from SPEC.md's
table; differentiable through autograd (gradients of every float input, raw gate inputs
included).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gate_activation(family: str, g, A_log, dt_bias, lower_bound, HV: int):
    """use_gate_in_kernel: raw g -> log-space decay (SPEC.md, options)."""
    if dt_bias is not None:
        g = g + (dt_bias.view(HV, -1) if family == "kda" else dt_bias.view(HV))
    if lower_bound is not None:
        if A_log is not None:
            a = torch.exp(A_log).view(HV, *([1] if family == "kda" else []))
            return lower_bound * torch.sigmoid(a * g)
        return lower_bound * torch.sigmoid(g)
    a = torch.exp(A_log).view(HV, *([1] if family == "kda" else []))
    return -a * F.softplus(g)


def recurrence(family: str, q, k, v, g=None, beta=None, *, scale=None, use_qk_l2norm_in_kernel=False,
               use_gate_in_kernel=False, A_log=None, dt_bias=None, lower_bound=None,
               use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, cu_seqlens=None,
               g_gamma=None, compute_dtype=torch.float64, **_ignored):
    """o = the recurrence's output, shape of v, in compute_dtype.

    q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K] (kda, gla) or [B, T, HV] (gdn,
    simple_gla); g_gamma [HV] (simple_gla: added to g, or the gate alone); beta [B, T, HV]. cu_seqlens: a list/tensor of offsets (B == 1), or None.
    """
    cd = compute_dtype
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    G = HV // H
    scale = K ** -0.5 if scale is None else scale
    q, k, v = q.to(cd), k.to(cd), v.to(cd)
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if G > 1:
        q = q.repeat_interleave(G, dim=2)
        k = k.repeat_interleave(G, dim=2)
    if g_gamma is not None:  # simple GLA's constant log decay per head, added to g (or alone)
        gg = g_gamma.to(cd).view(1, 1, HV).expand(B, T, HV)
        g = gg if g is None else g.to(cd) + gg
    g = g.to(cd)
    if use_gate_in_kernel:
        g = gate_activation(family, g, None if A_log is None else A_log.to(cd),
                            None if dt_bias is None else dt_bias.to(cd), lower_bound, HV)
    delta = family in ("kda", "gdn")
    if delta:
        beta = beta.to(cd)
        if use_beta_sigmoid_in_kernel:
            beta = torch.sigmoid(beta) * (2.0 if allow_neg_eigval else 1.0)
    per_channel = g.dim() == 4

    if cu_seqlens is not None:
        offs = [int(x) for x in (cu_seqlens.tolist() if torch.is_tensor(cu_seqlens) else cu_seqlens)]
        segs = [(0, offs[i], offs[i + 1]) for i in range(len(offs) - 1)]
    else:
        segs = [(b, 0, T) for b in range(B)]

    outs = []
    for b, s, e in segs:
        S = torch.zeros(HV, K, V, dtype=cd, device=q.device)
        seq = []
        for t in range(s, e):
            qt, kt, vt, gt = q[b, t], k[b, t], v[b, t], g[b, t]
            decay = torch.exp(gt)
            S = S * (decay[:, :, None] if per_channel else decay[:, None, None])
            if delta:
                kS = torch.einsum("hk,hkv->hv", kt, S)
                S = S + beta[b, t][:, None, None] * kt[:, :, None] * (vt - kS)[:, None, :]
            else:
                S = S + kt[:, :, None] * vt[:, None, :]
            seq.append(scale * torch.einsum("hk,hkv->hv", qt, S))
        outs.append(torch.stack(seq, 0) if seq else v.new_zeros(0, HV, V))
    if cu_seqlens is not None:
        return torch.cat(outs, 0).unsqueeze(0)
    return torch.stack(outs, 0)


def make_fla_signature_op(family: str, compute_dtype):
    """An FLA-signature function that evaluates the recurrence in compute_dtype and returns
    (o in v's dtype, None). The mock operators of --smoke."""

    def op(q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
           cu_seqlens=None, cu_seqlens_cpu=None, **kw):
        kw.pop("safe_gate", None)
        kw.pop("disable_recompute", None)
        o = recurrence(family, q, k, v, g, beta, scale=scale,
                       cu_seqlens=cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens,
                       compute_dtype=compute_dtype, **kw)
        return o.to(v.dtype), None

    op.__name__ = f"mock_{family}"
    return op
