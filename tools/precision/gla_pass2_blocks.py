#!/usr/bin/env python3
"""The vector-gate pass 2's block decomposition (src/cuda/sm90/pass2_vector_wgmma.cuh) in float64,
against autograd of one GLA chunk.

The kernel forms dq̂, dk̂ and dg of a 64-token chunk from: the inter products with their per-element
row factors; the off-diagonal 16-token blocks through reference rows (Rb_J = γ at block J's last
token), so that every exponent is <= 0; the diagonal blocks exactly; dg as a reverse cumsum of
q̂ dq̂ - k̂ dk̂ plus the chunk-end term. This script runs that decomposition (no rounding) and the
chunk's forward under autograd, for full and partial chunks (tokens past the chunk's end hold 0, as
the kernel's zero-filled tiles do), and prints the relative errors: ~1e-15 when the decomposition is
right. It checks the algebra, not the kernel's layouts (the GPU tests do that).

    python3 tools/precision/gla_pass2_blocks.py [--seed 0]
"""
import argparse

import torch

C, K, V = 64, 128, 128


def chunk(Lc, s, gen, skip_diag=False):
    """Relative errors (dq, dk, dg) of the decomposition on one random chunk of Lc tokens. skip_diag:
    leave the diagonal blocks out (a wrong decomposition, to show the check fails)."""
    dt = torch.float64
    q, k = torch.randn(C, K, dtype=dt, generator=gen), torch.randn(C, K, dtype=dt, generator=gen)
    v, dO = torch.randn(C, V, dtype=dt, generator=gen), torch.randn(C, V, dtype=dt, generator=gen)
    S, dSp = torch.randn(K, V, dtype=dt, generator=gen), torch.randn(K, V, dtype=dt, generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(C, K, dtype=dt, generator=gen)) * 2
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
    dP = dO @ v.T
    Rb = [gam[16 * J + 15] for J in range(4)]
    dq = s * gam.exp() * (dO @ S.T)
    dk = (gam[63][None, :] - gam).exp() * (v @ dSp.T)
    endc = (k * dk).sum(0)  # before the intra terms
    for I in range(1, 4):  # rows of block I, columns j < 16 I
        P = k * (Rb[I - 1][None, :] - gam).exp()
        P[16 * I:] = 0
        r = slice(16 * I, 16 * I + 16)
        dq[r] += s * (gam[r] - Rb[I - 1][None, :]).exp() * (dP @ P)[r]
    for J in range(3):  # columns of block J, rows i > 16 J + 15
        Qd = q * (gam - Rb[J][None, :]).exp()
        Qd[:16 * (J + 1)] = 0
        cj = slice(16 * J, 16 * J + 16)
        dk[cj] += s * (Rb[J][None, :] - gam[cj]).exp() * (dP.T @ Qd)[cj]
    for I in range(0 if skip_diag else 4):  # the diagonal blocks, one exp per pair
        for a in range(16):
            for b in range(16):
                i, j = 16 * I + a, 16 * I + b
                if b <= a:
                    dq[i] += s * dP[i, j] * k[j] * (gam[i] - gam[j]).exp()
                if b >= a:
                    dk[i] += s * dP[j, i] * q[j] * (gam[j] - gam[i]).exp()
    x = q * dq - k * dk
    dg = torch.flip(torch.cumsum(torch.flip(x, [0]), 0), [0]) + gam[63].exp() * (S * dSp).sum(1) + endc
    return [((got[:Lc] - want[:Lc]).abs().max() / want[:Lc].abs().max()).item()
            for got, want in zip((dq, dk, dg), ref)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    gen = torch.Generator().manual_seed(a.seed)
    worst = 0.0
    for Lc in (64, 50, 17, 1):
        e = chunk(Lc, 0.3, gen)
        worst = max(worst, *e)
        print(f"Lc={Lc:2d}  dq {e[0]:.1e}  dk {e[1]:.1e}  dg {e[2]:.1e}")
    print("decomposition", "OK" if worst < 1e-12 else "WRONG", f"(worst {worst:.1e})")
    return 0 if worst < 1e-12 else 1


if __name__ == "__main__":
    raise SystemExit(main())
