"""Head sizes the CUDA kernels lack (K, V not in {64, 128, 256}) run zero-padded to the next size
they take (``linattn._torch_ops._run_padded``). The padding is exact; these tests force it on the
CPU (which takes any size unpadded) and compare the padded call with the unpadded one, outputs,
states and every gradient, in float64."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402
from linattn import _torch_ops  # noqa: E402

from helpers import make_inputs  # noqa: E402
from test_torch_cpu import GRAD_OF, call  # noqa: E402

CASES = [
    # family, K, V, make_inputs options
    ("kda", 60, 100, dict(use_qk_l2norm_in_kernel=True)),
    ("kda", 100, 64, dict(use_gate_in_kernel=True)),  # dt_bias per key, padded
    ("kda", 60, 60, dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True, state_v_first=True)),
    ("kda", 32, 48, dict(cu_seqlens=[0, 5, 5, 70, 133])),  # an empty sequence
    ("gdn", 100, 100, dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True)),
    ("gdn", 64, 40, dict(state_v_first=True)),
    ("gla", 60, 100, dict()),
    ("gla", 300, 60, dict()),  # K > 256: key slices of 256 + 44, the 44 padded
    ("simple_gla", 100, 60, dict(g_gamma=True)),
    ("simple_gla", 48, 64, dict(g_gamma=True, g=False, cu_seqlens=[0, 1, 64, 64, 150])),
]


def _run(family, t, opts, padded, monkeypatch, **extra):
    monkeypatch.setattr(_torch_ops, "_needs_padding", lambda _t: padded)
    xs = {n: (x.clone().requires_grad_() if n != "cu_seqlens" else x) for n, x in t.items()}
    o, fs = call(family, xs, opts, output_final_state=True, **extra)
    (o.square().sum() + (fs * fs.detach().sin()).sum()).backward()
    grads = {n: x.grad for n, x in xs.items() if n != "cu_seqlens"}
    with torch.inference_mode():
        _, _, h = call(family, t, opts, return_intermediate_states=True, **extra)
    return o.detach(), fs.detach(), h, grads


@pytest.mark.parametrize("family,K,V,kw", CASES, ids=[f"{c[0]}-K{c[1]}-V{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_padded_call_equals_unpadded(family, K, V, kw, monkeypatch):
    t, opts = make_inputs(family, K=K, V=V, T=70, dtype=torch.float64, seed=K + V, **kw)
    ref = _run(family, t, opts, False, monkeypatch)
    got = _run(family, t, opts, True, monkeypatch)
    for name, x, y in zip(("o", "final_state", "h"), got[:3], ref[:3]):
        assert x.shape == y.shape, name
        assert x.is_contiguous(), name
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12, msg=name)
    assert got[3].keys() == ref[3].keys()
    for n in ref[3]:
        assert got[3][n] is not None and ref[3][n] is not None, GRAD_OF[n]
        torch.testing.assert_close(got[3][n], ref[3][n], rtol=1e-10, atol=1e-12, msg=GRAD_OF[n])


def test_padding_is_not_applied_where_the_kernels_take_the_size(monkeypatch):
    seen = []
    real = _torch_ops.run_forward

    def spy(family, q, k, v, **kw):
        seen.append((q.shape[-1], v.shape[-1]))
        return real(family, q, k, v, **kw)

    monkeypatch.setattr(_torch_ops, "run_forward", spy)
    monkeypatch.setattr(_torch_ops, "_needs_padding", lambda _t: True)
    for K, V, want in ((64, 128, (64, 128)), (60, 128, (64, 128)), (128, 100, (128, 128)), (200, 33, (256, 64))):
        t, opts = make_inputs("gla", K=K, V=V, T=9, B=1, initial_state=False)
        with torch.inference_mode():
            o, _ = call("gla", t, opts)
        assert o.shape[-1] == V
        assert seen[-1] == want


@pytest.mark.parametrize("what", ["g", "v", "initial_state"])
def test_bad_shapes_are_reported_in_the_callers_sizes(what, monkeypatch):
    # shapes that do not fit together are not padded: the error names K = 60, not the padded 64
    monkeypatch.setattr(_torch_ops, "_needs_padding", lambda _t: True)
    t, opts = make_inputs("gla", K=60, V=100, T=8, B=1)
    if what == "g":
        t["g"] = t["g"][..., :59]
    elif what == "v":
        t["v"] = t["v"][:, :7]
    else:
        t["initial_state"] = t["initial_state"][..., :99]
    with pytest.raises(ValueError) as e:
        call("gla", t, opts)
    assert "64" not in str(e.value) and "128" not in str(e.value), str(e.value)
