#!/usr/bin/env python3
"""A GPU timeline from torch.profiler Chrome traces (bench/cp_gpu.py --profile writes one per rank).

    python3 scripts/trace_timeline.py OUT/trace-kda-rank*.json [--gap-us 30]

For each trace: the span from the first to the last GPU activity, the time some kernel or copy
ran (the union over streams), the idle gaps longer than --gap-us with what ran before and after,
and the GPU time per kernel name. Kernels of one name that run back to back are printed as one row.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)["traceEvents"]


def short(name: str) -> str:
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    name = re.sub(r"<.*", "", name)
    name = re.sub(r"\(.*", "", name)
    return name.split("::")[-1][:70]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--gap-us", type=float, default=30.0)
    a = ap.parse_args()
    for path in a.traces:
        ev = [e for e in load(path) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        if not ev:
            print(f"{path}: no GPU activity")
            continue
        ev.sort(key=lambda e: e["ts"])
        t0 = ev[0]["ts"]
        end = max(e["ts"] + e["dur"] for e in ev)
        busy, cur_s, cur_e = 0.0, None, None
        gaps = []
        prev_name = None
        for e in ev:
            s, d = e["ts"], e["ts"] + e["dur"]
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                    if s - cur_e > a.gap_us:
                        gaps.append((cur_e - t0, s - cur_e, prev_name, short(e["name"])))
                cur_s, cur_e = s, d
            else:
                cur_e = max(cur_e, d)
            prev_name = short(e["name"])
        busy += cur_e - cur_s
        per = defaultdict(float)
        for e in ev:
            per[short(e["name"])] += e["dur"]
        print(f"== {path}: span {(end - t0) / 1e3:.3f} ms, GPU busy {busy / 1e3:.3f} ms, "
              f"idle {(end - t0 - busy) / 1e3:.3f} ms")
        print("  timeline (ms from the first GPU activity; runs of one kernel merged):")
        rows = []
        for e in ev:
            n = short(e["name"])
            s, d = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
            if rows and rows[-1][2] == n and s - (rows[-1][0] + rows[-1][1]) < a.gap_us / 1e3:
                rows[-1][1] = s + d - rows[-1][0]
                rows[-1][3] += 1
            else:
                rows.append([s, d, n, 1])
        for s, d, n, c in rows:
            if d >= 0.02 or "nccl" in n.lower():
                print(f"    {s:9.3f} {d:8.3f}  {n}{f' x{c}' if c > 1 else ''}")
        print(f"  idle gaps over {a.gap_us:.0f} us: {len(gaps)}, {sum(g[1] for g in gaps) / 1e3:.3f} ms in all")
        for at, dur, before, after in sorted(gaps, key=lambda g: -g[1])[:15]:
            print(f"    at {at / 1e3:9.3f} ms  {dur / 1e3:7.3f} ms  after {before}  before {after}")
        print("  GPU time per kernel:")
        for n, t in sorted(per.items(), key=lambda x: -x[1])[:20]:
            print(f"    {t / 1e3:8.3f} ms  {n}")


if __name__ == "__main__":
    main()
