"""Context parallelism (linattn.cp) on the CPU backend: 2, 3 and 4 gloo processes against the
single-process call (forward, final states and every gradient).

Each world size is spawned once (module fixture) and runs every case of that size; the parent
compares. Tolerances: SPEC's (1e-5 float64, 2e-3 float32, 1e-2 bf16) on o, the final states
and every gradient, for each scan (all-gather, recursive doubling, relay); rank 0 (whose
sequences all start on it) gives bitwise the single-process o and final states, and the relay
with chunk-aligned split points bitwise everything (checked)."""

from __future__ import annotations

import os
import tempfile
import time
import types
import zlib

import pytest
import torch
import torch.nn.functional as F

from helpers import TOL, rel_err

import linattn

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

# name: (family, world, dtype, cu_seqlens, split_points, H, G, K, V, options, with_h0, bitwise_ranks)
CASES = {
    # varlen across both boundaries of 2 ranks, an empty sequence on the boundary, GVA,
    # in-kernel gate + l2norm + sigmoid beta, initial and final states
    "kda_w2_varlen": ("kda", 2, torch.float64, [0, 37, 37, 150, 211], [0, 101, 211], 2, 2, 32, 24,
                      dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                           use_beta_sigmoid_in_kernel=True), True, (0,)),
    # one long sequence over 4 ranks (two interior ranks carry the transition), odd splits
    "gdn_w4_long": ("gdn", 4, torch.float64, [0, 260], [0, 63, 130, 131, 260], 2, 1, 32, 32,
                    dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True), True, (0,)),
    # 4 ranks, varlen with an empty sequence and a short sequence inside one rank, the bounded
    # gate, allow_neg_eigval, state_v_first, float32
    "kda_w4_f32": ("kda", 4, torch.float32, [0, 90, 95, 95, 230, 300], [0, 77, 150, 151, 300], 1, 2, 32, 16,
                   dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True,
                        use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True, state_v_first=True), True, (0,)),
    # GDN with GVA and a caller's gate, the KDA caller gate, FLA's usage (equal split, no states)
    "gdn_w2_gva": ("gdn", 2, torch.float64, [0, 64, 200, 256], [0, 128, 256], 2, 2, 16, 32,
                   dict(disable_recompute=True), True, (0,)),
    # FLA's usage: equal split, a context with FLA's fields only (as fla.ops.cp.build_cp_context
    # makes), no initial state
    "kda_w2_fla": ("kda", 2, torch.float64, [0, 100, 256], None, 2, 1, 32, 32, {}, False, (0,)),
    # 16-bit inputs (SPEC's 1e-2 against the single-process call)
    "kda_w2_bf16": ("kda", 2, torch.bfloat16, [0, 50, 190], [0, 77, 190], 2, 1, 32, 32,
                    dict(use_qk_l2norm_in_kernel=True), True, (0,)),
    # an odd world size (recursive doubling's last round leaves a rank idle); empty sequences
    # at 0, at a split point and at T
    "gdn_w3_odd": ("gdn", 3, torch.float64, [0, 0, 40, 120, 120, 190, 200, 200], [0, 33, 120, 200], 1, 2, 16, 16,
                   dict(use_beta_sigmoid_in_kernel=True), True, (0,)),
    # K + V > 256: the transition and the offset come from two calls
    "kda_w3_wide": ("kda", 3, torch.float64, [0, 120], [0, 41, 83, 120], 1, 1, 144, 128, {}, True, (0,)),
    "kda_w4_chain": ("kda", 4, torch.float64, [0, 256], [0, 64, 128, 192, 256], 1, 1, 16, 16, {}, True, (0,)),
}


def _inputs(name):
    fam, W, dtype, cu, sp, H, G, K, V, opts, with_h0, _ = CASES[name]
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    T, N, HV = cu[-1], len(cu) - 1, H * G

    def rn(*s):
        return torch.randn(*s, generator=gen, dtype=torch.float64)

    t = dict(q=rn(1, T, H, K), k=rn(1, T, H, K), v=rn(1, T, HV, V))
    if not opts.get("use_qk_l2norm_in_kernel"):
        t["k"] = F.normalize(t["k"], dim=-1)
    gshape = (1, T, HV, K) if fam == "kda" else (1, T, HV)
    if opts.get("use_gate_in_kernel"):
        # realistic decays (about -0.01 to -0.05 per token), so that states reach the next ranks
        t["g"] = rn(*gshape) - (6 if "lower_bound" in opts else 0)
        t["A_log"] = rn(HV) * 0.5 - (0 if "lower_bound" in opts else 4)
        t["dt_bias"] = rn(HV * K if fam == "kda" else HV) * 0.5
    else:
        t["g"] = F.logsigmoid(rn(*gshape)) / 16
    t["beta"] = rn(1, T, HV) if opts.get("use_beta_sigmoid_in_kernel") else torch.rand(1, T, HV, generator=gen,
                                                                                         dtype=torch.float64)
    if with_h0:
        t["h0"] = rn(N, HV, V, K) if opts.get("state_v_first") else rn(N, HV, K, V)
    w_o = rn(1, T, HV, V)
    w_h = rn(N, HV, V, K) if opts.get("state_v_first") else rn(N, HV, K, V)
    # weights of the boundary states (the state a rank hands on), one per rank
    w_b = rn(W, HV, V, K) if opts.get("state_v_first") else rn(W, HV, K, V)
    if name in RELAY_BITWISE:  # no loss on the boundary states: the reference then is one call
        w_b.zero_()
    w_h = torch.cat([w_h, w_b])
    t = {k_: (x.to(dtype) if x.is_floating_point() and k_ not in ("h0",) else x) for k_, x in t.items()}
    if "h0" in t:
        t["h0"] = t["h0"].to(torch.float64 if dtype == torch.float64 else torch.float32)
    return t, torch.tensor(cu), w_o.to(dtype), w_h.to(t["h0"].dtype if "h0" in t else torch.float32)


def _call(fam, t, opts, cu_seqlens, h0, cp_context=None, final=True):
    fn = linattn.chunk_kda if fam == "kda" else linattn.chunk_gated_delta_rule
    return fn(t["q"], t["k"], t["v"], t["g"], t["beta"], initial_state=h0, output_final_state=final,
              cu_seqlens=cu_seqlens, cp_context=cp_context, A_log=t.get("A_log"), dt_bias=t.get("dt_bias"), **opts)


# the ways of combining the ranks' transforms (linattn.cp.CPContext.scan); "rebuild": the
# all-gather with the backward's fallback (the local graph rebuilt from the true incoming state,
# as when the local call saves a copy of the incoming-state tensor) forced on every rank
SCANS = ("allgather", "doubling", "relay", "rebuild")
# cases whose split points fall on 64-token chunk boundaries of the sequences: the relay (the
# sequential reference mode) gives bitwise the single-process o, final states and gradients
RELAY_BITWISE = ("gdn_w2_gva", "kda_w4_chain")

_GRAD_KEYS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "h0")


def _reference(name):
    fam, W, dtype, cu, sp, H, G, K, V, opts, with_h0, _ = CASES[name]
    t, cu_t, w_o, w_h = _inputs(name)
    t = {k_: x.clone().requires_grad_() for k_, x in t.items()}
    N = len(cu) - 1
    w_h, w_b = w_h[:N], w_h[N:]
    o, ht = _call(fam, t, opts, cu_t, t.get("h0"))
    loss = (o * w_o).sum() + (ht * w_h.to(ht.dtype)).sum()
    # a boundary state is the final state of the stream cut at that boundary
    sp = sp or [cu[-1] // W * r for r in range(W + 1)]
    for r in range(W - 1):
        e = sp[r + 1]
        if not any(a < e < b for a, b in zip(cu, cu[1:])) or not w_b[r].any():
            continue
        pcu = [c for c in cu if c < e] + [e]
        tp = {k_: (x[:, :e] if k_ in ("q", "k", "v", "g", "beta") else x) for k_, x in t.items()}
        h0 = t["h0"][:len(pcu) - 1] if "h0" in t else None
        _, hp = _call(fam, tp, opts, torch.tensor(pcu), h0)
        loss = loss + (hp[-1] * w_b[r].to(hp.dtype)).sum()
    loss.backward()
    return o.detach(), ht.detach(), {k_: x.grad for k_, x in t.items()}


def _worker(rank, world, init_file, names, outdir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    from linattn.cp import build_cp_context

    import contextlib

    import linattn._torch_ops as ops_mod
    import linattn.cp as cp_mod

    capture = ops_mod.capture_saved_initial_states
    for name, scan in ((n, s_) for n in names for s_ in SCANS):
        fam, W, dtype, cu, sp, H, G, K, V, opts, with_h0, _ = CASES[name]
        t, cu_t, w_o, w_h = _inputs(name)
        ops_mod.capture_saved_initial_states = (
            capture if scan != "rebuild"
            else lambda **kw: contextlib.nullcontext(types.SimpleNamespace(entries=[], maps=[])))
        ctx = build_cp_context(cu_t, group=None, split_points=sp, scan="allgather" if scan == "rebuild" else scan)
        use = ctx
        if name.endswith("_fla"):  # duck typing: only the fields FLA's FLACPContext has
            use = types.SimpleNamespace(group=None, cu_seqlens=ctx.cu_seqlens, cu_seqlens_cpu=ctx.cu_seqlens_cpu,
                                        pre_num_ranks=ctx.pre_num_ranks, post_num_ranks=ctx.post_num_ranks,
                                        is_first_rank=ctx.is_first_rank, is_last_rank=ctx.is_last_rank,
                                        layout="contiguous", scan=ctx.scan)
        s, e, ids = ctx.start, ctx.end, ctx.seq_ids
        loc = {k_: (x[:, s:e] if k_ in ("q", "k", "v", "g", "beta") else x) for k_, x in t.items()}
        if "h0" in loc:
            loc["h0"] = loc["h0"][ids]  # row 0 of a continued sequence is ignored: the wrong state on purpose
        loc = {k_: x.clone().requires_grad_() for k_, x in loc.items()}
        t0 = time.perf_counter()
        rebuilt0 = cp_mod.REBUILT_GRAPHS
        o, ht = _call(fam, loc, opts, None, loc.get("h0"), cp_context=use)
        keep = torch.ones(len(ids), dtype=torch.bool)
        if ctx.post_num_ranks > 0:
            keep[-1] = False  # the boundary state; the sequence's final state is on a later rank
        N = len(cu) - 1
        w_b = w_h[N:]
        loss = (o * w_o[:, s:e]).sum() + (ht[keep] * w_h[ids][keep].to(ht.dtype)).sum()
        if ctx.post_num_ranks > 0:  # the boundary state handed to the next rank, with a loss term too
            loss = loss + (ht[-1] * w_b[ctx.rank].to(ht.dtype)).sum()
        loss.backward()
        dt = time.perf_counter() - t0
        rebuilt = cp_mod.REBUILT_GRAPHS - rebuilt0
        with torch.no_grad():  # inference: no graph, the same results
            o2, ht2 = _call(fam, loc, opts, None, loc.get("h0"), cp_context=use)
            o3, ht3 = _call(fam, loc, opts, None, loc.get("h0"), cp_context=use, final=False)
        same_no_grad = torch.equal(o2, o) and torch.equal(ht2, ht) and torch.equal(o3, o) and ht3 is None
        torch.save(dict(o=o.detach(), ht=ht.detach(), keep=keep, ids=ids, s=s, e=e, pre=ctx.pre_num_ranks,
                        grads={k_: x.grad for k_, x in loc.items()}, time=dt,
                        same_no_grad=same_no_grad, rebuilt=rebuilt),
                   os.path.join(outdir, f"{name}.{scan}.{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def cp_runs():
    import torch.multiprocessing as mp

    outdir = tempfile.mkdtemp(prefix="linattn-cp-")
    timings = {}
    for world in (2, 3, 4):
        names = [n for n, c in CASES.items() if c[1] == world]
        init_file = os.path.join(outdir, f"init{world}")
        t0 = time.perf_counter()
        mp.start_processes(_worker, args=(world, init_file, names, outdir), nprocs=world, join=True,
                           start_method="spawn")
        timings[world] = time.perf_counter() - t0
    return outdir, timings


@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("name", list(CASES))
def test_cp_matches_single_process(cp_runs, name, scan):
    outdir, _ = cp_runs
    fam, W, dtype, cu, sp, H, G, K, V, opts, with_h0, bitwise_ranks = CASES[name]
    o_ref, ht_ref, g_ref = _reference(name)
    parts = [torch.load(os.path.join(outdir, f"{name}.{scan}.{r}.pt")) for r in range(W)]
    tol = TOL[dtype]
    o = torch.cat([p["o"] for p in parts], 1)
    errs = {"o": rel_err(o, o_ref)}
    ht = torch.full_like(ht_ref, float("nan"))
    for p in parts:
        ht[p["ids"][p["keep"]]] = p["ht"][p["keep"]].to(ht.dtype)
    errs["final_state"] = rel_err(ht, ht_ref)
    for key in _GRAD_KEYS:
        if key not in g_ref:
            continue
        if key in ("q", "k", "v", "g", "beta"):
            got = torch.cat([p["grads"][key] for p in parts], 1)
        elif key == "h0":
            got = torch.zeros_like(g_ref[key])
            for p in parts:
                got.index_add_(0, p["ids"], p["grads"][key].to(got.dtype))
        else:  # per-head parameters: each rank holds its tokens' part (summed as DDP would)
            got = sum(p["grads"][key] for p in parts)
        errs["d" + key] = rel_err(got, g_ref[key])
    assert all(p["same_no_grad"] for p in parts), f"{name}: the no-grad forward differs from the autograd one"
    # the backward reuses the forward's local graph (no second local forward) except where forced
    want_rebuilt = [int(scan == "rebuild" and p["pre"] > 0) for p in parts]
    assert [p["rebuilt"] for p in parts] == want_rebuilt, f"{name}: rebuilt graphs {[p['rebuilt'] for p in parts]}"
    bad = {k_: e for k_, e in errs.items() if not e <= tol}
    assert not bad, f"{name}: {bad} (all: {errs})"
    for r in bitwise_ranks:
        p = parts[r]
        assert torch.equal(p["o"], o_ref[:, p["s"]:p["e"]]), f"{name}: rank {r}'s o is not bitwise the single-process o"
        kept = p["ids"][p["keep"]]
        assert torch.equal(p["ht"][p["keep"]].to(ht_ref.dtype), ht_ref[kept]), f"{name}: rank {r}'s final states differ"
    if scan == "relay" and name in RELAY_BITWISE:
        assert max(errs.values()) == 0, f"{name}: the relay is not bitwise: {errs}"
    print(f"{name} ({scan}): max rel err {max(errs.values()):.2e} ({max(errs, key=errs.get)}); "
          f"rank times {[round(p['time'], 3) for p in parts]} s")


def test_cp_refusals():
    from linattn.cp import CPContext, build_cp_context

    t, _, _, _ = _inputs("kda_w2_fla")
    cu_t = torch.tensor([0, 128, 256])
    with pytest.raises(NotImplementedError, match="zigzag"):
        build_cp_context(cu_t, rank=0, world_size=2, layout="zigzag")
    with pytest.raises(ValueError, match="divisible"):
        build_cp_context(torch.tensor([0, 255]), rank=0, world_size=2)
    with pytest.raises(ValueError, match="split_points"):
        build_cp_context(cu_t, rank=0, world_size=2, split_points=[0, 0, 256])
    ctx = build_cp_context(cu_t, rank=0, world_size=2, split_points=[0, 100, 256])
    assert ctx.cu_seqlens.tolist() == [0, 100] and ctx.post_num_ranks == 1 and ctx.pre_num_ranks == 0
    ctx1 = build_cp_context(cu_t, rank=1, world_size=2, split_points=[0, 100, 256])
    assert ctx1.cu_seqlens.tolist() == [0, 28, 156] and ctx1.pre_num_ranks == 1 and ctx1.seq_ids.tolist() == [0, 1]
    with pytest.raises(NotImplementedError, match="return_intermediate_states"):
        linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], cp_context=ctx, return_intermediate_states=True)
    with pytest.raises(ValueError, match="cp_context"):
        linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"], cp_context=object())
    # the state map in the local call's own pass: the CPU backend refuses it before writing
    # anything, and linattn.cp then computes the map by its own call (the CUDA backend computes it
    # on Hopper: tests/cuda SmallStateMap*, bench/cp_gpu.py)
    from linattn._torch_ops import capture_saved_initial_states
    with pytest.raises(NotImplementedError, match="state_map"), capture_saved_initial_states(state_map=True):
        linattn.chunk_kda(t["q"], t["k"], t["v"], t["g"], t["beta"])
    # linattn.fla's verifier: a CP call is checked by the local call's rules, nothing runs
    from linattn._torch_ops import ValidatedOnly, validate_only
    with pytest.raises(ValidatedOnly), validate_only():
        linattn.chunk_kda(t["q"][:, :100], t["k"][:, :100], t["v"][:, :100], t["g"][:, :100],
                          t["beta"][:, :100], cp_context=ctx)
    with pytest.raises(ValueError), validate_only():  # 99 tokens against a local cu_seqlens of 100
        linattn.chunk_kda(t["q"][:, :99], t["k"][:, :99], t["v"][:, :99], t["g"][:, :99],
                          t["beta"][:, :99], cp_context=ctx)
    with pytest.raises(NotImplementedError, match="contiguous"):
        linattn.chunk_gdn(t["q"], t["k"], t["v"], t["g"][..., 0], t["beta"],
                          cp_context=CPContext(cu_seqlens=ctx.cu_seqlens, layout="zigzag"))
