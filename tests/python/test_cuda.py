"""CUDA tensors: results against the CPU float64 reference, and against FLA when ``fla`` is
importable. Skipped without a GPU or without the CUDA backend. Operations the CUDA backend
does not have yet must raise NotImplementedError (then the comparison is skipped)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402
from linattn import reference  # noqa: E402

from helpers import assert_close, make_inputs, rel_err  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(not linattn.cuda_available(), reason="linattn built without the CUDA backend"),
]

FNS = {
    "kda": linattn.chunk_kda,
    "gdn": linattn.chunk_gated_delta_rule,
    "gla": linattn.chunk_gla,
    "simple_gla": linattn.chunk_simple_gla,
}
GRAD_OF = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "g_gamma": "dg_gamma", "beta": "dbeta",
           "A_log": "dA_log", "dt_bias": "ddt_bias", "initial_state": "dh0"}


def _call(family, t, opts, **extra):
    kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    kw.update(opts)
    kw.update(extra)
    return FNS[family](t["q"], t["k"], t["v"], **kw)


def _cuda(t):
    return {n: x.cuda() for n, x in t.items()}


def _fwd_or_skip(family, t, opts, **extra):
    try:
        return _call(family, t, opts, **extra)
    except NotImplementedError as e:
        assert str(e), "NotImplementedError without a message"
        pytest.skip(f"CUDA forward of {family} not available yet: {e}")


FWD_CASES = [
    ("kda", {}, torch.bfloat16),
    ("kda", {}, torch.float32),
    ("kda", {"use_gate_in_kernel": True, "use_qk_l2norm_in_kernel": True,
             "use_beta_sigmoid_in_kernel": True}, torch.bfloat16),
    ("kda", {"use_gate_in_kernel": True, "lower_bound": -5.0, "safe_gate": True}, torch.bfloat16),
    ("kda", {"safe_gate": True, "lower_bound": -5.0, "K": 128, "V": 128}, torch.bfloat16),
    ("kda", {"G": 2, "state_v_first": True}, torch.bfloat16),
    ("kda", {"cu_seqlens": [0, 100, 100, 357, 400]}, torch.bfloat16),
    ("gdn", {}, torch.bfloat16),
    ("gdn", {"use_gate_in_kernel": True, "K": 128, "V": 128}, torch.bfloat16),
    ("gdn", {"cu_seqlens": [0, 63, 64, 300]}, torch.float32),
    ("gla", {}, torch.bfloat16),
    ("simple_gla", {"g_gamma": True}, torch.bfloat16),
]


@pytest.mark.parametrize("family,kw,dtype", FWD_CASES)
def test_forward_vs_reference(family, kw, dtype):
    t, opts = make_inputs(family, B=2, T=300, H=2, dtype=dtype, **kw)
    o, ht = _fwd_or_skip(family, _cuda(t), opts, output_final_state=True)
    assert o.is_cuda and o.dtype == dtype and ht.dtype == torch.float32
    ref_kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    ro, rht, _ = reference.forward(family, t["q"], t["k"], t["v"], output_final_state=True,
                                   **ref_kw, **opts)
    assert_close("o", o, ro, dtype)
    assert_close("final_state", ht, rht, dtype)


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_backward_vs_reference(family):
    t, opts = make_inputs(family, B=1, T=200, H=2, dtype=torch.bfloat16,
                          g_gamma=family == "simple_gla")
    tc = {n: x.cuda().requires_grad_() for n, x in t.items()}
    o, ht = _fwd_or_skip(family, tc, opts, output_final_state=True)
    do = torch.randn_like(o)
    try:
        torch.autograd.backward([o, ht], [do, torch.ones_like(ht)])
    except NotImplementedError as e:
        pytest.skip(f"CUDA backward of {family} not available yet: {e}")
    ref_kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    rg = reference.backward(family, t["q"], t["k"], t["v"], do.cpu(), dht=torch.ones_like(ht).cpu(),
                            **ref_kw, **opts)
    for n, x in tc.items():
        assert_close("d" + n, x.grad, rg[GRAD_OF[n]], torch.bfloat16)


@pytest.mark.parametrize("family", ["kda", "gdn"])
@pytest.mark.parametrize("precision", ["split", "float32"])
@pytest.mark.parametrize("disable_recompute", [False, True])
def test_backward_precision(family, precision, disable_recompute):
    """backward_precision picks the CUDA backward's form (gradients within SPEC on both; with
    disable_recompute the forward keeps its intermediates in that form)."""
    t, opts = make_inputs(family, B=1, T=200, H=2, dtype=torch.bfloat16)
    tc = {n: x.cuda().requires_grad_() for n, x in t.items()}
    o, ht = _call(family, tc, opts, output_final_state=True, backward_precision=precision,
                  disable_recompute=disable_recompute)
    do = torch.randn_like(o)
    torch.autograd.backward([o, ht], [do, torch.ones_like(ht)])
    ref_kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    rg = reference.backward(family, t["q"], t["k"], t["v"], do.cpu(), dht=torch.ones_like(ht).cpu(),
                            **ref_kw, **opts)
    for n, x in tc.items():
        assert_close("d" + n, x.grad, rg[GRAD_OF[n]], torch.bfloat16)


def test_runs_on_the_current_stream():
    t, opts = make_inputs("kda", B=2, T=256, H=2, dtype=torch.bfloat16)
    tc = _cuda(t)
    o_ref, _ = _fwd_or_skip("kda", tc, opts)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        big = torch.randn(4096, 4096, device="cuda")
        _ = big @ big  # keep the side stream busy so a wrong-stream launch would race
        o, _ = linattn.chunk_kda(tc["q"], tc["k"], tc["v"], tc["g"], tc["beta"],
                                 initial_state=tc["initial_state"])
    side.synchronize()
    torch.testing.assert_close(o, o_ref)


def test_varlen_without_host_copy_and_with_it():
    t, opts = make_inputs("gdn", cu_seqlens=[0, 70, 200], dtype=torch.bfloat16)
    tc = _cuda(t)
    o1, _ = _fwd_or_skip("gdn", tc, opts)
    o2, _ = _call("gdn", tc, opts, cu_seqlens_cpu=t["cu_seqlens"])
    torch.testing.assert_close(o1, o2)


def test_device_mismatch_on_cuda():
    t, opts = make_inputs("kda", B=1, T=16, dtype=torch.bfloat16)
    tc = _cuda(t)
    tc["beta"] = t["beta"]  # left on the CPU
    with pytest.raises(ValueError, match="beta is on cpu"):
        _call("kda", tc, opts)
    tc = _cuda(t)
    with pytest.raises(ValueError, match="cu_seqlens_cpu must be a CPU tensor"):
        _call("kda", dict(tc, cu_seqlens=torch.tensor([0, 16], device="cuda")), opts,
              cu_seqlens_cpu=torch.tensor([0, 16], device="cuda"))


# ----------------------------------------------------------------------------- vs FLA
FLA_CASES = [
    ("kda", {}),
    ("kda", {"use_gate_in_kernel": True, "use_qk_l2norm_in_kernel": True}),
    ("kda", {"use_gate_in_kernel": True, "lower_bound": -5.0, "safe_gate": True}),
    ("gdn", {}),
    ("gdn", {"cu_seqlens": [0, 100, 333]}),
]


@pytest.mark.parametrize("family,kw", FLA_CASES)
def test_forward_vs_fla(family, kw):
    pytest.importorskip("fla")
    if family == "kda":
        from fla.ops.kda import chunk_kda as fla_fn
    else:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_fn
    t, opts = make_inputs(family, B=2, T=333, H=2, K=128, V=128, dtype=torch.bfloat16, **kw)
    tc = _cuda(t)
    o, ht = _fwd_or_skip(family, tc, opts, output_final_state=True)
    kwf = {n: x for n, x in tc.items() if n not in ("q", "k", "v")}
    fo, fht = fla_fn(tc["q"], tc["k"], tc["v"], **kwf, **opts, output_final_state=True)
    ref_kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    ro, rht, _ = reference.forward(family, t["q"], t["k"], t["v"], output_final_state=True,
                                   **ref_kw, **opts)
    # both meet the bf16 tolerance against the float64 reference, and agree with each other
    assert_close("o", o, ro, torch.bfloat16)
    assert rel_err(o, fo) <= 2e-2, f"linattn vs FLA: {rel_err(o, fo):.3e}"
    assert rel_err(ht, fht) <= 2e-2
