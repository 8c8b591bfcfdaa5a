"""Regression tests of issue 19's probes through the Python interfaces (CPU backend): the
workspace's rules in linattn._C, ValueError (never IndexError / ZeroDivisionError) for bad
shapes, the scale's range, and finite results and gradients for -inf gates and an overflowing
exp(A_log) through the PyTorch autograd path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from linattn import _C, chunk_gated_delta_rule, chunk_gla, chunk_kda, chunk_simple_gla
from linattn.ops import forward_numpy, make_options, reference_forward_numpy

from helpers import TOL, rel_err

B, T, H, K, V = 1, 70, 2, 16, 16


@pytest.fixture
def gdn_np():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k = rng.standard_normal((B, T, H, K)).astype(np.float32) / 4
    v = rng.standard_normal((B, T, H, V)).astype(np.float32)
    g = (-np.abs(rng.standard_normal((B, T, H))) / 16).astype(np.float32)
    beta = rng.uniform(0.1, 0.9, (B, T, H)).astype(np.float32)
    return q, k, v, g, beta


def _ws(q, k, v, g, beta):
    return _C.forward_workspace_size(2, q, k, v, g=g, beta=beta, options=make_options())


def test_reversed_workspace_is_refused(gdn_np):
    q, k, v, g, beta = gdn_np
    n = _ws(q, k, v, g, beta)
    assert n > 0
    backing = np.full(n + 64, 0x5A, np.uint8)
    o = np.full_like(v, 7.0)
    with pytest.raises(ValueError, match="workspace must be contiguous"):
        _C.forward(2, q, k, v, g=g, beta=beta, o=o, options=make_options(), workspace=backing[n - 1::-1])
    assert (o == 7.0).all() and (backing == 0x5A).all()


@pytest.mark.parametrize("where", ["q", "o"])
def test_workspace_overlapping_q_or_o_is_refused(gdn_np, where):
    q, k, v, g, beta = gdn_np
    n = _ws(q, k, v, g, beta)
    big = np.zeros(n + q.nbytes + 64, np.uint8)
    o = np.full_like(v, 7.0)
    if where == "q":
        qa = big[:q.nbytes].view(np.float32).reshape(q.shape)
        qa[...] = q
        args = dict(q=qa, o=o)
    else:
        oa = big[:o.nbytes].view(np.float32).reshape(o.shape)
        oa[...] = 7.0
        args = dict(q=q, o=oa)
    snapshot = big.copy()
    with pytest.raises(ValueError, match=f"workspace overlaps {where}"):
        _C.forward(2, k=k, v=v, g=g, beta=beta, options=make_options(), workspace=big[8:], **args)
    assert (big == snapshot).all() and (o == 7.0).all()


def test_workspace_of_another_dtype_is_refused(gdn_np):
    q, k, v, g, beta = gdn_np
    with pytest.raises(ValueError, match="workspace must be a uint8 buffer"):
        _C.forward(2, q, k, v, g=g, beta=beta, o=np.empty_like(v), options=make_options(),
                   workspace=np.zeros(_ws(q, k, v, g, beta), np.float32))


def test_misaligned_input_is_refused(gdn_np):
    q, k, v, g, beta = gdn_np
    buf = np.zeros(q.nbytes + 8, np.uint8)
    qm = np.frombuffer(buf.data, dtype=np.float32, count=q.size, offset=2).reshape(q.shape)
    with pytest.raises(ValueError, match="q starts at an address that is not a multiple"):
        _C.forward(2, qm, k, v, g=g, beta=beta, o=np.empty_like(v), options=make_options(),
                   workspace=np.zeros(_ws(q, k, v, g, beta), np.uint8))


def _torch_gdn(seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.randn(B, T, H, K, generator=gen)
    v = torch.randn(B, T, H, V, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, generator=gen)) / 16
    beta = torch.rand(B, T, H, generator=gen)
    return q, k, v, g, beta


@pytest.mark.parametrize("case", ["v_missing_dim", "k_zero", "v_zero", "q_scalar", "scale_huge",
                                  "scale_beyond_float", "scale_nan", "cu_2d"])
def test_bad_shapes_and_values_raise_value_error(case):
    q, k, v, g, beta = _torch_gdn()
    kw = dict(output_final_state=True, use_qk_l2norm_in_kernel=True)
    msg = {"v_missing_dim": "v must be 4-D", "k_zero": "head size K", "v_zero": "head size V",
           "q_scalar": "q must be 4-D", "scale_huge": "scale must be", "scale_beyond_float": "scale",
           "scale_nan": "scale must be finite", "cu_2d": "cu_seqlens must be 1-D"}[case]
    if case == "v_missing_dim":
        v = v[..., 0]
    elif case == "k_zero":
        q, k = q[..., :0], k[..., :0]
    elif case == "v_zero":
        v = v[..., :0]
    elif case == "q_scalar":
        q = torch.tensor(1.0)
    elif case == "scale_huge":
        kw["scale"] = 1e39
    elif case == "scale_beyond_float":
        kw["scale"] = 10 ** 400
    elif case == "scale_nan":
        kw["scale"] = math.nan
    elif case == "cu_2d":
        kw["cu_seqlens"] = torch.tensor([[0, T]])
    with pytest.raises(ValueError, match=msg):
        chunk_gated_delta_rule(q, k, v, g, beta, **kw)


@pytest.mark.parametrize("case", ["v_missing_dim", "k_zero", "scale_beyond_float"])
def test_numpy_api_raises_value_error(gdn_np, case):
    q, k, v, g, beta = gdn_np
    kw = dict(g=g, beta=beta, output_final_state=True, return_intermediate_states=True)
    if case == "v_missing_dim":
        v = v[..., 0]
    elif case == "k_zero":
        q, k = q[..., :0], k[..., :0]
    else:
        kw["scale"] = 10 ** 400
    with pytest.raises(ValueError):
        forward_numpy("gdn", q, k, v, **kw)
    with pytest.raises(ValueError):
        reference_forward_numpy("gdn", q, k, v, **kw)


def _family_call(fam, dtype, gate_value, gen):
    q = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(B, T, H, K, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(B, T, H, V, generator=gen, dtype=torch.float64).to(dtype)
    gshape = (B, T, H, K) if fam in ("kda", "gla") else (B, T, H)
    gd = torch.float64 if dtype == torch.float64 else torch.float32
    g = (torch.nn.functional.logsigmoid(torch.randn(gshape, generator=gen, dtype=torch.float64)) / 16).to(gd)
    g[:, 0] = gate_value
    g[:, 64] = gate_value
    h0 = torch.randn(B, H, K, V, generator=gen, dtype=gd)
    tensors = dict(q=q, k=k, v=v, g=g, h0=h0)
    if fam in ("kda", "gdn"):
        tensors["beta"] = torch.rand(B, T, H, generator=gen, dtype=torch.float64).to(dtype)
    return tensors


def _run(fam, t, requires_grad):
    t = {n: x.clone().requires_grad_(requires_grad) for n, x in t.items()}
    kw = dict(initial_state=t["h0"], output_final_state=True)
    if fam == "kda":
        o, ht = chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], use_qk_l2norm_in_kernel=True, **kw)
    elif fam == "gdn":
        o, ht = chunk_gated_delta_rule(t["q"], t["k"], t["v"], t["g"], t["beta"], use_qk_l2norm_in_kernel=True, **kw)
    elif fam == "gla":
        o, ht = chunk_gla(t["q"], t["k"], t["v"], t["g"], **kw)
    else:
        o, ht = chunk_simple_gla(t["q"], t["k"], t["v"], t["g"], **kw)
    return t, o, ht


@pytest.mark.parametrize("fam", ["kda", "gdn", "gla", "simple_gla"])
@pytest.mark.parametrize("gate_value", [-math.inf, -1e30])
def test_full_forget_gates_through_autograd(fam, gate_value):
    """g = -inf (or a huge finite negative gate) forgets everything: the CPU backend's outputs and
    gradients are finite and match the float64 evaluation (same code path on float64 tensors,
    checked against the reference in the C++ suite) within SPEC."""
    gen = torch.Generator().manual_seed(11)
    t32 = _family_call(fam, torch.float32, gate_value, gen)
    t64 = {n: x.double() for n, x in t32.items()}
    outs = []
    for t in (t32, t64):
        leaves, o, ht = _run(fam, t, True)
        (o.double().square().mean() + ht.double().sum()).backward()
        outs.append((o, ht, {n: x.grad for n, x in leaves.items()}))
    (o32, ht32, g32), (o64, ht64, g64) = outs
    for name, x, ref in [("o", o32, o64), ("final_state", ht32, ht64)] + \
            [("d" + n, g32[n], g64[n]) for n in g32]:
        assert torch.isfinite(x).all(), f"{name} has NaN/Inf"
        assert rel_err(x, ref) <= TOL[torch.float32], f"{name}: {rel_err(x, ref):.3e}"
    # nothing of the initial state survives the forget at token 0: its gradient is exactly zero
    assert float(g64["h0"].abs().max()) == 0.0


@pytest.mark.parametrize("a_log", [100.0, 1e4])
def test_overflowing_exp_a_log_is_a_full_forget(a_log):
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, T, H, K, generator=gen) for _ in range(3))
    g = torch.randn(B, T, H, K, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    A_log = torch.tensor([a_log, 0.0])
    ref = None
    for dt in (torch.float32, torch.float64):
        args = [x.detach().to(dt).requires_grad_() for x in (q, k, v, g, beta)]
        A = A_log.detach().to(dt).requires_grad_()
        o, _ = chunk_kda(*args, A_log=A, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True)
        o.square().sum().backward()
        res = [o] + [x.grad for x in args] + [A.grad]
        for x in res:
            assert torch.isfinite(x).all()
        if ref is None:
            ref = res
        else:
            for x32, x64 in zip(ref, res):
                assert rel_err(x32, x64) <= TOL[torch.float32]


def test_numpy_api_takes_non_native_byte_order(gdn_np):
    q, k, v, g, beta = gdn_np
    o, _, _ = forward_numpy("gdn", q, k, v, g=g, beta=beta)
    ob, _, _ = forward_numpy("gdn", q.astype(">f4"), k.astype(">f4"), v, g=g.astype(">f4"), beta=beta)
    assert np.array_equal(o, ob)
