"""Arguments flash-linear-attention 0.6.0 accepts and linattn once refused (issue #18): gate
parameters of any shape with their element count, float16 / bfloat16 initial states, q/k/v of
different float dtypes, safe_gate without lower_bound, FLA's chunk sizes, and ``h`` in FLA's
dtype. Each test compares against the plain float32 call, so an accepted-but-wrong result fails."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402

from helpers import assert_close, make_inputs  # noqa: E402


def _kda_gate_inputs(HV_shape_fn, dt_shape_fn):
    t, _ = make_inputs("kda", B=2, T=70, H=2, K=16, V=16, use_gate_in_kernel=True)
    HV, K = t["v"].shape[2], t["q"].shape[3]
    A_log = t["A_log"].reshape(HV_shape_fn(HV))
    dt_bias = t["dt_bias"].reshape(dt_shape_fn(HV, K))
    return t, A_log, dt_bias


@pytest.mark.parametrize("a_shape,dt_shape", [
    (lambda hv: (1, 1, hv, 1), lambda hv, k: (hv, k)),   # FLA's test_kda uses A_log [1, 1, H, 1]
    (lambda hv: (hv, 1), lambda hv, k: (1, 1, hv, k)),
])
def test_kda_gate_parameters_of_any_shape(a_shape, dt_shape):
    t, A_log, dt_bias = _kda_gate_inputs(a_shape, dt_shape)
    base = dict(use_gate_in_kernel=True, initial_state=t["initial_state"], output_final_state=True)
    ref_o, ref_ht = linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], A_log=t["A_log"],
                                      dt_bias=t["dt_bias"], **base)
    A_log = A_log.clone().requires_grad_()
    dt_bias = dt_bias.clone().requires_grad_()
    o, ht = linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], A_log=A_log,
                              dt_bias=dt_bias, **base)
    torch.testing.assert_close(o, ref_o, rtol=0, atol=0)
    torch.testing.assert_close(ht, ref_ht, rtol=0, atol=0)
    (o.sum() + ht.sum()).backward()
    assert A_log.grad.shape == A_log.shape and dt_bias.grad.shape == dt_bias.shape
    # fused_recurrent (decode path under no_grad) takes the same shapes
    with torch.no_grad():
        o1, _ = linattn.fused_recurrent_kda(t["q"][:, :4], t["k"][:, :4], t["v"][:, :4], t["g"][:, :4],
                                            t["beta"][:, :4], A_log=A_log, dt_bias=dt_bias,
                                            use_gate_in_kernel=True)
        r1, _ = linattn.fused_recurrent_kda(t["q"][:, :4], t["k"][:, :4], t["v"][:, :4], t["g"][:, :4],
                                            t["beta"][:, :4], A_log=t["A_log"], dt_bias=t["dt_bias"],
                                            use_gate_in_kernel=True)
    torch.testing.assert_close(o1, r1, rtol=0, atol=0)


def test_gdn_gate_parameters_of_any_shape():
    t, _ = make_inputs("gdn", B=1, T=40, H=2, K=16, V=16, use_gate_in_kernel=True)
    HV = t["v"].shape[2]
    ref, _ = linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], use_gate_in_kernel=True,
                               A_log=t["A_log"], dt_bias=t["dt_bias"])
    o, _ = linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], use_gate_in_kernel=True,
                             A_log=t["A_log"].reshape(1, 1, HV, 1), dt_bias=t["dt_bias"].reshape(1, HV))
    torch.testing.assert_close(o, ref, rtol=0, atol=0)


def test_gate_parameter_with_wrong_element_count_is_refused():
    t, _ = make_inputs("kda", B=1, T=8, H=2, K=8, V=8, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="A_log must hold HV = 2 elements"):
        linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], use_gate_in_kernel=True,
                          A_log=torch.zeros(1, 1, 3, 1))
    with pytest.raises(ValueError, match="dt_bias must hold HV \\* K = 16 elements"):
        linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], use_gate_in_kernel=True,
                          A_log=t["A_log"], dt_bias=torch.zeros(2))


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
@pytest.mark.parametrize("state_dtype", [torch.float16, torch.bfloat16])
def test_16_bit_initial_state(family, state_dtype):
    t, opts = make_inputs(family, B=2, T=70, H=2, K=16, V=16)
    h0 = t["initial_state"].to(state_dtype).requires_grad_()
    fn = {"kda": linattn.chunk_kda, "gdn": linattn.chunk_gdn, "gla": linattn.chunk_gla,
          "simple_gla": linattn.chunk_simple_gla}[family]
    rest = {n: x for n, x in t.items() if n not in ("q", "k", "v", "initial_state")}
    o, ht = fn(t["q"], t["k"], t["v"], initial_state=h0, output_final_state=True, **rest, **opts)
    h32 = h0.detach().float().requires_grad_()
    ro, rht = fn(t["q"], t["k"], t["v"], initial_state=h32, output_final_state=True, **rest, **opts)
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    assert ht.dtype == torch.float32  # final states stay float32, as in FLA
    (o.square().sum() + ht.sum()).backward()
    (ro.square().sum() + rht.sum()).backward()
    assert h0.grad.dtype == state_dtype
    torch.testing.assert_close(h0.grad, h32.grad.to(state_dtype), rtol=0, atol=0)


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_mixed_qkv_dtypes(family):
    # FLA's tests pass float32 q/k with a float16 v; o comes back in v's dtype.
    t, opts = make_inputs(family, B=2, T=70, H=2, K=16, V=16)
    fn = {"kda": linattn.chunk_kda, "gdn": linattn.chunk_gdn, "gla": linattn.chunk_gla,
          "simple_gla": linattn.chunk_simple_gla}[family]
    rest = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    v16 = t["v"].half().requires_grad_()
    q = t["q"].clone().requires_grad_()
    o, _ = fn(q, t["k"], v16, **rest, **opts)
    assert o.dtype == torch.float16
    ro, _ = fn(t["q"], t["k"], v16.detach().float(), **rest, **opts)
    torch.testing.assert_close(o, ro.half(), rtol=0, atol=0)
    o.float().sum().backward()
    assert v16.grad.dtype == torch.float16 and q.grad.dtype == torch.float32


def test_mixed_dtypes_fused_recurrent_with_out():
    t, _ = make_inputs("gdn", B=2, T=3, H=2, K=16, V=16)
    v16 = t["v"].half()
    out = torch.full_like(v16, float("nan"))
    with torch.no_grad():
        o, _ = linattn.fused_recurrent_gdn(t["q"], t["k"], v16, g=t["g"], beta=t["beta"], out=out)
        ro, _ = linattn.fused_recurrent_gdn(t["q"], t["k"], v16.float(), g=t["g"], beta=t["beta"])
    assert o is out
    torch.testing.assert_close(o, ro.half(), rtol=0, atol=0)


def test_safe_gate_without_lower_bound():
    # FLA: a caller-computed g promised safe needs no bound (the default -5 applies) ...
    t, _ = make_inputs("kda", B=1, T=70, H=2, K=16, V=16)
    g = t["g"].clamp(-5, 0)
    o, _ = linattn.chunk_kda(t["q"], t["k"], t["v"], g, t["beta"], safe_gate=True)
    ro, _ = linattn.chunk_kda(t["q"], t["k"], t["v"], g, t["beta"], safe_gate=True, lower_bound=-5.0)
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    # ... while the in-kernel safe gate needs the bound it applies (FLA raises ValueError too).
    with pytest.raises(ValueError, match="lower_bound"):
        linattn.chunk_kda(t["q"], t["k"], t["v"], g, t["beta"], safe_gate=True,
                          use_gate_in_kernel=True, A_log=torch.zeros(2))
    # fused_recurrent_kda accepts safe_gate and ignores it, as FLA's does
    with torch.no_grad():
        o1, _ = linattn.fused_recurrent_kda(t["q"], t["k"], t["v"], g, t["beta"], safe_gate=True)
        r1, _ = linattn.fused_recurrent_kda(t["q"], t["k"], t["v"], g, t["beta"])
    torch.testing.assert_close(o1, r1, rtol=0, atol=0)


@pytest.mark.parametrize("fn_name,family,accepted,refused", [
    ("chunk_kda", "kda", [32, 64], [16, 128]),
    ("chunk_gated_delta_rule", "gdn", [16, 32, 64], [8, 128]),
    ("chunk_simple_gla", "simple_gla", [16, 32, 64, 128], [48, 0]),
])
def test_fla_chunk_sizes(fn_name, family, accepted, refused):
    t, opts = make_inputs(family, B=1, T=70, H=2, K=16, V=16)
    fn = getattr(linattn, fn_name)
    rest = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    ref, _ = fn(t["q"], t["k"], t["v"], **rest, **opts)
    for cs in accepted:
        o, _ = fn(t["q"], t["k"], t["v"], chunk_size=cs, **rest, **opts)
        torch.testing.assert_close(o, ref, rtol=0, atol=0)
    for cs in refused:
        with pytest.raises(ValueError, match="`chunk_size` must be"):
            fn(t["q"], t["k"], t["v"], chunk_size=cs, **rest, **opts)
    # h is at 64-token boundaries: another chunk size with h is refused, naming the fix
    with pytest.raises(NotImplementedError, match="chunk_size=64"):
        fn(t["q"], t["k"], t["v"], chunk_size=32, return_intermediate_states=True, **rest, **opts)


def test_fla_kda_invalid_chunk_size_message():
    # FLA's own test_chunk_invalid_chunk_size matches this text
    t, _ = make_inputs("kda", B=1, T=8, H=1, K=8, V=8)
    with pytest.raises(ValueError, match=r"`chunk_size` must be either 32 or 64"):
        linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], chunk_size=16)


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_intermediate_states_in_fla_dtype(family, dtype):
    t, opts = make_inputs(family, B=1, T=130, H=2, K=16, V=16, dtype=dtype)
    fn = {"kda": linattn.chunk_kda, "gdn": linattn.chunk_gdn, "gla": linattn.chunk_gla,
          "simple_gla": linattn.chunk_simple_gla}[family]
    rest = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
    with torch.inference_mode():
        _, _, h = fn(t["q"], t["k"], t["v"], return_intermediate_states=True, **rest, **opts)
        _, _, h32 = fn(t["q"], t["k"], t["v"], return_intermediate_states=True,
                       intermediate_states_dtype=torch.float32, **rest, **opts)
    assert h.dtype == dtype  # FLA: h in k's dtype
    assert h32.dtype == torch.float32
    torch.testing.assert_close(h, h32.to(dtype), rtol=0, atol=0)
    with pytest.raises(ValueError, match="intermediate_states_dtype"):
        fn(t["q"], t["k"], t["v"], return_intermediate_states=True, intermediate_states_dtype=torch.int32,
           **rest, **opts)


def test_validate_only_checks_everything_and_computes_nothing():
    # linattn.fla's verifiers: accepted exactly when a real call would run
    from linattn._torch_ops import ValidatedOnly, validate_only

    t, _ = make_inputs("gdn", B=1, T=40, H=2, K=16, V=16)
    with validate_only():
        with pytest.raises(ValidatedOnly):
            linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], chunk_size=16)
        with pytest.raises(ValueError, match="cu_seqlens"):  # read by the C++ validation
            linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], cu_seqlens=torch.tensor([0, 30]))
        with pytest.raises(ValueError, match="`chunk_size` must be"):
            linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], chunk_size=8)
    # outside the context the same call computes again
    o, _ = linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], chunk_size=16)
    assert o.shape == t["v"].shape


def test_fused_recurrent_kda_fwd_updates_a_state_pool_in_place():
    # FLA's serving entry point (vLLM-style): one token per sequence, states in a pool
    t, _ = make_inputs("kda", B=1, T=3, H=2, K=16, V=16, initial_state=False)
    pool = torch.randn(5, 2, 16, 16)
    idx = torch.tensor([4, 0, 2], dtype=torch.int32)
    cu = torch.arange(4, dtype=torch.int32)
    pool_before = pool.clone()
    o, fs = linattn.fused_recurrent_kda_fwd(t["q"], t["k"], t["v"], t["g"], t["beta"], initial_state=pool,
                                            cu_seqlens=cu, ssm_state_indices=idx)
    assert fs is pool
    for n, slot in enumerate(idx.tolist()):
        sl = slice(n, n + 1)
        ro, rht = linattn.fused_recurrent_kda(t["q"][:, sl], t["k"][:, sl], t["v"][:, sl], t["g"][:, sl],
                                              t["beta"][:, sl], initial_state=pool_before[slot:slot + 1],
                                              output_final_state=True)
        torch.testing.assert_close(o[:, sl], ro, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(pool[slot], rht[0], rtol=1e-5, atol=1e-6)
    for slot in (1, 3):  # untouched
        torch.testing.assert_close(pool[slot], pool_before[slot], rtol=0, atol=0)
    with pytest.raises(ValueError, match="inplace_final_state"):
        linattn.fused_recurrent_kda_fwd(t["q"], t["k"], t["v"], t["g"], t["beta"])


def test_fused_recurrent_gla_and_simple_gla():
    # FLA's fused_recurrent_{gla,simple_gla}: the chunked functions under FLA's names/arguments
    t, _ = make_inputs("gla", B=2, T=40, H=2, K=16, V=16)
    o, ht = linattn.fused_recurrent_gla(t["q"], t["k"], t["v"], gk=t["g"], initial_state=t["initial_state"],
                                        output_final_state=True)
    ro, rht = linattn.chunk_gla(t["q"], t["k"], t["v"], t["g"], initial_state=t["initial_state"],
                                output_final_state=True)
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    torch.testing.assert_close(ht, rht, rtol=0, atol=0)
    o, _ = linattn.fused_recurrent_gla(t["q"], t["k"], t["v"])  # no decay
    ro, _ = linattn.chunk_gla(t["q"], t["k"], t["v"], torch.zeros_like(t["g"]))
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="gv"):
        linattn.fused_recurrent_gla(t["q"], t["k"], t["v"], gv=torch.zeros_like(t["v"]))
    s, _ = make_inputs("simple_gla", B=2, T=40, H=2, K=16, V=16, g_gamma=True)
    o, _ = linattn.fused_recurrent_simple_gla(s["q"], s["k"], s["v"], g=s["g"], g_gamma=s["g_gamma"])
    ro, _ = linattn.chunk_simple_gla(s["q"], s["k"], s["v"], g=s["g"], g_gamma=s["g_gamma"])
    torch.testing.assert_close(o, ro, rtol=0, atol=0)


def _naive_gla(q, k, v, g, h0, scale):
    # float64 recurrence: S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = scale S_t^T q_t
    S = h0.clone()
    outs = []
    for t in range(q.shape[1]):
        S = torch.exp(g[:, t])[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(outs, 1), S


@pytest.mark.parametrize("family", ["gla", "simple_gla"])
@pytest.mark.parametrize("v_first,V", [(False, 16), (True, 16), (False, 320), (True, 272)])
def test_gla_head_size_above_256(family, v_first, V):
    # FLA's test_gla runs K = V = 320; without the delta rule linattn splits K into slices of
    # <= 256 (and V, like every family)
    gen = torch.Generator().manual_seed(0)
    B, T, H, K = 1, 20, 2, 320
    rn = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q, k, v, h0 = rn(B, T, H, K), rn(B, T, H, K) * 0.1, rn(B, T, H, V), rn(B, H, K, V) * 0.1
    if family == "gla":
        g = torch.nn.functional.logsigmoid(rn(B, T, H, K)) / 4
        g_full = g
    else:
        g = torch.nn.functional.logsigmoid(rn(B, T, H)) / 4
        g_full = g[..., None].expand(B, T, H, K)
    xs = [x.clone().requires_grad_() for x in (q, k, v, g, h0)]
    h0_in = xs[4].transpose(-1, -2) if v_first else xs[4]
    fn = linattn.chunk_gla if family == "gla" else linattn.chunk_simple_gla
    o, ht = fn(xs[0], xs[1], xs[2], xs[3], initial_state=h0_in, output_final_state=True, state_v_first=v_first)
    ro, rht = _naive_gla(q, k, v, g_full, h0, K ** -0.5)
    assert_close("o", o, ro, torch.float64)
    assert_close("ht", ht.transpose(-1, -2) if v_first else ht, rht, torch.float64)
    (o.square().sum() + ht.sum()).backward()
    ys = [x.clone().requires_grad_() for x in (q, k, v, g, h0)]
    gy = ys[3] if family == "gla" else ys[3][..., None].expand(B, T, H, K)
    ro, rht = _naive_gla(ys[0], ys[1], ys[2], gy, ys[4], K ** -0.5)
    (ro.square().sum() + rht.sum()).backward()
    for name, x, y in zip(("dq", "dk", "dv", "dg", "dh0"), xs, ys):
        assert_close(name, x.grad, y.grad, torch.float64)
    with torch.inference_mode():
        _, _, h = fn(q, k, v, g, initial_state=h0, return_intermediate_states=True)
    assert h.shape == (B, 1, H, K, V)
    torch.testing.assert_close(h[:, 0], h0)


def _naive_delta(q, k, v, g, beta, h0, scale):
    # float64 KDA recurrence (GDN: g broadcast over K)
    S = h0.clone()
    outs = []
    for t in range(q.shape[1]):
        S = torch.exp(g[:, t])[..., None] * S
        kv = torch.einsum("bhk,bhkv->bhv", k[:, t], S)
        S = S + beta[:, t, :, None, None] * k[:, t, :, :, None] * (v[:, t] - kv)[:, :, None, :]
        outs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(outs, 1), S


@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_delta_rule_value_size_above_256(family):
    # every family is separable along V (column j of S only meets column j of v)
    gen = torch.Generator().manual_seed(1)
    B, T, H, K, V = 1, 20, 2, 16, 320
    rn = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    q, v, h0 = rn(B, T, H, K), rn(B, T, H, V), rn(B, H, K, V) * 0.1
    k = torch.nn.functional.normalize(rn(B, T, H, K), dim=-1)
    beta = torch.rand(B, T, H, generator=gen, dtype=torch.float64)
    g = torch.nn.functional.logsigmoid(rn(B, T, H, K) if family == "kda" else rn(B, T, H)) / 4
    xs = [x.clone().requires_grad_() for x in (q, k, v, g, beta, h0)]
    fn = linattn.chunk_kda if family == "kda" else linattn.chunk_gdn
    o, ht = fn(*xs[:5], initial_state=xs[5], output_final_state=True)
    ys = [x.clone().requires_grad_() for x in (q, k, v, g, beta, h0)]
    gy = ys[3] if family == "kda" else ys[3][..., None].expand(B, T, H, K)
    ro, rht = _naive_delta(ys[0], ys[1], ys[2], gy, ys[4], ys[5], K ** -0.5)
    assert_close("o", o, ro, torch.float64)
    assert_close("ht", ht, rht, torch.float64)
    (o.square().sum() + ht.sum()).backward()
    (ro.square().sum() + rht.sum()).backward()
    for name, x, y in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0"), xs, ys):
        assert_close(name, x.grad, y.grad, torch.float64)
    # K > 256 stays refused for the delta rule (not separable along K)
    with pytest.raises(NotImplementedError, match="K = 300"):
        fn(torch.randn(1, 4, 1, 300), torch.randn(1, 4, 1, 300), torch.randn(1, 4, 1, 8),
           torch.zeros(1, 4, 1, 300) if family == "kda" else torch.zeros(1, 4, 1), torch.rand(1, 4, 1))


def _naive_reverse(q, k, v, g, h0, scale, seqs):
    """FLA's reverse=True in float64, token by token from each sequence's end: S_t = Diag(exp(g_t))
    S_{t+1} + k_t v_t^T, o_t = scale S_t^T q_t; g [B, T, H, K]. seqs: [(b, start, end)]."""
    o = torch.zeros(v.shape, dtype=torch.float64)
    finals = []
    for n, (b, a, e) in enumerate(seqs):
        S = h0[n].clone()
        for t in range(e - 1, a - 1, -1):
            S = torch.exp(g[b, t])[..., None] * S + k[b, t, :, :, None] * v[b, t, :, None, :]
            o[b, t] = scale * torch.einsum("hk,hkv->hv", q[b, t], S)
        finals.append(S)
    return o, torch.stack(finals)


@pytest.mark.parametrize("family", ["gla", "simple_gla"])
@pytest.mark.parametrize("varlen", [False, True])
def test_fused_recurrent_reverse(family, varlen):
    # FLA's reverse=True: every output and gradient against a float64 right-to-left recurrence
    gen = torch.Generator().manual_seed(5)
    rn = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    H, K, V = 2, 16, 8
    if varlen:
        cu = [0, 7, 7, 30, 41]
        B, T = 1, cu[-1]
        seqs = [(0, a, e) for a, e in zip(cu[:-1], cu[1:])]
    else:
        B, T = 2, 23
        seqs = [(b, 0, T) for b in range(B)]
    q, k, v = rn(B, T, H, K), rn(B, T, H, K) * 0.3, rn(B, T, H, V)
    h0 = rn(len(seqs), H, K, V) * 0.1
    g = torch.nn.functional.logsigmoid(rn(B, T, H, K if family == "gla" else 1)) / 4
    gamma = -torch.rand(H, generator=gen, dtype=torch.float64) / 8
    scale = 0.4
    xs = [x.clone().float().requires_grad_() for x in (q, k, v, g, h0, gamma)]
    kw = dict(scale=scale, initial_state=xs[4], output_final_state=True, reverse=True)
    if varlen:
        kw["cu_seqlens"] = torch.tensor(cu)
    if family == "gla":
        o, ht = linattn.fused_recurrent_gla(xs[0], xs[1], xs[2], gk=xs[3], **kw)
    else:
        o, ht = linattn.fused_recurrent_simple_gla(xs[0], xs[1], xs[2], g=xs[3][..., 0], g_gamma=xs[5], **kw)
    rs = [x.clone().requires_grad_() for x in (q, k, v, g, h0, gamma)]
    rg = rs[3] if family == "gla" else (rs[3] + rs[5][:, None]).expand(B, T, H, K)
    ro, rht = _naive_reverse(rs[0], rs[1], rs[2], rg, rs[4], scale, seqs)
    assert_close("o", o, ro, torch.float32)
    assert_close("final_state", ht, rht, torch.float32)
    do, dht = rn(*o.shape), rn(*ht.shape)
    torch.autograd.backward([o, ht], [do.float(), dht.float()])
    torch.autograd.backward([ro, rht], [do, dht])
    names = ["q", "k", "v", "g", "h0"] + ([] if family == "gla" else ["g_gamma"])
    for n, x, r in zip(names, xs, rs):
        assert x.grad is not None, n
        assert_close("d" + n, x.grad, r.grad, torch.float32)


def test_fused_recurrent_reverse_no_grad_decode_path():
    # short calls without gradients take the decode kernels: reversed the same way
    t, _ = make_inputs("gla", B=1, T=5, H=2, K=16, V=16)
    with torch.no_grad():
        o, ht = linattn.fused_recurrent_gla(t["q"], t["k"], t["v"], gk=t["g"], initial_state=t["initial_state"],
                                            output_final_state=True, reverse=True)
        f = lambda x: torch.flip(x, dims=[1])  # noqa: E731
        ro, rht = linattn.fused_recurrent_gla(f(t["q"]), f(t["k"]), f(t["v"]), gk=f(t["g"]),
                                              initial_state=t["initial_state"], output_final_state=True)
    torch.testing.assert_close(o, f(ro), rtol=0, atol=0)
    torch.testing.assert_close(ht, rht, rtol=0, atol=0)


def test_fused_recurrent_reverse_bad_cu_seqlens():
    t, _ = make_inputs("simple_gla", B=1, T=20, H=2, K=16, V=16)
    for bad in ([0, 25], [0, 12, 8, 20], [3, 20]):
        with pytest.raises(ValueError, match="cu_seqlens"):
            linattn.fused_recurrent_simple_gla(t["q"], t["k"], t["v"], g=t["g"], reverse=True,
                                               cu_seqlens=torch.tensor(bad))
    with pytest.raises(TypeError, match="cu_seqlens"):
        linattn.fused_recurrent_gla(t["q"], t["k"], t["v"], reverse=True, cu_seqlens=[0, 20])


@pytest.mark.parametrize("varlen", [False, True])
def test_fused_recurrent_gdn_with_g_and_gk(varlen):
    # FLA scales the state by exp(g_t) and by Diag(exp(gk_t)) in turn: every output and gradient
    # against a float64 delta-rule recurrence with both decays
    gen = torch.Generator().manual_seed(11)
    rn = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    H, K, V = 2, 16, 8
    cu = [0, 9, 9, 26] if varlen else None
    B, T = (1, 26) if varlen else (2, 21)
    seqs = [(0, a, e) for a, e in zip(cu[:-1], cu[1:])] if varlen else [(b, 0, T) for b in range(B)]
    q, v = rn(B, T, H, K), rn(B, T, H, V)
    k = torch.nn.functional.normalize(rn(B, T, H, K), dim=-1)
    g = torch.nn.functional.logsigmoid(rn(B, T, H)) / 4
    gk = torch.nn.functional.logsigmoid(rn(B, T, H, K)) / 8
    beta = torch.rand(B, T, H, generator=gen, dtype=torch.float64) * 0.9 + 0.05
    h0 = rn(len(seqs), H, K, V) * 0.1
    xs = [x.clone().float().requires_grad_() for x in (q, k, v, g, gk, beta, h0)]
    o, ht = linattn.fused_recurrent_gdn(xs[0], xs[1], xs[2], g=xs[3], gk=xs[4], beta=xs[5], initial_state=xs[6],
                                        output_final_state=True,
                                        cu_seqlens=None if cu is None else torch.tensor(cu))
    rs = [x.clone().requires_grad_() for x in (q, k, v, g, gk, beta, h0)]
    ro = torch.zeros(v.shape, dtype=torch.float64)
    finals = []
    for n, (b, a, e) in enumerate(seqs):
        S = rs[6][n]
        for t in range(a, e):
            S = torch.exp(rs[3][b, t])[:, None, None] * torch.exp(rs[4][b, t])[..., None] * S
            vnew = rs[2][b, t] - torch.einsum("hk,hkv->hv", rs[1][b, t], S)
            S = S + rs[5][b, t][:, None, None] * rs[1][b, t][..., None] * vnew[:, None, :]
            ro[b, t] = K ** -0.5 * torch.einsum("hk,hkv->hv", rs[0][b, t], S)
        finals.append(S)
    rht = torch.stack(finals)
    assert_close("o", o, ro, torch.float32)
    assert_close("final_state", ht, rht, torch.float32)
    do, dht = rn(*o.shape), rn(*ht.shape)
    torch.autograd.backward([o, ht], [do.float(), dht.float()])
    torch.autograd.backward([ro, rht], [do, dht])
    for n, x, r in zip(["q", "k", "v", "g", "gk", "beta", "h0"], xs, rs):
        assert x.grad is not None, n
        assert_close("d" + n, x.grad, r.grad, torch.float32)
