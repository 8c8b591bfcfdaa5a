"""BENCHMARKS.md and the plots, generated from the results document (results.json)."""
from __future__ import annotations

import json
import math
import os

DIR_LABEL = {"fwd": "forward", "fwdbwd": "forward + backward"}


# ------------------------------------------------------------------ formatting


def _esc(s: str, n: int = 70) -> str:
    s = str(s).replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


def fms(x) -> str:
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.3f}"
    return f"{x:.4f}"


def fe(x) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return "**NaN/Inf**"
    return f"{x:.1e}"


def fmib(b) -> str:
    return "–" if b is None else f"{b / 2 ** 20:.0f}"


def status_cell(res: dict | None, ms_key="median_ms") -> str:
    if not res:
        return "–"
    if res.get("status") == "ok":
        return fms(res.get(ms_key))
    st = res.get("status", "?")
    if st == "refuses" and res.get("message"):
        return "refuses: " + _esc(res["message"], 110)
    if st == "not implemented":
        return "not implemented"
    return _esc(st, 80)


def err_cell(errs, direction: str) -> str:
    """'o 1.2e-03' (forward) or 'o 1.2e-03 · dg 4.0e-03' (worst gradient) (forward + backward)."""
    if not isinstance(errs, dict):
        return "–"
    if "status" in errs and "o" not in errs:
        return _esc(errs["status"], 60)
    parts = [f"o {fe(errs.get('o'))}"]
    if direction == "fwdbwd":
        grads = {n: e for n, e in errs.items() if n != "o" and n != "status"}
        if grads:
            def keyf(item):
                e = item[1]
                return float("inf") if e is None or math.isnan(e) else e
            bad = [n for n, e in grads.items() if e is not None and (math.isnan(e) or math.isinf(e))]
            n, e = (bad[0], grads[bad[0]]) if bad else max(grads.items(), key=keyf)
            parts.append(f"{n} {fe(e)}")
    return " · ".join(parts)


def _row_order(r):
    dist = {"uniform": 0, "random": 1, "skewed": 2}.get(r.get("dist") or "", 3)
    return (r["varlen"], r["tokens"], len(r.get("seqlens") or []), dist, r["B"])


# ------------------------------------------------------------------ markdown


def _unreached(doc: dict) -> list[dict]:
    """The GPU items the run planned (results.json's "planned") that have no row and no skip
    record: the run was cut off before them."""
    have = {(r["variant"], r["shape"]) for r in doc.get("rows", []) if r["section"] == "gpu"}
    have |= {(s["variant"], s["shape"]) for s in doc.get("skipped") or []}
    return [p for p in doc.get("planned") or [] if (p["variant"], p["shape"]) not in have]


def write_markdown(doc: dict, path: str) -> None:
    env = doc.get("environment", {})
    ceil = doc.get("ceilings")
    rows = doc.get("rows", [])
    L: list[str] = []
    w = L.append
    w("# linattn benchmarks")
    w("")
    w("> **Generated file — do not edit by hand.** `bench/run_benchmarks.py` writes it, with "
      "`results.json` (every number) and the plots beside it; re-run the command to update it. "
      "`bench/README.md` explains each column and the floor formulas.")
    w("")
    mode = env.get("mode", "?")
    unreached = _unreached(doc)
    if unreached:
        w(f"> ⚠️ **Partial run: {len(unreached)} of the {len(doc['planned'])} planned work items were "
          "not reached** (the run ended before them; listed under \"Not run\" at the end). Their "
          "operators' summary rows count only the shapes measured.")
        w("")
    if mode == "dry-run":
        w("> ⚠️ **DRY RUN: every time, memory figure, error and ceiling below is made up** (no GPU was "
          "used). This file only shows the report's layout.")
        w("")
    elif mode == "smoke":
        w("> ⚠️ **SMOKE TEST: tiny problems; stand-in (mock) operators where an implementation was "
          "missing. The numbers say nothing about performance.**")
        w("")
    w(f"Command: `{env.get('command', '?')}` — mode **{mode}**, {env.get('date_utc', '?')}.")
    w("")

    # environment
    w("## Environment")
    w("")
    w("| | |")
    w("| --- | --- |")
    dev = env.get("device", "?")
    if env.get("compute_capability"):
        dev += (f" (compute capability {env['compute_capability']}, {env.get('sm_count')} SMs, "
                f"L2 {(env.get('l2_bytes') or 0) / 2 ** 20:.0f} MiB, "
                f"{(env.get('gpu_memory_bytes') or 0) / 2 ** 30:.0f} GiB)")
    items = [
        ("device", dev),
        ("driver", env.get("driver") or "–"),
        ("CUDA (PyTorch's runtime)", env.get("cuda_runtime") or "–"),
        ("PyTorch", env.get("pytorch")),
        ("Triton", env.get("triton")),
        ("FLA", f"{env.get('fla_version') or 'not importable'}, commit {env.get('fla_commit')}"),
        ("FLA's optional backends", "disabled (FLA_DISABLE_BACKEND_DISPATCH=1): FLA's own Triton kernels"
         if env.get("fla_backend_dispatch_disabled") == "1" else
         f"FLA_DISABLE_BACKEND_DISPATCH={env.get('fla_backend_dispatch_disabled')}"),
        ("linattn", f"{env.get('linattn_version') or 'not importable'}, commit "
                    f"{(env.get('linattn_commit') or '?')[:12]}"
                    + (" + uncommitted changes" if env.get("linattn_tree_dirty") else "")),
        ("host CPU", f"{env.get('host_cpu')} ({env.get('host_cpu_count')} logical CPUs, "
                     f"torch threads {env.get('torch_threads')})"),
        ("Python", env.get("python")),
        ("date", env.get("date_utc")),
        ("float64 reference", env.get("reference")),
    ]
    for k, v in items:
        w(f"| {k} | {_esc(v, 200)} |")
    for i, run in enumerate(env.get("merged_runs") or []):
        kept = ("; its GPU rows measured again since, CPU rows kept" if run.get("gpu_rows_dropped")
                else "; its CPU rows dropped (another host CPU), GPU rows kept" if run.get("cpu_rows_dropped") else "")
        commit = f", linattn {run['linattn_commit'][:12]}" if run.get("linattn_commit") else ""
        w(f"| earlier run merged in ({i + 1}) | {_esc(run.get('date_utc'))}, `{_esc(run.get('command'), 120)}`, "
          f"{_esc(run.get('device'))}{commit}{kept} |")
    w("")

    gpu = [r for r in rows if r["section"] == "gpu"]
    cards = _cards(doc, gpu)
    if ceil and ceil.get("assumed"):
        w("## Ceilings — ASSUMED, not measured (dry run)")
        w("")
        w(f"- copy bandwidth {ceil['copy_bw_Bps'] / 1e12:.2f} TB/s, bf16 matrix rate "
          f"{ceil['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s (made-up round numbers).")
        w("")
    elif ceil or len(cards) > 1:
        w("## Measured ceilings (this run)" if len(cards) <= 1 else "## Measured ceilings (each card's newest run)")
        w("")
        for card in cards or [dev]:
            c = _card_ceilings(doc, card)
            if not c:
                continue
            who = f"{card}: " if len(cards) > 1 else ""
            w(f"- {who}copy bandwidth: **{c['copy_bw_Bps'] / 1e12:.2f} TB/s** — a {c['copy_bytes'] / 2 ** 31:.0f} GiB "
              f"device-to-device copy (`dst.copy_(src)`, {c['copy_bytes'] / 2 ** 31:.0f} GiB read + written), "
              f"median of 10 after 3 warm-ups ({fms(c['copy_ms'])} ms).")
            w(f"- {who}{c['matmul_dtype']} matrix rate: **{c['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s** — "
              f"`torch.matmul` of two random {c['matmul_n']}×{c['matmul_n']} matrices, 2n³ FLOPs, median of 10 "
              f"after 3 warm-ups ({fms(c['matmul_ms'])} ms).")
        w("")

    if gpu:
        w("## How to read the tables")
        w("")
        w("- **ours / FLA ms**: median of per-call CUDA-event times after warm-up, rotating among input sets "
          "that together exceed twice the L2 (count in results.json), same process, same inputs. "
          "Forward runs under `torch.no_grad()`; forward + backward is the forward call plus "
          "`torch.autograd.grad` of every float input.")
        w("- **FLA/ours**: FLA's time over ours — above 1 we are faster.")
        w("- **MiB**: peak of `torch.cuda.max_memory_allocated` during one call, minus what was allocated "
          "before it (inputs excluded; outputs, saved tensors and scratch included).")
        w("- **vs FLA**: ‖ours − FLA‖/‖FLA‖ on the full problem; for forward + backward the output and "
          "the worst gradient (all in results.json).")
        fp = _fp64_desc(rows)
        w(f"- **vs fp64**: ‖x − ref‖/‖ref‖ against a float64 evaluation of the recurrence on a reduced "
          f"problem with the same options and the same (rounded) inputs: {fp}. SPEC.md's bound for bf16 "
          f"inputs is 1e-2.")
        w("- **floor**: max(minimum bytes / copy bandwidth, matrix FLOPs / bf16 matrix rate), both ceilings "
          "measured above; (m) memory-bound, (c) compute-bound. **×floor**: time / floor.")
        w("- **not implemented**: the call raised NotImplementedError; **refuses**: it raised another "
          "exception, whose first line is shown.")
        if len(cards) > 1:
            w(f"- **cards**: the rows come from {len(cards)} GPU models ({', '.join(cards)}); each has its own "
              "summary, tables and first-call times, its floors from its own ceilings. Compare ratios "
              "within a card: FLA ran beside ours on the same card in the same process for every row.")
        w("")
        for card in cards:
            _card_sections(w, doc, [r for r in gpu if _card_of(r, doc) == card], card if len(cards) > 1 else None,
                           cards[0])

    cpu = [r for r in rows if r["section"] == "cpu"]
    if cpu:
        _cpu(w, cpu, doc)

    unreached = _unreached(doc)
    if doc.get("skipped") or unreached:
        w("## Not run")
        w("")
        for s in doc.get("skipped") or []:
            w(f"- `{s['variant']}` {s['shape']}: {_esc(s['why'], 200)}")
        for s in unreached:
            w(f"- `{s['variant']}` {_esc(s.get('label') or s['shape'])}: not reached (the run ended before it)")
        w("")
    if doc.get("notes"):
        w("## Notes")
        w("")
        for n in doc["notes"]:
            w(f"- {_esc(n, 300)}")
        w("")
    w("Decode (single-token / fused recurrent, beside FLA's fused_recurrent kernels): `DECODE.md` beside "
      "`results.json`, generated by `bench/decode_bench.py`.")
    w("")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(L))
    os.replace(path + ".tmp", path)


def _cards(doc: dict, gpu: list) -> list[str]:
    """The GPU models the rows were measured on, the one with the most rows first (ties: this run's
    card, then row order)."""
    env = doc.get("environment", {})
    seen = [env.get("device")] if any(_card_of(r, doc) == env.get("device") for r in gpu) else []
    for r in gpu:
        if _card_of(r, doc) not in seen:
            seen.append(_card_of(r, doc))
    count = {c: sum(_card_of(r, doc) == c for r in gpu) for c in seen}
    return sorted(seen, key=lambda c: (-count[c], seen.index(c)))


def _card_of(r: dict, doc: dict) -> str:
    # rows written before rows recorded their card come from the report's own run's card (merges
    # then kept only rows of one card)
    return r.get("device") or doc.get("environment", {}).get("device") or "?"


def _card_ceilings(doc: dict, card: str) -> dict | None:
    """The ceilings of the newest run on that card (this run's, else the merged runs' in order)."""
    env = doc.get("environment", {})
    if env.get("device") == card and doc.get("ceilings"):
        return doc["ceilings"]
    for run in env.get("merged_runs") or []:
        if run.get("device") == card and run.get("ceilings"):
            return run["ceilings"]
    return None


def _card_sections(w, doc: dict, gpu: list, card: str | None, primary: str) -> None:
    """Summary, per-variant tables and first-call times of one card's rows (card None: the only one;
    primary: the report's first card, which owns plots recorded without a card)."""
    tag = "" if card is None else f" — {card}"
    _summary(w, gpu, tag)
    variants = []
    for r in gpu:
        if r["variant"] not in [v for v, _ in variants]:
            variants.append((r["variant"], r))
    this = card or _card_of(gpu[0], doc)
    # plots.json entries from before plots recorded their card are the primary card's
    plots = {p["variant"]: p["file"] for p in doc.get("plots", [])
             if p.get("file") and (p.get("device") or primary) == this}
    for vkey, r0 in variants:
        opts = ", ".join(f"{k}={v}" for k, v in r0["options"].items()) or "defaults"
        w(f"## {r0['variant_label']} (`{vkey}`){tag}")
        w("")
        w(f"`{_fn_name(r0['family'])}`, H={r0['H']}, HV={r0['HV']}, K={r0['K']}, V={r0['V']}, "
          f"{r0['dtype']}, {opts}.")
        w("")
        if vkey in plots:
            w(f"![{vkey}: time vs tokens]({plots[vkey]})")
            w("")
        for d in ("fwd", "fwdbwd"):
            rs = sorted([r for r in gpu if r["variant"] == vkey and r["direction"] == d], key=_row_order)
            if not rs:
                continue
            w(f"### {DIR_LABEL[d]}")
            w("")
            w("| shape | ours ms | FLA ms | FLA/ours | ours MiB | FLA MiB | ours vs FLA | ours vs fp64 "
              "| FLA vs fp64 | floor ms | ours ×floor | FLA ×floor |")
            w("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | ---: |")
            for r in rs:
                o, f = r.get("ours", {}), r.get("fla", {})
                fl = r.get("floor") or {}
                sp = r.get("speedup_fla_over_ours")
                fp64 = r.get("fp64") or {}
                w("| " + " | ".join([
                    _esc(r["shape_label"], 60),
                    status_cell(o), status_cell(f),
                    "–" if sp is None else f"{sp:.2f}×",
                    fmib(o.get("peak_extra_bytes")), fmib(f.get("peak_extra_bytes")),
                    err_cell(r.get("err_ours_vs_fla"), d),
                    err_cell(fp64.get("ours"), d) if fp64 else "–",
                    err_cell(fp64.get("fla"), d) if fp64 else "–",
                    (f"{fms(fl['floor_ms'])} ({fl['bound'][0]})" if fl else "–"),
                    "–" if o.get("x_floor") is None else f"{o['x_floor']:.1f}",
                    "–" if f.get("x_floor") is None else f"{f['x_floor']:.1f}",
                ]) + " |")
            w("")
    _first_calls(w, gpu, tag)


def _fn_name(family: str) -> str:
    return {"kda": "chunk_kda", "gdn": "chunk_gated_delta_rule", "gla": "chunk_gla",
            "simple_gla": "chunk_simple_gla"}[family]


def _fp64_desc(rows) -> str:
    infos = [r["fp64"] for r in rows if isinstance(r.get("fp64"), dict) and "tokens" in r["fp64"]]
    if not infos:
        return "not computed in this run"
    toks = sorted({i["tokens"] for i in infos})
    hvs = sorted({i["HV"] for i in infos})
    prov = sorted({i["provider"] for i in infos})
    return (f"batch 0, the first {max(toks)} tokens (varlen: the leading sequences up to that many tokens, "
            f"the last one truncated; shorter problems use all their tokens), the first "
            f"{'/'.join(map(str, hvs))} value heads with their query/key heads"
            + (" (the implementations run every head of those tokens, compared on these)"
               if all(i.get("impl_all_heads") for i in infos) else "")
            + f"; reference computed by {' and '.join(prov)}")


def _geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _summary(w, gpu, tag=""):
    w(f"## Summary{tag}")
    w("")
    w("Per operator and direction: geometric mean of FLA/ours over the shapes where both ran, the "
      "range, our worst error against float64 (output; gradients), and how many shapes each ran.")
    w("")
    w("| operator | direction | FLA/ours (geomean) | range | ours worst vs fp64 | ours ran | FLA ran |")
    w("| --- | --- | ---: | --- | --- | ---: | ---: |")
    variants, seen = [], []
    for r in gpu:
        if r["variant"] not in variants:
            variants.append(r["variant"])
        k = (r["variant"], r["direction"])
        if k not in seen:
            seen.append(k)
    # an operator's rows together, forward first, whatever order merged runs added them in
    seen.sort(key=lambda k: (variants.index(k[0]), k[1] != "fwd"))
    for vkey, d in seen:
        rs = [r for r in gpu if r["variant"] == vkey and r["direction"] == d]
        sps = [r["speedup_fla_over_ours"] for r in rs if r.get("speedup_fla_over_ours")]
        g = _geomean(sps)
        worst_o, worst_g = None, None
        for r in rs:
            e = (r.get("fp64") or {}).get("ours")
            if isinstance(e, dict):
                for n, x in e.items():
                    if n == "status" or x is None:
                        continue
                    x = float("inf") if math.isnan(x) else x
                    if n == "o":
                        worst_o = x if worst_o is None else max(worst_o, x)
                    else:
                        worst_g = x if worst_g is None else max(worst_g, x)
        n_o = sum(1 for r in rs if r.get("ours", {}).get("status") == "ok")
        n_f = sum(1 for r in rs if r.get("fla", {}).get("status") == "ok")
        ours_st = {r.get("ours", {}).get("status") for r in rs} - {"ok"}
        ran = f"{n_o}/{len(rs)}" + (f" ({_esc(', '.join(sorted(ours_st)), 40)})" if ours_st and not n_o else "")
        errs = "–" if worst_o is None else f"o {fe(worst_o)}" + ("" if worst_g is None else f"; grads {fe(worst_g)}")
        w(f"| {rs[0]['variant_label']} | {DIR_LABEL[d]} | {'–' if g is None else f'{g:.2f}×'} | "
          f"{'–' if not sps else f'{min(sps):.2f}–{max(sps):.2f}×'} | {errs} | {ran} | {n_f}/{len(rs)} |")
    w("")


def _first_calls(w, gpu, tag=""):
    w(f"## First-call times (compilation, autotuning){tag}")
    w("")
    w("Wall time of the first call of each operator and direction, fixed-length and varlen separately "
      "(FLA's Triton kernels compile and autotune there; later shapes may re-tune). Not part of the "
      "medians above.")
    w("")
    w("| operator | direction | inputs | ours first call s | FLA first call s | FLA later calls, max s |")
    w("| --- | --- | --- | ---: | ---: | ---: |")
    groups = []
    for r in gpu:
        k = (r["variant"], r["direction"], r["varlen"])
        if k not in groups:
            groups.append(k)
    for v, d, vl in groups:
        rs = [r for r in gpu if (r["variant"], r["direction"], r["varlen"]) == (v, d, vl)]
        fo = rs[0].get("ours", {}).get("first_call_s")
        ff = rs[0].get("fla", {}).get("first_call_s")
        later = [r.get("fla", {}).get("first_call_s") for r in rs[1:] if r.get("fla", {}).get("first_call_s")]
        w(f"| {rs[0]['variant_label']} | {DIR_LABEL[d]} | {'varlen' if vl else 'fixed'} | "
          f"{'–' if fo is None else f'{fo:.2f}'} | {'–' if ff is None else f'{ff:.2f}'} | "
          f"{'–' if not later else f'{max(later):.2f}'} |")
    w("")


def _cpu(w, cpu, doc):
    env = doc.get("environment", {})
    w("## CPU backend")
    w("")
    w(f"linattn's CPU backend (the embedded default) on {env.get('host_cpu')} "
      f"({env.get('host_cpu_count')} logical CPUs, OMP_NUM_THREADS={env.get('omp_num_threads_env') or 'unset'}), "
      f"float32 inputs; median of per-call host-clock times after one warm-up call. Errors against "
      f"the float64 reference as above.")
    w("")
    w("| operator | shape | H | K=V | direction | linattn ms | µs / token | vs fp64 |")
    w("| --- | --- | ---: | ---: | --- | ---: | ---: | --- |")
    for r in cpu:
        o = r.get("ours", {})
        per_tok = (o["median_ms"] * 1e3 / r["tokens"]) if o.get("status") == "ok" else None
        fp64 = r.get("fp64") or {}
        w(f"| {r['variant_label']} | {r['shape_label']} | {r['H']} | {r['K']} | {DIR_LABEL[r['direction']]} | "
          f"{status_cell(o)} | {'–' if per_tok is None else f'{per_tok:.2f}'} | "
          f"{err_cell(fp64.get('ours'), r['direction']) if fp64 else '–'} |")
    w("")


# ------------------------------------------------------------------ plots


def plots(doc: dict, out_dir: str) -> list[dict]:
    """One PNG per operator variant and GPU model: median time against tokens, ours and FLA, forward
    and forward + backward side by side; fixed-length shapes as lines, varlen as markers."""
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        return [{"variant": None, "file": None, "error": f"matplotlib not importable: {e}"}]
    all_gpu = [r for r in doc.get("rows", []) if r["section"] == "gpu"]
    made = []
    cards = _cards(doc, all_gpu)
    jobs = []  # (variant, card, rows): one figure each; the first card's files keep the plain name
    for ci, card in enumerate(cards):
        gpu = [r for r in all_gpu if _card_of(r, doc) == card]
        variants = []
        for r in gpu:
            if r["variant"] not in variants:
                variants.append(r["variant"])
        for v in variants:
            jobs.append((v, card, ci, [r for r in gpu if r["variant"] == v]))
    for v, card, ci, rs in jobs:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        any_data = False
        for ax, d in zip(axes, ("fwd", "fwdbwd")):
            ds = [r for r in rs if r["direction"] == d]
            ax.set_title(f"{rs[0]['variant_label']} — {DIR_LABEL[d]}", fontsize=10)
            for who, color in (("ours", "tab:blue"), ("fla", "tab:orange")):
                label = "linattn" if who == "ours" else "FLA"
                fixed = sorted([r for r in ds if not r["varlen"] and r.get(who, {}).get("status") == "ok"],
                               key=lambda r: (r["tokens"], r["B"]))
                if fixed:
                    any_data = True
                    xs = [r["tokens"] for r in fixed]
                    ys = [r[who]["median_ms"] for r in fixed]
                    ax.plot(xs, ys, "-o", color=color, label=f"{label} fixed length")
                    for r, x, y in zip(fixed, xs, ys):
                        if who == "ours":
                            ax.annotate(r["shape_label"], (x, y), fontsize=7, xytext=(3, 3),
                                        textcoords="offset points")
                vl = [r for r in ds if r["varlen"] and r.get(who, {}).get("status") == "ok"]
                if vl:
                    any_data = True
                    ax.scatter([r["tokens"] * (1.03 if who == "fla" else 0.97) for r in vl],
                               [r[who]["median_ms"] for r in vl], marker="x" if who == "fla" else "^",
                               color=color, alpha=0.7, label=f"{label} varlen")
            fl = sorted([r for r in ds if not r["varlen"] and r.get("floor")], key=lambda r: r["tokens"])
            if fl:
                ax.plot([r["tokens"] for r in fl], [r["floor"]["floor_ms"] for r in fl], ":", color="gray",
                        label="floor")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: PLC0415
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("tokens (B × T)")
            ax.set_ylabel("median time, ms")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        mode = doc.get("environment", {}).get("mode")
        title = card
        if mode in ("dry-run", "smoke"):
            title += f"  [{mode.upper()}: NOT REAL TIMINGS]"
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        slug = "".join(ch if ch.isalnum() else "_" for ch in card).strip("_")
        fname = f"{v}.png" if ci == 0 else f"{v}@{slug}.png"
        if any_data:
            fig.savefig(os.path.join(out_dir, fname), dpi=110)
            made.append({"variant": v, "file": fname, "device": card})
        plt.close(fig)
    with open(os.path.join(out_dir, "plots.json"), "w") as f:
        json.dump(made, f)
    return made
