#!/usr/bin/env bash
# Session 5, final: every GPU test after the pass-2 rewrite, -ftz and the workspace reuse,
# the reference-shape backward bench (all modes, per-stage profile), memcheck and racecheck.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
grep -iE "warning|spill" "$out/build.log" | head -10
B=./build-gpu/linattn_cuda_tests
unset LINATTN_CUDA_BWD
step "backward bench bf16"
LINATTN_BWD_PROFILE=1 timeout 120 $B --gtest_also_run_disabled_tests --gtest_filter='CudaBackwardBench.KdaReferenceShape' > "$out/bench_bf16.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED|Failure" "$out/bench_bf16.log"; grep "profile" "$out/bench_bf16.log" | tail -18
step "GPU tests"
timeout 240 $B > "$out/cuda_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|^Expected|actual|Which is|tests ran|\(chunked" "$out/cuda_tests.log" | head -60
step memcheck
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B --gtest_filter='CudaBackward.*Small*:CudaForward.*Small*' > "$out/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$out/memcheck.log" | head -8
step racecheck
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 $B --gtest_filter='CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen' > "$out/racecheck.log" 2>&1
echo "rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -3
step done
