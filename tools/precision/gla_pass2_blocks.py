#!/usr/bin/env python3
"""The vector-gate pass 2's block decomposition (src/cuda/sm90/pass2_vector_wgmma.cuh) in float64,
against autograd of one GLA chunk.

The kernel forms dq̂, dk̂ and dg of a 64-token chunk from: the inter products with their per-element
factors; per 16-token block one product against tril(dP) (dq̂: k-blocks 0 .. I, reference γ before the
block; dk̂: k-blocks J .. 3, reference γ at the block's end), the diagonal block inside it unless its
gate sum passes KWIDE (then exactly, one exp a pair); dg as a reverse cumsum of q̂ dq̂ - k̂ dk̂ plus
the chunk-end term. This script runs that decomposition (no rounding) and the
chunk's forward under autograd, for full and partial chunks (tokens past the chunk's end hold 0, as
the kernel's zero-filled tiles do), and prints the relative errors: ~1e-15 when the decomposition is
right. It checks the algebra, not the kernel's layouts (the GPU tests do that).

    python3 tools/precision/gla_pass2_blocks.py [--seed 0]
"""
import argparse

import torch

C, K, V = 64, 128, 128
KWIDE = 64.0  # pass2_vector_wgmma.cuh, kWide


def chunk(Lc, s, gen, force_wide=0.0, steep=False, bf16=False, skip_exact=False):
    """Relative errors (dq, dk, dg) of the decomposition on one random chunk of Lc tokens. force_wide:
    the share of (block, channel)s sent to the exact diagonal path beside those past KWIDE; steep:
    gates of -2 .. -6 a token on a third of the channels (blocks past KWIDE); bf16: P and the A / B
    operands rounded to bfloat16 as the kernel's are; skip_exact: leave the exact diagonal path out (a
    wrong decomposition where blocks are wide, to show the check fails) (the diagonal k-block's hi + lo pairs unrounded).
    The errors are ‖got - want‖ / ‖want‖ over the chunk's tokens (SPEC's measure)."""
    dt = torch.float64
    q, k = torch.randn(C, K, dtype=dt, generator=gen), torch.randn(C, K, dtype=dt, generator=gen)
    v, dO = torch.randn(C, V, dtype=dt, generator=gen), torch.randn(C, V, dtype=dt, generator=gen)
    S, dSp = torch.randn(K, V, dtype=dt, generator=gen), torch.randn(K, V, dtype=dt, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(C, K, dtype=dt, generator=gen)) * 2
    if steep:
        g[:, ::3] = -2 - 4 * torch.rand(C, (K + 2) // 3, dtype=dt, generator=gen)
    for x in (q, k, v, dO, g):
        x[Lc:] = 0
    # ---- the reference: the chunk's forward and autograd
    qa, ka, ga = (x.clone().requires_grad_() for x in (q, k, g))
    gam = torch.cumsum(ga, 0)
    gL = gam[Lc - 1]
    D = gam[:, None, :] - gam[None, :, :]
    causal = torch.tril(torch.ones(C, C, dtype=torch.bool))[:, :, None]
    Aqk = torch.einsum('ic,jc,ijc->ij', qa, ka, torch.exp(torch.where(causal, D, torch.full_like(D, -1e30))))
    o = s * ((qa * gam.exp()) @ S) + s * Aqk @ v
    S_end = gL.exp()[:, None] * S + (ka * (gL[None, :] - gam).exp()).T @ v
    ((o[:Lc] * dO[:Lc]).sum() + (S_end * dSp).sum()).backward()
    ref = (qa.grad, ka.grad, ga.grad)
    # ---- the kernel's decomposition
    gam = torch.cumsum(g, 0)  # constant past the chunk's end: γ at row 63 is γ_L
    r16 = (lambda x: x.to(torch.bfloat16).to(dt)) if bf16 else (lambda x: x)
    P = r16(torch.tril(dO @ v.T))  # tril(dP), the 16-bit tile (upper triangle 0)
    Re = [gam[16 * b + 15] for b in range(4)]  # γ at block b's last token, per channel
    Rs = [torch.zeros(K, dtype=dt)] + Re[:3]   # γ before block b
    spread = [Rs[b] - Re[b] for b in range(4)]
    # wide (block, channel): the diagonal block exactly; `force_wide` marks random ones as well
    wide = [(spread[b] > KWIDE) | (torch.rand(K, generator=gen, dtype=dt) < force_wide) for b in range(4)]
    inter_q = dO @ S.T
    inter_k = v @ dSp.T
    dq = torch.zeros(C, K, dtype=dt)
    dk = torch.zeros(C, K, dtype=dt)
    endc = torch.zeros(K, dtype=dt)
    for I in range(4):  # dq̂ rows of block I: one product over k-blocks 0 .. I
        rows = slice(16 * I, 16 * I + 16)
        A = k * (Rs[I][None, :] - gam).exp()
        A[16 * (I + 1):] = 0
        A[rows] = torch.where(wide[I][None, :], torch.zeros_like(A[rows]), A[rows])
        Ar = r16(A)
        Ar[rows] = A[rows]  # the diagonal k-block as hi + lo: float32-grade
        Y = P[rows] @ Ar
        dq[rows] = s * (gam[rows] - Rs[I][None, :]).exp() * (Rs[I].exp()[None, :] * inter_q[rows] + Y)
    for J in range(4):  # dk̂ columns of block J: one product over k-blocks J .. 3
        cols = slice(16 * J, 16 * J + 16)
        B = q * (gam - Re[J][None, :]).exp()
        B[:16 * J] = 0
        B[cols] = torch.where(wide[J][None, :], torch.zeros_like(B[cols]), B[cols])
        Br = r16(B)
        Br[cols] = B[cols]
        Z = P.T[cols] @ Br
        f = (Re[J][None, :] - gam[cols]).exp()
        inter = f * (Re[3] - Re[J]).exp()[None, :] * inter_k[cols]
        endc += (k[cols] * inter).sum(0)
        dk[cols] = inter + s * f * Z
    for I in range(0 if skip_exact else 4):  # the wide diagonal blocks, one exp a pair
        for a in range(16):
            for b in range(16):
                i, j = 16 * I + a, 16 * I + b
                m = wide[I]
                if b <= a:
                    dq[i] += torch.where(m, s * P[i, j] * k[j] * (gam[i] - gam[j]).clamp(max=0).exp(), 0.)
                if b >= a:
                    dk[i] += torch.where(m, s * P[j, i] * q[j] * (gam[j] - gam[i]).clamp(max=0).exp(), 0.)
    x = q * dq - k * dk
    dg = torch.flip(torch.cumsum(torch.flip(x, [0]), 0), [0]) + gam[63].exp() * (S * dSp).sum(1) + endc
    return [((got[:Lc] - want[:Lc]).norm() / want[:Lc].norm()).item()
            for got, want in zip((dq, dk, dg), ref)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    worst = 0.0
    for force_wide, steep in ((0.0, False), (0.3, False), (0.0, True)):
        for Lc in (64, 50, 17, 1):
            e = chunk(Lc, 0.3, gen, force_wide, steep)
            worst = max(worst, *e)
            print(f"wide {force_wide:.1f} steep {steep:d} Lc={Lc:2d}  dq {e[0]:.1e}  dk {e[1]:.1e}  dg {e[2]:.1e}")
    print("decomposition", "OK" if worst < 1e-12 else "WRONG", f"(worst {worst:.1e})")
    for steep in (False, True):
        e = chunk(64, 0.3, gen, 0.0, steep, bf16=True)
        print(f"bf16 operands (steep {steep:d}): dq {e[0]:.1e}  dk {e[1]:.1e}  dg {e[2]:.1e}")
    return 0 if worst < 1e-12 else 1


if __name__ == "__main__":
    raise SystemExit(main())
