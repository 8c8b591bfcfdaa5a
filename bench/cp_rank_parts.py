#!/usr/bin/env python3
"""What one context-parallel rank computes, piece by piece, on one GPU and without communication:
the compute part of the model in docs/context_parallel.md ("Cost per rank").

    python3 bench/cp_rank_parts.py [--T 65536] [--H 32] [--out DIR]

A rank whose first sequence started on an earlier rank (linattn.cp's `pre` rank; B = 1, one local
sequence of T tokens, K = V = 128, bf16, l2norm in the kernel, as bench/cp_gpu.py's scaling point)
runs: (1) the local call from a zero incoming state with the state map in its pass, (2) the
all-gather and fold (not here), (3) o += S_in^T Q~ and the final row += M S_in, (4) in the backward
D = sum Q~ do^T + M^T dht, (5) the all-gather (not here), (6) the local backward. This script times
(1), (3), (4), (6) one after another with CUDA events between them (median of 5 after 2 warm-ups),
next to the same tokens' plain call (what bench/cp_gpu.py reports as "each rank's tokens without
CP") and the plain call with cu_seqlens, an initial state and a final state. The sum of the pieces
against bench/cp_gpu.py's time of a rank is what the communication and waits cost.
With --out, writes a torch.profiler Chrome trace of one step (scripts/trace_timeline.py reads it).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F


def main():
    import linattn
    from linattn._torch_ops import capture_saved_initial_states
    from linattn.cp import _add_incoming_state_term, _incoming_state_gradient

    from cp_gpu import timed as timed_synced  # (bench/ is this script's folder)

    def timed(fn):
        return timed_synced(fn, barrier=False)

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--T", type=int, default=65536)
    ap.add_argument("--H", type=int, default=32)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    T, H, K, V = a.T, a.H, 128, 128
    print(f"device {torch.cuda.get_device_name(0)}; B=1 T={T} H={H} K=V=128 bf16, l2norm in the kernel")
    for fam in ("kda", "gdn"):
        fn = linattn.chunk_kda if fam == "kda" else linattn.chunk_gated_delta_rule
        gen = torch.Generator(device=dev).manual_seed(1)

        def rn(*s):
            return torch.randn(*s, generator=gen, device=dev)

        gs = (1, T, H, K) if fam == "kda" else (1, T, H)
        x = dict(q=rn(1, T, H, K).bfloat16(), k=rn(1, T, H, K).bfloat16(), v=rn(1, T, H, V).bfloat16(),
                 g=F.logsigmoid(rn(*gs)) / 16, beta=torch.rand(1, T, H, device=dev, generator=gen).bfloat16())
        x = {k: t.requires_grad_() for k, t in x.items()}
        do, dht = torch.randn_like(x["v"]), rn(1, H, K, V)
        s_in = rn(H, K, V) * 0.1
        cu = torch.tensor([0, T], device=dev)
        cu_cpu = cu.cpu()
        opts = dict(use_qk_l2norm_in_kernel=True)
        ins = list(x.values())

        def plain():
            o, _ = fn(*ins, output_final_state=True, **opts)
            torch.autograd.grad(o, ins, do)

        def plain_fwd():
            with torch.no_grad():
                fn(*ins, output_final_state=True, **opts)

        def with_state(fwd_only=False):  # as the local call of a rank that is not `pre`
            h0 = torch.zeros(1, H, K, V, device=dev, requires_grad=True)
            o, ht = fn(*ins, initial_state=h0, output_final_state=True, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu, **opts)
            if not fwd_only:
                torch.autograd.grad([o, ht], ins + [h0], [do, dht])

        ev = []

        def mark():
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            ev.append(e)

        def pre_step():  # what linattn.cp runs on a `pre` rank, without the two collectives
            ev.clear()
            mark()
            h0 = torch.zeros(1, H, K, V, device=dev, requires_grad=True)
            leaves = [t.detach().requires_grad_() for t in ins]
            with capture_saved_initial_states(state_map=True) as rec:
                o, ht = fn(*leaves, initial_state=h0, output_final_state=True, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu,
                           **opts)
            qt, m = rec.maps[0][0], rec.maps[0][1][0]
            mark()
            with torch.no_grad():
                o_out, ht_out = o.detach(), ht.detach()
                _add_incoming_state_term(o_out.data, qt, s_in)
                ht_out.data[0] += (m.double() @ s_in.double()).to(ht_out.dtype)
                h0.data[0].copy_(s_in)
            mark()
            D = _incoming_state_gradient(qt, do, m, dht[0])
            mark()
            torch.autograd.grad([o, ht], leaves + [h0], [do, dht])
            mark()
            return D

        res = {}
        res["plain"], res["plain_fwd"] = timed(plain), timed(plain_fwd)
        res["state"], res["state_fwd"] = timed(with_state), timed(lambda: with_state(True))
        res["pre"] = timed(pre_step)
        parts = []
        for _ in range(5):
            pre_step()
            torch.cuda.synchronize()
            parts.append([ev[i].elapsed_time(ev[i + 1]) for i in range(len(ev) - 1)])
        med = [sorted(p[i] for p in parts)[2] for i in range(len(parts[0]))]
        print(f"{fam}: the tokens alone (bench/cp_gpu.py's local): fwd+bwd {res['plain']:.3f} ms, "
              f"forward {res['plain_fwd']:.3f} ms (no grad)")
        print(f"{fam}: with cu_seqlens, h0 and ht (+ their gradients): fwd+bwd {res['state']:.3f} ms, "
              f"forward {res['state_fwd']:.3f} ms (with the graph)")
        print(f"{fam}: a pre rank's compute {res['pre']:.3f} ms: forward with the state map {med[0]:.3f}, "
              f"o term + final row {med[1]:.3f}, D {med[2]:.3f}, backward {med[3]:.3f} ms")
        if a.out:
            from torch.profiler import ProfilerActivity, profile

            os.makedirs(a.out, exist_ok=True)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as pr:
                pre_step()
                torch.cuda.synchronize()
            pr.export_chrome_trace(os.path.join(a.out, f"trace-parts-{fam}.json"))
        del x, ins, do
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
