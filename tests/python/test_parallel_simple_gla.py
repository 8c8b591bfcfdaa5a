"""``parallel_simple_gla`` (FLA's ``fla.ops.simple_gla.parallel_simple_gla``): the output and every
gradient against the C++ float64 reference, the attention scores against a float64 evaluation of
their definition, FLA's argument rules, and the scores' gate floor with -inf gates."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402
from linattn import reference  # noqa: E402

from helpers import assert_close, make_inputs, rel_err  # noqa: E402


def scores64(q, k, g, scale, HV):
    """A[b, h, i, j] = scale q_i·k_j prod_{j < l <= i} exp(g_l) for j <= i, by products (no cumsum)."""
    B, T, H, _ = q.shape
    G = HV // H
    qd = q.double().repeat_interleave(G, dim=2)
    kd = k.double().repeat_interleave(G, dim=2)
    s = torch.einsum("bihk,bjhk->bhij", qd, kd) * scale
    out = torch.zeros_like(s)
    for b in range(B):
        for h in range(HV):
            for i in range(T):
                decay = 1.0
                for j in range(i, -1, -1):
                    out[b, h, i, j] = s[b, h, i, j] * decay
                    if g is not None:
                        decay *= math.exp(float(g[b, j, h]))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("G", [1, 2])
def test_output_and_gradients_match_reference(dtype, G):
    t, _ = make_inputs("simple_gla", B=2, T=67, H=2, G=G, K=32, V=16, dtype=dtype, initial_state=False)
    leaves = {n: t[n].clone().requires_grad_() for n in ("q", "k", "v", "g")}
    o, attn = linattn.parallel_simple_gla(leaves["q"], leaves["k"], leaves["v"], leaves["g"])
    assert attn is None
    assert o.shape == t["v"].shape and o.dtype == t["v"].dtype
    ro, _, _ = reference.forward("simple_gla", t["q"], t["k"], t["v"], g=t["g"])
    assert_close("o", o, ro, dtype)
    do = torch.randn(o.shape, generator=torch.Generator().manual_seed(3)).to(o.dtype)
    o.backward(do)
    rg = reference.backward("simple_gla", t["q"], t["k"], t["v"], do, g=t["g"])
    for n in ("q", "k", "v", "g"):
        assert leaves[n].grad is not None and leaves[n].grad.dtype == leaves[n].dtype
        assert_close("d" + n, leaves[n].grad, rg["d" + n], dtype)


@pytest.mark.parametrize("G", [1, 2])
@pytest.mark.parametrize("with_g", [True, False])
def test_attention_scores(G, with_g):
    t, _ = make_inputs("simple_gla", B=2, T=23, H=2, G=G, K=8, V=8, initial_state=False, g=with_g)
    g = t.get("g")
    scale = 0.3
    o, attn = linattn.parallel_simple_gla(t["q"], t["k"], t["v"], g, scale=scale, output_attentions=True)
    HV = t["v"].shape[2]
    assert attn.shape == (2, HV, 23, 23) and attn.dtype == t["q"].dtype
    assert not attn.requires_grad
    ref = scores64(t["q"], t["k"], g, scale, HV)
    assert rel_err(attn, ref) <= 1e-5
    assert torch.all(attn.triu(1) == 0)
    # the scores reproduce the output: o = A v
    ov = torch.einsum("bhij,bjhv->bihv", attn.double(), t["v"].double())
    assert_close("o from the scores", o, ov, torch.float32)


def test_attention_scores_half_precision_and_default_scale():
    t, _ = make_inputs("simple_gla", B=1, T=40, H=2, K=16, V=16, dtype=torch.bfloat16, initial_state=False)
    _, attn = linattn.parallel_simple_gla(t["q"], t["k"], t["v"], t["g"], output_attentions=True)
    assert attn.dtype == torch.bfloat16
    ref = scores64(t["q"], t["k"], t["g"], 16 ** -0.5, 2)
    assert rel_err(attn, ref) <= 1e-2


def test_attention_scores_with_full_forgets():
    # -inf gates (a full forget) and gates far below the kernels' floor: no NaN, and the scores
    # across a forget are 0 while those after it are those of a fresh start
    t, _ = make_inputs("simple_gla", B=1, T=12, H=1, K=8, V=8, initial_state=False)
    g = t["g"].clone()
    g[0, 5, 0] = -math.inf
    g[0, 9, 0] = -1e30
    o, attn = linattn.parallel_simple_gla(t["q"], t["k"], t["v"], g, output_attentions=True)
    assert torch.isfinite(attn).all() and torch.isfinite(o).all()
    assert torch.all(attn[0, 0, 5:, :5] == 0) and torch.all(attn[0, 0, 9:, :9] == 0)
    ref = scores64(t["q"], t["k"], g.clamp_min(-110.0), 8 ** -0.5, 1)
    assert rel_err(attn, ref) <= 1e-5


def test_varlen_matches_per_sequence_calls():
    cu = [0, 9, 9, 40, 47]
    t, _ = make_inputs("simple_gla", T=47, H=2, K=16, V=16, cu_seqlens=cu, initial_state=False)
    o, attn = linattn.parallel_simple_gla(t["q"], t["k"], t["v"], t["g"], cu_seqlens=t["cu_seqlens"])
    assert attn is None
    for a, b in zip(cu[:-1], cu[1:]):
        if a == b:
            continue
        part, _ = linattn.parallel_simple_gla(t["q"][:, a:b], t["k"][:, a:b], t["v"][:, a:b], t["g"][:, a:b])
        assert_close(f"sequence [{a}, {b})", o[:, a:b], part, torch.float32)


def test_fla_argument_rules():
    t, _ = make_inputs("simple_gla", B=2, T=16, H=2, K=8, V=8, initial_state=False)
    cu = torch.tensor([0, 8, 16])
    with pytest.raises(ValueError, match="batch size must be 1"):
        linattn.parallel_simple_gla(t["q"], t["k"], t["v"], t["g"], cu_seqlens=cu)
    one = {n: t[n][:1] for n in ("q", "k", "v", "g")}
    with pytest.raises(ValueError, match="output_attentions"):
        linattn.parallel_simple_gla(one["q"], one["k"], one["v"], one["g"], output_attentions=True, cu_seqlens=cu)
    with pytest.raises(TypeError):  # not a tensor: a clear error, not an AttributeError
        linattn.parallel_simple_gla(t["q"].tolist(), t["k"], t["v"], t["g"], cu_seqlens=cu)
    # bad input reaches the core's validation with a clear error
    with pytest.raises(ValueError):
        linattn.parallel_simple_gla(t["q"], t["k"][:, :, :1], t["v"], t["g"])


@pytest.mark.parametrize("output_attentions", [False, True])
def test_compile_fullgraph(output_attentions):
    t, _ = make_inputs("simple_gla", B=1, T=30, H=2, K=16, V=16, initial_state=False)

    def step(x):
        o, attn = linattn.parallel_simple_gla(x["q"], x["k"], x["v"], x["g"], output_attentions=output_attentions)
        loss = o.float().square().sum()
        return loss if attn is None else (loss, attn)

    def run(f):
        leaves = {n: t[n].clone().requires_grad_() for n in ("q", "k", "v", "g")}
        out = f(leaves)
        loss, attn = (out, None) if not output_attentions else out
        loss.backward()
        return attn, {n: x.grad for n, x in leaves.items()}

    torch._dynamo.reset()
    ea, eg = run(step)
    ca, cg = run(torch.compile(step, fullgraph=True, backend="aot_eager"))
    for n in eg:
        torch.testing.assert_close(eg[n], cg[n])
    if output_attentions:
        torch.testing.assert_close(ea, ca)
