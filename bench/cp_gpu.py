#!/usr/bin/env python3
"""Context parallelism (linattn.cp) on GPUs over NCCL: exactness against the single-GPU call and a
scaling point. Needs W GPUs of one host (the device tool's nvidia-h200-x2/x4/x8 kinds).

    python3 bench/cp_gpu.py --world 2 [--T 262144] [--out DIR]

Exactness: every case of CASES with each scan (allgather, doubling, relay): o, the final states of
the sequences that end on a rank, and every gradient (the local slices of q, k, v, g, beta; A_log,
dt_bias and h0 summed over the ranks, as a data-parallel wrapper would) against one call on the
whole stream on GPU 0, SPEC's relative error (1e-2 for 16-bit inputs, 2e-3 for float32).
Scaling: KDA and GDN forward + backward at B = 1, T tokens, H = 32, K = V = 128, bf16: the
single-GPU call on the whole sequence against the W-rank call (each rank T / W tokens), CUDA
events, median of 5 after 2 warm-ups; efficiency = t(1) / (W t(W)).
Writes OUT/cp_gpu.json and prints a table (bench/logs keeps the runs)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

# name: (family, dtype, cu_seqlens, split_points, H, G, K, V, options)
CASES = {
    # varlen across the boundary, an empty sequence, GVA, in-kernel gate + l2norm + sigmoid beta
    "kda_bf16_varlen": ("kda", torch.bfloat16, [0, 1000, 1000, 3000, 4096], [0, 1900, 4096], 2, 2, 128, 128,
                        dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                             use_beta_sigmoid_in_kernel=True)),
    # one sequence cut off the chunk grid, GVA, the caller's gate
    "gdn_bf16_long": ("gdn", torch.bfloat16, [0, 4096], [0, 2085, 4096], 2, 2, 128, 128,
                      dict(use_qk_l2norm_in_kernel=True)),
    # float32, the bounded gate with safe_gate, state_v_first, K != V
    "kda_f32_bounded": ("kda", torch.float32, [0, 700, 2000], [0, 1000, 2000], 1, 2, 64, 128,
                        dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True,
                             use_beta_sigmoid_in_kernel=True, state_v_first=True)),
}
SCANS = ("allgather", "doubling", "relay")
TOL = {torch.bfloat16: 1e-2, torch.float16: 1e-2, torch.float32: 2e-3}


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def inputs(name, world, dev):
    fam, dtype, cu, sp, H, G, K, V, opts = CASES[name]
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    T, N, HV = cu[-1], len(cu) - 1, H * G

    def rn(*s):
        return torch.randn(*s, generator=gen)

    t = dict(q=rn(1, T, H, K), k=rn(1, T, H, K), v=rn(1, T, HV, V))
    if not opts.get("use_qk_l2norm_in_kernel"):
        t["k"] = F.normalize(t["k"], dim=-1)
    gshape = (1, T, HV, K) if fam == "kda" else (1, T, HV)
    if opts.get("use_gate_in_kernel"):
        t["g"] = rn(*gshape) - (6 if "lower_bound" in opts else 0)
        t["A_log"] = rn(HV) * 0.5 - (0 if "lower_bound" in opts else 4)
        t["dt_bias"] = rn(HV * K if fam == "kda" else HV) * 0.5
    else:
        t["g"] = F.logsigmoid(rn(*gshape)) / 16
    t["beta"] = rn(1, T, HV) if opts.get("use_beta_sigmoid_in_kernel") else torch.rand(1, T, HV, generator=gen)
    sv = opts.get("state_v_first")
    t["h0"] = rn(N, HV, V, K) if sv else rn(N, HV, K, V)
    w_o = rn(1, T, HV, V)
    w_h = rn(N, HV, V, K) if sv else rn(N, HV, K, V)
    t = {k: (x.to(dtype) if k in ("q", "k", "v", "beta") else x).to(dev) for k, x in t.items()}
    return t, torch.tensor(cu), w_o.to(dtype).to(dev), w_h.to(dev)


def call(fam, t, opts, cu, h0, cp_context=None):
    import linattn

    fn = linattn.chunk_kda if fam == "kda" else linattn.chunk_gated_delta_rule
    return fn(t["q"], t["k"], t["v"], t["g"], t["beta"], initial_state=h0, output_final_state=True,
              cu_seqlens=cu, cp_context=cp_context, A_log=t.get("A_log"), dt_bias=t.get("dt_bias"), **opts)


def exactness(rank, world, dev, results):
    from linattn.cp import build_cp_context

    for name, (fam, dtype, cu, sp, H, G, K, V, opts) in CASES.items():
        t, cu_t, w_o, w_h = inputs(name, world, dev)
        ref = None
        if rank == 0:  # the single-GPU call on the whole stream
            tr = {k: x.clone().requires_grad_() for k, x in t.items()}
            o, ht = call(fam, tr, opts, cu_t.to(dev), tr["h0"])
            ((o * w_o).sum() + (ht * w_h).sum()).backward()
            ref = dict(o=o.detach(), ht=ht.detach(), grads={k: x.grad for k, x in tr.items()})
        if len(sp) != world + 1:  # another world size: odd offsets around the equal split
            T = cu[-1]
            sp = [0] + [T * r // world + 37 * r - 50 for r in range(1, world)] + [T]
        for scan in SCANS:
            ctx = build_cp_context(cu_t.to(dev), group=None, split_points=sp, scan=scan)
            s, e, ids = ctx.start, ctx.end, ctx.seq_ids
            loc = {k: (x[:, s:e] if k in ("q", "k", "v", "g", "beta") else x) for k, x in t.items()}
            loc["h0"] = loc["h0"][ids.to(dev) if torch.is_tensor(ids) else ids]
            loc = {k: x.clone().requires_grad_() for k, x in loc.items()}
            o, ht = call(fam, loc, opts, None, loc["h0"], cp_context=ctx)
            ids_l = [int(i) for i in ids]
            keep = [i < len(ids_l) - 1 or ctx.post_num_ranks == 0 for i in range(len(ids_l))]
            kt = torch.tensor(keep, device=dev)
            loss = (o * w_o[:, s:e]).sum() + (ht[kt] * w_h[ids_l][kt]).sum()
            loss.backward()
            # gather to rank 0: o and token gradients by slices, the shared parameters summed
            parts = [None] * world
            dh0 = torch.zeros_like(t["h0"])
            dh0.index_add_(0, torch.tensor(ids_l, device=dev), loc["h0"].grad)
            shared = {k: loc[k].grad.clone() for k in ("A_log", "dt_bias") if k in loc}
            shared["h0"] = dh0
            for x in shared.values():
                dist.all_reduce(x)
            mine = dict(s=s, e=e, o=o.detach().cpu(), ht=ht.detach().cpu(), ids=ids_l, keep=keep,
                        grads={k: loc[k].grad.cpu() for k in ("q", "k", "v", "g", "beta")})
            dist.all_gather_object(parts, mine)
            if rank == 0:
                errs = {}
                o_all = torch.cat([p["o"] for p in parts], dim=1)
                errs["o"] = rel(o_all, ref["o"].cpu())
                hts = [(i, p["ht"][j]) for p in parts for j, i in enumerate(p["ids"]) if p["keep"][j]]
                errs["final_state"] = max(rel(h, ref["ht"][i].cpu()) for i, h in hts)
                for k in ("q", "k", "v", "g", "beta"):
                    errs["d" + k] = rel(torch.cat([p["grads"][k] for p in parts], dim=1), ref["grads"][k].cpu())
                for k, x in shared.items():
                    errs["d" + k] = rel(x, ref["grads"][k])
                ok = all(v <= TOL[dtype] for v in errs.values())
                results.append(dict(case=name, scan=scan, dtype=str(dtype), errors=errs, passed=ok))
                print(f"{name:18s} {scan:9s} {'PASS' if ok else 'FAIL'}  worst {max(errs, key=errs.get)} "
                      f"{max(errs.values()):.2e}  (o {errs['o']:.1e}, final {errs['final_state']:.1e})", flush=True)
            dist.barrier()


def timed(fn, reps=5, warm=2, barrier=True):
    """Median CUDA-event time of fn (ms); barrier: every rank starts each repetition together."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        if barrier:
            dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


def scaling(rank, world, dev, T, results, profile=False, no_single=False, t1_ms=None, out_dir=None):
    from linattn.cp import build_cp_context

    H, K, V = 32, 128, 128
    for fam in ("kda", "gdn"):
        gen = torch.Generator(device=dev).manual_seed(1)

        def rn(*s):
            return torch.randn(*s, generator=gen, device=dev)

        def make(n):
            gs = (1, n, H, K) if fam == "kda" else (1, n, H)
            t = dict(q=rn(1, n, H, K).bfloat16(), k=rn(1, n, H, K).bfloat16(), v=rn(1, n, H, V).bfloat16(),
                     g=F.logsigmoid(rn(*gs)) / 16, beta=torch.rand(1, n, H, device=dev, generator=gen).bfloat16())
            return {k: x.requires_grad_() for k, x in t.items()}

        opts = dict(use_qk_l2norm_in_kernel=True)
        res = {}
        if no_single:  # given (modelled) single-GPU times, or none
            given = None if t1_ms is None else t1_ms[0 if fam == "kda" else 1]
            res = {"t1": given or float("nan"), "t1_fwd": float("nan")}
        if rank == 0 and not no_single:  # one GPU, the whole sequence
            t1 = make(T)
            do = torch.randn_like(t1["v"])

            def one():
                o, _ = call(fam, t1, opts, None, None)
                torch.autograd.grad(o, list(t1.values()), do)

            def one_fwd():
                call(fam, t1, opts, None, None)

            res["t1"] = timed(one, barrier=False)
            res["t1_fwd"] = timed(one_fwd, barrier=False)
            del t1, do
            torch.cuda.empty_cache()
        dist.barrier()
        ctx = build_cp_context(torch.tensor([0, T], device=dev), group=None)
        tw = make(ctx.end - ctx.start)
        dow = torch.randn_like(tw["v"])

        def cp():
            o, _ = call(fam, tw, opts, None, None, cp_context=ctx)
            torch.autograd.grad(o, list(tw.values()), dow)

        def cp_fwd():
            call(fam, tw, opts, None, None, cp_context=ctx)

        def local():  # the same tokens without CP: what a rank's share costs on its own
            o, _ = call(fam, tw, opts, None, None)
            torch.autograd.grad(o, list(tw.values()), dow)

        def local_fwd():
            call(fam, tw, opts, None, None)

        tW = timed(cp)
        tW_fwd = timed(cp_fwd)
        tl, tl_fwd = timed(local, barrier=False), timed(local_fwd, barrier=False)
        if profile:
            from torch.profiler import ProfilerActivity, profile as prof

            with prof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as pr:
                cp()
                torch.cuda.synchronize()
            if out_dir:  # every rank's timeline (scripts/trace_timeline.py reads them)
                pr.export_chrome_trace(os.path.join(out_dir, f"trace-{fam}-rank{rank}.json"))
            if rank == 1:
                print(f"profile of one CP step ({fam}, rank 1 of {world}):", flush=True)
                print(pr.key_averages().table(sort_by="cuda_time_total", row_limit=30), flush=True)
        dist.barrier()
        all_t = [None] * world
        dist.all_gather_object(all_t, (tW, tW_fwd, tl, tl_fwd))
        if rank == 0:
            tWm = max(x[0] for x in all_t)
            tWf = max(x[1] for x in all_t)
            eff = res["t1"] / (world * tWm)
            eff_f = res["t1_fwd"] / (world * tWf)
            results.append(dict(family=fam, T=T, world=world, t1_ms=res["t1"], tW_ms=tWm,
                                per_rank_ms=[x[0] for x in all_t], efficiency=eff, t1_fwd_ms=res["t1_fwd"],
                                tW_fwd_ms=tWf, per_rank_fwd_ms=[x[1] for x in all_t], efficiency_fwd=eff_f))
            results[-1].update(local_ms=[x[2] for x in all_t], local_fwd_ms=[x[3] for x in all_t])
            print(f"  each rank's tokens without CP: fwd+bwd {', '.join(f'{x[2]:.2f}' for x in all_t)} ms, "
                  f"forward {', '.join(f'{x[3]:.2f}' for x in all_t)} ms", flush=True)
            print(f"scaling {fam} T={T} H=32 K=V=128 bf16 fwd+bwd: 1 GPU {res['t1']:.2f} ms, {world} GPUs "
                  f"{tWm:.2f} ms (ranks {', '.join(f'{x[0]:.2f}' for x in all_t)}), efficiency {eff:.3f}; "
                  f"forward alone: 1 GPU {res['t1_fwd']:.2f} ms, {world} GPUs {tWf:.2f} ms "
                  f"(ranks {', '.join(f'{x[1]:.2f}' for x in all_t)}), efficiency {eff_f:.3f}", flush=True)
        del tw, dow
        torch.cuda.empty_cache()
        dist.barrier()


def worker(rank, world, init_file, T, out, cpu=False, exact=True, profile=False, no_single=False, t1_ms=None):
    if cpu:  # a smoke test of this script on the CPU backend with gloo (no scaling point)
        dev = torch.device("cpu")
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
        T = 0
    else:
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world,
                                device_id=dev)
    results = []
    t0 = time.perf_counter()
    if exact:
        exactness(rank, world, dev, results)
    if T > 0:
        scaling(rank, world, dev, T, results, profile, no_single, t1_ms, out)
    if rank == 0:
        info = dict(device="cpu" if cpu else torch.cuda.get_device_name(0), world=world,
                    nccl=None if cpu else ".".join(map(str, torch.cuda.nccl.version())),
                    torch=torch.__version__, seconds=time.perf_counter() - t0, results=results)
        with open(os.path.join(out, "cp_gpu.json"), "w") as f:
            json.dump(info, f, indent=1)
        print("exactness:", sum(r.get("passed", True) for r in results), "of", len(results), "entries pass")
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=torch.cuda.device_count())
    ap.add_argument("--T", type=int, default=262144, help="scaling point's tokens (0: skip)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--cpu", action="store_true", help="smoke-test the script on the CPU backend (gloo)")
    ap.add_argument("--skip-exactness", action="store_true", help="the scaling point only")
    ap.add_argument("--profile", action="store_true", help="print rank 1's torch.profiler table of one CP step and write every rank's "
                    "Chrome trace to OUT/trace-FAMILY-rankR.json")
    ap.add_argument("--no-single", action="store_true",
                    help="skip the single-GPU call (a T that does not fit one GPU); efficiency then uses "
                         "--t1-ms, a single-GPU time given (e.g. modelled), or is not computed")
    ap.add_argument("--t1-ms", type=float, nargs=2, default=None, metavar=("KDA", "GDN"),
                    help="with --no-single: single-GPU fwd+bwd times to compute the efficiency against")
    a = ap.parse_args()
    if a.cpu:
        a.world = max(a.world, 2)
    elif a.world < 2 or torch.cuda.device_count() < a.world:
        raise SystemExit(f"needs {a.world} >= 2 GPUs, found {torch.cuda.device_count()}")
    os.makedirs(a.out, exist_ok=True)
    init_file = os.path.join(tempfile.mkdtemp(prefix="linattn-cp-gpu-"), "init")
    mp.start_processes(worker, args=(a.world, init_file, a.T, a.out, a.cpu, not a.skip_exactness, a.profile, a.no_single, a.t1_ms), nprocs=a.world, join=True, start_method="spawn")


if __name__ == "__main__":
    main()
