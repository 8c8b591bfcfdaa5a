"""The recurrent decode path of fused_recurrent_kda / fused_recurrent_gated_delta_rule: the same
function as the chunked path, FLA's state-pool semantics, errors; on CUDA also against the CPU,
under a captured CUDA graph, and beside FLA's own recurrent kernel when FLA is importable."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import linattn
from linattn import _decode

from helpers import rel_err

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and linattn.cuda_available() else [])


def _inputs(family, N=4, T=1, H=2, HV=4, K=64, V=64, dtype=torch.bfloat16, device="cpu", seed=0,
            pool_slots=None):
    g_ = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g_)  # noqa: E731
    q, k, v = r(N, T, H, K).to(dtype), r(N, T, H, K).to(dtype), r(N, T, HV, V).to(dtype)
    g = F.logsigmoid(r(N, T, HV, K) if family == "kda" else r(N, T, HV)) / 16
    beta = torch.rand(N, T, HV, generator=g_).to(dtype)
    P = pool_slots or N
    h0 = r(P, HV, K, V) * 0.3
    to = lambda x: x.to(device)  # noqa: E731
    return [to(x) for x in (q, k, v, g, beta, h0)]


def _fn(family):
    return linattn.fused_recurrent_kda if family == "kda" else linattn.fused_recurrent_gated_delta_rule


def _call(family, q, k, v, g, beta, **kw):
    if family == "kda":
        return linattn.fused_recurrent_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, **kw)
    return linattn.fused_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True, **kw)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_decode_equals_chunked(device, family):
    q, k, v, g, beta, h0 = _inputs(family, T=3, device=device)
    assert _decode.use_decode("t", q, None, False)
    o, ht = _call(family, q, k, v, g, beta, initial_state=h0, output_final_state=True)
    # the chunked path on the same inputs (gradients requested force it)
    qg = q.clone().requires_grad_()
    oc, hc = _call(family, qg, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert not _decode.use_decode("t", qg, None, False)
    assert rel_err(o, oc) < 1e-2 and rel_err(ht, hc) < 1e-2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["kda", "gdn"])
def test_state_pool_in_place(device, family):
    q, k, v, g, beta, pool = _inputs(family, N=3, device=device, pool_slots=7)
    idx = torch.tensor([5, -1, 2], dtype=torch.int32, device=device)
    before = pool.clone()
    with torch.no_grad():
        o, fs = _call(family, q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                      inplace_final_state=True)
    assert fs is pool
    # each live sequence as its own call from its slot
    for n, slot in ((0, 5), (2, 2)):
        on, hn = _call(family, q[n:n + 1], k[n:n + 1], v[n:n + 1], g[n:n + 1], beta[n:n + 1],
                       initial_state=before[slot:slot + 1].clone(), output_final_state=True)
        assert rel_err(o[n:n + 1], on) < 1e-2
        assert rel_err(pool[slot:slot + 1], hn) < 1e-2
    assert torch.equal(o[1], torch.zeros_like(o[1]))  # padding
    untouched = [i for i in range(7) if i not in (5, 2)]
    assert torch.equal(pool[untouched], before[untouched])


@pytest.mark.parametrize("device", DEVICES)
def test_speculative_accepted_tokens(device):
    family = "kda"
    N, T = 2, 3
    q, k, v, g, beta, pool = _inputs(family, N=N, T=T, device=device, pool_slots=8)
    idx = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int64, device=device)
    acc = torch.tensor([2, 3], dtype=torch.int32, device=device)
    before = pool.clone()
    with torch.no_grad():
        o, _ = _call(family, q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx,
                     num_accepted_tokens=acc, inplace_final_state=True)
    for n in range(N):
        start = int(idx[n, int(acc[n]) - 1])
        for t in range(T):
            _, hn = _call(family, q[n:n + 1, :t + 1], k[n:n + 1, :t + 1], v[n:n + 1, :t + 1],
                          g[n:n + 1, :t + 1], beta[n:n + 1, :t + 1],
                          initial_state=before[start:start + 1].clone(), output_final_state=True)
            assert rel_err(pool[int(idx[n, t])], hn[0]) < 1e-2, (n, t)


def test_decode_errors_write_nothing():
    q, k, v, g, beta, pool = _inputs("kda", N=2, pool_slots=4)
    o = torch.full_like(v, float("nan"))
    before = pool.clone()
    with torch.no_grad():
        with pytest.raises(ValueError, match="slot"):
            linattn.fused_recurrent_kda(q, k, v, g, beta, initial_state=pool, out=o,
                                        ssm_state_indices=torch.tensor([0, 9], dtype=torch.int32),
                                        inplace_final_state=True)
        with pytest.raises(ValueError, match="int32 or int64"):
            linattn.fused_recurrent_kda(q, k, v, g, beta, initial_state=pool, out=o,
                                        ssm_state_indices=torch.tensor([0.0, 1.0]), inplace_final_state=True)
        with pytest.raises(ValueError, match="num_accepted_tokens needs"):
            linattn.fused_recurrent_kda(q, k, v, g, beta, initial_state=pool, out=o,
                                        ssm_state_indices=torch.tensor([0, 1], dtype=torch.int32),
                                        num_accepted_tokens=torch.tensor([1, 1], dtype=torch.int32),
                                        inplace_final_state=True)
    with pytest.raises(ValueError, match="no backward"):
        linattn.fused_recurrent_kda(q.requires_grad_(), k, v, g, beta, initial_state=pool,
                                    ssm_state_indices=torch.tensor([0, 1], dtype=torch.int32),
                                    inplace_final_state=True)
    assert torch.isnan(o).all()
    assert torch.equal(pool, before)


@pytest.mark.skipif("cuda" not in DEVICES, reason="no GPU")
@pytest.mark.parametrize("family", ["kda", "gdn"])
@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.bfloat16])
def test_cuda_matches_cpu_and_graph_replays(family, pool_dtype):
    N = 16
    idx = torch.randperm(40)[:N].to(torch.int32)
    cpu = _inputs(family, N=N, K=128, V=128, pool_slots=40, seed=1)
    cpu[5] = cpu[5].to(pool_dtype)
    gpu = [x.cuda() for x in cpu]
    with torch.no_grad():
        # captured once, replayed on new values in the same buffers
        q, k, v, g, beta, pool = gpu
        out = torch.empty_like(v)
        status = torch.zeros(1, dtype=torch.int32, device="cuda")
        idx_d = idx.cuda()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up outside the graph
            _call(family, q, k, v, g, beta, initial_state=pool.clone(), ssm_state_indices=idx_d,
                  inplace_final_state=True, out=out, status=status)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _call(family, q, k, v, g, beta, initial_state=pool, ssm_state_indices=idx_d,
                  inplace_final_state=True, out=out, status=status)
        for seed in (2, 3):
            new = _inputs(family, N=N, K=128, V=128, pool_slots=40, seed=seed)
            new[5] = new[5].to(pool_dtype)
            for dst, src in zip(gpu, new):
                dst.copy_(src)
            graph.replay()
            torch.cuda.synchronize()
            pn = new[5].clone()
            on, _ = _call(family, *new[:5], initial_state=pn, ssm_state_indices=idx, inplace_final_state=True)
            assert rel_err(out.cpu(), on) < 1e-2
            assert rel_err(pool.cpu().float(), pn.float()) < 1e-2
        assert int(status.item()) == 0


@pytest.mark.skipif("cuda" not in DEVICES or importlib.util.find_spec("fla") is None, reason="needs GPU and FLA")
def test_cuda_matches_fla_fused_recurrent():
    from fla.ops.kda import fused_recurrent_kda as fla_kda

    q, k, v, g, beta, h0 = [x.cuda() for x in _inputs("kda", N=8, K=128, V=128)]
    with torch.no_grad():
        o, ht = linattn.fused_recurrent_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                            use_qk_l2norm_in_kernel=True)
        of, hf = fla_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                         use_qk_l2norm_in_kernel=True)
    assert rel_err(o, of) < 1e-2 and rel_err(ht, hf) < 1e-3
