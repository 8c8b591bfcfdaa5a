"""The framework-free path: NumPy arrays through linattn.ops and the raw _C bindings."""

from __future__ import annotations

import numpy as np
import pytest

from linattn import _C, ops


def rel(x, ref):
    x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    if not np.isfinite(x).all():
        return np.inf
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


def inputs(rng, family, B=2, T=70, H=2, K=32, V=32, dtype=np.float32):
    q = rng.standard_normal((B, T, H, K))
    k = rng.standard_normal((B, T, H, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, T, H, V))
    gshape = (B, T, H, K) if family in ("kda", "gla") else (B, T, H)
    g = np.log(1 / (1 + np.exp(-rng.standard_normal(gshape)))) / 16  # logsigmoid / 16
    d = {"q": q.astype(dtype), "k": k.astype(dtype), "v": v.astype(dtype), "g": g.astype(np.float32),
         "initial_state": (rng.standard_normal((B, H, K, V)) * 0.1).astype(np.float32)}
    if family in ("kda", "gdn"):
        d["beta"] = rng.uniform(0.05, 0.95, (B, T, H)).astype(np.float32)
    return d


@pytest.mark.parametrize("family", ["kda", "gdn", "gla", "simple_gla"])
def test_forward_backward_numpy(rng, family):
    d = inputs(rng, family)
    q, k, v = d.pop("q"), d.pop("k"), d.pop("v")
    o, fs, h = ops.forward_numpy(family, q, k, v, output_final_state=True, **d)
    ro, rfs, _ = ops.reference_forward_numpy(family, q, k, v, output_final_state=True, **d)
    assert o.dtype == np.float32 and fs.dtype == np.float32 and h is None
    assert rel(o, ro) < 2e-3 and rel(fs, rfs) < 2e-3
    do = rng.standard_normal(o.shape).astype(np.float32)
    dht = rng.standard_normal(fs.shape).astype(np.float32)
    grads = ops.backward_numpy(family, q, k, v, do, dht=dht, **d)
    rgrads = ops.reference_backward_numpy(family, q, k, v, do, dht=dht, **d)
    assert set(grads) == set(rgrads)
    expect = {"dq", "dk", "dv", "dg", "dh0"} | ({"dbeta"} if family in ("kda", "gdn") else set())
    assert set(grads) == expect
    for n in grads:
        assert rel(grads[n], rgrads[n]) < 2e-3, n


def test_numpy_saved_buffer_roundtrip(rng):
    d = inputs(rng, "kda", T=100)
    q, k, v = d.pop("q"), d.pop("k"), d.pop("v")
    o, fs, h, saved = ops.forward_numpy("kda", q, k, v, disable_recompute=True, **d)
    do = rng.standard_normal(o.shape).astype(np.float32)
    g1 = ops.backward_numpy("kda", q, k, v, do, saved=saved, **d)
    g2 = ops.backward_numpy("kda", q, k, v, do, **d)
    for n in g1:
        np.testing.assert_allclose(g1[n], g2[n], rtol=1e-4, atol=1e-5)


def test_numpy_float64_and_options(rng):
    d = inputs(rng, "gdn", dtype=np.float64, T=40, K=16, V=16)
    for n in ("g", "beta", "initial_state"):
        d[n] = d[n].astype(np.float64)
    q, k, v = d.pop("q"), d.pop("k"), d.pop("v")
    opts = dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True,
                scale=0.3)
    o, fs, h = ops.forward_numpy("gdn", q, k, v, output_final_state=True,
                                 return_intermediate_states=True, **d, **opts)
    ro, rfs, rh = ops.reference_forward_numpy("gdn", q, k, v, output_final_state=True,
                                              return_intermediate_states=True, **d, **opts)
    assert o.dtype == np.float64
    assert rel(o, ro) < 1e-5 and rel(fs, rfs) < 1e-5 and rel(h, rh) < 1e-5


def test_poisoned_outputs_are_overwritten(rng):
    """Direct _C call with caller-allocated, NaN-filled outputs: every element is written."""
    d = inputs(rng, "kda", T=67)
    opt = ops.make_options()
    o = np.full_like(d["v"], np.nan)
    fs = np.full_like(d["initial_state"], np.nan)
    nt = _C.num_chunks(d["q"], d["k"], d["v"])
    h = np.full((2, nt // 2, 2, 32, 32), np.nan, np.float32)
    ws = np.empty(_C.forward_workspace_size(3, **d, options=opt), np.uint8)
    _C.forward(3, **d, o=o, final_state=fs, h=h, options=opt, workspace=ws)
    assert np.isfinite(o).all() and np.isfinite(fs).all() and np.isfinite(h).all()
    grads = {n: np.full_like(d[s], np.nan) for n, s in
             (("dq", "q"), ("dk", "k"), ("dv", "v"), ("dg", "g"), ("dbeta", "beta"), ("dh0", "initial_state"))}
    ws = np.empty(_C.backward_workspace_size(3, **d, options=opt), np.uint8)
    _C.backward(3, **d, d_o=np.ones_like(o), dht=np.ones_like(fs), **grads, options=opt, workspace=ws)
    for n, x in grads.items():
        assert np.isfinite(x).all(), n


def test_numpy_noncontiguous_and_lists(rng):
    d = inputs(rng, "gla", T=20, K=8, V=8)
    q = np.asfortranarray(d["q"])  # any layout: ops makes arrays contiguous
    o1, _, _ = ops.forward_numpy("gla", q, d["k"], d["v"], g=d["g"])
    o2, _, _ = ops.forward_numpy("gla", d["q"], d["k"], d["v"], g=d["g"])
    np.testing.assert_array_equal(o1, o2)


def test_numpy_errors(rng):
    d = inputs(rng, "gdn", T=10, K=8, V=8)
    q, k, v = d.pop("q"), d.pop("k"), d.pop("v")
    with pytest.raises(ValueError, match="beta"):
        ops.forward_numpy("gdn", q, k, v, g=d["g"])
    with pytest.raises(ValueError, match="unknown family"):
        ops.forward_numpy("foo", q, k, v)
    with pytest.raises(TypeError, match="unexpected"):
        ops.forward_numpy("gdn", q, k, v, gk=d["g"])
    # direct call with a too-small workspace: RuntimeError with the C++ message
    opt = ops.make_options()
    need = _C.forward_workspace_size(2, q, k, v, g=d["g"], beta=d["beta"], options=opt)
    if need > 0:
        with pytest.raises(RuntimeError, match="workspace"):
            _C.forward(2, q, k, v, g=d["g"], beta=d["beta"], o=np.empty_like(v), options=opt,
                       workspace=np.empty(need - 1, np.uint8))
    with pytest.raises(ValueError, match="dtype"):
        _C.forward(2, q, k, v, g=d["g"], beta=d["beta"], o=np.empty_like(v, dtype=np.complex64),
                   options=opt)
    with pytest.raises(NotImplementedError):
        big = np.ones((1, 4, 1, 300), np.float32)
        ops.forward_numpy("gla", big, big, big, g=np.zeros_like(big))


def test_raw_binding_sees_strides(rng):
    """The DLPack strides reach the C++ core: a non-contiguous view is refused by name."""
    d = inputs(rng, "gla", T=20, K=8, V=8)
    opt = ops.make_options()
    q_view = np.ascontiguousarray(d["q"].transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    with pytest.raises(ValueError, match="q must be contiguous"):
        _C.forward(1, q_view, d["k"], d["v"], g=d["g"], o=np.empty_like(d["v"]), options=opt)
    with pytest.raises(ValueError, match="o must have the shape"):
        _C.forward(1, d["q"], d["k"], d["v"], g=d["g"], o=np.empty((1, 2, 3, 4), np.float32),
                   options=opt)


def test_version_and_cuda_flag():
    import linattn

    assert linattn.__version__ == _C.version()
    assert isinstance(linattn.cuda_available(), bool)
