"""Property-based tests (Hypothesis) of the Python API on the CPU backend (issue 19).

For any drawn call — valid or broken in one way — the extension either
  * raises a documented exception (ValueError, or NotImplementedError for valid requests this
    build cannot run) and leaves every caller-provided output untouched (bytewise), or
  * succeeds with outputs and gradients within SPEC.md's tolerance of the float64 reference
    (linattn._C.reference_*), NaN/Inf never passing.
The public FLA-style functions raise only documented exceptions (ValueError, TypeError,
NotImplementedError), never IndexError / ZeroDivisionError / RuntimeError, on broken shapes.

Gates include the hard cases of SPEC.md: -inf (a full forget), huge finite negative values, and
an in-kernel gate whose exp(A_log) overflows. Sizes stay small: the suite runs in seconds.
"""

from __future__ import annotations

import math

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import linattn  # noqa: E402
from linattn import _C  # noqa: E402
from linattn.ops import FAMILIES, make_options  # noqa: E402

from helpers import DELTA, TOL, VECTOR_GATE  # noqa: E402

SETTINGS = dict(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SENTINEL = 1234.5  # outputs are filled with it; an error must leave it in place


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    x = x.double()
    ref = ref.double()
    if not torch.isfinite(x).all():
        return math.inf
    den = ref.norm().item()
    num = (x - ref).norm().item()
    if den == 0:
        # An exactly zero reference (e.g. dg of a gate that decays nothing: no state yet): the
        # relative error is undefined; the chunked form's cancelling float terms leave rounding
        # noise, which must stay at rounding level.
        return 0.0 if num <= 1e-5 * math.sqrt(x.numel()) else math.inf
    return num / den


@st.composite
def calls(draw, allow_broken=True):
    """A call of _C.forward (+ backward): tensors, options, and what (if anything) is broken."""
    fam = draw(st.sampled_from(sorted(FAMILIES)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    varlen = draw(st.booleans())
    B = 1 if varlen else draw(st.integers(1, 2))
    T = draw(st.integers(1, 80))
    H = draw(st.integers(1, 2))
    G = draw(st.integers(1, 2))
    K = draw(st.sampled_from([16, 24, 32]))  # SPEC: 16..256 (K = 1 with l2norm is degenerate)
    V = draw(st.sampled_from([1, 2, 5, 8, 16]))
    HV = H * G
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    side = torch.float64 if dtype == torch.float64 else torch.float32

    def rn(*shape, dt=dtype):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dt)

    delta, vg = DELTA[fam], VECTOR_GATE[fam]
    opt = dict(use_qk_l2norm_in_kernel=delta or draw(st.booleans()),
               state_v_first=draw(st.booleans()))
    t = {"q": rn(B, T, H, K), "k": rn(B, T, H, K), "v": rn(B, T, HV, V)}
    gate_in_kernel = delta and draw(st.booleans())
    gshape = (B, T, HV, K) if vg else (B, T, HV)
    if gate_in_kernel:
        opt["use_gate_in_kernel"] = True
        t["g"] = rn(*gshape, dt=side)
        a_log = rn(HV, dt=side) / 2
        if draw(st.booleans()):
            a_log[0] = draw(st.sampled_from([100.0, 1e4, -1e4]))  # exp(A_log) beyond float32
        t["A_log"] = a_log
        if draw(st.booleans()):
            t["dt_bias"] = rn(HV * K if fam == "kda" else HV, dt=side) / 2
        if fam == "kda" and draw(st.booleans()):
            opt["lower_bound"] = -float(draw(st.integers(1, 5)))
    elif fam == "simple_gla" and draw(st.booleans()):
        t["g_gamma"] = -rn(HV, dt=side).abs() / 8
        if draw(st.booleans()):
            t["g_gamma"][0] = draw(st.sampled_from([-math.inf, -1e30]))
        if draw(st.booleans()):
            t["g"] = torch.nn.functional.logsigmoid(rn(*gshape, dt=side)) / 16
    else:
        t["g"] = torch.nn.functional.logsigmoid(rn(*gshape, dt=side)) / 16
    if "g" in t and not gate_in_kernel:
        n = draw(st.integers(0, 4))  # full forgets and huge finite gates anywhere
        flat = t["g"].view(-1)
        for _ in range(n):
            i = draw(st.integers(0, flat.numel() - 1))
            flat[i] = draw(st.sampled_from([-math.inf, -1e30, -1e5, -200.0]))
    if delta:
        if draw(st.booleans()):
            opt["use_beta_sigmoid_in_kernel"] = True
            opt["allow_neg_eigval"] = draw(st.booleans())
            t["beta"] = rn(B, T, HV)
        else:
            t["beta"] = torch.rand(B, T, HV, generator=gen, dtype=torch.float64).to(dtype)
    N = B
    if varlen:
        cuts = sorted(draw(st.lists(st.integers(0, T), max_size=3)))
        cu = [0] + cuts + [T]
        N = len(cu) - 1
        t["cu_seqlens"] = torch.tensor(cu, dtype=draw(st.sampled_from([torch.int32, torch.int64])))
    sshape = (N, HV, V, K) if opt["state_v_first"] else (N, HV, K, V)
    if draw(st.booleans()):
        t["initial_state"] = rn(*sshape, dt=side) / 2
    want_fs = draw(st.booleans())
    if draw(st.booleans()):
        opt["scale"] = draw(st.sampled_from([0.0, 0.1, 1.0]))

    broken = None
    if allow_broken and draw(st.integers(0, 2)) == 0:
        broken = draw(st.sampled_from([
            "drop_dim", "extra_dim", "wrong_dtype", "int_dtype", "k_zero", "v_zero", "scale_huge",
            "scale_nan", "lower_bound", "cu_decreasing", "cu_end", "state_shape", "o_shape",
            "o_dtype", "h0_bf16", "noncontig_o", "family"]))
        name = draw(st.sampled_from(sorted(n for n in t if n != "cu_seqlens")))
        x = t[name]
        if broken == "drop_dim":
            t[name] = x[..., 0].contiguous() if x.dim() > 1 else x[:0]
        elif broken == "extra_dim":
            t[name] = x.unsqueeze(-1).contiguous()
        elif broken == "wrong_dtype":
            t[name] = x.to(torch.float16 if x.dtype != torch.float16 else torch.float32)
            if name in ("q", "k", "v", "beta", "g", "g_gamma", "A_log", "dt_bias") and dtype != torch.float64:
                broken = None if name in ("g", "g_gamma", "A_log", "dt_bias") else broken  # gates accept any float
        elif broken == "int_dtype":
            t[name] = x.to(torch.int32)
        elif broken == "k_zero":
            t["q"], t["k"] = t["q"][..., :0], t["k"][..., :0]
        elif broken == "v_zero":
            t["v"] = t["v"][..., :0]
        elif broken == "scale_huge":
            opt["scale"] = 1e39
        elif broken == "scale_nan":
            opt["scale"] = math.nan
        elif broken == "lower_bound":
            opt["lower_bound"] = draw(st.sampled_from([0.5, -6.0, math.nan]))
        elif broken == "cu_decreasing" and varlen:
            t["cu_seqlens"] = t["cu_seqlens"].flip(0)
            broken = broken if T > 0 else None
        elif broken == "cu_end" and varlen:
            t["cu_seqlens"] = t["cu_seqlens"].clone()
            t["cu_seqlens"][-1] += 1
        elif broken == "state_shape" and "initial_state" in t:
            t["initial_state"] = t["initial_state"][:, :, :, :-1].contiguous() if V > 1 else t["initial_state"][:0]
        elif broken not in ("o_shape", "o_dtype", "noncontig_o", "family", "h0_bf16"):
            broken = None
        if broken == "h0_bf16" and "initial_state" in t:
            t["initial_state"] = t["initial_state"].bfloat16()
        elif broken == "h0_bf16":
            broken = None
    return dict(fam=fam, dtype=dtype, t=t, opt=opt, want_fs=want_fs, sshape=sshape,
                broken=broken, B=B, T=T, HV=HV, V=V, backward=draw(st.booleans()))


def _outputs(c):
    t = c["t"]
    v = t["v"]
    o = torch.full(v.shape if v.dim() == 4 else (1,), SENTINEL, dtype=v.dtype if v.is_floating_point() else torch.float32)
    side = torch.float64 if c["dtype"] == torch.float64 else torch.float32
    fs = torch.full(c["sshape"], SENTINEL, dtype=side) if c["want_fs"] else None
    if c["broken"] == "o_shape":
        o = torch.full((o.numel() + 1,), SENTINEL, dtype=o.dtype)
    elif c["broken"] == "o_dtype":
        o = o.to(torch.float64 if o.dtype != torch.float64 else torch.float32)
    elif c["broken"] == "noncontig_o" and o.dim() == 4 and o.shape[1] > 1:
        o = torch.full((o.shape[0], o.shape[1] * 2, o.shape[2], o.shape[3]), SENTINEL, dtype=o.dtype)[:, ::2]
    return o, fs


def _untouched(x):
    return x is None or bool((x == SENTINEL).all())


def _family(c):
    return 7 if c["broken"] == "family" else FAMILIES[c["fam"]]


@settings(**SETTINGS)
@given(calls())
def test_forward_errors_or_matches_reference(c):
    t, opt = c["t"], c["opt"]
    o, fs = _outputs(c)
    options = make_options(**opt)
    fam = _family(c)
    try:
        nws = _C.forward_workspace_size(fam, **t, options=options)
        ws = torch.empty(nws, dtype=torch.uint8)
        _C.forward(fam, **t, o=o, final_state=fs, options=options, workspace=ws)
    except (ValueError, NotImplementedError) as e:
        event(f"refused: {type(e).__name__}")
        assert str(e), "an error without a message"
        assert _untouched(o) and _untouched(fs), f"outputs written although the call failed: {e}"
        return
    assert c["broken"] is None, f"a broken call ({c['broken']}) was accepted"
    event("accepted, compared with the reference")
    # the float64 reference on the same values
    t64 = {n: (x.double() if x.is_floating_point() else x) for n, x in t.items()}
    ro = torch.empty(t64["v"].shape, dtype=torch.float64)
    rfs = torch.empty(c["sshape"], dtype=torch.float64) if c["want_fs"] else None
    _C.reference_forward(fam, **t64, o=ro, final_state=rfs, options=options)
    assert torch.isfinite(ro).all(), "the reference is not finite on these inputs"
    tol = TOL[c["dtype"]]
    assert _rel(o, ro) <= tol, f"o: relative error {_rel(o, ro):.3e} > {tol}"
    if fs is not None:
        assert _rel(fs, rfs) <= tol, f"final_state: relative error {_rel(fs, rfs):.3e} > {tol}"


@settings(**SETTINGS)
@given(calls(allow_broken=False))
def test_backward_matches_reference(c):
    t, opt = c["t"], c["opt"]
    fam = FAMILIES[c["fam"]]
    options = make_options(**opt)
    gen = torch.Generator().manual_seed(7)
    d_o = torch.randn(t["v"].shape, generator=gen, dtype=torch.float64).to(t["v"].dtype)
    side = torch.float64 if c["dtype"] == torch.float64 else torch.float32
    dht = torch.randn(c["sshape"], generator=gen, dtype=torch.float64).to(side) / 2 if c["want_fs"] else None
    grads = {"dq": torch.full_like(t["q"], SENTINEL), "dk": torch.full_like(t["k"], SENTINEL),
             "dv": torch.full_like(t["v"], SENTINEL)}
    for src, dst in (("g", "dg"), ("g_gamma", "dg_gamma"), ("beta", "dbeta"), ("A_log", "dA_log"),
                     ("dt_bias", "ddt_bias"), ("initial_state", "dh0")):
        if src in t:
            grads[dst] = torch.full_like(t[src], SENTINEL)
    nws = _C.backward_workspace_size(fam, **t, options=options)
    _C.backward(fam, **t, d_o=d_o, dht=dht, **grads, options=options,
                workspace=torch.empty(nws, dtype=torch.uint8))
    t64 = {n: (x.double() if x.is_floating_point() else x) for n, x in t.items()}
    ref = {n: torch.empty(x.shape, dtype=torch.float64) for n, x in grads.items()}
    _C.reference_backward(fam, **t64, d_o=d_o.double(), dht=None if dht is None else dht.double(),
                          **ref, options=options)
    tol = TOL[c["dtype"]]
    for n, x in grads.items():
        if n in ("dA_log", "ddt_bias") and (t["A_log"].abs() > 50).any():
            # exp(A_log) beyond float32: the exact per-head sums can leave float32's range
            assert not torch.isnan(x).any(), f"{n}: NaN"
            continue
        r = ref[n]
        assert torch.isfinite(r).all(), f"the reference's {n} is not finite"
        e = _rel(x, r)
        # per-head sums (dA_log, dg_gamma) over bf16 inputs carry more rounding: SPEC's bf16 bar
        assert e <= tol, f"{n}: relative error {e:.3e} > {tol} ({c['fam']}, {c['dtype']})"


_PUBLIC = {"kda": linattn.chunk_kda, "gdn": linattn.chunk_gated_delta_rule,
           "gla": linattn.chunk_gla, "simple_gla": linattn.chunk_simple_gla}


@settings(**SETTINGS)
@given(calls())
def test_public_functions_raise_only_documented_exceptions(c):
    t, opt = dict(c["t"]), dict(c["opt"])
    fn = _PUBLIC[c["fam"]]
    if c["broken"] == "family":
        return  # no family argument in the public API
    kw = dict(scale=opt.get("scale"), initial_state=t.get("initial_state"),
              output_final_state=c["want_fs"], cu_seqlens=t.get("cu_seqlens"),
              use_qk_l2norm_in_kernel=opt.get("use_qk_l2norm_in_kernel", False))
    if c["fam"] in ("kda", "gdn"):
        args = (t["q"], t["k"], t["v"], t.get("g"), t.get("beta"))
        kw.update(use_gate_in_kernel=opt.get("use_gate_in_kernel", False),
                  use_beta_sigmoid_in_kernel=opt.get("use_beta_sigmoid_in_kernel", False),
                  allow_neg_eigval=opt.get("allow_neg_eigval", False),
                  A_log=t.get("A_log"), dt_bias=t.get("dt_bias"))
        if c["fam"] == "kda":
            kw.update(lower_bound=opt.get("lower_bound"))
    elif c["fam"] == "gla":
        args = (t["q"], t["k"], t["v"], t.get("g"))
    else:
        args = (t["q"], t["k"], t["v"], t.get("g"))
        kw.update(g_gamma=t.get("g_gamma"))
    try:
        o, _ = fn(*args, **kw)
    except (ValueError, TypeError, NotImplementedError) as e:
        assert str(e)
        return
    assert torch.isfinite(o.double()).all() or c["broken"] is not None
