"""tools/precision/chunk_bwd_emulation.py: exact without rounding, plausibly inexact with it."""

import importlib.util
import pathlib

import numpy as np
import pytest

_PATH = pathlib.Path(__file__).resolve().parents[2] / "tools" / "precision" / "chunk_bwd_emulation.py"
_spec = importlib.util.spec_from_file_location("chunk_bwd_emulation", _PATH)
emu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(emu)

# Several chunks, a partial last chunk, a one-token and an empty sequence, in-kernel gates, h0, dht.
PROBLEMS = [
    emu.make_problem("kda", 150, 16, 32, 2, "lowerbound", True, [0, 1, 64, 64, 129, 150]),
    emu.make_problem("kda", 130, 16, 32, 1, "softplus", False),
    emu.make_problem("gdn", 150, 16, 32, 2, "softplus", True, [0, 70, 71, 150]),
    emu.make_problem("gdn", 130, 16, 32, 1, "raw", False),
]


def _loss(prob, x):
    """Forward of the token recurrence; loss = <dO, o> + <dht, S_T> (its gradients are the backward)."""
    g, _, _ = emu.gate_forward(prob, x)
    beta = emu.sigmoid(x["beta"]) if prob["beta_sigmoid"] else x["beta"]
    qh = x["q"] / np.sqrt((x["q"] ** 2).sum(-1, keepdims=True) + 1e-6)
    kh = x["k"] / np.sqrt((x["k"] ** 2).sum(-1, keepdims=True) + 1e-6)
    s, cu, total = prob["K"] ** -0.5, prob["cu"], 0.0
    for h in range(prob["H"]):
        for n in range(len(cu) - 1):
            S = x["h0"][n, h]
            for t in range(cu[n], cu[n + 1]):
                Sd = np.exp(g[t, h])[:, None] * S
                S = Sd + beta[t, h] * np.outer(kh[t, h], x["v"][t, h] - Sd.T @ kh[t, h])
                total += x["do"][t, h] @ (s * S.T @ qh[t, h])
            total += (x["dht"][n, h] * S).sum()
    return total


INPUT_OF = {"dq": "q", "dk": "k", "dv": "v", "dbeta": "beta", "dg": "g", "dh0": "h0",
            "dA_log": "A_log", "ddt_bias": "dt_bias"}


@pytest.mark.parametrize("family,gate", [("kda", "lowerbound"), ("gdn", "softplus"), ("kda", "raw")])
def test_token_reference_matches_finite_differences(family, gate):
    prob = emu.make_problem(family, 5, 4, 3, 1, gate, True, [0, 2, 5])
    x = emu.make_inputs(prob, np.random.default_rng(1))
    grads = emu.token_backward(prob, x)
    eps = 1e-6
    for name, arr in grads.items():
        inp = x[INPUT_OF[name]]
        for idx in list(np.ndindex(inp.shape))[:: max(1, inp.size // 6)]:
            xp = {k: v.copy() for k, v in x.items()}
            xm = {k: v.copy() for k, v in x.items()}
            xp[INPUT_OF[name]][idx] += eps
            xm[INPUT_OF[name]][idx] -= eps
            fd = (_loss(prob, xp) - _loss(prob, xm)) / (2 * eps)
            assert abs(fd - arr[idx]) <= 1e-6 * max(1.0, abs(fd)), (name, idx, fd, arr[idx])


@pytest.mark.parametrize("prob", PROBLEMS, ids=lambda p: f"{p['family']}-{p['gate']}")
def test_unrounded_emulation_is_exact(prob):
    x = emu.make_inputs(prob, np.random.default_rng(0))
    ref = emu.token_backward(prob, x)
    got = emu.chunked_backward(prob, x, emu.Rounding())
    assert set(got) == set(ref)
    for name in ref:
        assert emu.rel_err(got[name], ref[name]) <= 1e-10, name


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("prob", PROBLEMS[:3:2], ids=lambda p: p["family"])
def test_rounded_emulation_error_is_plausible(prob, dtype):
    x = emu.make_inputs(prob, np.random.default_rng(0), dtype)
    ref = emu.token_backward(prob, x)
    got = emu.chunked_backward(prob, x, emu.Rounding(emu.SITES, dtype))
    lo = 1e-4 if dtype == "bf16" else 1e-5  # fp16 has 3 more mantissa bits
    for name in ("dq", "dk", "dv"):
        assert lo <= emu.rel_err(got[name], ref[name]) <= 3e-2, name


def test_each_site_is_applied():
    prob = PROBLEMS[0]
    x = emu.make_inputs(prob, np.random.default_rng(0))
    exact = emu.chunked_backward(prob, x, emu.Rounding())
    for site in emu.SITES:
        got = emu.chunked_backward(prob, x, emu.Rounding({site}))
        assert any(not np.array_equal(got[n], exact[n]) for n in exact), site


def test_parse_sites():
    assert emu.parse_sites("none") == set()
    assert emu.parse_sites("all") == set(emu.SITES)
    assert emu.parse_sites("all,-dN,-KgT") == set(emu.SITES) - {"dN", "KgT"}
    assert emu.parse_sites("dN,KgT") == {"dN", "KgT"}
    with pytest.raises(ValueError):
        emu.Rounding({"nope"})


def test_bf16_rounds_to_nearest_even():
    one_ulp = 2.0 ** -7
    assert emu.bf16(1 + one_ulp / 2) == 1.0  # tie, to even
    assert emu.bf16(1 + 3 * one_ulp / 2) == 1 + 2 * one_ulp  # tie, to even
    assert emu.bf16(1 + 0.6 * one_ulp) == 1 + one_ulp


def test_tf32x3_operand_models():
    """The float32 form's 3xTF32 operand models: big + small within 2^-22 (rounded big) and 2^-21
    (truncated big) and 2^-20 (both parts truncated, today's mma.cuh) of the float32 value, exact on
    TF32 values, signs kept; and bf16x2 (hi + lo bfloat16 halves) within 2^-17."""
    r = np.random.default_rng(3).standard_normal(20000).astype(np.float32).astype(np.float64)
    r = np.concatenate([r, r * 1e-30, r * 1e30, [0.0, 1.0, -2.5]])
    for fn, bound in ((emu.tf32x3, 2.0**-22), (emu.tf32x3t, 2.0**-21), (emu.tf32x3tt, 2.0**-20), (emu.bf16x2, 2.0**-17)):
        got = fn(r)
        assert np.all(np.abs(got - r) <= bound * np.abs(r))
        assert np.all(np.sign(got) == np.sign(r))
        exact = emu._tf32_trunc(r)  # already TF32: represented exactly
        assert np.array_equal(fn(exact), exact)


def test_plain_sites_round_to_the_plain_type():
    # --plain: those sites (of the switched-on ones) take one 16-bit rounding, the rest the site dtype
    x = np.array([1.0 + 2.0**-10, -3.0 + 2.0**-12, 0.1])
    rnd = emu.Rounding({"W", "U"}, "bf16x2", plain={"W", "Qg"})
    assert rnd.plain == frozenset({"W"})  # Qg is not switched on: passes through exactly
    np.testing.assert_array_equal(rnd(x, "W"), emu.bf16(x))
    np.testing.assert_array_equal(rnd(x, "U"), emu.bf16x2(x))
    np.testing.assert_array_equal(rnd(x, "Qg"), x)
    assert np.any(emu.bf16(x) != emu.bf16x2(x))  # the two roundings differ on these values
    with pytest.raises(ValueError):
        emu.Rounding({"W"}, "bf16x2", plain={"nope"})
