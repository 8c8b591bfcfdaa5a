#!/usr/bin/env bash
# Session 3, last call: after the copy / MMA helper consolidation (common/copy.cuh, one
# warp_mma_sm for every operand layout): build, every GPU test, memcheck on the small cases,
# racecheck on the subset, the forward bench at the reference shape.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
step "GPU tests"
timeout 100 $B > "$out/cuda_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|\[bench\]|profile" "$out/cuda_tests.log" | head -30
step memcheck
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B --gtest_filter='*Small*' > "$out/memcheck.log" 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY|FAILED" "$out/memcheck.log" | tail -2
step racecheck
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 $B --gtest_filter='CudaForward.*Small*:CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen' > "$out/racecheck.log" 2>&1; echo "rc=$?"; grep -E "RACECHECK SUMMARY|FAILED" "$out/racecheck.log" | tail -2
step bench
LINATTN_BENCH_ONLY=kda,kda_safe_gate,gdn timeout 30 $B --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Forward*' 2>&1 | grep linattn
step done
