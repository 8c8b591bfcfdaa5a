#!/usr/bin/env python3
"""linattn benchmark suite: ours against FLA, with accuracy and the roofline floor beside every
time. Writes <out>/BENCHMARKS.md, <out>/results.json and <out>/*.png (see bench/README.md).

    python3 bench/run_benchmarks.py --out bench/results            # GPU machine: everything
    python3 bench/run_benchmarks.py --out bench/results --quick    # GPU, fewer shapes (~minutes)
    python3 bench/run_benchmarks.py --out bench/results --cpu-only # the CPU backend section only
    python3 bench/run_benchmarks.py --out /tmp/r --dry-run         # no GPU: fake timings, full report
    python3 bench/run_benchmarks.py --out /tmp/r --smoke           # tiny problems, mock ops if needed
"""
from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from benchlib import impls, measure, problems, report  # noqa: E402

REPO = impls.REPO
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def elapsed() -> float:
    return time.perf_counter() - T0


def stable_seed(*parts: str) -> int:
    return int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:8], 16)


# ------------------------------------------------------------------ environment


def _run(cmd: list[str], cwd: str | None = None) -> str | None:
    try:
        env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")  # read-only git queries
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, env=env)
        return r.stdout.strip() if r.returncode == 0 else None
    except Exception:  # noqa: BLE001
        return None


def environment(args, ours: impls.Impl, fla: impls.Impl, device: torch.device) -> dict:
    now = datetime.datetime.now(datetime.timezone.utc)
    env = {
        "date_utc": now.strftime("%Y-%m-%d %H:%M UTC"),
        "run_id": now.isoformat(),  # what each row's `run` names (date_utc is to the minute)
        "command": "python3 " + " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]),
        "host_cpu": _cpu_name(),
        "host_cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "python": platform.python_version(),
        "pytorch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "linattn_version": ours.version,
        # LINATTN_COMMIT (set by scripts/gpu_bench.sh from .device/LINATTN_COMMIT) names the commit
        # whose tree was sent to a machine whose own git metadata may be stale
        "linattn_commit": os.environ.get("LINATTN_COMMIT") or _run(["git", "rev-parse", "HEAD"], REPO),
        "linattn_tree_dirty": (False if os.environ.get("LINATTN_COMMIT") else
                               bool(_run(["git", "status", "--porcelain", "--untracked-files=no"], REPO))),
        "fla_version": fla.version,
        "fla_commit": args.fla_commit or os.environ.get("FLA_COMMIT") or "unknown",
        # FLA's own Triton kernels, not the optional backends its registry may dispatch to
        "fla_backend_dispatch_disabled": os.environ.get("FLA_DISABLE_BACKEND_DISPATCH"),
    }
    try:
        import triton  # noqa: PLC0415
        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        env["triton"] = "not importable"
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env["device"] = p.name
        env["sm_count"] = p.multi_processor_count
        env["l2_bytes"] = getattr(p, "L2_cache_size", None)
        env["gpu_memory_bytes"] = p.total_memory
        env["compute_capability"] = f"{p.major}.{p.minor}"
        env["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    else:
        env["device"] = "cpu"
    return env


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# ------------------------------------------------------------------ one work item


class Runner:
    def __init__(self, args, device, ours, fla, ref, ceil, l2_bytes):
        self.args = args
        self.device = device
        self.ours = ours
        self.fla = fla
        self.ref = ref
        self.ceil = ceil
        self.l2 = l2_bytes
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        if args.dtype:
            self.dtype = getattr(torch, args.dtype)
        self.beta_dtype = getattr(torch, args.beta_dtype) if args.beta_dtype else self.dtype

    def item(self, var: problems.Variant, shape: problems.Shape, directions, section: str,
             impl_list) -> list[dict]:
        dev = self.device
        seed = stable_seed(var.key, shape.key, f"{var.H}/{var.HV}/{var.K}/{var.V}")
        specs = problems.input_specs(var, shape, dtype=self.dtype, beta_dtype=self.beta_dtype)
        set_bytes = sum(math.prod(s) * torch.empty((), dtype=d).element_size() for s, d in specs.values())
        set_bytes += shape.tokens * var.HV * var.V * torch.empty((), dtype=self.dtype).element_size()
        n_sets = measure.n_rotating_sets(set_bytes, self.l2) if dev.type == "cuda" else 1
        need_grad = "fwdbwd" in directions
        sets, dos = [], []
        for i in range(n_sets):
            x = problems.make_inputs(var, shape, device=dev, dtype=self.dtype, beta_dtype=self.beta_dtype,
                                     seed=seed + i)
            if need_grad:
                for n, t in x.items():
                    t.requires_grad_(n not in problems.NO_GRAD_INPUTS)
            sets.append(x)
            dos.append(problems.make_do(var, shape, device=dev, dtype=self.dtype, seed=seed + i))
        cu_list = shape.cu_seqlens()
        cu_cpu = None if cu_list is None else torch.tensor(cu_list, dtype=torch.long)
        cu = None if cu_cpu is None else cu_cpu.to(dev)

        rows = []
        for direction in directions:
            row = self._row_base(var, shape, direction, section, n_sets)
            outs = {}
            for name, impl in impl_list:
                ours_st = row.get("ours", {}).get("status")
                if name != "ours" and ours_st == "not implemented" and not self.args.fla_always:
                    # Nothing to compare against: skip FLA's (possibly minutes-long) Triton compile.
                    row[name] = {"status": "not measured (linattn has no kernel for this on this device)"}
                    continue
                res, out0 = self._measure_impl(impl, var, shape, direction, sets, dos, cu, cu_cpu, n_sets)
                row[name] = res
                if out0 is not None:
                    outs[name] = out0
            if "ours" in outs and "fla" in outs:
                row["err_ours_vs_fla"] = measure.errors(outs["ours"], outs["fla"])
            rows.append(row)
            del outs

        # float64 reference on the reduced problem
        if not self.args.no_fp64:
            self._fp64(var, shape, directions, sets[0], dos[0], rows, impl_list)

        for r in rows:
            o, f = r.get("ours", {}), r.get("fla", {})
            if o.get("median_ms") and f.get("median_ms"):
                r["speedup_fla_over_ours"] = f["median_ms"] / o["median_ms"]
            for k in ("ours", "fla"):
                m = r.get(k, {}).get("median_ms")
                if m and r.get("floor"):
                    r[k]["x_floor"] = m / r["floor"]["floor_ms"]
        del sets, dos
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        return rows

    def _row_base(self, var, shape, direction, section, n_sets):
        row = {
            "section": section, "variant": var.key, "variant_label": var.label, "family": var.family,
            "options": var.options(), "H": var.H, "HV": var.HV, "K": var.K, "V": var.V,
            "shape": shape.key, "shape_label": shape.label, "B": shape.B, "T": shape.T,
            "tokens": shape.tokens, "varlen": shape.varlen, "dist": shape.dist,
            "seqlens": list(shape.seqlens) if shape.seqlens else None,
            "direction": direction, "dtype": str(self.dtype).replace("torch.", ""),
            "rotating_sets": n_sets,
        }
        if self.ceil is not None:
            b = problems.min_bytes(var, shape, direction, dtype=self.dtype, beta_dtype=self.beta_dtype)
            fl = problems.flops(var, shape, direction)
            row["floor"] = measure.floor(b, fl, self.ceil)
        return row

    def _call_fn(self, fn, var, direction, sets, dos, cu, cu_cpu):
        names = [n for n in sets[0] if n not in problems.NO_GRAD_INPUTS]
        if direction == "fwd":
            def call(i):
                with torch.no_grad():
                    return problems.call_op(fn, var, sets[i], cu, cu_cpu), None
        else:
            def call(i):
                o = problems.call_op(fn, var, sets[i], cu, cu_cpu)
                gs = torch.autograd.grad(o, [sets[i][n] for n in names], dos[i], allow_unused=True)
                return o, dict(zip([problems.GRAD_NAMES[n] for n in names], gs))
        return call

    def _measure_impl(self, impl, var, shape, direction, sets, dos, cu, cu_cpu, n_sets):
        fn, why = impl.get(var.family)
        if fn is None:
            return {"status": why}, None
        call = self._call_fn(fn, var, direction, sets, dos, cu, cu_cpu)
        dev = self.device
        t0 = time.perf_counter()
        try:
            call(0)
            measure.sync(dev)
        except NotImplementedError as e:
            return {"status": "not implemented", "message": measure.first_line(e)}, None
        except Exception as e:  # noqa: BLE001
            if self.args.verbose:
                traceback.print_exc()
            return {"status": "refuses", "message": measure.first_line(e)}, None
        first = time.perf_counter() - t0
        if self.args.dry_run_timings:
            res = self._fake_timing(impl.name, var, shape, direction)
        else:
            res = measure.time_calls(lambda i: call(i), n_sets, dev, warmup=self.args.warmup,
                                     target_s=self.args.target_s, max_reps=self.args.max_reps)
        res["status"] = "ok"
        res["first_call_s"] = first
        pm, (o, gs) = measure.peak_memory(lambda: call(0), dev)
        if pm:
            res.update(pm)
        out0 = {"o": o.detach()}
        if gs:
            out0.update({n: (None if g is None else g.detach()) for n, g in gs.items()})
        return res, out0

    def _fake_timing(self, name, var, shape, direction):
        """--dry-run: deterministic made-up times (a multiple of the floor), clearly labelled."""
        base = self._row_base(var, shape, direction, "", 1)["floor"]["floor_ms"]
        h = stable_seed(name, var.key, shape.key, direction) % 1000 / 1000
        mult = (3 + 4 * h) if name == "ours" else (6 + 8 * h)
        return {"median_ms": base * mult, "min_ms": base * mult * 0.97, "p20_ms": base * mult * 0.98,
                "p80_ms": base * mult * 1.03, "reps": 0, "warmup": 0, "sets": 1, "fake": True}

    def _fp64(self, var, shape, directions, x0, do0, rows, impl_list):
        grads = "fwdbwd" in directions
        rvar, rshape, rx, rdo = problems.reduced_problem(var, shape, x0, do0, self.args.ref_tokens,
                                                         self.args.ref_heads)
        # the implementations run every head of the reduced tokens and are compared on rvar's heads
        fvar, _, fx, fdo = problems.reduced_problem(var, shape, x0, do0, self.args.ref_tokens, None)
        t0 = time.perf_counter()
        try:
            ref, provider = self.ref.run(rvar, rshape, rx, rdo, grads)
        except Exception as e:  # noqa: BLE001
            for r in rows:
                r["fp64"] = {"status": f"reference failed: {measure.first_line(e)}"}
            return
        ref_s = time.perf_counter() - t0
        cu_list = rshape.cu_seqlens()
        cu_cpu = None if cu_list is None else torch.tensor(cu_list, dtype=torch.long)
        cu = None if cu_cpu is None else cu_cpu.to(self.device)
        info = {"provider": provider, "tokens": rshape.T, "H": rvar.H, "HV": rvar.HV, "impl_all_heads": True,
                "seqlens": list(rshape.seqlens) if rshape.seqlens else None, "ref_s": ref_s}
        for r in rows:
            r["fp64"] = dict(info)
        for name, impl in impl_list:
            fn, _ = impl.get(var.family)
            for r in rows:
                if r.get(name, {}).get("status") != "ok":
                    continue
                xs = {n: t.detach().clone().requires_grad_(r["direction"] == "fwdbwd"
                                                           and n not in problems.NO_GRAD_INPUTS)
                      for n, t in fx.items()}
                call = self._call_fn(fn, fvar, r["direction"], [xs], [fdo], cu, cu_cpu)
                try:
                    o, gs = call(0)
                except Exception as e:  # noqa: BLE001
                    r["fp64"][name] = {"status": f"failed on the reduced problem: {measure.first_line(e)}"}
                    continue
                mine = {n: None if t is None else problems.head_slice(n, t, var, rvar.H, rvar.HV)
                        for n, t in dict(o=o, **(gs or {})).items()}
                want = {n: t for n, t in ref.items() if n == "o" or r["direction"] == "fwdbwd"}
                r["fp64"][name] = measure.errors(mine, want)


# ------------------------------------------------------------------ main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None,
                   help="results folder (default bench/results; --dry-run and --smoke default to a "
                        "temporary folder, so that fake or tiny numbers never overwrite the committed ones)")
    p.add_argument("--report", default=None,
                   help="where BENCHMARKS.md goes (default <out>/BENCHMARKS.md; the committed one is the repo root)")
    p.add_argument("--quick", action="store_true", help="fewer variants and shapes (fits ~5 min)")
    p.add_argument("--cpu-only", action="store_true", help="only the CPU-backend section")
    p.add_argument("--skip-cpu", action="store_true", help="no CPU-backend section")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU needed: fake timings and ceilings, no operator runs; full report")
    p.add_argument("--smoke", action="store_true",
                   help="tiny problems through the real code paths; mock ops stand in for what is missing")
    p.add_argument("--ops", default=None,
                   help="comma-separated variant keys, families, shape keys or VARIANT@SHAPE pairs to run (e.g. kda,gdn_gva or varlen-seed003x4); a family name selects the family, =KEY (=kda, =kda@2x8192) that variant alone")
    p.add_argument("--directions", default="fwd,fwdbwd", help="fwd, fwdbwd (comma-separated)")
    p.add_argument("--varlen-all", action="store_true", help="the whole varlen grid for every variant")
    p.add_argument("--no-varlen", action="store_true")
    p.add_argument("--varlen-only", action="store_true")
    p.add_argument("--no-fla", action="store_true")
    p.add_argument("--fla-always", action="store_true",
                   help="time FLA even where linattn has no kernel for the item on this device")
    p.add_argument("--no-ours", action="store_true", help="do not import linattn (FLA only)")
    p.add_argument("--no-fp64", action="store_true", help="skip the float64 reference check")
    p.add_argument("--ref-tokens", type=int, default=1024, help="tokens of the reduced problem")
    p.add_argument("--ref-heads", type=int, default=2, help="value heads of the reduced problem")
    p.add_argument("--time-budget", type=float, default=480.0,
                   help="seconds; no new item starts after this (partial results are kept)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--target-s", type=float, default=0.25, help="seconds of timed calls per measurement")
    p.add_argument("--max-reps", type=int, default=100)
    p.add_argument("--dtype", default=None, help="q/k/v dtype (default bfloat16 on GPU, float32 on CPU)")
    p.add_argument("--beta-dtype", default=None, help="beta dtype (default: the q/k/v dtype)")
    p.add_argument("--merge", action="store_true",
                   help="keep rows of an earlier results.json in --out that this run does not redo")
    p.add_argument("--linattn-path", default=None, help="prepended to sys.path before importing linattn")
    p.add_argument("--fla-path", default=None, help="directory holding fla/ (default: third_party_ref)")
    p.add_argument("--fla-commit", default=None, help="FLA commit, for the report")
    p.add_argument("--render", default=None, metavar="RESULTS_JSON",
                   help="run nothing: write --report from an existing results.json (plots beside it are "
                        "linked, not redrawn); how the committed BENCHMARKS.md at the repo root is made")
    p.add_argument("--replot", action="store_true",
                   help="with --render: redraw the plots from results.json first (a run cut off before its "
                        "end has not drawn them)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    args.dry_run_timings = args.dry_run
    return args


def select(items, ops, directions):
    """--ops: the union of its comma-separated tokens; a token VARIANT@SHAPE (variant key or family,
    shape key) selects the items of both. A family's name is also its plain variant's key and
    selects the whole family; a token starting with "=" (=kda, =kda@2x8192) is that variant key
    alone. The items run in the order of the first token each matches (the suite's order within
    a token), so that a call cut off by its time limit has measured the rows named first."""
    if not ops:
        return items

    def matches(tok, it):
        var, shape = it[0], it[1]
        exact = tok.startswith("=")
        tok = tok[1:] if exact else tok
        name, _, shape_key = tok.partition("@")
        if shape_key and shape.key != shape_key:
            return False
        if exact:
            return var.key == name
        return var.key == name or var.family == name or (not shape_key and shape.key == name)

    tokens = [t for t in ops.split(",") if t]
    ranked = []
    for pos, it in enumerate(items):
        rank = next((i for i, t in enumerate(tokens) if matches(t, it)), None)
        if rank is not None:
            ranked.append((rank, pos, it))
    return [it for _, _, it in sorted(ranked, key=lambda r: (r[0], r[1]))]


def cpu_section(args, runner_factory, ours, budget_left) -> list[dict]:
    rows = []
    dev = torch.device("cpu")
    runner = runner_factory(dev)
    runner.dtype = torch.float32 if not args.dtype else runner.dtype
    runner.beta_dtype = torch.float32 if not args.beta_dtype else runner.beta_dtype
    args_saved = (args.target_s, args.warmup)
    args.target_s, args.warmup = 1.0, 1
    for var, shape, dirs in select([(v, s, d) for v, s, d in problems.cpu_work()], args.ops, None):
        dirs = tuple(d for d in dirs if d in args.directions.split(","))
        if not dirs:
            continue
        if budget_left() <= 0:
            log(f"cpu {var.key} {shape.key}: skipped (time budget)")
            continue
        log(f"cpu {var.key} H={var.H} K={var.K} {shape.label} {'+'.join(dirs)}")
        if args.dry_run:
            for d in dirs:
                r = runner._row_base(var, shape, d, "cpu", 1)
                r["ours"] = {"status": "not run (--dry-run)"}
                rows.append(r)
            continue
        for r in runner.item(var, shape, dirs, "cpu", [("ours", ours)]):
            rows.append(r)
            o = r["ours"]
            log(f"    {r['direction']:7s} ours {fmt_ms(o)}")
    args.target_s, args.warmup = args_saved
    return rows


def fmt_ms(res: dict) -> str:
    return f"{res['median_ms']:.3f} ms" if res.get("status") == "ok" else res.get("status", "?")


def suite_order(rows: list) -> list:
    """Rows in the suite's variant order (gpu_variants, then the issue's own), whatever run each
    came from, so that a merge does not move the report's sections; rows of variants outside
    that list keep their order after it, and rows of one variant their order among themselves."""
    known = [v.key for v in problems.gpu_variants()] + [v.key for v in problems.issue_variants()]
    rank = {k: i for i, k in enumerate(known)}
    first: dict = {}
    for r in rows:
        first.setdefault(r.get("variant"), len(known) + len(first))
    return sorted(rows, key=lambda r: rank.get(r.get("variant"), first[r.get("variant")]))


def prune_merged_runs(env: dict, rows: list) -> None:
    """Keep in env["merged_runs"] only the earlier runs some row still comes from. A row records
    its run (`run`: that run's run_id); rows written before runs were recorded carry none and
    keep every earlier run of their section listed."""
    stamped = {(r["section"], r["run"]) for r in rows if r.get("run")}
    unstamped = {r["section"] for r in rows if not r.get("run")}
    kept = []
    for run in env.get("merged_runs") or []:
        for section in ("gpu", "cpu"):
            if section not in unstamped and (section, run.get("run_id")) not in stamped:
                run[f"{section}_rows_dropped"] = True
        if not (run.get("gpu_rows_dropped") and run.get("cpu_rows_dropped")):
            kept.append(run)
    if "merged_runs" in env:
        env["merged_runs"] = kept


def render(json_path: str, report_path: str, replot: bool = False) -> int:
    """BENCHMARKS.md from a results.json written by an earlier run, plot links made relative to
    the report's folder."""
    with open(json_path) as f:
        doc = json.load(f)
    env = doc.get("environment", {})
    cmd = env.get("command") or ""
    if "planned" not in doc and env.get("mode") == "full" and not any(
            o in cmd.split() for o in ("--ops", "--no-varlen", "--varlen-only", "--cpu-only", "--smoke")):
        # results.json written before runs recorded their plan: a full run's plan is the suite's
        # whole GPU list, so the report can still list what such a run did not reach
        doc["planned"] = [{"variant": v.key, "shape": s.key, "label": s.label}
                          for v, s in problems.gpu_work(False, "--varlen-all" in cmd.split())]
    # (also results.json written before --merge recorded what it dropped or rows their run)
    prune_merged_runs(env, doc.get("rows", []))
    doc["rows"] = suite_order(doc.get("rows", []))
    src = os.path.dirname(os.path.abspath(json_path))
    if replot:
        for f in os.listdir(src):  # plots of variants without rows would otherwise stay behind
            if f.endswith(".png"):
                os.remove(os.path.join(src, f))
        report.plots(doc, src)
    plots_json = os.path.join(src, "plots.json")
    if os.path.exists(plots_json):
        with open(plots_json) as f:
            doc["plots"] = json.load(f)
    rel = os.path.relpath(src, os.path.dirname(os.path.abspath(report_path)))
    if rel != "." and doc.get("plots"):
        doc["plots"] = [dict(p, file=os.path.join(rel, p["file"])) if p.get("file") else p for p in doc["plots"]]
    report.write_markdown(doc, report_path)
    print(f"wrote {report_path} from {json_path}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.out is None:
        args.out = (tempfile.mkdtemp(prefix="linattn-bench-") if args.dry_run or args.smoke
                    else os.path.join(REPO, "bench", "results"))
    if args.render:
        return render(args.render, args.report or "BENCHMARKS.md", args.replot)
    os.makedirs(args.out, exist_ok=True)
    cuda = torch.cuda.is_available() and not args.dry_run and not args.cpu_only
    if not args.cpu_only and not args.dry_run and not args.smoke and not torch.cuda.is_available():
        print("No GPU: use --cpu-only, --dry-run or --smoke here.", file=sys.stderr)
        return 2
    device = torch.device("cuda") if cuda else torch.device("cpu")

    if args.no_ours:
        ours, linattn_mod = impls.Impl("linattn"), None
        for fam in problems.FAMILIES:
            ours.missing[fam] = "not run (--no-ours)"
    else:
        ours, linattn_mod = impls.load_linattn(args.linattn_path)
    # The baseline is FLA's own kernels: its backend registry (FlashKDA, FlashQLA, ...) stays off
    # unless the caller set the variable otherwise; the report prints the setting.
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    print(f"FLA_DISABLE_BACKEND_DISPATCH={os.environ['FLA_DISABLE_BACKEND_DISPATCH']}", flush=True)
    fla = impls.load_fla(args.fla_path) if not args.no_fla else impls.Impl("FLA")
    if args.no_fla:
        for fam in problems.FAMILIES:
            fla.missing[fam] = "not run (--no-fla)"
    if args.smoke:
        if linattn_mod is None:
            ours = impls.mock_impl("mock-ours (torch recurrence, float32)")
        if device.type != "cuda" or not fla.fns:
            fla = impls.mock_impl("mock-FLA (torch recurrence, float32)")
    log(f"device {device}; linattn: {ours.version or 'missing'} ({len(ours.fns)}/4 ops); "
        f"FLA: {fla.version or 'missing'} ({len(fla.fns)}/4 ops)")

    env = environment(args, ours, fla, device)
    env["mode"] = ("dry-run" if args.dry_run else "smoke" if args.smoke else "cpu-only" if args.cpu_only
                   else "quick" if args.quick else "full")
    ref = impls.Reference(linattn_mod, device)
    env["reference"] = ref.label

    # ceilings
    ceil = None
    if args.dry_run:
        ceil = {"copy_bw_Bps": 3.0e12, "matmul_flops_per_s": 8.0e14, "copy_bytes": 0, "copy_ms": 0,
                "matmul_n": 0, "matmul_dtype": "bfloat16", "matmul_ms": 0, "assumed": True}
        env["l2_bytes"] = 50 * 2 ** 20
    elif not args.cpu_only:
        log("measuring ceilings (device-to-device copy, large matmul)")
        ceil = measure.measure_ceilings(device, small=args.smoke)
        log(f"copy {ceil['copy_bw_Bps'] / 1e12:.2f} TB/s, matmul {ceil['matmul_flops_per_s'] / 1e12:.1f} TFLOP/s")
    l2 = env.get("l2_bytes") or 50 * 2 ** 20

    json_path = os.path.join(args.out, "results.json")
    old_rows = []
    if args.merge and os.path.exists(json_path):
        with open(json_path) as f:
            old = json.load(f)
        old_rows = old.get("rows", [])
        prev = dict(old.get("environment", {}))
        prev.setdefault("ceilings", old.get("ceilings"))  # a run's ceilings stay with it once merged
        # GPU rows keep the card they were measured on (`device`; rows from before rows recorded it
        # come from the earlier run's card, which stood for every run it had merged in), so a report
        # can hold several cards, each with its own tables (report.py): a later run on one card
        # replaces only that card's rows. The CPU section keeps one host CPU: rows measured on
        # another one sit beside this run's with nothing in their table to tell them apart.
        for r in old_rows:
            if r["section"] == "gpu":
                r.setdefault("device", prev.get("device"))
        earlier = prev.pop("merged_runs", [])
        runs = ([prev] if prev else []) + earlier
        if not args.skip_cpu and prev.get("host_cpu") != env.get("host_cpu"):
            n = sum(r["section"] == "cpu" for r in old_rows)
            if n:
                log(f"--merge: dropping {n} earlier cpu rows measured on "
                    f"{prev.get('host_cpu')!r}, not this run's {env.get('host_cpu')!r}")
            old_rows = [r for r in old_rows if r["section"] != "cpu"]
            for run in runs:  # the report says which of the earlier runs' rows remain
                run["cpu_rows_dropped"] = True
        kept_cards = sorted({r["device"] for r in old_rows if r["section"] == "gpu"} - {env.get("device")})
        if kept_cards:
            log(f"--merge: keeping the earlier rows measured on {', '.join(kept_cards)} beside this run's")
        # the earlier run's own environment, then the runs it had merged in, while any of their rows
        # remain (prune_merged_runs: by each row's `run`)
        left = {r["section"] for r in old_rows}
        for run in runs:
            for section in ("gpu", "cpu"):
                if section not in left:
                    run[f"{section}_rows_dropped"] = True
        env["merged_runs"] = [r for r in runs if not (r.get("gpu_rows_dropped") and r.get("cpu_rows_dropped"))]

    env["ceilings"] = ceil
    state = {"environment": env, "ceilings": ceil, "rows": [], "skipped": [], "notes": []}

    def rowkey(r):
        return (r["section"], r["variant"], r["shape"], r["direction"], r["H"], r["HV"], r["K"], r["V"],
                r.get("device") if r["section"] == "gpu" else None)

    def flush(plots=False):
        for r in state["rows"]:  # which run measured each row: the report lists only runs with rows left
            r.setdefault("run", env["run_id"])
            if r["section"] == "gpu":  # and on which card
                r.setdefault("device", env.get("device"))
        new = {rowkey(r) for r in state["rows"]}
        merged = suite_order([r for r in old_rows if rowkey(r) not in new] + state["rows"])
        prune_merged_runs(env, merged)
        doc = dict(state, rows=merged, notes=state["notes"] + ref.notes)
        with open(json_path + ".tmp", "w") as f:
            json.dump(doc, f, indent=1, default=str)
        os.replace(json_path + ".tmp", json_path)
        if plots:
            doc["plots"] = report.plots(doc, args.out)
        elif os.path.exists(os.path.join(args.out, "plots.json")):
            with open(os.path.join(args.out, "plots.json")) as f:
                doc["plots"] = json.load(f)
        report_path = args.report or os.path.join(args.out, "BENCHMARKS.md")
        rel = os.path.relpath(os.path.abspath(args.out), os.path.dirname(os.path.abspath(report_path)))
        if rel != "." and doc.get("plots"):
            doc = dict(doc, plots=[dict(p, file=os.path.join(rel, p["file"])) for p in doc["plots"]])
        report.write_markdown(doc, report_path)

    def budget_left():
        return args.time_budget - elapsed()

    def runner_factory(dev, with_floor=False):
        return Runner(args, dev, ours, fla, ref, ceil if with_floor else None, l2 if dev.type == "cuda" else 0)

    directions = [d for d in args.directions.split(",") if d in ("fwd", "fwdbwd")]
    if not args.cpu_only:
        runner = runner_factory(device, with_floor=True)
        if args.dry_run:
            runner.dtype = torch.bfloat16
            runner.beta_dtype = getattr(torch, args.beta_dtype) if args.beta_dtype else torch.bfloat16
        items = problems.smoke_work() if args.smoke else problems.gpu_work(args.quick, args.varlen_all)
        if args.no_varlen:
            items = [it for it in items if not it[1].varlen]
        if args.varlen_only:
            items = [it for it in items if it[1].varlen]
        items = select(items, args.ops, directions)
        log(f"{len(items)} GPU work items x {len(directions)} directions")
        # what this run set out to measure: a run cut off before its end (a call's time limit) leaves
        # a results.json whose report lists the items it never reached
        state["planned"] = [{"variant": v.key, "shape": s.key, "label": s.label} for v, s in items]
        impl_list = [("ours", ours), ("fla", fla)]
        for n, (var, shape) in enumerate(items):
            if budget_left() <= 0:
                state["skipped"].append({"variant": var.key, "shape": shape.key, "why": "time budget"})
                continue
            log(f"[{n + 1}/{len(items)}] {var.key} {shape.label}")
            if args.dry_run:
                rows = []
                for d in directions:
                    r = runner._row_base(var, shape, d, "gpu", 2)
                    for name in ("ours", "fla"):
                        r[name] = dict(runner._fake_timing(name, var, shape, d), status="ok",
                                       first_call_s=0.0, peak_extra_bytes=0)
                    r["speedup_fla_over_ours"] = r["fla"]["median_ms"] / r["ours"]["median_ms"]
                    h = stable_seed(var.key, shape.key, d) % 97 / 97
                    names = ["o"] + ([problems.GRAD_NAMES[k] for k in problems.input_specs(var, shape)
                                      if k not in problems.NO_GRAD_INPUTS] if d == "fwdbwd" else [])
                    fake = {nm: (1 + i + h) * 1e-3 for i, nm in enumerate(names)}
                    r["err_ours_vs_fla"] = fake
                    r["fp64"] = {"provider": "dry-run (fake)", "tokens": min(args.ref_tokens, shape.T),
                                 "H": 2, "HV": 2, "ours": fake, "fla": fake}
                    for name in ("ours", "fla"):
                        r[name]["peak_extra_bytes"] = int(r["floor"]["bytes"] * (1.5 + h))
                    for name in ("ours", "fla"):
                        r[name]["x_floor"] = r[name]["median_ms"] / r["floor"]["floor_ms"]
                    rows.append(r)
            else:
                try:
                    rows = runner.item(var, shape, directions, "gpu", impl_list)
                except Exception as e:  # noqa: BLE001  (e.g. out of memory): keep going
                    if args.verbose:
                        traceback.print_exc()
                    log(f"    failed: {measure.first_line(e)}")
                    state["skipped"].append({"variant": var.key, "shape": shape.key,
                                             "why": measure.first_line(e)})
                    gc.collect()
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
            for r in rows:
                o, f = r["ours"], r["fla"]
                extra = ""
                if "speedup_fla_over_ours" in r:
                    extra = f"  FLA/ours {r['speedup_fla_over_ours']:.2f}x"
                e = r.get("fp64", {}).get("ours")
                if isinstance(e, dict) and e.get("o") is not None:
                    extra += f"  err(fp64) o {e['o']:.1e}"
                log(f"    {r['direction']:7s} ours {fmt_ms(o)} | FLA {fmt_ms(f)}{extra}")
            state["rows"].extend(rows)
            flush()

    if not args.skip_cpu and not args.smoke:
        state["rows"].extend(cpu_section(args, runner_factory, ours, budget_left))
    flush(plots=True)
    log(f"wrote {args.report or os.path.join(args.out, 'BENCHMARKS.md')} and {args.out}/results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
