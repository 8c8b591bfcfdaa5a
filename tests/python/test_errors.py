"""Errors: C++ Status codes become ValueError / NotImplementedError / RuntimeError with the C++
message; unsupported FLA arguments are refused, never ignored; device and dtype mismatches."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402

from helpers import make_inputs  # noqa: E402


@pytest.fixture
def kda():
    t, _ = make_inputs("kda", B=1, T=12, H=2, K=8, V=8, initial_state=False)
    return t


def run(t, **kw):
    return linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], **kw)


def test_shape_errors_are_value_errors(kda):
    with pytest.raises(ValueError, match="g must have shape"):
        linattn.chunk_kda(kda["q"], kda["k"], kda["v"], kda["g"][..., :4], kda["beta"])
    with pytest.raises(ValueError, match="multiple"):
        v = torch.randn(1, 12, 3, 8)
        linattn.chunk_kda(kda["q"], kda["k"], v, torch.zeros(1, 12, 3, 8), torch.rand(1, 12, 3))
    with pytest.raises(ValueError, match="initial_state"):
        run(kda, initial_state=torch.zeros(2, 2, 8, 8))


def test_dtype_mismatch(kda):
    # Float dtypes may differ as in FLA (test_fla_api_gaps.py); non-float ones are refused.
    with pytest.raises(ValueError, match="dtype"):
        linattn.chunk_kda(kda["q"], kda["k"], kda["v"].to(torch.int32), kda["g"], kda["beta"])
    with pytest.raises(ValueError, match="initial_state must be float32"):
        run(kda, initial_state=torch.zeros(1, 2, 8, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="cu_seqlens must be int32 or int64"):
        run(kda, cu_seqlens=torch.tensor([0.0, 12.0]))


def test_device_mismatch(kda):
    with pytest.raises(ValueError, match="is on meta"):
        linattn.chunk_kda(kda["q"], kda["k"], kda["v"], kda["g"], kda["beta"].to("meta"))
    with pytest.raises(ValueError, match="cu_seqlens_cpu must be a CPU tensor"):
        run(kda, cu_seqlens=torch.tensor([0, 12]), cu_seqlens_cpu=torch.tensor([0, 12], device="meta"))


def test_not_supported_is_not_implemented_error(kda):
    # (GLA and simple GLA split K > 256 into slices; the delta rule cannot be split)
    with pytest.raises(NotImplementedError, match="K = 300"):
        q = torch.randn(1, 4, 1, 300)
        linattn.chunk_kda(q, q, torch.randn(1, 4, 1, 8), torch.zeros(1, 4, 1, 300), torch.rand(1, 4, 1))
    # lower_bound is a KDA option: chunk_gdn has no such parameter, and the C++ core refuses
    # it for GDN with NotSupported
    t, _ = make_inputs("gdn", B=1, T=8, K=8, V=8, use_gate_in_kernel=True)
    with pytest.raises(TypeError):
        linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], lower_bound=-5.0)
    with pytest.raises(NotImplementedError, match="KDA only"):
        linattn.ops.forward_numpy("gdn", t["q"].numpy(), t["k"].numpy(), t["v"].numpy(),
                                  g=t["g"].numpy(), beta=t["beta"].numpy(), A_log=t["A_log"].numpy(),
                                  use_gate_in_kernel=True, lower_bound=-5.0)


def test_unsupported_fla_arguments(kda):
    # cp_context is supported (linattn.cp, tests/python/test_cp.py); an object that is not a
    # context is refused by name
    with pytest.raises(ValueError, match="cp_context"):
        run(kda, cp_context=object())
    t, _ = make_inputs("gdn", B=1, T=8, K=8, V=8)
    with pytest.raises(NotImplementedError, match="chunk_indices"):
        linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], chunk_indices=torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"`chunk_size` must be either 32 or 64"):
        run(kda, chunk_size=16)
    with pytest.raises(NotImplementedError, match="use_graph"):
        run(kda, use_graph=True)
    with pytest.raises(ValueError, match="head_first"):
        linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], head_first=True)
    with pytest.raises(NotImplementedError, match="gv"):
        linattn.fused_recurrent_gdn(t["q"], t["k"], t["v"], gv=torch.zeros(1, 8, 2, 8))
    with pytest.raises(ValueError, match="both gates"):  # g [B, T, HV] and gk [B, T, HV, K] must agree
        linattn.fused_recurrent_gdn(t["q"], t["k"], t["v"], g=t["g"], gk=torch.zeros(1, 8, 3, 8))
    with pytest.raises(ValueError, match="both gates"):
        linattn.fused_recurrent_gdn(t["q"], t["k"], t["v"], g=t["g"][..., None], gk=torch.zeros(1, 8, 2, 8))
    with pytest.raises(NotImplementedError, match="in-kernel gate"):
        linattn.fused_recurrent_gdn(t["q"], t["k"], t["v"], g=t["g"], gk=torch.zeros(1, 8, 2, 8),
                                    use_gate_in_kernel=True, A_log=torch.zeros(2))


def test_unknown_kwargs_raise_type_error(kda):
    with pytest.raises(TypeError, match="bogus"):
        run(kda, bogus=1)
    t, _ = make_inputs("simple_gla", B=1, T=8, K=8, V=8)
    with pytest.raises(TypeError, match="ssm_state_index"):
        linattn.fused_recurrent_kda(kda["q"], kda["k"], kda["v"], kda["g"], kda["beta"],
                                    ssm_state_index=torch.zeros(1))
    with pytest.raises(TypeError):
        linattn.chunk_gla(t["q"], t["k"], t["v"], torch.zeros(1, 8, 2, 8), bogus=True)


def test_options_never_silently_ignored(kda):
    # A_log without use_gate_in_kernel
    with pytest.raises(ValueError, match="A_log"):
        run(kda, A_log=torch.zeros(2))
    # allow_neg_eigval needs the beta sigmoid
    with pytest.raises(ValueError, match="allow_neg_eigval"):
        run(kda, allow_neg_eigval=True)
    # use_gate_in_kernel without A_log (and no lower_bound)
    with pytest.raises(ValueError, match="A_log"):
        run(kda, use_gate_in_kernel=True)
    with pytest.raises(ValueError, match="lower_bound"):
        run(kda, use_gate_in_kernel=True, lower_bound=-7.0)
    with pytest.raises(ValueError, match="safe_gate with use_gate_in_kernel needs lower_bound"):
        run(kda, safe_gate=True, use_gate_in_kernel=True, A_log=torch.zeros(2))
    with pytest.raises(ValueError, match="no effect"):
        linattn.fused_recurrent_kda(kda["q"], kda["k"], kda["v"], kda["g"], kda["beta"], lower_bound=-5.0)
    with pytest.raises(ValueError, match="disable_recompute"):
        run(kda, return_intermediate_states=True, disable_recompute=True)


def test_varlen_errors(kda):
    with pytest.raises(ValueError, match="batch size must be 1"):
        q = torch.randn(2, 6, 2, 8)
        linattn.chunk_gla(q, q, q, torch.zeros(2, 6, 2, 8), cu_seqlens=torch.tensor([0, 6]))
    with pytest.raises(ValueError, match="end at T"):
        run(kda, cu_seqlens=torch.tensor([0, 5, 11]))
    with pytest.raises(ValueError, match="non-decreasing"):
        run(kda, cu_seqlens=torch.tensor([0, 7, 5, 12]))
    with pytest.raises(ValueError, match="differs"):
        run(kda, cu_seqlens=torch.tensor([0, 5, 12]), cu_seqlens_cpu=torch.tensor([0, 6, 12]))
    with pytest.raises(ValueError, match="without cu_seqlens"):
        run(kda, cu_seqlens_cpu=torch.tensor([0, 12]))


def test_non_tensor_inputs(kda):
    with pytest.raises(TypeError, match="torch.Tensor"):
        linattn.chunk_kda(kda["q"].numpy(), kda["k"], kda["v"], kda["g"], kda["beta"])
    with pytest.raises(TypeError, match="beta"):
        linattn.chunk_kda(kda["q"], kda["k"], kda["v"], kda["g"], [1.0])


@pytest.mark.skipif(linattn.cuda_available(), reason="checks the error of a build without CUDA")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_without_cuda_backend(kda):
    with pytest.raises(NotImplementedError, match="no CUDA backend"):
        run({n: x.cuda() for n, x in kda.items()})


def test_backward_precision_values(kda):
    """backward_precision: the four names are accepted (the CPU backend ignores it: the same
    result), anything else is a ValueError; the Options binding takes the enum."""
    from linattn import ops

    o_auto, _ = run(kda)
    for name in ops.BACKWARD_PRECISIONS:
        o, _ = run(kda, backward_precision=name)
        assert torch.equal(o, o_auto)
    with pytest.raises(ValueError, match="backward_precision"):
        run(kda, backward_precision="chunked16")
    with pytest.raises(ValueError, match="backward_precision"):
        ops.make_options(backward_precision="token")
    opt = ops.make_options(backward_precision="fast16")
    assert opt.backward_precision == linattn._C.BackwardPrecision.fast16


def test_auto_precision_follows_the_decay_parameters_gradients():
    """auto keeps the float32 backward for the per-head sums (dA_log, ddt_bias, dg_gamma) only
    when one of those parameters takes a gradient; otherwise it is auto's choice without that
    clause, "split". Explicit names pass through unchanged."""
    from linattn._torch_ops import effective_backward_precision as eff

    p = torch.zeros(4)
    pg = torch.zeros(4, requires_grad=True)
    assert eff("auto", None, None, None) == "split"
    assert eff("auto", p, None, None) == "split"  # g_gamma given, frozen (FLA never differentiates it)
    assert eff("auto", None, p, p) == "split"  # frozen A_log / dt_bias
    assert eff("auto", pg, None, None) == "auto"
    assert eff("auto", None, p, pg) == "auto"
    with torch.no_grad():  # no graph: no gradient will be asked for
        assert eff("auto", pg, pg, pg) == "split"
    for name in ("split", "fast16", "float32"):
        assert eff(name, pg, pg, pg) == name
