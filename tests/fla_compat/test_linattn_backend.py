"""linattn.fla: linattn as a backend of FLA's registry (needs FLA >= 0.6; run_fla_tests.py runs
this file with the pinned FLA release before FLA's own tests)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
fla = pytest.importorskip("fla")
pytest.importorskip("fla.backends")

import torch.nn.functional as F  # noqa: E402

import linattn  # noqa: E402
import linattn.fla as lfla  # noqa: E402
from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_chunk_gdn  # noqa: E402
from fla.ops.kda import chunk_kda as fla_chunk_kda  # noqa: E402
from fla.ops.simple_gla import fused_chunk_simple_gla as fla_fused_chunk_simple_gla  # noqa: E402
from fla.ops.simple_gla import parallel_simple_gla as fla_parallel_simple_gla  # noqa: E402

DEVICE = os.environ.get("LINATTN_FLA_DEVICE", "cpu")


def _inputs(B=2, T=100, H=2, K=64, V=64, vector_gate=True, seed=0):  # sizes the CUDA kernels run
    gen = torch.Generator().manual_seed(seed)
    rn = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    q, v = rn(B, T, H, K), rn(B, T, H, V)
    k = F.normalize(rn(B, T, H, K), dim=-1)
    g = F.logsigmoid(rn(B, T, H, K) if vector_gate else rn(B, T, H)) / 16
    beta = torch.rand(B, T, H, generator=gen)
    h0 = rn(B, H, K, V) * 0.1
    return [x.to(DEVICE) for x in (q, k, v, g, beta, h0)]


def test_fla_chunk_kda_runs_on_linattn():
    q, k, v, g, beta, h0 = _inputs()
    before = lfla.calls["chunk_kda"]
    o, ht = fla_chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert lfla.calls["chunk_kda"] == before + 1
    ro, rht = linattn.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    torch.testing.assert_close(ht, rht, rtol=0, atol=0)


def test_fla_chunk_kda_gradients_through_linattn():
    q, k, v, g, beta, h0 = (x.requires_grad_() for x in _inputs(T=70))
    o, ht = fla_chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    (o.square().sum() + ht.sum()).backward()
    assert all(x.grad is not None and torch.isfinite(x.grad).all() for x in (q, k, v, g, beta, h0))


def test_fla_chunk_gdn_and_fused_chunk_simple_gla_run_on_linattn():
    q, k, v, g, beta, h0 = _inputs(vector_gate=False)
    before = dict(lfla.calls)
    o, _ = fla_chunk_gdn(q, k, v, g, beta, initial_state=h0)
    ro, _ = linattn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0)
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    o, _ = fla_fused_chunk_simple_gla(q, k, v, g=g, initial_state=h0)
    ro, _ = linattn.fused_chunk_simple_gla(q, k, v, g=g, initial_state=h0)
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    assert lfla.calls["chunk_gated_delta_rule"] == before["chunk_gated_delta_rule"] + 1
    assert lfla.calls["fused_chunk_simple_gla"] == before["fused_chunk_simple_gla"] + 1


def test_fla_parallel_simple_gla_runs_on_linattn():
    q, k, v, g, _, _ = _inputs(vector_gate=False)
    before = lfla.calls["parallel_simple_gla"]
    o, attn = fla_parallel_simple_gla(q, k, v, g=g, output_attentions=True)
    assert lfla.calls["parallel_simple_gla"] == before + 1
    ro, rattn = linattn.parallel_simple_gla(q, k, v, g=g, output_attentions=True)
    torch.testing.assert_close(o, ro, rtol=0, atol=0)
    torch.testing.assert_close(attn, rattn, rtol=0, atol=0)
    # FLA's rule (B = 1 with cu_seqlens) is linattn's verifier's too: refused, FLA's own code decides
    backend = lfla.LinattnBackend()
    ok, why = backend.parallel_simple_gla_verifier(q, k, v, g=g, cu_seqlens=torch.tensor([0, 50, 100], device=DEVICE))
    assert not ok and "batch size" in why
    assert backend.parallel_simple_gla_verifier(q, k, v, g=g) == (True, None)
    assert lfla.calls["parallel_simple_gla"] == before + 1  # the verifier computes nothing


def test_verifier_accepts_exactly_what_linattn_runs():
    backend = lfla.LinattnBackend()
    q, k, v, g, beta, h0 = _inputs(T=20)
    assert backend.chunk_kda_verifier(q, k, v, g, beta) == (True, None)
    # what FLA accepts and linattn now accepts too
    assert backend.chunk_kda_verifier(q, k, v.half(), g, beta, initial_state=h0.half(), chunk_size=32)[0]
    ok, why = backend.chunk_kda_verifier(q, k, v, g, beta, use_graph=True)
    assert not ok and "use_graph" in why
    ok, why = backend.chunk_kda_verifier(q, k, v, g, beta, cp_context=object())
    assert not ok and "cp_context" in why
    big = torch.randn(1, 4, 1, 300, device=DEVICE)
    ok, why = backend.chunk_kda_verifier(big, big, big, torch.zeros_like(big), torch.rand(1, 4, 1, device=DEVICE))
    assert not ok and "300" in why
    # a bad cu_seqlens (read by the C++ validation) is refused, not run
    ok, why = backend.chunk_gated_delta_rule_verifier(
        q[:1], k[:1], v[:1], g[:1, ..., 0], beta[:1], cu_seqlens=torch.tensor([0, 30], device=DEVICE))
    assert not ok and "cu_seqlens" in why
    # the verifier computes nothing: no call is counted
    assert backend.chunk_gated_delta_rule_verifier(q, k, v, g[..., 0], beta) == (True, None)


def test_backend_can_be_disabled(monkeypatch):
    monkeypatch.setenv("FLA_LINATTN", "0")
    assert not lfla.LinattnBackend().is_enabled()
    monkeypatch.setenv("FLA_LINATTN", "1")
    assert lfla.LinattnBackend().is_enabled()


LAYERS = [
    ("KimiDeltaAttention", dict(hidden_size=256, head_dim=64, num_heads=4), "chunk_kda"),
    # GVA (8 value heads over 4 key heads) and V = 2 K, as GatedDeltaNet's defaults shape it
    ("GatedDeltaNet", dict(hidden_size=256, head_dim=64, num_heads=4, num_v_heads=8, expand_v=2),
     "chunk_gated_delta_rule"),
]


@pytest.mark.skipif(DEVICE != "cuda" or not torch.cuda.is_available(),
                    reason="FLA's layers need Triton kernels (short convolution, gated norm) that run on GPUs only")
@pytest.mark.parametrize("name,kw,op", LAYERS, ids=[x[0] for x in LAYERS])
def test_fla_layer_runs_on_linattn(name, kw, op, monkeypatch):
    layers = pytest.importorskip("fla.layers")
    torch.manual_seed(0)
    layer = getattr(layers, name)(**kw).to("cuda", torch.bfloat16)
    x = torch.randn(2, 192, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    before = lfla.calls[op]
    y = layer(x)[0]
    y.float().square().mean().backward()
    assert lfla.calls[op] == before + 1
    gx = x.grad.clone()
    x.grad = None
    monkeypatch.setenv("FLA_LINATTN", "0")  # FLA's own kernels
    y_fla = layer(x)[0]
    rel = lambda a, b: ((a.float() - b.float()).norm() / b.float().norm()).item()  # noqa: E731
    assert lfla.calls[op] == before + 1
    assert rel(y, y_fla) < 1e-2
    try:
        y_fla.float().square().mean().backward()
    except RuntimeError as e:  # FLA 0.6 refuses its gated backward on Hopper with Triton < 3.7.1
        if "Triton" not in str(e):
            raise
        pytest.skip(f"forward compared; FLA's own backward refuses here: {str(e)[:120]}")
    assert rel(gx, x.grad) < 2e-2
