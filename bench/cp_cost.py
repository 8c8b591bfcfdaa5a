"""Cost ratios behind docs/context_parallel.md's model, on this machine: a local forward F, the widened
(width K + V) call that gives [M | C], and the backward B. Run: python bench/cp_cost.py"""

import time, torch, torch.nn.functional as F
from linattn import chunk_kda
torch.manual_seed(0)
T, H, K, V = 4096, 4, 128, 128
q = torch.randn(1, T, H, K); k = F.normalize(torch.randn(1, T, H, K), dim=-1); v = torch.randn(1, T, H, V)
g = F.logsigmoid(torch.randn(1, T, H, K)) / 16; beta = torch.rand(1, T, H)
def tm(f, n=3):
    f(); ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return min(ts)
with torch.no_grad():
    Fw = tm(lambda: chunk_kda(q, k, v, g, beta, output_final_state=True))
    vw = torch.cat([torch.zeros(1, T, H, K), v], -1); h0 = torch.cat([torch.eye(K).expand(1, H, K, K), torch.zeros(1, H, K, V)], -1).contiguous()
    Fwide = tm(lambda: chunk_kda(q, k, vw, g, beta, initial_state=h0, output_final_state=True))
ts = [t.clone().requires_grad_() for t in (q, k, v, g, beta)]
def fb():
    o, ht = chunk_kda(*ts, output_final_state=True); (o.sum() + ht.sum()).backward()
FB = tm(fb)
print(f"T={T} H={H} K=V={K} float32 CPU (2 cores, shared): F {Fw*1e3:.1f} ms, widened (K+V) {Fwide*1e3:.1f} ms = {Fwide/Fw:.2f} F, F+B {FB*1e3:.1f} ms, B {(FB-Fw)*1e3:.1f} ms")
B = FB - Fw
print(f"interior-rank model (widened + F + 2B) / (F + B) = {(Fwide + Fw + 2*B)/(Fw + B):.2f}")
