"""Decode benchmark: linattn's recurrent decode kernels beside FLA's fused_recurrent kernels in
one process (KDA and GDN, H = HV = 32, K = V = 128, bf16 q/k/v, state pool in place).

Each call is captured in a CUDA graph and the graph replayed (what a serving engine does); the
time is the median over replays, each timed with CUDA events around 20 back-to-back replays.
Bytes: each state read and written once plus q, k, v, g, beta, o; GB/s against the copy bandwidth
measured in the same run. Writes <out>/decode.json and <out>/DECODE.md.

    python3 bench/decode_bench.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")  # FLA's own Triton kernels only

import torch
import torch.nn.functional as F


def copy_bandwidth() -> float:
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ts = []
    for _ in range(13):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return 2 * n / statistics.median(ts[3:])


def graph_time(fn, reps=20, rounds=15) -> float:
    """Median seconds per call of fn() captured in a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    ts = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / reps)
    return statistics.median(ts)


def make(family, N, T, pool_dtype, H=32, K=128, V=128, spec=False, v_first=False):
    dev = "cuda"
    q = torch.randn(N, T, H, K, device=dev, dtype=torch.bfloat16)
    k = torch.randn(N, T, H, K, device=dev, dtype=torch.bfloat16)
    v = torch.randn(N, T, H, V, device=dev, dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(N, T, H, K, device=dev) if family == "kda" else torch.randn(N, T, H, device=dev)) / 16
    beta = torch.rand(N, T, H, device=dev, dtype=torch.bfloat16)
    P = N * (T if spec else 1) + 8
    pool = (torch.randn(P, H, K, V, device=dev) * 0.1).to(pool_dtype)
    if spec:
        idx = torch.randperm(P, device=dev)[: N * T].view(N, T).to(torch.int32)
        acc = torch.randint(1, T + 1, (N,), device=dev, dtype=torch.int32)
    else:
        idx = torch.randperm(P, device=dev)[:N].to(torch.int32)
        acc = None
    return dict(q=q, k=k, v=v, g=g, beta=beta, pool=pool, idx=idx, acc=acc, v_first=v_first)


def ours(family, x):
    import linattn

    out = torch.empty_like(x["v"])
    if family == "kda":
        return lambda: linattn.fused_recurrent_kda(
            x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["pool"], ssm_state_indices=x["idx"],
            num_accepted_tokens=x["acc"], inplace_final_state=True, use_qk_l2norm_in_kernel=True, out=out,
            state_v_first=x["v_first"])
    return lambda: linattn.fused_recurrent_gated_delta_rule(
        x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], initial_state=x["pool"], ssm_state_indices=x["idx"],
        num_accepted_tokens=x["acc"], inplace_final_state=True, use_qk_l2norm_in_kernel=True, out=out,
        state_v_first=x["v_first"])


def fla_call(family, x):
    """FLA's kernel for the same step, or None where FLA has no such call."""
    if x["v_first"]:
        return None  # the [V, K] rows: ours only (not compared)
    if family == "kda":
        from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

        return lambda: fused_recurrent_kda_fwd(
            x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["pool"], inplace_final_state=True,
            ssm_state_indices=x["idx"], num_accepted_tokens=x["acc"], use_qk_l2norm_in_kernel=True)
    if x["acc"] is not None:
        return None  # FLA's GDN recurrent kernel has no state pool / accepted tokens
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    # no in-place pool in FLA's GDN: read the batch's states, write new float32 ones (same count)
    h0 = x["pool"][: x["q"].shape[0]]
    return lambda: fused_recurrent_gated_delta_rule(
        x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], initial_state=h0, output_final_state=True,
        use_qk_l2norm_in_kernel=True)


def state_bytes(x, N, spec_T=1):
    H, K, V = x["q"].shape[2], x["q"].shape[3], x["v"].shape[3]
    es = x["pool"].element_size()
    io = sum(t.numel() * t.element_size() for t in (x["q"], x["k"], x["v"], x["g"], x["beta"])) + x["v"].numel() * 2
    return N * H * K * V * es * (1 + spec_T) + io  # read once, written once per token kept


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--batches", default="1,8,64,256,1024")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import linattn

    try:
        import fla

        fla_version = getattr(fla, "__version__", "?")
    except Exception as e:  # noqa: BLE001
        fla_version = f"not importable ({e})"
    bw = copy_bandwidth()
    stamp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".device", "LINATTN_COMMIT")
    if not os.environ.get("LINATTN_COMMIT") and os.path.exists(stamp):  # the device's git metadata lags
        os.environ["LINATTN_COMMIT"] = open(stamp).read().strip()[:12]
    commit = os.environ.get("LINATTN_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"device {torch.cuda.get_device_name()}, copy {bw / 1e12:.2f} TB/s, FLA {fla_version}, "
          f"FLA_DISABLE_BACKEND_DISPATCH={os.environ.get('FLA_DISABLE_BACKEND_DISPATCH')}", flush=True)
    rows = []
    cases = []
    for fam in ("kda", "gdn"):
        for pd in (torch.float32, torch.bfloat16):
            for N in [int(b) for b in args.batches.split(",")]:
                cases.append((fam, pd, N, 1, False))
            cases.append((fam, pd, 256, 4, True))
            cases.append((fam, pd, 256, 1, False, True))  # state_v_first ([V, K] state)
    for case in cases:
        fam, pd, N, T, spec = case[:5]
        vf = len(case) > 5 and case[5]
        torch.manual_seed(0)
        x = make(fam, N, T, pd, spec=spec, v_first=vf)
        t_ours = graph_time(ours(fam, x))
        f = fla_call(fam, x)
        t_fla = None
        if f is not None:
            try:
                t_fla = graph_time(f)
            except Exception as e:  # noqa: BLE001
                print(f"FLA failed: {fam} {N}: {e}", flush=True)
        nbytes = state_bytes(x, N, T if spec else 1)
        row = dict(family=fam, pool=str(pd).replace("torch.", ""), batch=N, T=T, speculative=spec,
                   layout="[V, K]" if vf else "[K, V]",
                   ours_us=t_ours * 1e6, fla_us=None if t_fla is None else t_fla * 1e6, bytes=nbytes,
                   ours_gbs=nbytes / t_ours / 1e9, frac_copy=nbytes / t_ours / bw,
                   fla_over_ours=None if t_fla is None else t_fla / t_ours)
        rows.append(row)
        print(f"{fam:4s} {row['pool']:9s} {row['layout']} N={N:5d} T={T} ours {row['ours_us']:8.2f} us "
              f"({row['ours_gbs']:7.1f} GB/s, {100 * row['frac_copy']:5.1f}% of copy)  FLA "
              f"{'—' if t_fla is None else '%8.2f us' % (t_fla * 1e6)}  "
              f"{'' if t_fla is None else '%5.2fx' % (t_fla / t_ours)}", flush=True)
    meta = dict(device=torch.cuda.get_device_name(), copy_bw=bw, fla=fla_version, commit=commit,
                date=time.strftime("%Y-%m-%d"), torch=torch.__version__,
                fla_backend_dispatch_disabled=os.environ.get("FLA_DISABLE_BACKEND_DISPATCH") == "1")
    with open(os.path.join(args.out, "decode.json"), "w") as fh:
        json.dump(dict(meta=meta, rows=rows), fh, indent=1)
    lines = [
        "## Decode (recurrent, state pool in place)",
        "",
        f"Generated by `bench/decode_bench.py` at commit {commit} on {meta['device']}, {meta['date']}; "
        f"FLA {fla_version} in the same process (FLA_DISABLE_BACKEND_DISPATCH=1: FLA's own Triton kernels); "
        f"copy bandwidth measured {bw / 1e12:.2f} TB/s. H = HV = 32, K = V = 128, bf16 q/k/v, l2norm in kernel; "
        "each call captured in a CUDA graph, median replay time. Bytes: states read once and written "
        "once (per kept token with T = 4 speculative), plus the token inputs and o. FLA's GDN has no "
        "state pool: it reads the batch's states and writes new float32 ones (same state count); "
        "no accepted-token form (—); the [V, K] (state_v_first) rows are ours only, not compared (—).",
        "",
        "| family | pool | state | batch | T | ours µs | FLA µs | FLA / ours | ours GB/s | % of copy |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        fla_us = "—" if r["fla_us"] is None else "%.2f" % r["fla_us"]
        ratio = "—" if r["fla_over_ours"] is None else "%.2f×" % r["fla_over_ours"]
        t = str(r["T"]) + (" (accepted)" if r["speculative"] else "")
        lines.append(f"| {r['family']} | {r['pool']} | {r['layout']} | {r['batch']} | {t} | {r['ours_us']:.2f} | {fla_us} | "
                     f"{ratio} | {r['ours_gbs']:.0f} | {100 * r['frac_copy']:.0f}% |")
    with open(os.path.join(args.out, "DECODE.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", os.path.join(args.out, "DECODE.md"))


if __name__ == "__main__":
    sys.exit(main())
