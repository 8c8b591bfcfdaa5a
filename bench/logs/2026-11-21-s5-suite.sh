#!/usr/bin/env bash
# Session 5 run F: the CUDA backward tests and the backward bench (workspace), then the full
# benchmark suite against FLA (BENCHMARKS.md).
set -u
out=$OUT; t0=$SECONDS
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; exit 1; }
B=./build-gpu/linattn_cuda_tests
LINATTN_BENCH_GATE=logsigmoid timeout 60 $B --gtest_also_run_disabled_tests --gtest_filter=CudaBackwardBench.KdaReferenceShape > "$out/bench.log" 2>&1
grep -E "bench\]" "$out/bench.log"
timeout 120 $B --gtest_filter='CudaBackward.*' > "$out/tests.log" 2>&1; echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED) |Failure|actual" "$out/tests.log" | head -12
echo "== suite after $((SECONDS - t0)) s"
TRITON_CACHE_SAVE=0 bash scripts/gpu_bench.sh all $(( 585 - (SECONDS - t0) ))
