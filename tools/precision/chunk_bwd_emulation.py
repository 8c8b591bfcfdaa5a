#!/usr/bin/env python3
"""NumPy emulation of the CUDA chunked (WY) backward of KDA / GDN, rounding where the kernels round.

The computation follows src/cuda/common/chunk_prep.cuh (forward recompute: Aqk, Akk, M^-1, W, U,
Qg, KgT), chunk_state.cu (N = U - W S, the chunk-start states), chunk_bwd_wy.cu (pass 1: dS, dN;
pass 2: dq, dk, dv, dbeta, dgamma) and chunk_bwd.cu (finish: l2norm backward, beta sigmoid, gate
transform, output dtype). Formulas: docs/chunked_backward.md. Everything is float64 except at the
named SITES, where a value is rounded to the 16-bit type exactly as the kernel stores it. float32 is
modelled only where it is switched on: --gamma (how the chunk-local log decays are formed) and
--f32acc (the gate gradients' accumulation); otherwise the 16-bit roundings dominate by ~2^8.
--dg-pairs forms dg without the reverse cumsum (_dg_pairs), the fix for the float32 dA_log error.

Usage: python3 tools/precision/chunk_bwd_emulation.py --family kda --T 1 --round all --draws 20
"""
import argparse

import numpy as np

C = 64  # chunk length
SB = 16  # sub-block of the pass-2 decayed products

# site -> (kernel file, quantity rounded to 16 bits)
SITES = {
    "Aqk": ("chunk_prep.cuh", "Aqk = s*P, stored for pass 1"),
    "Ainv": ("chunk_prep.cuh", "B = M^-1 exported for pass 2 (dY = B^T dN)"),
    "Tpack": ("chunk_prep.cuh", "M^-1 packed as the A operand of the W / U GEMMs"),
    "bk": ("chunk_prep.cuh", "beta*k*exp(gamma), B operand of W"),
    "bv": ("chunk_prep.cuh", "beta*v, B operand of U"),
    "W": ("chunk_prep.cuh", "W = M^-1 (beta E*k), stored"),
    "U": ("chunk_prep.cuh", "U = M^-1 (beta v), stored"),
    "Qg": ("chunk_prep.cuh", "s*q*exp(gamma), stored for pass 1"),
    "KgT": ("chunk_prep.cuh", "(k*F)^T, F = exp(gamma_L - gamma), as pass 1 reads it (dN = Kg dS+)"),
    "KgTs": ("chunk_state.cu", "(k*F)^T as the state pass reads it (S+ = e_L S + KgT^T N)"),
    "Sfwd": ("chunk_state.cu", "S tile (Ss) in N = U - W S"),
    "N": ("chunk_state.cu", "N = V_new tile (Vs) in S+ = e_L S + KgT^T N"),
    "Nb": ("chunk_state.cu", "N written to vnew, read by pass 2"),
    "dSt": ("chunk_bwd_wy.cu dh_kernel", "dS+ tile (dSt) in dN = Aqk^T dO + Kg dS+"),
    "dN": ("chunk_bwd_wy.cu dh_kernel", "dN stored for pass 2 (dY = B^T dN)"),
    "dNt": ("chunk_bwd_wy.cu dh_kernel", "-dN^T (dNt) in the dS update"),
    "dY": ("chunk_bwd_wy.cu wy_kernel", "dY = B^T dN stored (dM, dX, <dY, v>)"),
    "A1": ("chunk_bwd_wy.cu wy_kernel", "A1 = s*Lo(dO N^T) tile"),
    "dM": ("chunk_bwd_wy.cu wy_kernel", "dM = -SLo(dY N^T) tile"),
    "Sb": ("chunk_bwd_wy.cu wy_kernel", "S tile (hi) in dO S^T; hi + lo halves in dY S^T"),
    "dSb": ("chunk_bwd_wy.cu wy_kernel", "dS+ tile in N dS+^T"),
    "Kmin": ("chunk_bwd_wy.cu wy_kernel", "k_j exp(gamma_r - gamma_j), off-diagonal blocks"),
    "Qd": ("chunk_bwd_wy.cu wy_kernel", "q_i exp(gamma_i - gamma_r), off-diagonal blocks"),
    "Kd": ("chunk_bwd_wy.cu wy_kernel", "beta_i k_i exp(gamma_i - gamma_r), off-diagonal blocks"),
    "pqk": ("chunk_bwd_wy.cu wy_kernel", "dq^, dk^ partials stored for finish_qk's l2norm backward (bfloat16 "
            "for bfloat16 inputs in either form: PartialQK; float32 otherwise)"),
    "out": ("chunk_bwd.cu / wy_kernel", "dq, dk, dv, dbeta written in the input dtype"),
}
GRADS = ("dq", "dk", "dv", "dbeta", "dg", "dh0", "dA_log", "ddt_bias")
# how the chunk-local cumulative log decay gamma_i = sum_{t <= i} g_t and its differences are formed
GAMMA = {
    "f64": "float64 gamma and differences gamma_i - gamma_j (exact)",
    "f32": "the kernels: float32 gate and chunk-local scan, exps of differences of the float32 gammas",
    "block": "float32 scans per 16-row block; a difference is a sum of same-sign block pieces",
    "twosum": "float32 scan with TwoSum compensation (gamma = hi + lo); differences (hi_i-hi_j)+(lo_i-lo_j)",
}


def bf16(x):
    """Round to bfloat16 (round to nearest even via the float32 bits), returned as float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def fp16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def _tf32_rna(x):
    """Round float32 values to TF32 (10 mantissa bits), to nearest, ties away (cvt.rna.tf32.f32)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x1000) & 0xFFFFE000) & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)


def _tf32_trunc(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    return (u & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def tf32x3(x):
    """A float32 operand as the 3xTF32 products see it: big + small, big = rna(x), small =
    rna(x - big) (mma.cuh tf32_bits twice); the small x small product is dropped (second order)."""
    x32 = np.asarray(x, dtype=np.float32).astype(np.float64)
    big = _tf32_rna(x32)
    return big + _tf32_rna((x32 - big).astype(np.float32))


def tf32x3t(x):
    """The same with the big part truncated (branch tf32-split: one LOP3 instead of a cvt.rna)."""
    x32 = np.asarray(x, dtype=np.float32).astype(np.float64)
    big = _tf32_trunc(x32)
    return big + _tf32_rna((x32 - big).astype(np.float32))


def tf32x3tt(x):
    """Both parts truncated (session 12: two LOP3s, no cvt.rna): |x - big - small| < 2^-20 |x|."""
    x32 = np.asarray(x, dtype=np.float32).astype(np.float64)
    big = _tf32_trunc(x32)
    return big + _tf32_trunc((x32 - big).astype(np.float32))


def bf16x2(x):
    """A float32 operand carried as two bfloat16 halves, hi = bf16(x), lo = bf16(x - hi), as a
    16-bit tensor-core form of the float32 products would (hi·hi + hi·lo + lo·hi; the dropped
    lo·lo is second order): |x - hi - lo| <= 2^-18 |x|."""
    x32 = np.asarray(x, dtype=np.float32).astype(np.float64)
    hi = bf16(x32)
    return hi + bf16(x32 - hi)


ROUNDERS = {"bf16": bf16, "fp16": fp16}
# how a site's value is rounded: the 16-bit types, or the float32 form's 3xTF32 operands
SITE_ROUNDERS = dict(ROUNDERS, tf32x3=tf32x3, tf32x3t=tf32x3t, tf32x3tt=tf32x3tt, bf16x2=bf16x2)


class Rounding:
    """Rounds a value to 16 bits at the sites switched on, passes float64 through elsewhere."""

    def __init__(self, sites=(), dtype="bf16", plain=(), plain_dtype="bf16"):
        unknown = (set(sites) | set(plain)) - set(SITES)
        if unknown:
            raise ValueError(f"unknown sites {sorted(unknown)}; known: {', '.join(SITES)}")
        self.sites = frozenset(sites)
        self.fn = SITE_ROUNDERS[dtype]
        # sites rounded to the plain 16-bit type instead (one operand, one product), whatever dtype is
        self.plain = frozenset(plain) & self.sites
        self.plain_fn = ROUNDERS[plain_dtype]

    def __call__(self, x, site):
        if site == "pqk" and site in self.sites:  # PartialQK: bfloat16 for bfloat16 inputs (either form), float32 else
            return bf16(x) if self.plain_fn is bf16 else np.asarray(x, dtype=np.float32).astype(np.float64)
        if site in self.plain:
            return self.plain_fn(x)
        return self.fn(x) if site in self.sites else np.asarray(x, dtype=np.float64)


def parse_sites(spec):
    """'all' | 'none' | 'a,b' | 'all,-a,-b' (all but a and b)."""
    sites = set()
    for s in filter(None, spec.split(",")):
        if s == "all":
            sites |= set(SITES)
        elif s == "none":
            continue
        elif s.startswith("-"):
            sites.discard(s[1:])
        else:
            sites.add(s)
    return sites


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ------------------------------------------------------------------ problems and inputs
def make_problem(family="kda", T=64, K=64, V=64, H=1, gate="raw", beta_sigmoid=False, cu=None):
    """family: kda (per-channel gate) | gdn (scalar gate). gate: raw (log decays given) |
    softplus (-exp(A_log) softplus(g + dt_bias)) | lowerbound (-5 sigmoid(exp(A_log) (g + dt_bias)))."""
    assert family in ("kda", "gdn") and gate in ("raw", "softplus", "lowerbound")
    return dict(family=family, T=T, K=K, V=V, H=H, gate=gate, beta_sigmoid=beta_sigmoid,
                cu=list(cu) if cu else [0, T])


def make_inputs(prob, rng, dtype="bf16"):
    """Random inputs with the distributions of tests/cuda/test_cuda_backward.cpp (make_inputs):
    q, k, v, dO, beta in the 16-bit dtype; gates, h0, dht in float32."""
    T, K, V, H = prob["T"], prob["K"], prob["V"], prob["H"]
    r16, f32 = ROUNDERS[dtype], (lambda a: np.asarray(a, np.float32).astype(np.float64))
    gk = K if prob["family"] == "kda" else 1  # gate channels (GDN: one per token, broadcast)
    N = len(prob["cu"]) - 1
    x = dict(q=r16(rng.standard_normal((T, H, K))), k=r16(rng.standard_normal((T, H, K))),
             v=r16(rng.standard_normal((T, H, V))), do=r16(rng.standard_normal((T, H, V))))
    if prob["gate"] == "raw":  # logsigmoid(z) / 16, as the tests' fill_logsigmoid_gate
        z = rng.standard_normal((T, H, gk))
        x["g"] = f32((np.minimum(z, 0) - np.log1p(np.exp(-np.abs(z)))) / 16)
    else:
        x["g"] = f32(rng.standard_normal((T, H, gk)))
        x["A_log"] = f32(rng.uniform(0, 2.7, H))
        x["dt_bias"] = f32(rng.standard_normal((H, gk)))
    if prob["family"] == "gdn":  # the API's shapes: g [T, H], dt_bias [H]
        x["g"] = x["g"][..., 0]
        if "dt_bias" in x:
            x["dt_bias"] = x["dt_bias"][:, 0]
    x["beta"] = r16(rng.standard_normal((T, H)) if prob["beta_sigmoid"] else rng.uniform(0.05, 1.0, (T, H)))
    x["h0"] = f32(0.5 * rng.standard_normal((N, H, K, V)))
    x["dht"] = f32(0.5 * rng.standard_normal((N, H, K, V)))
    return x


def gate_forward(prob, x):
    """Per-channel log decays g [T, H, K] (GDN: broadcast) and dg/draw, dg/dA_log [T, H, 1 or K]
    (dg/dA_log None for raw gates)."""
    K, scalar = prob["K"], prob["family"] == "gdn"
    raw = x["g"][..., None] if scalar else x["g"]  # [T, H, 1 or K]
    if prob["gate"] == "raw":
        g, d_raw, d_alog = raw, np.ones_like(raw), None
    else:
        ea = np.exp(x["A_log"])[None, :, None]
        u = raw + (x["dt_bias"][:, None] if scalar else x["dt_bias"])[None]
        if prob["gate"] == "softplus":
            sp = np.maximum(u, 0) + np.log1p(np.exp(-np.abs(u)))
            g, d_raw, d_alog = -ea * sp, -ea * sigmoid(u), -ea * sp
        else:
            s = sigmoid(ea * u)
            g, d_raw = -5.0 * s, -5.0 * s * (1 - s) * ea
            d_alog = d_raw * u
    return np.broadcast_to(g, g.shape[:2] + (K,)), d_raw, d_alog


def _colsum32(a):
    """colsum_kernel: float32 sums over the rows (axis 0), 8 interleaved running sums, then added."""
    a = _f32(a)
    a = np.concatenate([a, np.zeros((-len(a) % 8,) + a.shape[1:], np.float32)])
    part = np.cumsum(a.reshape((-1, 8) + a.shape[1:]), 0, dtype=np.float32)[-1]
    return np.cumsum(part, 0, dtype=np.float32)[-1].astype(np.float64)


def finish(prob, x, dq, dk, dv, db, dgam, dh0, rnd, f32acc=False):
    """chunk_bwd.cu finish: l2norm backward, beta sigmoid, gate transform; dgam [T, H, K] is the
    gradient w.r.t. the per-channel log decays. f32acc: the channel and token sums of the gate
    gradients in float32 (finish_gb_kernel, colsum_kernel)."""
    def l2_back(a, d):
        r = 1 / np.sqrt((a * a).sum(-1, keepdims=True) + 1e-6)
        ah = a * r
        return r * (d - ah * (ah * d).sum(-1, keepdims=True))

    if prob["beta_sigmoid"]:
        sg = sigmoid(x["beta"])
        db = db * sg * (1 - sg)
    res = dict(dq=rnd(l2_back(x["q"], rnd(dq, "pqk")), "out"), dk=rnd(l2_back(x["k"], rnd(dk, "pqk")), "out"),
               dv=rnd(dv, "out"), dbeta=rnd(db, "out"), dh0=dh0)
    _, d_raw, d_alog = gate_forward(prob, x)
    if prob["family"] == "gdn":  # scalar gate: a token's gradient is the sum over channels
        dgam = _f32(dgam).sum(-1, keepdims=True, dtype=np.float32) if f32acc else dgam.sum(-1, keepdims=True)
    res["dg"] = dgam * d_raw
    if d_alog is not None:
        res["dA_log"] = _colsum32((dgam * d_alog).sum(2)) if f32acc else (dgam * d_alog).sum((0, 2))
        res["ddt_bias"] = _colsum32(res["dg"]) if f32acc else res["dg"].sum(0)
    if prob["family"] == "gdn":
        res = {n: (a[..., 0] if n in ("dg", "ddt_bias") else a) for n, a in res.items()}
    return res


# ------------------------------------------------------------------ chunk-local log decays
def _f32(a):
    return np.asarray(a, dtype=np.float32)


def _add32(x, y):
    """x + y in float32; with comp, x and y are (hi, lo) pairs added through TwoSum."""
    if not isinstance(x, tuple):
        return x + y
    s = x[0] + y[0]
    bb = s - x[0]
    lo = x[1] + y[1] + ((x[0] - (s - bb)) + (y[0] - bb))
    hi = s + lo  # FastTwoSum renormalisation
    return hi, lo - (hi - s)


def _scan32(g, scalar, seglen, comp=False):
    """Inclusive float32 scan of the gates g [C, c] down the rows, in the kernels' order. Scalar
    gate: warp-shuffle (Hillis-Steele) scans of 32 rows, then rows 32.. add row 31. Vector gate:
    running sums over segments of seglen rows plus the earlier segments' totals added one by one.
    comp: (hi, lo) pairs through TwoSum. Returns the list of the C rows (float32 or pairs)."""
    x = [(r, np.zeros_like(r)) if comp else r for r in _f32(g)]
    if scalar:
        for w0 in (0, C // 2):
            for o in (1, 2, 4, 8, 16):
                x[w0:w0 + 32] = x[w0:w0 + o] + [_add32(x[w0 + l], x[w0 + l - o]) for l in range(o, 32)]
        x[32:] = [_add32(r, x[31]) for r in x[32:]]
        return x
    zero = np.zeros_like(_f32(g)[0])
    off, out = (zero, zero) if comp else zero, []
    for s0 in range(0, len(x), seglen):
        run = (zero, zero) if comp else zero
        for i in range(s0, s0 + seglen):
            run = _add32(run, x[i])
            out.append(_add32(run, off))
        off = _add32(off, run)
    return out


def _gamma(g, mode="f64", scalar=False, seglen=SB):
    """The chunk's log decays as the kernels form them, from the per-token gates g [C, c] (rows past
    the chunk's length 0). Returns G [C, c] (exponent of e^gamma_i) and D [C, C, c],
    D_ij = gamma_i - gamma_j: the exponent of Gamma_ij, of F_i = e^{gamma_L - gamma_i} = e^{D_Li} and
    of the split decays e^{gamma_i - gamma_r}, e^{gamma_r - gamma_j}. Exact (f64) or formed in
    float32 (GAMMA); seglen: the vector gate's scan segment."""
    if mode == "f64":
        G = np.cumsum(g, 0)
        return G, G[:, None] - G[None, :]
    if mode in ("f32", "twosum"):
        x = _scan32(g, scalar, seglen, comp=mode == "twosum")
        if mode == "f32":
            hi = np.stack(x)
            return hi.astype(np.float64), (hi[:, None] - hi[None, :]).astype(np.float64)
        hi, lo = np.stack([r[0] for r in x]), np.stack([r[1] for r in x])
        D = (hi[:, None] - hi[None, :]) + (lo[:, None] - lo[None, :])
        return hi.astype(np.float64) + lo, D.astype(np.float64)
    # block: lam_i = sum of the rows of i's 16-row block up to i, tau_b = block b's total. For j in an
    # earlier block, D_ij = ((tau_bj - lam_j) + sum_{bj<b<bi} tau_b) + lam_i: every piece is <= 0, so
    # the float32 error is relative to D_ij (a difference of chunk-wide scans: relative to gamma_i)
    nb = C // SB
    lam = np.concatenate([np.stack(_scan32(g[b * SB:(b + 1) * SB], False, SB)) for b in range(nb)])
    tau = lam[SB - 1::SB]
    zero = np.zeros_like(tau[0])
    D = np.zeros((C, C) + g.shape[1:], dtype=np.float32)
    G = np.empty_like(lam)
    for bi in range(nb):
        ri = slice(bi * SB, (bi + 1) * SB)
        G[ri] = sum(tau[:bi], zero) + lam[ri]
        D[ri, ri] = lam[ri, None] - lam[None, ri]
        for bj in range(bi):
            rj = slice(bj * SB, (bj + 1) * SB)
            D[ri, rj] = ((tau[bj] - lam[rj]) + sum(tau[bj + 1:bi], zero))[None] + lam[ri, None]
            D[rj, ri] = -np.swapaxes(D[ri, rj], 0, 1)  # j > i: only clamped / masked
    return G.astype(np.float64), D.astype(np.float64)


# ------------------------------------------------------------------ the chunked emulation
def _decay(D):
    """Gamma_ij = exp(D_ij) = exp(gamma_i - gamma_j) [i, j, c], for j <= i (<= 1). The exponent is
    clamped at 0 so that the unused j > i entries cannot overflow (inf * 0 = nan under the masks)."""
    return np.exp(np.minimum(D, 0))


def _chunk_forward(Qh, Kh, Vv, B, gam, S, s, rnd):
    """chunk_prep.cuh + chunk_state.cu for one (padded) chunk; gam = (G, D) from _gamma. Returns
    pass 1/2 operands and S+."""
    G, D = gam
    E, gL = np.exp(G), G[-1]
    F = np.exp(D[-1])
    Gam = _decay(D)
    lo, slo = np.tril(np.ones((C, C))), np.tril(np.ones((C, C)), -1)
    Aqk = s * np.einsum("ic,jc,ijc->ij", Qh, Kh, Gam * lo[:, :, None])
    Akk = B[:, None] * np.einsum("ic,jc,ijc->ij", Kh, Kh, Gam * slo[:, :, None])
    Minv = np.tril(np.linalg.inv(np.eye(C) + Akk))
    Tp = rnd(Minv, "Tpack")
    W = rnd(Tp @ rnd(B[:, None] * Kh * E, "bk"), "W")
    U = rnd(Tp @ rnd(B[:, None] * Vv, "bv"), "U")
    Qg, Kg = rnd(s * Qh * E, "Qg"), rnd(Kh * F, "KgT")
    Nv = U - W @ rnd(S, "Sfwd")
    S_next = np.exp(gL)[:, None] * S + rnd(Kh * F, "KgTs").T @ rnd(Nv, "N")
    ops = dict(Aqk=rnd(Aqk, "Aqk"), Ainv=rnd(Minv, "Ainv"), W=W, Qg=Qg, Kg=Kg, N=rnd(Nv, "Nb"),
               S=S.copy(), E=E, F=F, gL=gL, D=D)
    return ops, S_next


def _pass1(op, DO, dSp, rnd):
    """dh_kernel for one chunk: dN and the dS of the previous chunk."""
    dN = op["Aqk"].T @ DO + op["Kg"] @ rnd(dSp, "dSt")
    dS = np.exp(op["gL"])[:, None] * dSp + op["Qg"].T @ DO + op["W"].T @ rnd(-dN, "dNt")
    return rnd(dN, "dN"), dS


def _dg_pairs(Qh, Kh, B, dqE, xE, kmF, A1, dM, D, end, f32acc=False):
    """dg_t = sum_{i >= t} dgamma_i of one chunk without the reverse cumsum. Each dgamma_i is O(1) but
    the sum is a pair sum whose every term carries e^{g_t}: a decay pair (i, j), j < i, adds
    X_ij = Gamma_ij (A1_ij q_i k_j + dM_ij beta_i k_i k_j) (per channel) to dgamma_i and takes it
    from dgamma_j, the chunk-start terms (E) of i, the chunk-end terms (F) of j. So
    dg_t = end + sum_{j < t} k_j kmF_j + sum_{i >= t} (q_i dqE_i + beta_i k_i xE_i)
           + sum_{j < t <= i} X_ij,
    sums of terms of the size of dg_t (no cancellation: a strongly decayed token's small dg_t is
    exact to its own size, not to float32 eps x O(1)). dqE, xE, kmF: the V-side products before
    the decayed products are added; end = e^{gamma_L} rowsum(S * dS+)."""
    f, dt = ((lambda a: _f32(a).astype(np.float64)), np.float32) if f32acc else ((lambda a: a), np.float64)
    Gam = _decay(D)
    X = Gam * (f(A1 * np.tril(np.ones((C, C)), -1))[:, :, None] * Qh[:, None] * Kh[None]
               + f(B[:, None] * dM)[:, :, None] * Kh[:, None] * Kh[None])
    X = f(X)
    Y = np.cumsum(X[::-1], 0, dtype=dt)[::-1]  # Y_tj = sum_{i >= t} X_ij (column suffix sums)
    R = np.stack([Y[t, :t].sum(0, dtype=dt) for t in range(C)])  # sum_{j < t} Y_tj
    Ft = f(Kh * kmF)
    pre = np.concatenate([np.zeros((1,) + Ft.shape[1:], dt), np.cumsum(Ft, 0, dtype=dt)[:-1]])
    Et = f(f(Qh * dqE) + f(Kh * f(B[:, None] * xE)))
    suf = np.cumsum(Et[::-1], 0, dtype=dt)[::-1]
    return (((end[None].astype(dt) + pre) + suf) + R).astype(np.float64)


def _pass2(op, Qh, Kh, Vv, DO, B, D, dN, dSp, s, rnd, f32acc=False, pairs=False):
    """wy_kernel for one chunk: dq, dk (w.r.t. the normalised q, k), dv, dbeta, dgamma; D from _gamma
    as this kernel forms it (E, F: the recompute's, in op). f32acc: the dgamma terms and their
    reverse cumsum rounded to float32 as they are formed and added. pairs: dg_t = sum_{i >= t}
    dgamma_i formed from the terms that straddle t (_dg_pairs) instead of the reverse cumsum."""
    f = (lambda a: _f32(a).astype(np.float64)) if f32acc else (lambda a: a)
    S, Nb, E, F = op["S"], op["N"], op["E"], op["F"]
    lo, slo = np.tril(np.ones((C, C))), np.tril(np.ones((C, C)), -1)
    # A. dY, dv, dbeta (v part), A1, dM
    y = op["Ainv"].T @ dN
    yr = rnd(y, "dY")
    dv = B[:, None] * y
    db = (yr * Vv).sum(1)  # the same rounded dY as dX: the two dbeta terms nearly cancel
    A1 = rnd(s * (DO @ Nb.T) * lo, "A1")
    dM = rnd(-(yr @ Nb.T) * slo, "dM")
    # B. V-side products; dY S^T uses S as two 16-bit halves (hi + lo)
    Shi = rnd(S, "Sb")
    Slo = rnd(S - Shi, "Sb")
    dq = f(s * E * (DO @ Shi.T))
    x = f(-E * (yr @ (Shi + Slo).T))  # dX ⊙ E
    km = f(F * (Nb @ rnd(dSp, "dSb").T))  # dK⁻ from the state update
    last = f(f(np.exp(op["gL"]) * f((S * dSp).sum(1))) + f((Kh * km).sum(0)))  # chunk-end dgamma term
    if pairs:
        dgp = _dg_pairs(Qh, Kh, B, dq.copy(), x.copy(), km.copy(), A1, dM, D, f(np.exp(op["gL"]) * f((S * dSp).sum(1))), f32acc)
    # diagonal 16x16 blocks: exact exps, the same rounded A1 / dM on both sides
    for b0 in range(0, C, SB):
        r = slice(b0, b0 + SB)
        Gd = _decay(D[r, r]) * np.tril(np.ones((SB, SB)))[:, :, None]
        a1, dm = A1[r, r], dM[r, r]
        dq[r] = f(dq[r] + f(np.einsum("ij,jc,ijc->ic", a1, Kh[r], Gd)))
        x[r] = f(x[r] + f(np.einsum("ij,jc,ijc->ic", dm, Kh[r], Gd)))
        km[r] = f(km[r] + f(np.einsum("ijc,ij,ic->jc", Gd, a1, Qh[r]) + np.einsum("ijc,ij,ic->jc", Gd, B[r, None] * dm, Kh[r])))
    # seed 001 on all but the off-diagonal blocks
    dkp = f(B[:, None] * x)
    db += (Kh * x).sum(1)
    dgam = f(f(Qh * dq) + f(Kh * f(dkp - km)))
    km += dkp
    # off-diagonal blocks (i in block I, j < r = 16 I) on tensor cores, decay split at row r; the
    # gate gradient of a pair is taken from the same rounded operands on both sides, so the two
    # contributions cancel in dA_log / ddt_bias as in exact arithmetic
    for r0 in range(SB, C, SB):
        r, p = slice(r0, r0 + SB), slice(0, r0)
        up = np.exp(D[r, r0])  # <= 1
        dn = np.exp(D[r0, p])  # <= 1
        Kmin = rnd(Kh[p] * dn, "Kmin")
        Qd = rnd(Qh[r] * up, "Qd")
        Kd = rnd(B[r, None] * Kh[r] * up, "Kd")
        a = f(A1[r, p] @ Kmin)
        dq[r] += a * up
        dgam[r] = f(dgam[r] + f(Qd * a))
        a = f(dM[r, p] @ Kmin)
        z = a * up
        km[r] += B[r, None] * z
        db[r] += (Kh[r] * z).sum(1)
        dgam[r] = f(dgam[r] + f(Kd * a))
        a = f(A1[r, p].T @ Qd + dM[r, p].T @ Kd)
        km[p] += a * dn
        dgam[p] = f(dgam[p] - f(Kmin * a))
    if pairs:
        return dq, km, dv, db, dgp
    if f32acc:  # the kernel's float32 run: the chunk-end term, then dgamma_63, dgamma_62, ...
        dgc = np.cumsum(np.concatenate([_f32(last)[None], _f32(dgam[::-1])]), 0, dtype=np.float32)[:0:-1]
        return dq, km, dv, db, dgc.astype(np.float64)
    dgam[-1] += last
    dgc = np.cumsum(dgam[::-1], 0)[::-1]  # dg_t = sum_{i >= t} dgamma_i
    return dq, km, dv, db, dgc


def chunked_backward(prob, x, rnd=Rounding(), gamma="f64", f32acc=False, pairs=False):
    """The emulated GPU backward; returns the gradients of GRADS present for this problem. gamma: how
    the chunk-local log decays are formed (GAMMA); besides f64 the gates are float32. f32acc: the
    gate gradients (dgamma, its reverse cumsum, the channel / token sums) accumulated in float32.
    pairs: dg from the straddling terms (_dg_pairs)."""
    T, K, V, H, cu = prob["T"], prob["K"], prob["V"], prob["H"], prob["cu"]
    s = K ** -0.5
    g, _, _ = gate_forward(prob, x)
    scalar = prob["family"] == "gdn"
    if gamma != "f64":  # the gate transform in float32; GDN: one channel, broadcast
        g = np.broadcast_to(_f32(g[..., :1] if scalar else g).astype(np.float64), g.shape)
    beta = sigmoid(x["beta"]) if prob["beta_sigmoid"] else x["beta"]
    qh = x["q"] / np.sqrt((x["q"] ** 2).sum(-1, keepdims=True) + 1e-6)
    kh = x["k"] / np.sqrt((x["k"] ** 2).sum(-1, keepdims=True) + 1e-6)
    dq, dk, dgam = np.zeros((T, H, K)), np.zeros((T, H, K)), np.zeros((T, H, K))
    dv, db, dh0 = np.zeros((T, H, V)), np.zeros((T, H)), np.zeros_like(x["h0"])

    def pad(a, t0, L):  # one chunk, rows past L zero
        out = np.zeros((C,) + a.shape[1:])
        out[:L] = a[t0:t0 + L]
        return out

    def gam(t0, L, h, seglen):  # (G, D) of a chunk: chunk_prep.cuh scans K/4-row segments, wy_kernel 16
        gc = pad(g[:, h, :1] if scalar else g[:, h], t0, L)
        G, D = _gamma(gc, gamma, scalar, seglen)
        return np.broadcast_to(G, (C, K)), np.broadcast_to(D, (C, C, K))

    for h in range(H):
        for n in range(len(cu) - 1):
            starts = list(range(cu[n], cu[n + 1], C))
            chunks = []
            S = x["h0"][n, h]
            for t0 in starts:
                L = min(C, cu[n + 1] - t0)
                Qh, Kh = pad(qh[:, h], t0, L), pad(kh[:, h], t0, L)
                Vv, DO, B = pad(x["v"][:, h], t0, L), pad(x["do"][:, h], t0, L), pad(beta[:, h], t0, L)
                op, S = _chunk_forward(Qh, Kh, Vv, B, gam(t0, L, h, C * K // 256), S, s, rnd)
                chunks.append((t0, L, Qh, Kh, Vv, DO, B, op))
            dS = x["dht"][n, h]
            for t0, L, Qh, Kh, Vv, DO, B, op in reversed(chunks):
                dN, dS_prev = _pass1(op, DO, dS, rnd)
                D = op["D"] if gamma == "f64" or scalar or K == 64 else gam(t0, L, h, SB)[1]
                cq, ck, cv, cb, cg = _pass2(op, Qh, Kh, Vv, DO, B, D, dN, dS, s, rnd, f32acc, pairs)
                sl = slice(t0, t0 + L)
                dq[sl, h], dk[sl, h], dv[sl, h], db[sl, h], dgam[sl, h] = cq[:L], ck[:L], cv[:L], cb[:L], cg[:L]
                dS = dS_prev
            dh0[n, h] = dS
    return finish(prob, x, dq, dk, dv, db, dgam, dh0, rnd, f32acc)


# ------------------------------------------------------------------ float64 token recurrence
def token_backward(prob, x):
    """Independent float64 reference: backward of S_t = D_t S + beta k (v - (D_t S)^T k)^T,
    o_t = s S_t^T q, token by token."""
    T, K, V, H, cu = prob["T"], prob["K"], prob["V"], prob["H"], prob["cu"]
    s = K ** -0.5
    g, _, _ = gate_forward(prob, x)
    beta = sigmoid(x["beta"]) if prob["beta_sigmoid"] else x["beta"]
    qh = x["q"] / np.sqrt((x["q"] ** 2).sum(-1, keepdims=True) + 1e-6)
    kh = x["k"] / np.sqrt((x["k"] ** 2).sum(-1, keepdims=True) + 1e-6)
    dq, dk, dgam = np.zeros((T, H, K)), np.zeros((T, H, K)), np.zeros((T, H, K))
    dv, db, dh0 = np.zeros((T, H, V)), np.zeros((T, H)), np.zeros_like(x["h0"])
    for h in range(H):
        for n in range(len(cu) - 1):
            S, saved = x["h0"][n, h], []
            for t in range(cu[n], cu[n + 1]):
                Sd = np.exp(g[t, h])[:, None] * S
                u = x["v"][t, h] - Sd.T @ kh[t, h]
                S = Sd + beta[t, h] * np.outer(kh[t, h], u)
                saved.append((Sd, u, S))
            dS = x["dht"][n, h].copy()
            for t in range(cu[n + 1] - 1, cu[n] - 1, -1):
                Sd, u, S = saved[t - cu[n]]
                do, k, b = x["do"][t, h], kh[t, h], beta[t, h]
                dS += s * np.outer(qh[t, h], do)
                dq[t, h] = s * S @ do
                du = b * dS.T @ k
                dv[t, h] = du
                db[t, h] = k @ dS @ u
                dSd = dS - np.outer(k, du)
                dk[t, h] = b * dS @ u - Sd @ du
                dgam[t, h] = (dSd * Sd).sum(1)
                dS = np.exp(g[t, h])[:, None] * dSd
            dh0[n, h] = dS
    return finish(prob, x, dq, dk, dv, db, dgam, dh0, Rounding())


def rel_err(a, ref):
    return float(np.linalg.norm(a - ref) / np.linalg.norm(ref))


# ------------------------------------------------------------------ CLI
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=("kda", "gdn"), default="kda")
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--K", type=int, default=64)
    ap.add_argument("--V", type=int, default=64)
    ap.add_argument("--H", type=int, default=1)
    ap.add_argument("--gate", choices=("raw", "softplus", "lowerbound"), default="raw")
    ap.add_argument("--beta-sigmoid", action="store_true")
    ap.add_argument("--cu", help="cu_seqlens, comma separated (default: one sequence of T)")
    ap.add_argument("--dtype", choices=tuple(ROUNDERS), default="bf16", help="the inputs' 16-bit type")
    ap.add_argument("--site-dtype", choices=tuple(SITE_ROUNDERS),
                    help="how the sites round (default: --dtype); tf32x3 / tf32x3t: the float32 form's "
                         "3xTF32 operands with the big part rounded / truncated; tf32x3tt: both parts truncated (mma.cuh today); "
                         "bf16x2: hi + lo bfloat16 halves (a 16-bit tensor-core form of the float32 products)")
    ap.add_argument("--round", default="all",
                    help="all | none | site1,site2 | all,-site (all but site); sites: " + ",".join(SITES))
    ap.add_argument("--gamma", choices=tuple(GAMMA), default="f64",
                    help="how the chunk-local log decays are formed: " + "; ".join(f"{k}: {v}" for k, v in GAMMA.items()))
    ap.add_argument("--f32acc", action="store_true",
                    help="gate gradients accumulated in float32: dgamma terms, reverse cumsum, finish sums")
    ap.add_argument("--dg-pairs", action="store_true",
                    help="dg_t from the terms straddling t instead of the reverse cumsum of dgamma")
    ap.add_argument("--plain", default="",
                    help="sites (of those --round switches on) rounded to the plain 16-bit --dtype instead "
                         "of --site-dtype: which operands of a bf16x2 form may stay one bfloat16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=1, help="input draws (seeds seed .. seed+draws-1)")
    a = ap.parse_args(argv)
    cu = [int(c) for c in a.cu.split(",")] if a.cu else None
    if cu and cu[-1] != a.T:
        ap.error("--cu must end at T")
    prob = make_problem(a.family, a.T, a.K, a.V, a.H, a.gate, a.beta_sigmoid, cu)
    rnd = Rounding(parse_sites(a.round), a.site_dtype or a.dtype, parse_sites(a.plain) if a.plain else (), a.dtype)
    print(f"{a.family} T={a.T} K={a.K} V={a.V} H={a.H} gate={a.gate} beta_sigmoid={a.beta_sigmoid} "
          f"dtype={a.dtype} site_dtype={a.site_dtype or a.dtype} sites={','.join(s for s in SITES if s in rnd.sites) or 'none'} plain={','.join(s for s in SITES if s in rnd.plain) or 'none'} gamma={a.gamma} f32acc={a.f32acc} dg_pairs={a.dg_pairs}")
    errs = []
    for d in range(a.draws):
        x = make_inputs(prob, np.random.default_rng(a.seed + d), a.dtype)
        ref, got = token_backward(prob, x), chunked_backward(prob, x, rnd, a.gamma, a.f32acc, a.dg_pairs)
        errs.append({n: rel_err(got[n], ref[n]) for n in GRADS if n in ref})
        print(f"seed {a.seed + d:4d} " + " ".join(f"{n} {e:.2e}" for n, e in errs[-1].items()))
    if a.draws > 1:
        print("median    " + " ".join(f"{n} {np.median([e[n] for e in errs]):.2e}" for n in errs[0]))
        print("max       " + " ".join(f"{n} {np.max([e[n] for e in errs]):.2e}" for n in errs[0]))


if __name__ == "__main__":
    main()
