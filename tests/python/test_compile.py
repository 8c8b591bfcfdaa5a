"""torch.compile(fullgraph=True) traces through the linattn custom ops: no graph break, and the
compiled forward and backward equal eager mode."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402

from helpers import make_inputs  # noqa: E402


class TinyKDA(torch.nn.Module):
    """A projection + KDA (in-kernel gate, l2norm, beta sigmoid) + output projection block."""

    def __init__(self, d=32, H=2, K=16, V=16):
        super().__init__()
        self.H, self.K, self.V = H, K, V
        self.q = torch.nn.Linear(d, H * K, bias=False)
        self.k = torch.nn.Linear(d, H * K, bias=False)
        self.v = torch.nn.Linear(d, H * V, bias=False)
        self.g = torch.nn.Linear(d, H * K, bias=False)
        self.b = torch.nn.Linear(d, H, bias=False)
        self.A_log = torch.nn.Parameter(torch.log(torch.linspace(1.0, 4.0, H)))
        self.dt_bias = torch.nn.Parameter(torch.zeros(H * K))
        self.o = torch.nn.Linear(H * V, d, bias=False)

    def forward(self, x, h0, disable_recompute=False):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.H, self.K)
        k = self.k(x).view(B, T, self.H, self.K)
        v = self.v(x).view(B, T, self.H, self.V)
        g = self.g(x).view(B, T, self.H, self.K)
        beta = self.b(x)
        o, ht = linattn.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                  use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                  use_beta_sigmoid_in_kernel=True, A_log=self.A_log,
                                  dt_bias=self.dt_bias, disable_recompute=disable_recompute)
        return self.o(o.reshape(B, T, -1)), ht


def _run(model, x, h0, **kw):
    model.zero_grad()
    h0 = h0.clone().requires_grad_()
    y, ht = model(x, h0, **kw)
    (y.square().mean() + ht.sum()).backward()
    return y.detach(), ht.detach(), h0.grad, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("disable_recompute", [False, True])
def test_compile_fullgraph_kda_model(disable_recompute):
    torch.manual_seed(0)
    model = TinyKDA()
    x = torch.randn(2, 40, 32)
    h0 = torch.randn(2, 2, 16, 16) * 0.1
    ref = _run(model, x, h0, disable_recompute=disable_recompute)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = _run(compiled, x, h0, disable_recompute=disable_recompute)
    for a, b in zip(ref[:3], got[:3]):
        torch.testing.assert_close(a, b)
    for a, b in zip(ref[3], got[3]):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("family", ["gdn", "gla", "simple_gla"])
def test_compile_fullgraph_functions(family):
    t, opts = make_inputs(family, B=1, T=30, H=2, K=16, V=16, g_gamma=family == "simple_gla")
    fn = {"gdn": linattn.chunk_gdn, "gla": linattn.chunk_gla,
          "simple_gla": linattn.chunk_simple_gla}[family]

    def step(t):
        kw = {n: x for n, x in t.items() if n not in ("q", "k", "v")}
        o, ht = fn(t["q"], t["k"], t["v"], **kw, output_final_state=True)
        return o.float().square().sum() + ht.sum()

    def grads(f):
        leaves = {n: x.clone().requires_grad_() for n, x in t.items()}
        f(leaves).backward()
        return {n: x.grad for n, x in leaves.items()}

    torch._dynamo.reset()
    eager = grads(step)
    comp = grads(torch.compile(step, fullgraph=True, backend="aot_eager"))
    for n in eager:
        torch.testing.assert_close(eager[n], comp[n])


def test_compile_varlen_intermediate_states():
    """Data-dependent sizes (h with cu_seqlens) come out of the fake kernel as dynamic sizes."""
    t, opts = make_inputs("gdn", cu_seqlens=[0, 10, 75], K=16, V=16)

    def f(q, k, v, g, beta, cu):
        o, ht, h = linattn.chunk_gdn(q, k, v, g, beta, cu_seqlens=cu, output_final_state=True,
                                     return_intermediate_states=True)
        return o, ht, h

    args = (t["q"], t["k"], t["v"], t["g"], t["beta"], t["cu_seqlens"])
    torch._dynamo.reset()
    with torch.no_grad():
        ref = f(*args)
        got = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    assert got[2].shape == (1, 3, 2, 16, 16)
    for a, b in zip(ref, got):
        torch.testing.assert_close(a, b)


def test_opcheck():
    """torch.library.opcheck: schema, fake kernel and autograd registration are consistent."""
    t, opts = make_inputs("kda", B=1, T=12, H=1, K=8, V=8, use_gate_in_kernel=True)
    args = (3, t["q"], t["k"], t["v"], t["g"], None, t["beta"], t["A_log"], t["dt_bias"],
            t["initial_state"], None, None, 8 ** -0.5, False, True, False, False, False, None,
            False, True, False, False)
    torch.library.opcheck(torch.ops.linattn.chunk_fwd.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="inductor needs a C++ compiler")
def test_compile_inductor_default_backend():
    torch.manual_seed(0)
    model = TinyKDA()
    x = torch.randn(2, 40, 32)
    h0 = torch.randn(2, 2, 16, 16) * 0.1
    ref = _run(model, x, h0, disable_recompute=True)
    torch._dynamo.reset()
    got = _run(torch.compile(model, fullgraph=True), x, h0, disable_recompute=True)
    for a, b in zip(ref[:3], got[:3]):
        torch.testing.assert_close(a, b)


def test_compile_dynamic_shapes():
    """dynamic=True: symbolic T reaches the fake kernels (the saved-buffer size turns dynamic)."""
    torch.manual_seed(0)
    model = TinyKDA()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    for T in (40, 57):
        x = torch.randn(2, T, 32)
        h0 = torch.randn(2, 2, 16, 16) * 0.1
        for dr in (False, True):
            ref = _run(model, x, h0, disable_recompute=dr)
            got = _run(compiled, x, h0, disable_recompute=dr)
            for a, b in zip(ref[:3], got[:3]):
                torch.testing.assert_close(a, b)


def test_compile_varlen_disable_recompute_backward():
    t, opts = make_inputs("kda", cu_seqlens=[0, 10, 75], K=16, V=16)
    names = ["q", "k", "v", "g", "beta", "initial_state"]

    def f(q, k, v, g, beta, h0, cu):
        o, ht = linattn.chunk_kda(q, k, v, g, beta, initial_state=h0, cu_seqlens=cu,
                                  output_final_state=True, disable_recompute=True)
        return o.square().sum() + ht.sum()

    def grads(fn):
        leaves = [t[n].clone().requires_grad_() for n in names]
        fn(*leaves, t["cu_seqlens"]).backward()
        return [x.grad for x in leaves]

    torch._dynamo.reset()
    eager = grads(f)
    comp = grads(torch.compile(f, fullgraph=True, backend="aot_eager"))
    for a, b in zip(eager, comp):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("disable_recompute", [False, True])
def test_eager_path_equals_operator_path(monkeypatch, disable_recompute):
    """Plain eager calls skip torch.library's dispatch (_torch_ops._plain_eager): the same
    implementation, setup_context and backward as torch.ops.linattn.chunk_fwd, so the outputs and
    every gradient are bitwise those of the operator path; a TorchDispatchMode (as tracers use)
    takes the operator path."""
    from linattn import _torch_ops
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.manual_seed(0)
    model = TinyKDA()
    x = torch.randn(2, 40, 32)
    h0 = torch.randn(2, 2, 16, 16) * 0.1
    calls = {"op": 0}
    real = _torch_ops._plain_eager

    def counted(args):
        r = real(args)
        calls["op"] += 0 if r else 1
        return r

    monkeypatch.setattr(_torch_ops, "_plain_eager", counted)
    eager = _run(model, x, h0, disable_recompute=disable_recompute)
    assert calls["op"] == 0
    monkeypatch.setattr(_torch_ops, "_plain_eager", lambda args: False)
    op = _run(model, x, h0, disable_recompute=disable_recompute)
    for a, b in zip(eager[:3] + tuple(eager[3]), op[:3] + tuple(op[3])):
        assert torch.equal(a, b)
    monkeypatch.setattr(_torch_ops, "_plain_eager", counted)

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        moded = _run(model, x, h0, disable_recompute=disable_recompute)
    assert calls["op"] > 0
    for a, b in zip(eager[:3] + tuple(eager[3]), moded[:3] + tuple(moded[3])):
        assert torch.equal(a, b)
