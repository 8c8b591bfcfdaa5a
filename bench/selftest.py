#!/usr/bin/env python3
"""Checks of the benchmark suite that need no GPU (a few minutes on 2 CPU cores):

1. the torch float64 recurrence (benchlib/reference.py) agrees with linattn.reference (when
   importable) on every variant, outputs and gradients;
2. --dry-run writes a complete report (every variant, both directions, plots);
3. the row code records "not implemented" (NotImplementedError), "refuses: <first line>"
   (another exception) and a backward-only failure, and keeps the other side's numbers;
4. --merge keeps an earlier run's rows, each with the GPU model it was measured on (a section per card);
5. --smoke on two variants runs the real measurement path end to end.

    python3 bench/selftest.py
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The suite's own checks run on the CPU on every machine (on a GPU machine the smoke problems'
# K = V = 16 would meet linattn's CUDA head-size limits instead of the code under test).
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import torch  # noqa: E402

import run_benchmarks  # noqa: E402
from benchlib import impls, problems, reference  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def test_reference():
    try:
        import linattn  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        print(f"skip reference cross-check: linattn not importable ({e})")
        return
    ref = impls.Reference(linattn, torch.device("cpu"))
    check(ref.families == set(problems.FAMILIES),
          f"linattn.reference agrees with the torch recurrence for {sorted(ref.families)} {ref.notes}")


def test_head_slice():
    """The float64 check compares the implementations' every-head run on its reference's heads:
    slicing the every-head result must give the reduced-head result, for every variant (GVA,
    in-kernel gates' per-head A_log / dt_bias) and every gradient."""
    ref = impls.Reference(None, torch.device("cpu"))
    worst = 0.0
    for var in problems.gpu_variants():
        v = var.with_heads(2, 4, 16, 16) if var.HV != var.H else var.with_heads(3, 3, 16, 16)
        shape = problems.varlen_shape("random", 3, 150)
        x = problems.make_inputs(v, shape, device="cpu", dtype=torch.float64, gate_dtype=torch.float64,
                                 beta_dtype=torch.float64, seed=7)
        do = problems.make_do(v, shape, device="cpu", dtype=torch.float64, seed=7)
        fvar, fshape, fx, fdo = problems.reduced_problem(v, shape, x, do, 120, None)
        rvar, rshape, rx, rdo = problems.reduced_problem(v, shape, x, do, 120, 2)
        full, _ = ref.run(fvar, fshape, fx, fdo, True)
        red, _ = ref.run(rvar, rshape, rx, rdo, True)
        check(set(full) == set(red) and fvar.HV > rvar.HV, f"head slice: {var.key} has the reduced run's outputs")
        for n, t in red.items():
            worst = max(worst, (problems.head_slice(n, full[n], v, rvar.H, rvar.HV) - t).abs().max().item())
    check(worst < 1e-10, f"head slice of the every-head run equals the reduced-head run ({worst:.1e})")


def test_dry_run(tmp):
    out = os.path.join(tmp, "dry")
    rc = run_benchmarks.main(["--out", out, "--dry-run", "--skip-cpu", "--no-varlen"])
    check(rc == 0, "dry run exits 0")
    doc = json.load(open(os.path.join(out, "results.json")))
    variants = {r["variant"] for r in doc["rows"]}
    check(variants == {v.key for v in problems.gpu_variants() + problems.issue_variants()},
          "dry run covers every variant")
    md = open(os.path.join(out, "BENCHMARKS.md")).read()
    check("DRY RUN" in md and "do not edit by hand" in md, "dry-run report is labelled")
    pngs = [f for f in os.listdir(out) if f.endswith(".png")]
    check(len(pngs) == len(variants), f"one plot per variant ({len(pngs)})")
    rendered = os.path.join(tmp, "BENCHMARKS.md")
    rc = run_benchmarks.main(["--render", os.path.join(out, "results.json"), "--report", rendered])
    rmd = open(rendered).read()
    check(rc == 0 and rmd.count("](dry/") == len(pngs) and "do not edit by hand" in rmd,
          "--render rewrites the report elsewhere with the plot links adjusted")
    os.remove(os.path.join(out, pngs[0]))
    rc = run_benchmarks.main(["--render", os.path.join(out, "results.json"), "--report", rendered, "--replot"])
    check(rc == 0 and os.path.exists(os.path.join(out, pngs[0])), "--render --replot redraws the plots")


def test_status_paths():
    def not_impl(*a, **k):
        raise NotImplementedError("CUDA backward not implemented")

    def refuses(*a, **k):
        raise RuntimeError("first line of the refusal\nsecond line")

    class BwdFails(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            raise NotImplementedError("backward")

    mock = reference.make_fla_signature_op("gla", torch.float32)

    def fwd_only(q, k, v, g, **kw):
        o, s = mock(q, k, v, g, **kw)
        return BwdFails.apply(o), s

    ours = impls.Impl("ours")
    ours.fns["gla"] = fwd_only
    ours.fns["kda"] = not_impl
    fla = impls.Impl("fla")
    fla.fns["gla"] = mock
    fla.fns["kda"] = refuses
    args = run_benchmarks.parse_args(["--out", "/tmp/unused", "--smoke", "--fla-always"])
    ceil = {"copy_bw_Bps": 1e10, "matmul_flops_per_s": 1e11}
    runner = run_benchmarks.Runner(args, torch.device("cpu"), ours, fla,
                                   impls.Reference(None, torch.device("cpu")), ceil, 0)
    shape = problems.fixed_shape(1, 80)
    gla = [v for v in problems.gpu_variants() if v.key == "gla"][0].with_heads(2, 2, 16, 16)
    rows = runner.item(gla, shape, ("fwd", "fwdbwd"), "gpu", [("ours", ours), ("fla", fla)])
    check(rows[0]["ours"]["status"] == "ok" and rows[0]["fla"]["status"] == "ok", "forward of both ran")
    check(rows[1]["ours"]["status"] == "not implemented", "backward NotImplementedError -> not implemented")
    check(rows[1]["fla"]["status"] == "ok" and "o" in rows[1]["fp64"]["fla"], "FLA's numbers kept")
    kda = problems.gpu_variants()[0].with_heads(2, 2, 16, 16)
    rows = runner.item(kda, shape, ("fwd",), "gpu", [("ours", ours), ("fla", fla)])
    check(rows[0]["ours"]["status"] == "not implemented", "forward NotImplementedError -> not implemented")
    check(rows[0]["fla"] == {"status": "refuses", "message": "RuntimeError: first line of the refusal"},
          "other exception -> refuses + first line")
    # default: where ours has no kernel, FLA is not timed (its compile would be wasted)
    runner.args = run_benchmarks.parse_args(["--out", "/tmp/unused", "--smoke"])
    rows = runner.item(gla, shape, ("fwd", "fwdbwd"), "gpu", [("ours", ours), ("fla", fla)])
    check(rows[0]["fla"]["status"] == "ok" and rows[1]["fla"]["status"].startswith("not measured"),
          "FLA skipped where ours is not implemented (without --fla-always)")


def test_select():
    items = [(v, s) for v, s in problems.gpu_work(False, False) if not s.varlen]
    keys = lambda ops: {(v.key, s.key) for v, s in run_benchmarks.select(items, ops, None)}
    fam = keys("kda@2x8192")
    check(("kda", "2x8192") in fam and ("kda_ik", "2x8192") in fam and all(s == "2x8192" for _, s in fam),
          "--ops FAMILY@SHAPE: every variant of the family at that shape")
    check(keys("=kda@2x8192") == {("kda", "2x8192")}, "--ops =KEY@SHAPE: that variant alone")
    check({v for v, _ in keys("=kda")} == {"kda"} and len(keys("=kda")) > 1, "--ops =KEY: that variant at every shape")
    check(keys("=kda@2x8192,=gla@2x8192") == {("kda", "2x8192"), ("gla", "2x8192")}, "=KEY tokens combine")
    check(keys("2x8192") == {(v.key, s.key) for v, s in items if s.key == "2x8192"}, "--ops SHAPE: every variant there")
    order = [(v.key, s.key) for v, s in run_benchmarks.select(items, "gla@2x8192,=gdn@1x8192,kda@2x8192", None)]
    check(order[:2] == [("gla", "2x8192"), ("gdn", "1x8192")] and order[2] == ("kda", "2x8192")
          and len(order) == 2 + len(keys("kda@2x8192")),
          f"--ops: items in the order of the tokens they match, the suite's within one ({order[:3]})")


def test_merge(tmp):
    out = os.path.join(tmp, "merge")
    base = ["--out", out, "--dry-run", "--skip-cpu", "--no-varlen", "--directions", "fwd"]
    families = lambda: {r["family"] for r in json.load(open(os.path.join(out, "results.json")))["rows"]}
    run_benchmarks.main(base + ["--ops", "gla"])
    run_benchmarks.main(base + ["--ops", "gdn", "--merge"])
    check(families() == {"gla", "gdn"}, f"--merge keeps rows of the same device ({sorted(families())})")
    order = [r["variant"] for r in json.load(open(os.path.join(out, "results.json")))["rows"]]
    check(order.index("gdn") < order.index("gla"), f"--merge keeps the suite's variant order ({order[:4]})")
    path = os.path.join(out, "results.json")
    doc = json.load(open(path))
    for run in [doc["environment"]] + doc["environment"].get("merged_runs", []):
        run["device"] = "some other GPU"
    for r in doc["rows"]:
        r["device"] = "some other GPU"
    json.dump(doc, open(path, "w"))
    run_benchmarks.main(base + ["--ops", "simple_gla,gdn", "--merge"])
    doc = json.load(open(path))
    by_card = {(r["device"], r["family"]) for r in doc["rows"]}
    here = doc["environment"]["device"]
    check(by_card == {("some other GPU", "gla"), ("some other GPU", "gdn"), (here, "simple_gla"), (here, "gdn")},
          f"--merge keeps another GPU's rows beside this run's, each with its card ({sorted(by_card)})")
    md = open(os.path.join(out, "BENCHMARKS.md")).read()
    check("## Summary — some other GPU" in md and f"## Summary — {here}" in md
          and md.index(f"## Summary — {here}") < md.index("## Summary — some other GPU"),
          "a report of two cards has a section per card, the one with more rows first")
    check(md.count("earlier run merged in") == 2 and md.count("some other GPU, linattn") == 2,
          "the other card's runs are listed while their rows remain")
    run_benchmarks.main(base + ["--ops", "simple_gla"])  # no merge: one card, one run
    md = open(os.path.join(out, "BENCHMARKS.md")).read()
    check("earlier run merged in" not in md and "## Summary\n" in md and "## Summary —" not in md,
          "one card: no per-card headings")
    check("Partial run" not in md, "a complete run is not reported as partial")
    doc = json.load(open(path))  # a run cut off before one of its planned items
    doc["planned"].append({"variant": "gla", "shape": "2x8192", "label": "2×8192"})
    json.dump(doc, open(path, "w"))
    md2 = os.path.join(tmp, "partial.md")
    run_benchmarks.main(["--render", path, "--report", md2])
    md = open(md2).read()
    check("Partial run: 1 of the" in md and "`gla` 2×8192: not reached" in md,
          "a planned item without rows is reported as not reached")
    run_benchmarks.main(base + ["--ops", "gla", "--merge"])  # same device: simple_gla's run stays listed
    md = open(os.path.join(out, "BENCHMARKS.md")).read()
    check(md.count("earlier run merged in") == 1, "a merged run with rows left is listed")
    run_benchmarks.main(base + ["--ops", "gla,simple_gla", "--merge"])  # supersedes both earlier runs
    md = open(os.path.join(out, "BENCHMARKS.md")).read()
    doc = json.load(open(path))
    check("earlier run merged in" not in md and not doc["environment"]["merged_runs"],
          "earlier runs whose rows were all measured again are not listed")
    check(all(r.get("run") == doc["environment"]["run_id"] for r in doc["rows"]),
          "every row records the run that measured it")


def test_smoke(tmp):
    out = os.path.join(tmp, "smoke")
    rc = run_benchmarks.main(["--out", out, "--smoke", "--ops", "kda_safe_gate_ik,gdn_gva"])
    check(rc == 0, "smoke run exits 0")
    doc = json.load(open(os.path.join(out, "results.json")))
    ok = [r for r in doc["rows"] if r["ours"].get("status") == "ok" and r["fla"].get("status") == "ok"]
    check(len(ok) == 16, f"smoke: 16 rows with both sides timed ({len(ok)})")
    worst = max(e for r in ok for e in r["fp64"]["ours"].values() if e is not None)
    check(worst < 2e-3, f"smoke: ours vs float64 within the float32 bound ({worst:.1e})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        test_reference()
        test_head_slice()
        test_dry_run(tmp)
        test_status_paths()
        test_select()
        test_merge(tmp)
        test_smoke(tmp)
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)
