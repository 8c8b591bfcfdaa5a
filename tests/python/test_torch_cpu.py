"""PyTorch path on CPU: forward and backward against the C++ float64 reference (SPEC.md
tolerances), for every family and option."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402
from linattn import reference  # noqa: E402

from helpers import DELTA, assert_close, make_inputs  # noqa: E402

FNS = {
    "kda": linattn.chunk_kda,
    "gdn": linattn.chunk_gated_delta_rule,
    "gla": linattn.chunk_gla,
    "simple_gla": linattn.chunk_simple_gla,
}

GRAD_OF = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "g_gamma": "dg_gamma", "beta": "dbeta",
           "A_log": "dA_log", "dt_bias": "ddt_bias", "initial_state": "dh0"}


def call(family, t, opts, fn=None, **extra):
    fn = fn or FNS[family]
    kw = dict(opts)
    kw.update(extra)
    args = [t["q"], t["k"], t["v"]]
    # by keyword: FLA's entry points differ in where beta sits (fused_recurrent_gdn: q, k, v,
    # g, gk, gv, beta)
    kw["g"] = t.get("g")
    if family == "simple_gla":
        kw["g_gamma"] = t.get("g_gamma")
    if DELTA[family]:
        kw["beta"] = t["beta"]
    for n in ("A_log", "dt_bias", "initial_state", "cu_seqlens"):
        if n in t:
            kw[n] = t[n]
    return fn(*args, **kw)


def check_family(family, t, opts, dtype, *, disable_recompute=False, backward=True, fn=None):
    """Runs forward (+ backward with a random do and dht) and compares with the reference."""
    leaves = {n: x.clone().requires_grad_() for n, x in t.items()
              if n != "cu_seqlens" and x.is_floating_point()}
    inputs = dict(t)
    inputs.update(leaves)
    extra = {"output_final_state": True}
    if disable_recompute:
        extra["disable_recompute"] = True
    o, ht = call(family, inputs, opts, fn=fn, **extra)
    assert o.dtype == t["v"].dtype and o.shape == t["v"].shape
    assert ht.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)

    ref_kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    ref_kw.update(opts)
    ro, rht, _ = reference.forward(family, t["q"], t["k"], t["v"], output_final_state=True, **ref_kw)
    assert_close("o", o, ro, dtype)
    assert_close("final_state", ht, rht, dtype)
    if not backward:
        return
    gen = torch.Generator().manual_seed(1)
    do = torch.randn(o.shape, generator=gen).to(o.dtype)
    dht = torch.randn(ht.shape, generator=gen).to(ht.dtype)
    torch.autograd.backward([o, ht], [do, dht])
    rg = reference.backward(family, t["q"], t["k"], t["v"], do, dht=dht, **ref_kw)
    for n, x in leaves.items():
        assert x.grad is not None, f"no gradient for {n}"
        assert x.grad.dtype == x.dtype
        assert_close("d" + n, x.grad, rg[GRAD_OF[n]], dtype)


CASES = [
    # (family, make_inputs kwargs)
    ("kda", {}),
    ("kda", {"use_qk_l2norm_in_kernel": True, "use_beta_sigmoid_in_kernel": True}),
    ("kda", {"use_gate_in_kernel": True}),
    ("kda", {"use_gate_in_kernel": True, "lower_bound": -5.0, "safe_gate": True}),
    ("kda", {"use_gate_in_kernel": True, "lower_bound": -3.0, "A_log": False}),
    ("kda", {"safe_gate": True, "lower_bound": -5.0}),
    ("kda", {"G": 2, "state_v_first": True}),
    ("gdn", {}),
    ("gdn", {"use_gate_in_kernel": True, "use_qk_l2norm_in_kernel": True}),
    ("gdn", {"use_gate_in_kernel": True, "dt_bias": False}),
    ("gdn", {"G": 2, "use_beta_sigmoid_in_kernel": True}),
    ("gla", {}),
    ("gla", {"G": 2, "state_v_first": True}),
    ("simple_gla", {}),
    ("simple_gla", {"g_gamma": True}),
    ("simple_gla", {"g_gamma": True, "g": False, "initial_state": False}),
]


@pytest.mark.parametrize("family,kw", CASES, ids=[f"{f}-{'-'.join(k) or 'plain'}" for f, k in CASES])
def test_forward_backward_fp32(family, kw):
    t, opts = make_inputs(family, dtype=torch.float32, **kw)
    check_family(family, t, opts, torch.float32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_half_precision(family, dtype):
    t, opts = make_inputs(family, dtype=dtype, T=80, g_gamma=family == "simple_gla")
    check_family(family, t, opts, dtype)


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_float64_path(family):
    t, opts = make_inputs(family, dtype=torch.float64, T=70, K=16, V=16)
    check_family(family, t, opts, torch.float64)


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_varlen(family):
    t, opts = make_inputs(family, cu_seqlens=[0, 5, 70, 70, 141], K=32, V=32)
    check_family(family, t, opts, torch.float32)
    # int32 cu_seqlens and an explicit host copy are accepted too
    t32 = dict(t, cu_seqlens=t["cu_seqlens"].int())
    o1, _ = call(family, t32, opts, cu_seqlens_cpu=t["cu_seqlens"].clone())
    o2, _ = call(family, t, opts)
    torch.testing.assert_close(o1, o2)


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_disable_recompute(family):
    t, opts = make_inputs(family, T=100, K=32, V=32, g_gamma=family == "simple_gla")
    check_family(family, t, opts, torch.float32, disable_recompute=True)


def test_disable_recompute_matches_recompute():
    t, opts = make_inputs("kda", T=100, K=32, V=32, use_gate_in_kernel=True)
    grads = []
    for dr in (False, True):
        leaves = {n: x.clone().requires_grad_() for n, x in t.items()}
        o, ht = call("kda", leaves, opts, output_final_state=True, disable_recompute=dr)
        (o.square().sum() + ht.sum()).backward()
        grads.append({n: x.grad for n, x in leaves.items()})
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_return_intermediate_states(family):
    t, opts = make_inputs(family, T=150, K=16, V=16, g_gamma=family == "simple_gla")
    with torch.inference_mode():
        o, ht, h = call(family, t, opts, output_final_state=True, return_intermediate_states=True)
    assert h.shape == (2, 3, t["v"].shape[2], 16, 16)
    ref_kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    ro, rht, rh = reference.forward(family, t["q"], t["k"], t["v"], output_final_state=True,
                                    return_intermediate_states=True, **ref_kw, **opts)
    assert_close("o", o, ro, torch.float32)
    assert_close("h", h, rh, torch.float32)
    # chunk 0 starts from the initial state
    torch.testing.assert_close(h[:, 0], t["initial_state"])


def test_return_intermediate_states_varlen():
    t, opts = make_inputs("gdn", cu_seqlens=[0, 64, 65, 200], K=16, V=16)
    o, ht, h = call("gdn", t, opts, output_final_state=True, return_intermediate_states=True)
    assert h.shape == (1, 1 + 1 + 3, 2, 16, 16)
    _, _, rh = reference.forward("gdn", t["q"], t["k"], t["v"], return_intermediate_states=True,
                                 **{n: x for n, x in t.items() if n not in ("q", "k", "v")})
    assert_close("h", h, rh, torch.float32)


def test_intermediate_states_have_no_gradient():
    # h has no backward: it must not require grad (a loss through it would silently get zero
    # gradients for k, v, g, beta and the initial state).
    t, opts = make_inputs("kda", T=70, K=8, V=8)
    t = {n: (x.clone().requires_grad_() if x.is_floating_point() else x) for n, x in t.items()}
    o, ht, h = call("kda", t, opts, output_final_state=True, return_intermediate_states=True)
    assert o.requires_grad and ht.requires_grad
    assert not h.requires_grad
    with pytest.raises(RuntimeError):
        h.sum().backward()


def test_final_state_none_unless_requested():
    t, opts = make_inputs("kda", T=10, K=8, V=8)
    o, ht = call("kda", t, opts)
    assert ht is None
    o, ht = call("kda", t, opts, output_final_state=True)
    assert ht.shape == t["initial_state"].shape


def test_non_contiguous_inputs():
    t, opts = make_inputs("kda", T=40, K=32, V=32)
    # head-major storage viewed token-major: non-contiguous views, as FLA users pass
    nc = {n: (x.transpose(1, 2).contiguous().transpose(1, 2) if x.dim() == 4 else x)
          for n, x in t.items()}
    assert not nc["q"].is_contiguous()
    o1, s1 = call("kda", nc, opts, output_final_state=True)
    o2, s2 = call("kda", t, opts, output_final_state=True)
    torch.testing.assert_close(o1, o2)
    torch.testing.assert_close(s1, s2)


def test_gradient_through_loss_with_broadcast_do():
    # o.sum() hands the backward an expanded (stride-0) gradient
    t, opts = make_inputs("gdn", T=30, K=16, V=16)
    q = t["q"].clone().requires_grad_()
    o, _ = linattn.chunk_gdn(q, t["k"], t["v"], t["g"], t["beta"], initial_state=t["initial_state"])
    o.sum().backward()
    rg = reference.backward("gdn", t["q"], t["k"], t["v"], torch.ones_like(o), g=t["g"],
                            beta=t["beta"], initial_state=t["initial_state"])
    assert_close("dq", q.grad, rg["dq"], torch.float32)


def test_only_some_inputs_require_grad():
    t, opts = make_inputs("gla", T=30, K=16, V=16, initial_state=False)
    v = t["v"].clone().requires_grad_()
    o, _ = linattn.chunk_gla(t["q"], t["k"], v, t["g"])
    o.square().sum().backward()
    assert v.grad is not None and torch.isfinite(v.grad).all()


# --------------------------------------------------------------- FLA's other entry points
def test_fused_recurrent_kda_matches_chunk():
    t, opts = make_inputs("kda", T=70, K=32, V=32, use_gate_in_kernel=True)
    check_family("kda", t, opts, torch.float32, fn=linattn.fused_recurrent_kda)


def test_fused_recurrent_gdn_variants():
    t, opts = make_inputs("gdn", T=70, K=32, V=32)
    check_family("gdn", t, opts, torch.float32, fn=linattn.fused_recurrent_gated_delta_rule)
    q, k, v, beta = t["q"], t["k"], t["v"], t["beta"]
    # gk: per-key decay (the KDA recurrence)
    tk, _ = make_inputs("kda", T=70, K=32, V=32)
    o, ht = linattn.fused_recurrent_gdn(tk["q"], tk["k"], tk["v"], gk=tk["g"], beta=tk["beta"],
                                        output_final_state=True)
    ro, rht, _ = reference.forward("kda", tk["q"], tk["k"], tk["v"], g=tk["g"], beta=tk["beta"],
                                   output_final_state=True)
    assert_close("o(gk)", o, ro, torch.float32)
    # no gate, default beta = 1
    o, _ = linattn.fused_recurrent_gdn(q, k, v)
    ro, _, _ = reference.forward("gdn", q, k, v, g=torch.zeros(v.shape[:3]),
                                 beta=torch.ones(v.shape[:3]))
    assert_close("o(no gate)", o, ro, torch.float32)


def test_fused_chunk_simple_gla():
    t, opts = make_inputs("simple_gla", T=70, K=32, V=32, g_gamma=True)
    check_family("simple_gla", t, opts, torch.float32, fn=linattn.fused_chunk_simple_gla)


def test_chunk_gdn_alias():
    assert linattn.chunk_gdn is linattn.chunk_gated_delta_rule
    assert linattn.fused_recurrent_gdn is linattn.fused_recurrent_gated_delta_rule


def test_transpose_state_layout_alias():
    t, opts = make_inputs("kda", T=20, K=8, V=16, state_v_first=True)
    opts.pop("state_v_first")
    with pytest.warns(DeprecationWarning):
        o1, s1 = call("kda", t, opts, output_final_state=True, transpose_state_layout=True)
    o2, s2 = call("kda", t, opts, output_final_state=True, state_v_first=True)
    assert s1.shape == (2, 2, 16, 8)
    torch.testing.assert_close(o1, o2)


@pytest.mark.parametrize("KV", [(128, 128), (256, 64), (64, 256)])
def test_head_sizes(KV):
    K, V = KV
    t, opts = make_inputs("kda", B=1, T=66, H=1, K=K, V=V)
    check_family("kda", t, opts, torch.float32)


@pytest.mark.parametrize("family,kw", [("gla", {}), ("simple_gla", {"g_gamma": True})])
def test_keep_chunk_local_keyword(family, kw):
    """chunk_gla's and chunk_simple_gla's keep_chunk_local (what a CUDA training call keeps for its
    backward) is None or a bool; on the CPU nothing is kept either way, so o and every gradient
    are bitwise equal."""
    t, opts = make_inputs(family, dtype=torch.float32, **kw)
    runs = []
    for keep in (None, False, True):
        leaves = {n: x.clone().requires_grad_() for n, x in t.items() if x.is_floating_point()}
        o, ht = call(family, leaves, opts, output_final_state=True, keep_chunk_local=keep)
        (o.sum() + ht.sum()).backward()
        runs.append([o.detach(), ht.detach()] + [x.grad for x in leaves.values()])
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)
    with pytest.raises(TypeError, match="keep_chunk_local"):
        call(family, t, opts, keep_chunk_local="yes")
