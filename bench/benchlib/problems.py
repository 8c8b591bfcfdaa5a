"""Operator variants, shapes, input generation and the calling convention (FLA's signatures).

Everything here is device-agnostic: the same code builds the GPU problems, the CPU-section
problems and the tiny problems of the --smoke test.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

CHUNK = 64

# ------------------------------------------------------------------ operators

# family -> (FLA module, FLA function name, linattn function name)
FAMILIES = {
    "kda": ("fla.ops.kda", "chunk_kda", "chunk_kda"),
    "gdn": ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule", "chunk_gated_delta_rule"),
    "gla": ("fla.ops.gla", "chunk_gla", "chunk_gla"),
    "simple_gla": ("fla.ops.simple_gla", "chunk_simple_gla", "chunk_simple_gla"),
}
DELTA_FAMILIES = ("kda", "gdn")
PER_CHANNEL_GATE = ("kda", "gla")  # g: [B, T, HV, K]; otherwise [B, T, HV]


@dataclasses.dataclass(frozen=True)
class Variant:
    """One operator with one set of options at one head configuration."""

    key: str  # unique id, used by --ops filters and in the JSON
    family: str
    label: str  # human-readable
    H: int = 32
    HV: int = 32
    K: int = 128
    V: int = 128
    gate_in_kernel: bool = False
    safe_gate: bool = False
    lower_bound: float | None = None
    l2norm: bool = False  # use_qk_l2norm_in_kernel (delta rules: keeps the recurrence stable)
    disable_recompute: bool = False  # the forward keeps its intermediates for the backward
    g_gamma: bool = False  # simple GLA: a constant log decay per head instead of g (RetNet's gate)

    def with_heads(self, H: int, HV: int, K: int, V: int) -> "Variant":
        return dataclasses.replace(self, H=H, HV=HV, K=K, V=V)

    def options(self) -> dict[str, Any]:
        """Keyword options passed to both implementations (FLA's names)."""
        o: dict[str, Any] = {}
        if self.family in DELTA_FAMILIES:
            o["use_qk_l2norm_in_kernel"] = self.l2norm
        if self.family == "kda":
            o["use_gate_in_kernel"] = self.gate_in_kernel
            o["safe_gate"] = self.safe_gate
            o["lower_bound"] = self.lower_bound
            if self.disable_recompute:
                o["disable_recompute"] = True
        elif self.family == "gdn" and self.gate_in_kernel:
            o["use_gate_in_kernel"] = True
        return o


def gpu_variants() -> list[Variant]:
    """The GPU suite's operator variants, in run order (most important first)."""
    return [
        Variant("kda", "kda", "KDA", l2norm=True),
        Variant("kda_safe_gate_ik", "kda", "KDA safe_gate (L=-5) + in-kernel gate", gate_in_kernel=True,
                safe_gate=True, lower_bound=-5.0, l2norm=True),
        Variant("gdn", "gdn", "GDN", l2norm=True),
        Variant("gla", "gla", "GLA"),
        Variant("simple_gla", "simple_gla", "simple GLA"),
        Variant("kda_ik", "kda", "KDA in-kernel gate", gate_in_kernel=True, l2norm=True),
        Variant("kda_safe_gate", "kda", "KDA safe_gate (L=-5)", safe_gate=True, lower_bound=-5.0, l2norm=True),
        Variant("gdn_gva", "gdn", "GDN GVA (HV = 2H)", H=16, HV=32, l2norm=True),
        Variant("kda_dr", "kda", "KDA disable_recompute", l2norm=True, disable_recompute=True),
        Variant("simple_gla_gamma", "simple_gla", "simple GLA, g_gamma alone", g_gamma=True),
    ]


# ------------------------------------------------------------------ shapes


@dataclasses.dataclass(frozen=True)
class Shape:
    key: str  # unique id
    label: str
    B: int
    T: int  # per-batch length (total tokens with cu_seqlens, B == 1)
    seqlens: tuple[int, ...] | None = None  # varlen: the sequence lengths
    dist: str | None = None  # varlen distribution name

    @property
    def varlen(self) -> bool:
        return self.seqlens is not None

    @property
    def tokens(self) -> int:
        return self.B * self.T

    def cu_seqlens(self) -> list[int] | None:
        if self.seqlens is None:
            return None
        return [0] + list(np.cumsum(self.seqlens).tolist())

    def sequence_lengths(self) -> list[int]:
        return list(self.seqlens) if self.seqlens is not None else [self.T] * self.B


def fixed_shape(B: int, T: int) -> Shape:
    return Shape(f"{B}x{T}", f"{B}×{T}", B, T)


def varlen_lengths(dist: str, n: int, total: int, seed: int) -> list[int]:
    """n positive lengths summing to total. Fixed RNG seed per (dist, n, total).

    uniform: total // n each, the last takes the remainder.
    random:  n - 1 distinct cut points drawn uniformly from 1..total-1.
    skewed:  the last sequence holds half the tokens, the others share the rest evenly.
    """
    if dist == "uniform":
        lens = [total // n] * n
        lens[-1] += total - sum(lens)
    elif dist == "random":
        rng = np.random.default_rng(seed)
        cuts = np.sort(rng.choice(np.arange(1, total), size=n - 1, replace=False))
        lens = np.diff(np.concatenate([[0], cuts, [total]])).tolist()
    elif dist == "skewed":
        long = total // 2
        short = (total - long) // (n - 1)
        lens = [short] * (n - 1) + [total - short * (n - 1)]
    else:
        raise ValueError(dist)
    assert sum(lens) == total and min(lens) > 0, (dist, n, total, lens)
    return [int(x) for x in lens]


def varlen_shape(dist: str, n: int, total: int) -> Shape:
    seed = 1000 * n + total + {"uniform": 0, "random": 1, "skewed": 2}[dist]
    lens = varlen_lengths(dist, n, total, seed)
    label = f"{dist} {n} seqs T={total} [{min(lens)}..{max(lens)}]"
    return Shape(f"varlen-{dist}-{n}-{total}", label, 1, total, tuple(lens), dist)


FIXED_FULL = [(1, 8192), (2, 8192), (8, 4096), (1, 32768)]
FIXED_QUICK = [(1, 8192), (8, 4096)]
VARLEN_N = [10, 20]
VARLEN_TOTALS = [4096, 8192, 16384]
VARLEN_DISTS = ["uniform", "random", "skewed"]
# variants that get the whole varlen grid in full mode; the others get the "random" column only
VARLEN_FULL_GRID = ("kda", "kda_safe_gate_ik", "gdn")


# seed 003's 15-sequence varlen layout (its cu_seqlens diffs, 8192 tokens)
SEED003_LENS = (494, 510, 557, 347, 332, 609, 267, 980, 890, 640, 464, 628, 526, 626, 322)


def issue_items() -> list[tuple[Variant, Shape]]:
    """The core v2 issue's own rows: few chains (B=1, T=16384, H=HV=16) for KDA and GDN, and seed
    003's 15-sequence layout with every length x4 (32768 tokens) for KDA (plain and safe_gate +
    in-kernel gate) and GDN. Selected by --ops with the variant keys kda_h16, gdn_h16 or the shape
    key varlen-seed003x4."""
    by = {v.key: v for v in gpu_variants()}
    few = fixed_shape(1, 16384)
    items = [(dataclasses.replace(by["kda"], key="kda_h16", label="KDA, H=16 (few chains)", H=16, HV=16), few),
             (dataclasses.replace(by["gdn"], key="gdn_h16", label="GDN, H=16 (few chains)", H=16, HV=16), few)]
    lens = tuple(4 * n for n in SEED003_LENS)
    v003 = Shape("varlen-seed003x4", f"seed 003's 15 seqs x4 T={sum(lens)} [{min(lens)}..{max(lens)}]", 1,
                 sum(lens), lens, "seed003")
    items += [(by[k], v003) for k in ("kda", "kda_safe_gate_ik", "gdn")]
    return items


def issue_variants() -> list[Variant]:
    """The variants only issue_items() has."""
    return [v for v, _ in issue_items() if v.key not in {g.key for g in gpu_variants()}]


def gpu_work(quick: bool, varlen_all: bool) -> list[tuple[Variant, Shape]]:
    """(variant, shape) work items in run order: all fixed shapes first, the issue's rows, then varlen."""
    variants = gpu_variants()
    items: list[tuple[Variant, Shape]] = []
    if quick:
        quick_variants = ("kda", "kda_safe_gate_ik", "gdn", "gla", "simple_gla")
        for v in variants:
            if v.key in quick_variants:
                for B, T in FIXED_QUICK:
                    items.append((v, fixed_shape(B, T)))
        for v in variants:
            if v.key in ("kda", "gdn"):
                items.append((v, varlen_shape("random", 20, 8192)))
        return items
    for B, T in FIXED_FULL:
        for v in variants:
            items.append((v, fixed_shape(B, T)))
    items += issue_items()
    for total in VARLEN_TOTALS:
        for n in VARLEN_N:
            for dist in VARLEN_DISTS:
                for v in variants:
                    if varlen_all or v.key in VARLEN_FULL_GRID or dist == "random":
                        items.append((v, varlen_shape(dist, n, total)))
    return items


def smoke_work() -> list[tuple[Variant, Shape]]:
    """Tiny problems for --smoke (CPU or GPU): every variant, two fixed and two varlen shapes."""
    items = []
    for v in gpu_variants():
        H, HV = (1, 2) if v.H != v.HV else (2, 2)
        vs = v.with_heads(H, HV, 16, 16)
        for s in (fixed_shape(1, 160), fixed_shape(2, 64), varlen_shape("random", 3, 200),
                  varlen_shape("skewed", 3, 150)):
            items.append((vs, s))
    return items


def cpu_work() -> list[tuple[Variant, Shape, tuple[str, ...]]]:
    """The CPU section: (variant, shape, directions)."""
    out = []
    for v in gpu_variants():
        if v.key in ("kda", "gdn", "gla", "simple_gla"):
            out.append((v.with_heads(4, 4, 64, 64), fixed_shape(1, 1024), ("fwd", "fwdbwd")))
    kda = gpu_variants()[0]
    out.append((kda.with_heads(8, 8, 128, 128), fixed_shape(1, 4096), ("fwdbwd",)))
    return out


# ------------------------------------------------------------------ inputs

GRAD_NAMES = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta", "A_log": "dA_log",
              "dt_bias": "ddt_bias"}
# Inputs that take no gradient: FLA never differentiates g_gamma (a fixed decay per head), so
# neither implementation is asked for one.
NO_GRAD_INPUTS = ("g_gamma",)


def make_inputs(var: Variant, shape: Shape, *, device, dtype=torch.bfloat16,
                gate_dtype=torch.float32, beta_dtype=torch.bfloat16, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random inputs (never zeros) with realistic gates, as SPEC.md asks.

    Returns the float tensors by FLA's argument names: q, k, v, g, [beta], [A_log, dt_bias].
    """
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)  # drawn where they are used: fast on GPU
    B, T, H, HV, K, V = shape.B, shape.T, var.H, var.HV, var.K, var.V

    def randn(*s, dt=torch.float32):
        return torch.randn(*s, generator=gen, dtype=torch.float32, device=device).to(dt)

    def rand(*s):
        return torch.rand(*s, generator=gen, dtype=torch.float32, device=device)

    x: dict[str, torch.Tensor] = {
        "q": randn(B, T, H, K, dt=dtype),
        "k": randn(B, T, H, K, dt=dtype),
        "v": randn(B, T, HV, V, dt=dtype),
    }
    gshape = (B, T, HV, K) if var.family in PER_CHANNEL_GATE else (B, T, HV)
    if var.g_gamma:
        # RetNet's decays 1 - 2^(-5 - 5 h / HV), per head, with a random ±10% spread
        h = torch.arange(HV, device=device, dtype=torch.float32)
        x["g_gamma"] = torch.log1p(-torch.pow(2.0, -5.0 - 5.0 * h / HV)) * (0.9 + 0.2 * rand(HV))
    elif var.gate_in_kernel:
        x["g"] = randn(*gshape).to(gate_dtype)  # raw gate input
        # Mamba-style decay parameters: A in [1, 16], dt in [1e-3, 1e-1] through softplus^-1
        A = 1.0 + 15.0 * rand(HV)
        x["A_log"] = torch.log(A)
        nb = HV * K if var.family == "kda" else HV
        if var.lower_bound is not None:
            # L * sigmoid(exp(A_log) * (g + dt_bias)): a zero-mean bias spreads g over (L, 0)
            x["dt_bias"] = 0.5 * randn(nb)
        else:
            dt = torch.exp(rand(nb) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            x["dt_bias"] = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    elif var.safe_gate:
        x["g"] = F.logsigmoid(randn(*gshape)).clamp(min=var.lower_bound).to(gate_dtype)
    else:
        x["g"] = (F.logsigmoid(randn(*gshape)) / 16).to(gate_dtype)
    if var.family in DELTA_FAMILIES:
        x["beta"] = torch.sigmoid(randn(B, T, HV)).to(beta_dtype)
    return {n: t.contiguous() for n, t in x.items()}


def make_do(var: Variant, shape: Shape, *, device, dtype, seed: int) -> torch.Tensor:
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed + 7919)
    return torch.randn(shape.B, shape.T, var.HV, var.V, generator=gen, device=device).to(dtype)


def call_op(fn, var: Variant, x: dict[str, torch.Tensor], cu: torch.Tensor | None,
            cu_cpu: torch.Tensor | None) -> torch.Tensor:
    """Call an FLA-signature function; return o."""
    kw = dict(var.options())
    if cu is not None:
        kw["cu_seqlens"] = cu
        kw["cu_seqlens_cpu"] = cu_cpu
    if var.family in ("kda", "gdn"):
        if "A_log" in x:
            kw["A_log"] = x["A_log"]
            kw["dt_bias"] = x.get("dt_bias")
        out = fn(x["q"], x["k"], x["v"], x["g"], x["beta"], **kw)
    elif var.family == "gla":
        out = fn(x["q"], x["k"], x["v"], x["g"], **kw)
    else:
        out = fn(x["q"], x["k"], x["v"], g=x.get("g"), g_gamma=x.get("g_gamma"), **kw)
    return out[0] if isinstance(out, (tuple, list)) else out


def head_slice(name: str, t: torch.Tensor, var: Variant, h: int, hv: int) -> torch.Tensor:
    """The first h query/key heads and hv value heads of an input (by its name: q, k, v, g, beta,
    A_log, dt_bias), of its gradient (dq, dk, ...) or of the output o."""
    base = name[1:] if name.startswith("d") and name[1:] in GRAD_NAMES else name
    if base in ("q", "k"):
        return t[:, :, :h]
    if base in ("v", "g", "beta", "o"):
        return t[:, :, :hv]
    if base in ("A_log", "g_gamma"):
        return t[:hv]
    if base == "dt_bias":
        return t.view(var.HV, -1)[:hv].reshape(-1)
    raise KeyError(name)


def reduced_problem(var: Variant, shape: Shape, x: dict[str, torch.Tensor], do: torch.Tensor,
                    max_tokens: int, max_heads: int | None):
    """The problem on which the float64 reference runs: batch 0, the first max_tokens tokens
    (for varlen: the leading sequences, the one crossing the limit truncated), the first
    max_heads value heads with their query/key heads (None: every head). Returns (variant, shape,
    inputs, dO), all fresh leaves (contiguous copies). The implementations run the every-head
    form and are compared on the reference's heads (`head_slice`): heads are independent, and
    the kernels then see the head counts of the timed problem (FLA's autotuning keys hold H and
    HV, so a 2-head problem would be tuned again; linattn's split heuristics count chains)."""
    G = var.HV // var.H
    h = var.H if max_heads is None else max(1, min(var.H, math.ceil(max_heads / G)))
    hv = h * G  # keep HV = G * H
    tokens = min(max_tokens, shape.T)
    if shape.varlen:
        lens, acc = [], 0
        for L in shape.seqlens:
            if acc >= tokens:
                break
            take = min(L, tokens - acc)
            lens.append(take)
            acc += take
        rshape = Shape(shape.key + "-reduced", f"reduced {shape.label}", 1, acc, tuple(lens), shape.dist)
    else:
        rshape = Shape(shape.key + "-reduced", f"reduced {shape.label}", 1, tokens)
    T = rshape.T
    rvar = var.with_heads(h, hv, var.K, var.V)
    rx = {}
    for n, t in x.items():
        r = t[:1, :T] if n in ("q", "k", "v", "g", "beta") else t
        rx[n] = head_slice(n, r, var, h, hv).detach().clone().contiguous()
    rdo = do[:1, :T, :hv].detach().clone().contiguous()
    return rvar, rshape, rx, rdo


# ------------------------------------------------------------------ counts (the floor)


def chunk_sizes(shape: Shape) -> list[tuple[int, int]]:
    """(chunk length c, count) pairs over all sequences."""
    counts: dict[int, int] = {}
    for L in shape.sequence_lengths():
        if L // CHUNK:
            counts[CHUNK] = counts.get(CHUNK, 0) + L // CHUNK
        if L % CHUNK:
            counts[L % CHUNK] = counts.get(L % CHUNK, 0) + 1
    return sorted(counts.items())


def chunk_flops(family: str, c: int, K: int, V: int) -> float:
    """Matrix-product FLOPs of the chunked forward for one chunk of c tokens and one value head
    (2 FLOPs per multiply-add; element-wise work, gates and norms not counted).

    delta rules (KDA, GDN):
        K K^T           2 c^2 K      (the WY system)
        Q K^T           2 c^2 K      (intra-chunk scores)
        (I + L)^-1      c^3 / 3      (unit lower-triangular inverse)
        W = A (K*e^γ)   2 c^2 K
        U = A V         2 c^2 V
        W S             2 c K V      (V_new = U - W S)
        Q S             2 c K V      (inter-chunk output)
        scores V_new    2 c^2 V      (intra-chunk output)
        K^T V_new       2 c K V      (state update)
      = 6 c^2 K + 4 c^2 V + 6 c K V + c^3 / 3
    GLA, simple GLA:
        Q K^T 2 c^2 K + scores V 2 c^2 V + Q S 2 c K V + K^T V 2 c K V
      = 2 c^2 K + 2 c^2 V + 4 c K V
    """
    if family in DELTA_FAMILIES:
        return 6 * c * c * K + 4 * c * c * V + 6 * c * K * V + c ** 3 / 3
    return 2 * c * c * K + 2 * c * c * V + 4 * c * K * V


def flops(var: Variant, shape: Shape, direction: str) -> float:
    """Forward: sum over chunks and value heads of chunk_flops. Forward + backward: 3x the
    forward (the backward needs, for every product, the gradients of both operands: two
    products of the same size; recomputation of forward intermediates is not counted, so this
    is a lower bound)."""
    f = var.HV * sum(n * chunk_flops(var.family, c, var.K, var.V) for c, n in chunk_sizes(shape))
    return f if direction == "fwd" else 3 * f


def input_specs(var: Variant, shape: Shape, *, dtype=torch.bfloat16, gate_dtype=torch.float32,
                beta_dtype=torch.bfloat16) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Shapes and dtypes of the float inputs (what make_inputs draws)."""
    B, T, H, HV, K, V = shape.B, shape.T, var.H, var.HV, var.K, var.V
    s = {"q": ((B, T, H, K), dtype), "k": ((B, T, H, K), dtype), "v": ((B, T, HV, V), dtype)}
    if var.g_gamma:
        s["g_gamma"] = ((HV,), torch.float32)
    else:
        s["g"] = (((B, T, HV, K) if var.family in PER_CHANNEL_GATE else (B, T, HV)), gate_dtype)
    if var.family in DELTA_FAMILIES:
        s["beta"] = ((B, T, HV), beta_dtype)
    if var.gate_in_kernel:
        s["A_log"] = ((HV,), torch.float32)
        s["dt_bias"] = ((HV * K if var.family == "kda" else HV,), torch.float32)
    return s


def min_bytes(var: Variant, shape: Shape, direction: str, *, dtype=torch.bfloat16,
              gate_dtype=torch.float32, beta_dtype=torch.bfloat16) -> float:
    """Each input read once, each output written once.

    fwd:     sum(inputs) + o
    fwd+bwd: sum(inputs) + o + dO + sum(gradients of the inputs)   (gradients have the inputs'
             shapes and dtypes; the backward's own re-read of the inputs is not counted, so
             this is a lower bound)
    cu_seqlens and the optional states are not counted (absent or negligible).
    """
    specs = input_specs(var, shape, dtype=dtype, gate_dtype=gate_dtype, beta_dtype=beta_dtype)
    esize = lambda dt: torch.empty((), dtype=dt).element_size()  # noqa: E731
    inputs = sum(math.prod(s) * esize(dt) for s, dt in specs.values())
    o = shape.tokens * var.HV * var.V * esize(dtype)
    if direction == "fwd":
        return float(inputs + o)
    return float(2 * inputs + 2 * o)
