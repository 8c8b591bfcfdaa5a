"""Timing (CUDA events or the host clock), peak memory, relative errors, measured ceilings."""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Sequence

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}".strip()


def time_calls(fn: Callable[[int], object], n_sets: int, device: torch.device, *, warmup: int = 2,
               target_s: float = 0.25, min_reps: int = 5, max_reps: int = 100) -> dict:
    """Median time of fn(i) (i cycles over the rotating input sets), in milliseconds.

    CUDA: one pair of events around every call, read after one synchronize at the end (no host
    synchronisation between calls, so launch overhead is included as the GPU sees it). CPU: the
    host clock around every call. The first `warmup` calls are not timed; the repeat count is
    chosen from a one-call estimate so the timed loop lasts about target_s.
    """
    i = 0
    for _ in range(warmup):
        fn(i % n_sets)
        i += 1
    sync(device)
    t0 = time.perf_counter()
    fn(i % n_sets)
    i += 1
    sync(device)
    est = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(min_reps, target_s / est)))
    times = []
    if device.type == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in ev:
            a.record()
            fn(i % n_sets)
            b.record()
            i += 1
        torch.cuda.synchronize(device)
        times = [a.elapsed_time(b) for a, b in ev]
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(i % n_sets)
            times.append((time.perf_counter() - t0) * 1e3)
            i += 1
    times.sort()
    q = lambda p: times[min(len(times) - 1, int(p * len(times)))]  # noqa: E731
    return {"median_ms": statistics.median(times), "min_ms": times[0], "p20_ms": q(0.2),
            "p80_ms": q(0.8), "reps": reps, "warmup": warmup + 1, "sets": n_sets}


def peak_memory(fn: Callable[[], object], device: torch.device):
    """(memory, fn's result) of one call. memory: the peak bytes torch's allocator held during
    the call above what was allocated before it (inputs and earlier results excluded):
    torch.cuda.max_memory_allocated after reset_peak_memory_stats; None on CPU."""
    if device.type != "cuda":
        return None, fn()
    sync(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn()
    sync(device)
    peak = torch.cuda.max_memory_allocated(device)
    return {"peak_extra_bytes": int(peak - base), "peak_total_bytes": int(peak)}, out


def rel_err(x: torch.Tensor | None, ref: torch.Tensor | None) -> float | None:
    """||x - ref|| / ||ref|| accumulated in float64; NaN when x is not finite."""
    if x is None or ref is None:
        return None
    if x.shape != ref.shape:
        return float("nan")
    x64 = x.detach().to(ref.device, torch.float64)
    r64 = ref.detach().to(torch.float64)
    if not torch.isfinite(x64).all():
        return float("nan")
    den = torch.linalg.vector_norm(r64).item()
    num = torch.linalg.vector_norm(x64 - r64).item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def errors(xs: dict[str, torch.Tensor], refs: dict[str, torch.Tensor]) -> dict[str, float | None]:
    return {n: rel_err(xs.get(n), r) for n, r in refs.items() if r is not None and n in xs}


def measure_ceilings(device: torch.device, small: bool = False) -> dict:
    """Copy bandwidth (one large device-to-device copy, bytes read + written) and the bf16 matrix
    rate (one large torch.matmul on random data), each the median of 10 after 3 warm-ups.
    On CPU (smoke tests) the same with small sizes and float32 products."""
    cuda = device.type == "cuda"
    nbytes = (1 << 30) if (cuda and not small) else (1 << 26)
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy = time_calls(lambda i: dst.copy_(src), 1, device, warmup=3, min_reps=10, max_reps=10, target_s=0)
    n = 8192 if (cuda and not small) else 512
    dt = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=device).to(dt)
    b = torch.randn(n, n, device=device).to(dt)
    mm = time_calls(lambda i: torch.matmul(a, b), 1, device, warmup=3, min_reps=10, max_reps=10, target_s=0)
    del src, dst, a, b
    return {
        "copy_bytes": 2 * nbytes,
        "copy_ms": copy["median_ms"],
        "copy_bw_Bps": 2 * nbytes / (copy["median_ms"] * 1e-3),
        "matmul_n": n,
        "matmul_dtype": str(dt).replace("torch.", ""),
        "matmul_ms": mm["median_ms"],
        "matmul_flops_per_s": 2 * n ** 3 / (mm["median_ms"] * 1e-3),
    }


def floor(bytes_: float, flops_: float, ceil: dict) -> dict:
    t_mem = bytes_ / ceil["copy_bw_Bps"] * 1e3
    t_flop = flops_ / ceil["matmul_flops_per_s"] * 1e3
    return {"bytes": bytes_, "flops": flops_, "mem_ms": t_mem, "flop_ms": t_flop,
            "floor_ms": max(t_mem, t_flop), "bound": "memory" if t_mem >= t_flop else "compute"}


def n_rotating_sets(set_bytes: int, l2_bytes: int, cap: int = 8) -> int:
    """Enough input sets that consecutive calls never find their inputs in L2: the sets together
    exceed twice the L2 and there are at least 2."""
    return int(min(cap, max(2, math.ceil(2 * l2_bytes / max(set_bytes, 1)))))


def tensor_bytes(ts: Sequence[torch.Tensor]) -> int:
    return int(sum(t.numel() * t.element_size() for t in ts))
