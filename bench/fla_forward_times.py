"""FLA forward timings at the reference shape, plus the device's copy bandwidth and bf16 matmul
rate (for the floor). Run on the GPU machine: PYTHONPATH=third_party_ref python3 bench/fla_forward_times.py
Settings match bench/cuda_stage_bench.cpp (linattn_cuda_stage_bench forward)."""
import math
import statistics

import torch
import torch.nn.functional as F

B, T, H, K, V = 2, 8192, 32, 128, 128
dev = "cuda"
ROT = 4


def timed(fn, sets, reps=30, warm=5):
    for i in range(warm):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    ts = []
    for i in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a = sets[i % len(sets)]
        s.record()
        fn(*a)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main():
    torch.manual_seed(0)
    print("device:", torch.cuda.get_device_name())
    # ---- ceilings
    x = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    ms = timed(lambda a, b: b.copy_(a), [(x, y)], reps=20)
    bw = 2 * x.numel() / (ms * 1e-3)
    del x, y
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
    ms = timed(lambda a, b: a @ b, [(a, b)], reps=20)
    tf = 2 * 8192**3 / (ms * 1e-3)
    del a, b
    print(f"copy bandwidth {bw/1e12:.2f} TB/s   bf16 matmul {tf/1e12:.0f} TFLOP/s")

    from fla.ops.kda import chunk_kda
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    def kda_sets(HV):
        sets = []
        for _ in range(ROT):
            q = torch.randn(B, T, H, K, dtype=torch.bfloat16, device=dev)
            k = torch.randn(B, T, H, K, dtype=torch.bfloat16, device=dev)
            v = torch.randn(B, T, HV, V, dtype=torch.bfloat16, device=dev)
            g = torch.randn(B, T, HV, K, dtype=torch.float32, device=dev)
            beta = torch.rand(B, T, HV, dtype=torch.bfloat16, device=dev)
            sets.append((q, k, v, g, beta))
        return sets

    # steep: A_log ~ U(0, 2.7), dt_bias ~ N(0, 1); realistic: the FLA / Kimi Linear layer init
    # (A ~ U(1, 16), dt_bias = softplus^-1(dt), dt ~ logU(1e-3, 0.1)). Same as cuda_stage_bench.cpp.
    A_steep = torch.rand(H, dtype=torch.float32, device=dev) * 2.7
    dtb_steep = torch.randn(H * K, dtype=torch.float32, device=dev)
    A_real = torch.log(torch.empty(H, dtype=torch.float32, device=dev).uniform_(1, 16))
    dt = torch.exp(torch.rand(H * K, dtype=torch.float32, device=dev) * (math.log(0.1) - math.log(1e-3))
                   + math.log(1e-3))
    dtb_real = dt + torch.log(-torch.expm1(-dt))
    A_log, dt_bias = A_real, dtb_real
    sets = kda_sets(H)

    def kda(q, k, v, g, beta):
        return chunk_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, use_gate_in_kernel=True,
                         use_qk_l2norm_in_kernel=True, output_final_state=True)

    def kda_steep(q, k, v, g, beta):
        return chunk_kda(q, k, v, g, beta, A_log=A_steep, dt_bias=dtb_steep, use_gate_in_kernel=True,
                         use_qk_l2norm_in_kernel=True, output_final_state=True)

    def kda_safe(q, k, v, g, beta):
        return chunk_kda(q, k, v, g, beta, A_log=A_steep, dt_bias=dtb_steep, use_gate_in_kernel=True,
                         use_qk_l2norm_in_kernel=True, safe_gate=True, lower_bound=-5.0,
                         output_final_state=True)

    res = {}
    for name, fn in (("kda", kda), ("kda_steep", kda_steep), ("kda_safe_gate", kda_safe)):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        res[name] = timed(fn, sets)
        peak = torch.cuda.max_memory_allocated() - base
        print(f"FLA {name:14s} {res[name]:.3f} ms   peak extra {peak/2**20:.0f} MiB")
    del sets
    HV = 32
    Hq = 16
    gsets = []
    for _ in range(ROT):
        q = torch.randn(B, T, Hq, K, dtype=torch.bfloat16, device=dev)
        k = torch.randn(B, T, Hq, K, dtype=torch.bfloat16, device=dev)
        v = torch.randn(B, T, HV, V, dtype=torch.bfloat16, device=dev)
        g = F.logsigmoid(torch.randn(B, T, HV, dtype=torch.float32, device=dev)) / 16
        beta = torch.rand(B, T, HV, dtype=torch.bfloat16, device=dev)
        gsets.append((q, k, v, g, beta))

    def gdn(q, k, v, g, beta):
        return chunk_gated_delta_rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, output_final_state=True)

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    res["gdn"] = timed(gdn, gsets)
    peak = torch.cuda.max_memory_allocated() - base
    print(f"FLA {'gdn':14s} {res['gdn']:.3f} ms   peak extra {peak/2**20:.0f} MiB")


if __name__ == "__main__":
    main()
