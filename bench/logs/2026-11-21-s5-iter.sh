#!/usr/bin/env bash
# Session 5 iteration run: build, the reference-shape backward bench (split alone, per-stage
# profile), the CUDA backward tests. Usage: bash bench/logs/2026-11-21-s5-iter.sh [gtest filter]
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
step "bench split"
LINATTN_BENCH_ONLY=split LINATTN_BWD_PROFILE=1 timeout 100 $B --gtest_also_run_disabled_tests --gtest_filter=CudaBackwardBench.KdaReferenceShape > "$out/bench.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench.log"; grep profile "$out/bench.log" | sed -n 5,8p
step tests
timeout 300 $B --gtest_filter="${1:-CudaBackward.*}" > "$out/tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|^Expected|actual|Which is|tests ran" "$out/tests.log" | head -40
step done
