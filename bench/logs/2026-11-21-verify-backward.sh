#!/usr/bin/env bash
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
step "GPU tests"
timeout 240 $B > "$out/cuda_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|^Expected|actual" "$out/cuda_tests.log" | head -40
step "backward bench"
LINATTN_BWD_PROFILE=1 timeout 90 $B --gtest_also_run_disabled_tests --gtest_filter='CudaBackwardBench.*' 2>&1 | grep -E "bench\]|profile" | tail -12
timeout 60 $B --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Forward*' 2>&1 | grep linattn
step memcheck
timeout 150 compute-sanitizer --tool memcheck $B --gtest_filter='CudaForward.*Small*:CudaBackward.Small*' > "$out/memcheck.log" 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -3
step racecheck
timeout 150 compute-sanitizer --tool racecheck $B --gtest_filter='CudaForward.*Small*:CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen:CudaBackward.SmallChunkedMatchesTokenReplay' > "$out/racecheck.log" 2>&1; echo "rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -3
step done
