"""torch.autograd.gradcheck in float64 on CPU (the CPU backend computes in float64 for
float64 inputs), for every family with its options. Small shapes: T <= 20, K, V <= 8."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import linattn  # noqa: E402

from helpers import make_inputs  # noqa: E402

FNS = {
    "kda": linattn.chunk_kda,
    "gdn": linattn.chunk_gated_delta_rule,
    "gla": linattn.chunk_gla,
    "simple_gla": linattn.chunk_simple_gla,
}

CASES = [
    ("kda", {}),
    ("kda", {"use_qk_l2norm_in_kernel": True, "use_beta_sigmoid_in_kernel": True, "G": 2}),
    ("kda", {"use_gate_in_kernel": True}),
    ("kda", {"use_gate_in_kernel": True, "lower_bound": -5.0, "safe_gate": True}),
    ("kda", {"use_gate_in_kernel": True, "lower_bound": -2.0, "A_log": False, "state_v_first": True}),
    ("kda", {"cu_seqlens": [0, 7, 20], "disable_recompute": True}),
    ("gdn", {}),
    ("gdn", {"use_gate_in_kernel": True, "use_qk_l2norm_in_kernel": True}),
    ("gdn", {"use_beta_sigmoid_in_kernel": True, "allow_neg_eigval": True, "G": 2}),
    ("gdn", {"cu_seqlens": [0, 11, 12, 19], "state_v_first": True}),
    ("gla", {}),
    ("gla", {"G": 2, "state_v_first": True, "disable_recompute": True}),
    ("gla", {"cu_seqlens": [0, 9, 17]}),
    ("simple_gla", {}),
    ("simple_gla", {"g_gamma": True}),
    ("simple_gla", {"g_gamma": True, "g": False, "cu_seqlens": [0, 5, 18]}),
]


def _ids():
    out = []
    for f, kw in CASES:
        parts = [k if v is True else f"{k}={v}" for k, v in kw.items()]
        out.append(f"{f}-{'-'.join(parts) or 'plain'}".replace(" ", ""))
    return out


@pytest.mark.parametrize("family,kw", CASES, ids=_ids())
def test_gradcheck(family, kw):
    kw = dict(kw)
    disable_recompute = kw.pop("disable_recompute", False)
    allow_neg = kw.pop("allow_neg_eigval", False)
    t, opts = make_inputs(family, B=2, T=20, H=1, K=8, V=6, dtype=torch.float64, seed=3, **kw)
    if allow_neg:
        opts["allow_neg_eigval"] = True
    names = [n for n, x in t.items() if n != "cu_seqlens"]
    fn = FNS[family]
    fixed = {"cu_seqlens": t.get("cu_seqlens")} if "cu_seqlens" in t else {}

    def f(*xs):
        d = dict(zip(names, xs))
        q, k, v = d.pop("q"), d.pop("k"), d.pop("v")
        o, ht = fn(q, k, v, **d, **fixed, **opts, output_final_state=True,
                   disable_recompute=disable_recompute)
        return o, ht

    xs = tuple(t[n].clone().requires_grad_() for n in names)
    assert torch.autograd.gradcheck(f, xs, eps=1e-6, atol=1e-6, rtol=1e-5)
