#!/usr/bin/env bash
# Session 6, disable_recompute on CUDA (saved buffer): build, the saved-buffer tests first, every
# GPU test, memcheck on every small case (the saved tests included), racecheck on the saved
# forward + backward and two backward cases.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; tail -20 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
step "saved tests"
timeout 120 $B --gtest_filter='CudaBackward.*Saved*' > "$out/saved_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |Failure|actual|Which is|differs|message" "$out/saved_tests.log" | head -30
step "GPU tests"
timeout 240 $B > "$out/cuda_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|actual" "$out/cuda_tests.log" | head -20
step memcheck
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B --gtest_filter='CudaBackward.*Small*:CudaForward.*Small*' > "$out/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$out/memcheck.log" | head -6
step racecheck
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 $B --gtest_filter='CudaBackward.SmallSavedMatchesRecompute:CudaBackward.SmallOddLengths' > "$out/racecheck.log" 2>&1
echo "rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -3
step done
