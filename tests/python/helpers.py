"""Helpers of the PyTorch tests: input generation and error measures (SPEC.md)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# SPEC.md tolerances on ||x - ref|| / ||ref||.
TOL = {torch.float64: 1e-5, torch.float32: 2e-3, torch.bfloat16: 1e-2, torch.float16: 1e-2}

VECTOR_GATE = {"kda": True, "gla": True, "gdn": False, "simple_gla": False}
DELTA = {"kda": True, "gdn": True, "gla": False, "simple_gla": False}


def rel_err(x, ref) -> float:
    x = torch.as_tensor(x).detach().double().cpu()
    ref = torch.as_tensor(ref).detach().double().cpu()
    assert x.shape == ref.shape, f"shape {tuple(x.shape)} != reference {tuple(ref.shape)}"
    if not torch.isfinite(x).all():
        return math.inf
    den = ref.norm().item()
    num = (x - ref).norm().item()
    return num / den if den > 0 else num


def assert_close(name, x, ref, dtype):
    err = rel_err(x, ref)
    assert err <= TOL[dtype], f"{name}: relative error {err:.3e} > {TOL[dtype]:.0e}"


def make_inputs(family, *, B=2, T=70, H=2, G=1, K=64, V=64, dtype=torch.float32, seed=0,
                cu_seqlens=None, initial_state=True, use_gate_in_kernel=False,
                use_beta_sigmoid_in_kernel=False, lower_bound=None, safe_gate=False,
                use_qk_l2norm_in_kernel=False, g_gamma=False, g=True, state_v_first=False,
                dt_bias=True, A_log=True):
    """Random inputs (never zeros) with realistic gates; returns (tensors, options) dicts."""
    gen = torch.Generator().manual_seed(seed)

    def rn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    HV = H * G
    if cu_seqlens is not None:
        B = 1
        T = int(cu_seqlens[-1])
    N = B if cu_seqlens is None else len(cu_seqlens) - 1
    t = {}
    t["q"] = rn(B, T, H, K)
    k = rn(B, T, H, K)
    # Delta rule: unit-norm keys keep the recurrence contractive (as in practice).
    t["k"] = k if (use_qk_l2norm_in_kernel or not DELTA[family]) else F.normalize(k, dim=-1)
    t["v"] = rn(B, T, HV, V)
    opts = {}
    gw = (K,) if VECTOR_GATE[family] else ()
    if g:
        if use_gate_in_kernel:
            t["g"] = rn(B, T, HV, *gw)
            if A_log:
                t["A_log"] = torch.log(torch.rand(HV, generator=gen, dtype=torch.float64) * 4 + 0.5)
            if dt_bias:
                t["dt_bias"] = rn(HV * K if family == "kda" else HV) * 0.5
            opts["use_gate_in_kernel"] = True
        elif safe_gate:
            # clamped case: g in [lower_bound, 0)
            t["g"] = (F.logsigmoid(rn(B, T, HV, *gw)) * 2).clamp(min=lower_bound, max=-1e-4)
        else:
            t["g"] = F.logsigmoid(rn(B, T, HV, *gw)) / 16
    if g_gamma:
        t["g_gamma"] = -torch.rand(HV, generator=gen, dtype=torch.float64) / 8 - 0.01
    if DELTA[family]:
        if use_beta_sigmoid_in_kernel:
            t["beta"] = rn(B, T, HV)
            opts["use_beta_sigmoid_in_kernel"] = True
        else:
            t["beta"] = torch.rand(B, T, HV, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    if initial_state:
        shape = (N, HV, V, K) if state_v_first else (N, HV, K, V)
        t["initial_state"] = rn(*shape) * 0.1
    if cu_seqlens is not None:
        t["cu_seqlens"] = torch.tensor(cu_seqlens, dtype=torch.int64)
    for n in list(t):
        if n == "cu_seqlens":
            continue
        if n in ("q", "k", "v"):
            t[n] = t[n].to(dtype)
        elif n == "initial_state":
            t[n] = t[n].to(torch.float64 if dtype == torch.float64 else torch.float32)
        else:  # gates, beta, gate parameters
            t[n] = t[n].to(torch.float64 if dtype == torch.float64 else torch.float32)
    if use_qk_l2norm_in_kernel:
        opts["use_qk_l2norm_in_kernel"] = True
    if lower_bound is not None:
        opts["lower_bound"] = lower_bound
    if safe_gate:
        opts["safe_gate"] = True
    if state_v_first:
        opts["state_v_first"] = True
    return t, opts
