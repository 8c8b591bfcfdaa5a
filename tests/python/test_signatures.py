"""inspect.signature of every public function matches flash-linear-attention's: same
parameter names, order, kinds and defaults; linattn's extras only after FLA's parameters
(keyword-only or defaulted). FLA's signatures come from the table below (what CI checks);
when a local FLA copy exists (third_party_ref/fla or the device bundle's, never imported) the
test also parses it, so a drift between the table and FLA shows up here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

pytest.importorskip("torch")

import linattn  # noqa: E402

REQ = inspect.Parameter.empty

# FLA's public signatures: (positional-or-keyword parameters with defaults, has **kwargs).
FLA_SIGNATURES = {
    "chunk_kda": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", REQ), ("beta", REQ), ("scale", None),
         ("initial_state", None), ("output_final_state", False), ("use_qk_l2norm_in_kernel", False),
         ("use_gate_in_kernel", False), ("use_beta_sigmoid_in_kernel", False),
         ("allow_neg_eigval", False), ("safe_gate", False), ("lower_bound", None),
         ("disable_recompute", False), ("return_intermediate_states", False),
         ("state_v_first", False), ("cu_seqlens", None), ("cu_seqlens_cpu", None),
         ("cp_context", None), ("use_graph", False), ("max_num_seqs", None)],
        True,
    ),
    "fused_recurrent_kda": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", REQ), ("beta", REQ), ("A_log", None),
         ("dt_bias", None), ("scale", None), ("initial_state", None), ("output_final_state", False),
         ("use_qk_l2norm_in_kernel", False), ("use_gate_in_kernel", False),
         ("use_beta_sigmoid_in_kernel", False), ("allow_neg_eigval", False), ("lower_bound", None),
         ("state_v_first", False), ("cu_seqlens", None)],
        True,
    ),
    "fused_recurrent_kda_fwd": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", REQ), ("beta", REQ), ("A_log", None),
         ("dt_bias", None), ("initial_state", None), ("scale", None), ("output_final_state", False),
         ("inplace_final_state", True), ("state_v_first", False), ("cu_seqlens", None),
         ("ssm_state_indices", None), ("num_accepted_tokens", None),
         ("use_qk_l2norm_in_kernel", False), ("use_gate_in_kernel", False),
         ("use_beta_sigmoid_in_kernel", False), ("allow_neg_eigval", False), ("lower_bound", None),
         ("out", None)],
        True,
    ),
    "chunk_gated_delta_rule": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", REQ), ("beta", REQ), ("scale", None),
         ("initial_state", None), ("output_final_state", False), ("use_qk_l2norm_in_kernel", False),
         ("use_beta_sigmoid_in_kernel", False), ("allow_neg_eigval", False),
         ("state_v_first", False), ("cu_seqlens", None), ("cu_seqlens_cpu", None),
         ("chunk_indices", None), ("cp_context", None)],
        True,
    ),
    "fused_recurrent_gated_delta_rule": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", None), ("gk", None), ("gv", None),
         ("beta", None), ("scale", None), ("initial_state", None), ("output_final_state", False),
         ("use_qk_l2norm_in_kernel", False), ("use_gate_in_kernel", False), ("A_log", None),
         ("dt_bias", None), ("use_beta_sigmoid_in_kernel", False), ("allow_neg_eigval", False),
         ("state_v_first", False), ("cu_seqlens", None)],
        True,
    ),
    "chunk_gla": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", REQ), ("scale", None), ("initial_state", None),
         ("output_final_state", False), ("state_v_first", False), ("cu_seqlens", None),
         ("cu_seqlens_cpu", None)],
        False,
    ),
    "chunk_simple_gla": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", None), ("g_gamma", None), ("scale", None),
         ("initial_state", None), ("output_final_state", False), ("state_v_first", False),
         ("cu_seqlens", None), ("cu_seqlens_cpu", None)],
        True,
    ),
    "fused_recurrent_gla": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("gk", None), ("gv", None), ("scale", None),
         ("initial_state", None), ("output_final_state", False), ("reverse", False),
         ("state_v_first", False), ("cu_seqlens", None)],
        True,
    ),
    "fused_recurrent_simple_gla": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", None), ("g_gamma", None), ("scale", None),
         ("initial_state", None), ("output_final_state", False), ("reverse", False),
         ("state_v_first", False), ("cu_seqlens", None)],
        True,
    ),
    "fused_chunk_simple_gla": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", None), ("g_gamma", None), ("scale", None),
         ("initial_state", None), ("output_final_state", False), ("cu_seqlens", None)],
        False,
    ),
    "parallel_simple_gla": (
        [("q", REQ), ("k", REQ), ("v", REQ), ("g", None), ("scale", None), ("output_attentions", False),
         ("cu_seqlens", None), ("cu_seqlens_cpu", None)],
        False,
    ),
}

ALIASES = {"chunk_gdn": "chunk_gated_delta_rule",
           "fused_recurrent_gdn": "fused_recurrent_gated_delta_rule"}

# Keywords FLA reads out of **kwargs (documented there); linattn takes them explicitly.
FLA_KWARGS = {
    "chunk_kda": ["A_log", "dt_bias", "chunk_size"],
    "chunk_gated_delta_rule": ["use_gate_in_kernel", "A_log", "dt_bias", "chunk_size"],
    "chunk_simple_gla": ["chunk_size"],
}

FLA_FILES = {
    "chunk_kda": "kda/chunk.py",
    "fused_recurrent_kda": "kda/fused_recurrent.py",
    "fused_recurrent_kda_fwd": "kda/fused_recurrent.py",
    "chunk_gated_delta_rule": "gated_delta_rule/chunk.py",
    "fused_recurrent_gated_delta_rule": "gated_delta_rule/fused_recurrent.py",
    "chunk_gla": "gla/chunk.py",
    "chunk_simple_gla": "simple_gla/chunk.py",
    "fused_chunk_simple_gla": "simple_gla/fused_chunk.py",
    "parallel_simple_gla": "simple_gla/parallel.py",
    "fused_recurrent_gla": "gla/fused_recurrent.py",
    "fused_recurrent_simple_gla": "simple_gla/fused_recurrent.py",
}

_ROOT = Path(__file__).resolve().parents[2]
# a checkout in third_party_ref/fla, else the FLA release the device bundle carries
# (scripts/make_device_bundle.sh); neither is imported, only parsed
FLA_ROOT = next((d for d in (_ROOT / "third_party_ref" / "fla" / "ops",
                             _ROOT / ".device" / "fla-compat" / "site" / "fla" / "ops") if d.is_dir()),
                _ROOT / "third_party_ref" / "fla" / "ops")


def check_against(ours, fla_params, fla_var_kw):
    sig = inspect.signature(ours)
    params = list(sig.parameters.values())
    n = len(fla_params)
    assert len(params) >= n, f"{ours.__name__}: fewer parameters than FLA"
    for p, (name, default) in zip(params[:n], fla_params):
        assert p.name == name, f"{ours.__name__}: parameter {p.name!r} where FLA has {name!r}"
        assert p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD, f"{ours.__name__}.{name}: kind {p.kind}"
        assert p.default is default or p.default == default, (
            f"{ours.__name__}.{name}: default {p.default!r}, FLA has {default!r}")
    for p in params[n:]:  # linattn's extras
        assert p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD) or \
            p.default is not REQ, f"{ours.__name__}: extra parameter {p.name} must be optional"
    has_var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)
    assert has_var_kw == fla_var_kw, f"{ours.__name__}: **kwargs presence differs from FLA"


@pytest.mark.parametrize("name", sorted(FLA_SIGNATURES))
def test_signature_matches_table(name):
    check_against(getattr(linattn, name), *FLA_SIGNATURES[name])


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases(alias):
    assert getattr(linattn, alias) is getattr(linattn, ALIASES[alias])


@pytest.mark.parametrize("name", sorted(FLA_KWARGS))
def test_fla_kwargs_accepted(name):
    params = inspect.signature(getattr(linattn, name)).parameters
    for kw in FLA_KWARGS[name]:
        assert kw in params, f"{name}: FLA's keyword {kw} is not a parameter"


def _parse_fla(path: Path, name: str):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            pos = a.posonlyargs + a.args
            defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
            out = []
            for p, d in zip(pos, defaults):
                out.append((p.arg, REQ if d is None else ast.literal_eval(d)))
            return out, a.kwarg is not None
    raise LookupError(f"{name} not found in {path}")


@pytest.mark.skipif(not FLA_ROOT.is_dir(), reason="no local FLA copy (third_party_ref/fla or .device/fla-compat/site/fla)")
@pytest.mark.parametrize("name", sorted(FLA_FILES))
def test_signature_matches_local_fla(name):
    params, var_kw = _parse_fla(FLA_ROOT / FLA_FILES[name], name)
    assert (params, var_kw) == FLA_SIGNATURES[name], f"{name}: the table differs from local FLA"
    check_against(getattr(linattn, name), params, var_kw)


def test_docstrings_present():
    for name in list(FLA_SIGNATURES):
        doc = getattr(linattn, name).__doc__
        assert doc and "Returns" in doc, name
