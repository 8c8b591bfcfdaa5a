#!/usr/bin/env python3
"""A kernel timeline of linattn's operators as the benchmark suite calls them (torch.profiler).

    python3 bench/profile_ops.py gla,simple_gla [--B 2 --T 8192] [--direction fwdbwd] [--out DIR]

For each variant key of the GPU suite (bench/benchlib/problems.py): inputs as the suite makes them,
a few warm-up calls, then --calls calls back to back under torch.profiler with no host
synchronisation between them (as the suite times them). Prints, per call, the GPU time of each
kernel name, the time the GPU was busy and the span from the first to the last GPU activity (the
difference is launch gaps and host work the GPU waited on), and writes the Chrome trace to
DIR/trace-VARIANT-DIRECTION.json for scripts/trace_timeline.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import impls, problems  # noqa: E402


def short(name: str) -> str:
    name = name.replace("(anonymous namespace)::", "")
    for cut in ("<", "("):
        name = name.split(cut)[0]
    return name.replace("void ", "").split("::")[-1][:60]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variants", help="comma-separated variant keys (problems.gpu_variants)")
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--T", type=int, default=8192)
    ap.add_argument("--direction", choices=("fwd", "fwdbwd"), default="fwdbwd")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--device", default="cuda", help="cpu: a check of this script without a GPU")
    a = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile

    ours, _ = impls.load_linattn(None)
    dev = torch.device(a.device)
    by_key = {v.key: v for v in problems.gpu_variants()}
    shape = problems.fixed_shape(a.B, a.T)
    for key in a.variants.split(","):
        var = by_key[key]
        fn, why = ours.get(var.family)
        if fn is None:
            print(f"{key}: {why}")
            continue
        x = problems.make_inputs(var, shape, device=dev)
        grad = a.direction == "fwdbwd"
        for n, t in x.items():
            t.requires_grad_(grad and n not in problems.NO_GRAD_INPUTS)
        do = problems.make_do(var, shape, device=dev, dtype=torch.bfloat16, seed=1)

        def call():
            for t in x.values():
                t.grad = None
            o = problems.call_op(fn, var, x, None, None)
            if grad:
                o.backward(do)

        for _ in range(3):
            call()
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        sync()
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for _ in range(a.calls):
                call()
            sync()
        path = os.path.join(a.out, f"trace-{key}-{a.direction}.json")
        prof.export_chrome_trace(path)
        kind = torch.autograd.DeviceType.CUDA if dev.type == "cuda" else torch.autograd.DeviceType.CPU
        ev = [e for e in prof.events() if e.device_type == kind]
        per = defaultdict(lambda: [0.0, 0])
        spans = []
        for e in ev:
            per[short(e.name)][0] += e.device_time if dev.type == "cuda" else e.cpu_time
            per[short(e.name)][1] += 1
            spans.append((e.time_range.start, e.time_range.end))
        spans.sort()
        busy, cs, ce = 0.0, None, None
        for s, t in spans:
            if ce is None or s > ce:
                if ce is not None:
                    busy += ce - cs
                cs, ce = s, t
            else:
                ce = max(ce, t)
        if ce is not None:
            busy += ce - cs
        span = (spans[-1][1] - spans[0][0]) if spans else 0.0
        print(f"== {key} {a.direction} B={a.B} T={a.T}: per call GPU busy {busy / a.calls / 1e3:.3f} ms, "
              f"span {span / a.calls / 1e3:.3f} ms, {len(ev) / a.calls:.1f} GPU activities")
        for n, (t, c) in sorted(per.items(), key=lambda kv: -kv[1][0]):
            print(f"    {t / a.calls / 1e3:8.4f} ms  x{c / a.calls:<4.1f} {n}")
        print(f"  trace: {path}")


if __name__ == "__main__":
    main()
