#!/usr/bin/env python3
"""Per-source-line cost of a CUDA kernel from an ncu SASS export.

ncu's `--page source --print-source cuda` export of our kernels carries no metrics, and the SASS
export (`--page source --csv --print-source sass`, what scripts/cuda_fwd_profile.sh writes as
<config>.sass.csv) has per-instruction metrics but no source lines. This joins the SASS export
with the line table of the same kernel compiled here: the object is compiled with -lineinfo (the
CMake build does), disassembled with `nvdisasm -g`, and the instructions are matched by position
(the same nvcc on both machines gives the same SASS; the script counts opcode mismatches and
says so when they are more than a few).

    python3 scripts/ncu_source_lines.py PROFILE.sass.csv OBJECT.o KERNEL_SUBSTRING \
        [--nvdisasm PATH] [--cuobjdump PATH] [--top 30] [--phases FILE:LINE=name,LINE=name,...]

KERNEL_SUBSTRING picks the kernel in ncu's export (e.g. "chunk_prep_kernel<__nv_bfloat16, (bool)1, (bool)1>");
in the object, the function with the same instruction count and the fewest opcode mismatches is
taken. nvdisasm / cuobjdump: from the CUDA
toolkit or PyPI's nvidia-cuda-nvdisasm / nvidia-cuda-cuobjdump wheels.

Prints the top source lines by warp-stall samples and by executed warp instructions, with each
line's three most frequent opcodes, and the totals by opcode class (integer/control, tensor,
memory, special function); with --phases, the shares of the kernel's phases (marker lines of one
file, e.g. the `// ----` sections of a kernel). An export of several launches of one kernel is
read for its first launch.
"""

from __future__ import annotations

import argparse
import collections
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile

INT_CONTROL = {"IMAD", "ISETP", "IADD3", "SHF", "LEA", "LOP3", "BRA", "BSSY", "BSYNC", "SEL", "MOV", "PRMT",
               "S2R", "ULDC", "IMNMX", "LDC", "UIADD3", "UMOV", "VIADD", "IABS", "CALL", "RET", "EXIT"}
TENSOR = {"HMMA", "HGMMA", "IMMA"}
MEMORY = {"LDS", "STS", "LDSM", "LDG", "STG", "LDGSTS", "LDGDEPBAR", "DEPBAR", "LD", "ST", "LDL", "STL", "RED", "ATOM"}


def opcode(text: str) -> str:
    t = text.split()
    if not t:
        return ""
    op = t[1] if t[0].startswith("@") and len(t) > 1 else t[0]
    return op.split(".")[0]


def read_ncu(path: str, kernel: str):
    """The instruction rows (text, stall samples, executed warp instructions) of the first kernel
    whose name contains `kernel` (the first launch only: an export of several launches of one
    kernel holds one section each)."""
    rows, name, hdr, found = [], None, None, None
    with open(path, newline="") as f:
        for line in csv.reader(f):
            if not line:
                continue
            if line[0] == "Kernel Name":
                if rows:
                    break
                name = line[1]
                continue
            if line[0] == "Address":
                hdr = line
                continue
            if name and kernel in name and (found is None or found == name):
                found = name
                rows.append(line)
    if not rows:
        sys.exit(f"no kernel containing {kernel!r} in {path}")
    i_src = hdr.index("Source")
    i_samp = hdr.index("Warp Stall Sampling (All Samples)")
    i_exec = hdr.index("Instructions Executed")
    return found, [(r[i_src], int(r[i_samp] or 0), int(r[i_exec] or 0)) for r in rows]


def local_functions(obj: str, nvdisasm: str, cuobjdump: str, outer: bool = False):
    """{mangled name: [(file, line) or None, instruction text] per instruction} from the object."""
    tmp = tempfile.mkdtemp(prefix="ncu-lines-")
    subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(obj)], cwd=tmp, check=True, capture_output=True)
    funcs = {}
    for cubin in sorted(x for x in os.listdir(tmp) if x.endswith(".cubin")):
        out = subprocess.run([nvdisasm, "-g"] + (["-gi"] if outer else []) + ["-c", os.path.join(tmp, cubin)], check=True, capture_output=True,
                             text=True).stdout
        cur_fn, cur_line = None, None
        for l in out.split("\n"):
            if l.startswith(".text."):
                cur_fn = l[len(".text."):].rstrip(":")
                funcs[cur_fn] = []
                cur_line = None
                continue
            m = re.match(r'\s*//## File "([^"]+)", line (\d+)', l)
            if m:
                cur_line = (os.path.basename(m.group(1)), int(m.group(2)))
                continue
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*)", l)
            if m and cur_fn is not None:
                funcs[cur_fn].append((cur_line, m.group(2)))
    shutil.rmtree(tmp, ignore_errors=True)
    return funcs


def match_function(funcs, ncu_rows):
    """The local function whose opcode sequence matches ncu's best (fewest mismatches)."""
    best = None
    for fn, ins in funcs.items():
        if len(ins) != len(ncu_rows):
            continue
        mism = sum(opcode(a[0]) != opcode(b[1]) for a, b in zip(ncu_rows, ins))
        if best is None or mism < best[1]:
            best = (fn, mism)
    if best is None:
        sys.exit(f"no function of the object has ncu's {len(ncu_rows)} instructions: a different compiler or "
                 "flags (compile the object as the profiled build did)")
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass_csv")
    ap.add_argument("object")
    ap.add_argument("kernel")
    ap.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "nvdisasm")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--outer", action="store_true",
                    help="charge inlined helpers' instructions to the calling line of the kernel's own code "
                         "(nvdisasm -gi: the outermost line of each inline chain)")
    ap.add_argument("--phases", default="",
                    help="FILE:LINE=name,LINE=name,...: also the stall and executed shares per phase of the "
                         "kernel, a phase running from its marker line of FILE to the next; instructions of "
                         "other files (inlined helpers) count in the phase of the last FILE line before them")
    a = ap.parse_args()

    name, rows = read_ncu(a.sass_csv, a.kernel)
    all_funcs = local_functions(a.object, a.nvdisasm, a.cuobjdump, a.outer)
    fn, mism = match_function(all_funcs, rows)
    funcs = all_funcs[fn]
    print(f"kernel (ncu): {name}\nlocal function: {fn}\ninstructions: {len(rows)}, opcode mismatches: {mism}")
    if mism > len(rows) // 100:
        print("warning: more than 1% of the opcodes differ; the attribution is approximate")

    samp, exe = collections.Counter(), collections.Counter()
    ops = collections.defaultdict(collections.Counter)
    cls = collections.Counter()
    for (text, s, e), (line, _) in zip(rows, funcs):
        samp[line] += s
        exe[line] += e
        op = opcode(text)
        ops[line][op] += e
        cls["integer/control" if op in INT_CONTROL else "tensor" if op in TENSOR else "memory" if op in MEMORY
            else "special function" if op == "MUFU" else "other"] += e
    S, E = max(sum(samp.values()), 1), max(sum(exe.values()), 1)
    print(f"warp instructions executed: {E}, stall samples: {S}")
    print("by class: " + ", ".join(f"{k} {100 * v / E:.1f}%" for k, v in cls.most_common()))

    def show(title, counter):
        print(f"\n{title}")
        for line, v in counter.most_common(a.top):
            where = f"{line[0]}:{line[1]}" if line else "(no line)"
            top3 = ", ".join(f"{o} {c}" for o, c in ops[line].most_common(3))
            print(f"  {where:34s} samples {100 * samp[line] / S:5.1f}%  executed {100 * exe[line] / E:5.1f}%  [{top3}]")

    show("top lines by stall samples", samp)
    show("top lines by executed instructions", exe)
    if a.phases:
        pfile, spec = a.phases.split(":", 1)
        marks = sorted((int(k), v) for k, v in (m.split("=", 1) for m in spec.split(",")))
        order = ["(before " + marks[0][1] + ")"] + [name for _, name in marks]
        ps, pe = collections.Counter(), collections.Counter()
        cur = order[0]
        for (text, s_, e_), (line, _) in zip(rows, funcs):
            if line and os.path.basename(line[0]) == os.path.basename(pfile):
                cur = next((name for ln, name in reversed(marks) if ln <= int(line[1])), order[0])
            ps[cur] += s_
            pe[cur] += e_
        print(f"\nphases of {os.path.basename(pfile)}")
        for name in order:
            if ps[name] or pe[name]:
                print(f"  {name:34s} samples {100 * ps[name] / S:5.1f}%  executed {100 * pe[name] / E:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
