"""The implementations being compared: linattn (ours), FLA, the mock (torch recurrence), and the
float64 reference provider."""
from __future__ import annotations

import importlib
import os
import sys
from typing import Callable

import torch

from . import problems, reference
from .measure import first_line, rel_err

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Impl:
    """name + one FLA-signature function per family (or the reason there is none)."""

    def __init__(self, name: str, version: str | None = None):
        self.name = name
        self.version = version
        self.fns: dict[str, Callable] = {}
        self.missing: dict[str, str] = {}  # family -> status text ("not importable: ...")

    def get(self, family: str):
        if family in self.fns:
            return self.fns[family], None
        return None, self.missing.get(family, "not available")


def load_linattn(extra_path: str | None) -> tuple[Impl, object | None]:
    if extra_path:
        sys.path.insert(0, os.path.abspath(extra_path))
    impl = Impl("linattn")
    try:
        mod = importlib.import_module("linattn")
    except Exception as e:  # noqa: BLE001
        for fam in problems.FAMILIES:
            impl.missing[fam] = f"not importable: {first_line(e)}"
        return impl, None
    impl.version = str(getattr(mod, "__version__", None) or _call(getattr(mod, "version", None)) or "?")
    for fam, (_, _, ours) in problems.FAMILIES.items():
        fn = getattr(mod, ours, None)
        if fn is None:
            impl.missing[fam] = f"not implemented (no linattn.{ours})"
        else:
            impl.fns[fam] = fn
    return impl, mod


def _call(f):
    try:
        return f() if callable(f) else None
    except Exception:  # noqa: BLE001
        return None


def load_fla(fla_path: str | None) -> Impl:
    impl = Impl("FLA")
    try:
        importlib.import_module("fla")
    except Exception:  # noqa: BLE001
        path = fla_path or os.path.join(REPO, "third_party_ref")
        if os.path.isdir(os.path.join(path, "fla")):
            sys.path.insert(0, path)
    for fam, (modname, fname, _) in problems.FAMILIES.items():
        try:
            mod = importlib.import_module(modname)
            impl.fns[fam] = getattr(mod, fname)
        except Exception as e:  # noqa: BLE001
            impl.missing[fam] = f"not importable: {first_line(e)}"
    try:
        impl.version = importlib.import_module("fla").__version__
    except Exception:  # noqa: BLE001
        impl.version = None
    return impl


def mock_impl(name: str, compute_dtype=torch.float32) -> Impl:
    impl = Impl(name, "torch token recurrence (mock)")
    for fam in problems.FAMILIES:
        impl.fns[fam] = reference.make_fla_signature_op(fam, compute_dtype)
    return impl


# ------------------------------------------------------------------ float64 reference


class Reference:
    """Computes o and the gradients of a (reduced) problem in float64.

    Prefers the float64 reference the linattn package exposes (linattn.reference.forward /
    .backward: the C++ token recurrence, CPU, no autograd), after checking that it agrees with
    the torch recurrence of reference.py on a tiny problem of each family; otherwise (or if it
    fails) the torch recurrence in float64 on `device`, differentiated by autograd.
    """

    def __init__(self, linattn_mod, device: torch.device):
        self.device = device
        self.mod = None
        self.families: set[str] = set()
        self.label = "torch float64 token recurrence (bench/benchlib/reference.py), autograd for gradients"
        self.notes: list[str] = []
        mod = getattr(linattn_mod, "reference", None) if linattn_mod is not None else None
        if mod is None or not hasattr(mod, "forward"):
            if linattn_mod is not None:
                self.notes.append("linattn.reference.forward not found: using the torch float64 recurrence")
            return
        self.mod = mod
        for fam in problems.FAMILIES:
            if self._agrees(fam):
                self.families.add(fam)
        if self.families:
            self.label = ("linattn.reference (C++ float64 token recurrence) for "
                          + ", ".join(sorted(self.families))
                          + ("" if len(self.families) == 4 else "; torch float64 recurrence for the others"))

    def _agrees(self, fam: str) -> bool:
        for var in [v for v in problems.gpu_variants() if v.family == fam]:
            var = var.with_heads(1, 2 if var.HV != var.H else 1, 16, 16)
            shape = problems.varlen_shape("random", 3, 150)
            x = problems.make_inputs(var, shape, device="cpu", dtype=torch.float64, gate_dtype=torch.float64,
                                     beta_dtype=torch.float64, seed=5)
            do = problems.make_do(var, shape, device="cpu", dtype=torch.float64, seed=5)
            try:
                mine = self._run_linattn(var, shape, x, do, True)
            except Exception as e:  # noqa: BLE001
                self.notes.append(f"linattn.reference not used for {var.key}: {first_line(e)}")
                return False
            want = self._run_torch(var, shape, x, do, True, torch.device("cpu"))
            for n, r in want.items():
                err = rel_err(mine.get(n), r) if r is not None else 0.0
                if err is None or not err < 1e-9:
                    self.notes.append(f"linattn.reference not used for {var.key}: {n} differs from the "
                                      f"torch recurrence (rel. error {err})")
                    return False
        return True

    def _run_linattn(self, var, shape, x, do, grads):
        kw = {n: t.detach() for n, t in x.items()}
        kw.update(var.options())
        cu = shape.cu_seqlens()
        if cu is not None:
            kw["cu_seqlens"] = torch.tensor(cu, dtype=torch.long)
        q, k, v = kw.pop("q"), kw.pop("k"), kw.pop("v")
        o = self.mod.forward(var.family, q, k, v, **kw)[0]
        out = {"o": o.to(torch.float64)}
        if grads:
            gs = self.mod.backward(var.family, q, k, v, do.detach(), **kw)
            for n in x:
                if n in problems.NO_GRAD_INPUTS:
                    continue
                gn = problems.GRAD_NAMES[n]
                out[gn] = None if gs.get(gn) is None else gs[gn].to(torch.float64)
        return out

    def run(self, var: problems.Variant, shape: problems.Shape, x: dict[str, torch.Tensor],
            do: torch.Tensor, grads: bool) -> tuple[dict[str, torch.Tensor], str]:
        """{'o': ..., 'dq': ..., ...} in float64 on the CPU, and which provider computed it."""
        if var.family in self.families:
            try:
                return self._run_linattn(var, shape, x, do, grads), "linattn.reference"
            except Exception as e:  # noqa: BLE001
                self.notes.append(f"linattn.reference failed on {var.key} {shape.key}: {first_line(e)}")
        return self._run_torch(var, shape, x, do, grads, self.device), "torch recurrence"

    @staticmethod
    def _run_torch(var, shape, x, do, grads, dev):
        fn = reference.make_fla_signature_op(var.family, torch.float64)
        x64 = {n: t.detach().to(dev, torch.float64).requires_grad_(grads and n not in problems.NO_GRAD_INPUTS)
               for n, t in x.items()}
        cu = shape.cu_seqlens()
        cu_t = None if cu is None else torch.tensor(cu, dtype=torch.long)
        with torch.set_grad_enabled(grads):
            o = problems.call_op(fn, var, x64, None if cu_t is None else cu_t.to(dev), cu_t)
        out = {"o": o.detach().to(torch.float64)}
        if grads:
            names = [n for n in x64 if n not in problems.NO_GRAD_INPUTS]
            gs = torch.autograd.grad(o, [x64[n] for n in names], do.to(dev, torch.float64), allow_unused=True)
            for n, gr in zip(names, gs):
                out[problems.GRAD_NAMES[n]] = None if gr is None else gr.to(torch.float64)
        return {n: (None if t is None else t.cpu()) for n, t in out.items()}
