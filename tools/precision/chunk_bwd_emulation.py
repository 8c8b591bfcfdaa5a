#!/usr/bin/env python3
"""NumPy emulation of the CUDA chunked (WY) backward of KDA / GDN, rounding where the kernels round.

The computation follows src/cuda/common/chunk_prep.cuh (forward recompute: Aqk, Akk, M^-1, W, U,
Qg, KgT), chunk_state.cu (N = U - W S, the chunk-start states), chunk_bwd_wy.cu (pass 1: dS, dN;
pass 2: dq, dk, dv, dbeta, dgamma) and chunk_bwd.cu (finish: l2norm backward, beta sigmoid, gate
transform, output dtype). Formulas: docs/chunked_backward.md. Everything is float64 except at the
named SITES, where a value is rounded to the 16-bit type exactly as the kernel stores it. float32
accumulation is not modelled: the 16-bit roundings dominate by ~2^8.

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
    "out": ("chunk_bwd.cu / wy_kernel", "dq, dk, dv, dbeta written in the input dtype"),
}
GRADS = ("dq", "dk", "dv", "dbeta", "dg", "dh0", "dA_log", "ddt_bias")


def bf16(x):
    """Round to bfloat16 (round to nearest even via the float32 bits), returned as float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def fp16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


ROUNDERS = {"bf16": bf16, "fp16": fp16}


class Rounding:
    """Rounds a value to 16 bits at the sites switched on, passes float64 through elsewhere."""

    def __init__(self, sites=(), dtype="bf16"):
        unknown = set(sites) - set(SITES)
        if unknown:
            raise ValueError(f"unknown sites {sorted(unknown)}; known: {', '.join(SITES)}")
        self.sites = frozenset(sites)
        self.fn = ROUNDERS[dtype]

    def __call__(self, x, site):
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


def finish(prob, x, dq, dk, dv, db, dgam, dh0, rnd):
    """chunk_bwd.cu finish: l2norm backward, beta sigmoid, gate transform; dgam [T, H, K] is the
    gradient w.r.t. the per-channel log decays."""
    def l2_back(a, d):
        r = 1 / np.sqrt((a * a).sum(-1, keepdims=True) + 1e-6)
        ah = a * r
        return r * (d - ah * (ah * d).sum(-1, keepdims=True))

    if prob["beta_sigmoid"]:
        sg = sigmoid(x["beta"])
        db = db * sg * (1 - sg)
    res = dict(dq=rnd(l2_back(x["q"], dq), "out"), dk=rnd(l2_back(x["k"], dk), "out"),
               dv=rnd(dv, "out"), dbeta=rnd(db, "out"), dh0=dh0)
    _, d_raw, d_alog = gate_forward(prob, x)
    if prob["family"] == "gdn":  # scalar gate: a token's gradient is the sum over channels
        dgam = dgam.sum(-1, keepdims=True)
    res["dg"] = dgam * d_raw
    if d_alog is not None:
        res["dA_log"] = (dgam * d_alog).sum((0, 2))
        res["ddt_bias"] = res["dg"].sum(0)
    if prob["family"] == "gdn":
        res = {n: (a[..., 0] if n in ("dg", "ddt_bias") else a) for n, a in res.items()}
    return res


# ------------------------------------------------------------------ the chunked emulation
def _decay(Gi, Gj):
    """Gamma_ij = exp(gamma_i - gamma_j) [i, j, c], for j <= i (<= 1). The exponent is clamped at 0
    so that the unused j > i entries cannot overflow (inf * 0 = nan under the masks)."""
    return np.exp(np.minimum(Gi[:, None, :] - Gj[None, :, :], 0))


def _chunk_forward(Qh, Kh, Vv, B, G, S, s, rnd):
    """chunk_prep.cuh + chunk_state.cu for one (padded) chunk; returns pass 1/2 operands and S+."""
    E, gL = np.exp(G), G[-1]
    F = np.exp(gL - G)
    Gam = _decay(G, G)
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
               S=S.copy(), E=E, F=F, gL=gL)
    return ops, S_next


def _pass1(op, DO, dSp, rnd):
    """dh_kernel for one chunk: dN and the dS of the previous chunk."""
    dN = op["Aqk"].T @ DO + op["Kg"] @ rnd(dSp, "dSt")
    dS = np.exp(op["gL"])[:, None] * dSp + op["Qg"].T @ DO + op["W"].T @ rnd(-dN, "dNt")
    return rnd(dN, "dN"), dS


def _pass2(op, Qh, Kh, Vv, DO, B, G, dN, dSp, s, rnd):
    """wy_kernel for one chunk: dq, dk (w.r.t. the normalised q, k), dv, dbeta, dgamma."""
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
    dq = s * E * (DO @ Shi.T)
    x = -E * (yr @ (Shi + Slo).T)  # dX ⊙ E
    km = F * (Nb @ rnd(dSp, "dSb").T)  # dK⁻ from the state update
    last = np.exp(op["gL"]) * (S * dSp).sum(1) + (Kh * km).sum(0)  # chunk-end dgamma term
    # diagonal 16x16 blocks: exact exps, the same rounded A1 / dM on both sides
    for b0 in range(0, C, SB):
        r = slice(b0, b0 + SB)
        Gd = _decay(G[r], G[r]) * np.tril(np.ones((SB, SB)))[:, :, None]
        a1, dm = A1[r, r], dM[r, r]
        dq[r] += np.einsum("ij,jc,ijc->ic", a1, Kh[r], Gd)
        x[r] += np.einsum("ij,jc,ijc->ic", dm, Kh[r], Gd)
        km[r] += np.einsum("ijc,ij,ic->jc", Gd, a1, Qh[r]) + np.einsum("ijc,ij,ic->jc", Gd, B[r, None] * dm, Kh[r])
    # seed 001 on all but the off-diagonal blocks
    dkp = B[:, None] * x
    db += (Kh * x).sum(1)
    dgam = Qh * dq + Kh * (dkp - km)
    km += dkp
    # off-diagonal blocks (i in block I, j < r = 16 I) on tensor cores, decay split at row r; the
    # gate gradient of a pair is taken from the same rounded operands on both sides, so the two
    # contributions cancel in dA_log / ddt_bias as in exact arithmetic
    for r0 in range(SB, C, SB):
        r, p = slice(r0, r0 + SB), slice(0, r0)
        up = np.exp(G[r] - G[r0])  # <= 1
        dn = np.exp(G[r0] - G[p])  # <= 1
        Kmin = rnd(Kh[p] * dn, "Kmin")
        Qd = rnd(Qh[r] * up, "Qd")
        Kd = rnd(B[r, None] * Kh[r] * up, "Kd")
        a = A1[r, p] @ Kmin
        dq[r] += a * up
        dgam[r] += Qd * a
        a = dM[r, p] @ Kmin
        z = a * up
        km[r] += B[r, None] * z
        db[r] += (Kh[r] * z).sum(1)
        dgam[r] += Kd * a
        a = A1[r, p].T @ Qd + dM[r, p].T @ Kd
        km[p] += a * dn
        dgam[p] -= Kmin * a
    dgam[-1] += last
    dgc = np.cumsum(dgam[::-1], 0)[::-1]  # dg_t = sum_{i >= t} dgamma_i
    return dq, km, dv, db, dgc


def chunked_backward(prob, x, rnd=Rounding()):
    """The emulated GPU backward; returns the gradients of GRADS present for this problem."""
    T, K, V, H, cu = prob["T"], prob["K"], prob["V"], prob["H"], prob["cu"]
    s = K ** -0.5
    g, _, _ = gate_forward(prob, x)
    beta = sigmoid(x["beta"]) if prob["beta_sigmoid"] else x["beta"]
    qh = x["q"] / np.sqrt((x["q"] ** 2).sum(-1, keepdims=True) + 1e-6)
    kh = x["k"] / np.sqrt((x["k"] ** 2).sum(-1, keepdims=True) + 1e-6)
    dq, dk, dgam = np.zeros((T, H, K)), np.zeros((T, H, K)), np.zeros((T, H, K))
    dv, db, dh0 = np.zeros((T, H, V)), np.zeros((T, H)), np.zeros_like(x["h0"])

    def pad(a, t0, L, fill_last=False):  # one chunk, rows past L zero (gamma: repeat row L-1)
        out = np.zeros((C,) + a.shape[1:])
        out[:L] = a[t0:t0 + L]
        if fill_last:
            out[L:] = out[L - 1]
        return out

    for h in range(H):
        for n in range(len(cu) - 1):
            starts = list(range(cu[n], cu[n + 1], C))
            chunks = []
            S = x["h0"][n, h]
            for t0 in starts:
                L = min(C, cu[n + 1] - t0)
                Qh, Kh = pad(qh[:, h], t0, L), pad(kh[:, h], t0, L)
                Vv, DO, B = pad(x["v"][:, h], t0, L), pad(x["do"][:, h], t0, L), pad(beta[:, h], t0, L)
                G = pad(np.cumsum(g[t0:t0 + L, h], 0), 0, L, fill_last=True)
                op, S = _chunk_forward(Qh, Kh, Vv, B, G, S, s, rnd)
                chunks.append((t0, L, Qh, Kh, Vv, DO, B, G, op))
            dS = x["dht"][n, h]
            for t0, L, Qh, Kh, Vv, DO, B, G, op in reversed(chunks):
                dN, dS_prev = _pass1(op, DO, dS, rnd)
                cq, ck, cv, cb, cg = _pass2(op, Qh, Kh, Vv, DO, B, G, dN, dS, s, rnd)
                sl = slice(t0, t0 + L)
                dq[sl, h], dk[sl, h], dv[sl, h], db[sl, h], dgam[sl, h] = cq[:L], ck[:L], cv[:L], cb[:L], cg[:L]
                dS = dS_prev
            dh0[n, h] = dS
    return finish(prob, x, dq, dk, dv, db, dgam, dh0, rnd)


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
    ap.add_argument("--dtype", choices=tuple(ROUNDERS), default="bf16")
    ap.add_argument("--round", default="all",
                    help="all | none | site1,site2 | all,-site (all but site); sites: " + ",".join(SITES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--draws", type=int, default=1, help="input draws (seeds seed .. seed+draws-1)")
    a = ap.parse_args(argv)
    cu = [int(c) for c in a.cu.split(",")] if a.cu else None
    if cu and cu[-1] != a.T:
        ap.error("--cu must end at T")
    prob = make_problem(a.family, a.T, a.K, a.V, a.H, a.gate, a.beta_sigmoid, cu)
    rnd = Rounding(parse_sites(a.round), a.dtype)
    print(f"{a.family} T={a.T} K={a.K} V={a.V} H={a.H} gate={a.gate} beta_sigmoid={a.beta_sigmoid} "
          f"dtype={a.dtype} sites={','.join(s for s in SITES if s in rnd.sites) or 'none'}")
    errs = []
    for d in range(a.draws):
        x = make_inputs(prob, np.random.default_rng(a.seed + d), a.dtype)
        ref, got = token_backward(prob, x), chunked_backward(prob, x, rnd)
        errs.append({n: rel_err(got[n], ref[n]) for n in GRADS if n in ref})
        print(f"seed {a.seed + d:4d} " + " ".join(f"{n} {e:.2e}" for n, e in errs[-1].items()))
    if a.draws > 1:
        print("median    " + " ".join(f"{n} {np.median([e[n] for e in errs]):.2e}" for n in errs[0]))
        print("max       " + " ".join(f"{n} {np.max([e[n] for e in errs]):.2e}" for n in errs[0]))


if __name__ == "__main__":
    main()
