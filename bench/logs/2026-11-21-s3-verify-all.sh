#!/usr/bin/env bash
# Session 3, run C: every GPU test (forward: tile rule, GDN raw rows, graph capture, mismatched
# cu_seqlens copies; backward: the float32-compute default for 16-bit inputs, modes), the
# reference-shape backward bench (bf16, float32), memcheck and racecheck on the small cases.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
unset LINATTN_CUDA_BWD
step "GPU tests"
timeout 200 $B > "$out/cuda_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|^Expected|actual|Which is|tests ran" "$out/cuda_tests.log" | head -40
LINATTN_FUSED_VT=64 timeout 60 $B --gtest_filter='CudaForward*' > "$out/fwd_vt64.log" 2>&1; echo "forward, tile 64 forced: rc=$?"
step "backward bench bf16"
LINATTN_BWD_PROFILE=1 timeout 90 $B --gtest_also_run_disabled_tests --gtest_filter='CudaBackwardBench.KdaReferenceShape' > "$out/bench_bf16.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench_bf16.log"; grep "profile" "$out/bench_bf16.log" | tail -5
step "backward bench float32"
LINATTN_BENCH_DTYPE=f32 timeout 90 $B --gtest_also_run_disabled_tests --gtest_filter='CudaBackwardBench.KdaReferenceShape' > "$out/bench_f32.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench_f32.log" | tail -8
step memcheck
timeout 170 compute-sanitizer --tool memcheck --error-exitcode 3 $B --gtest_filter='*Small*' > "$out/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -4
step racecheck
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 $B --gtest_filter='CudaForward.*Small*:CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen:CudaBackward.SmallChunkedMatchesTokenReplay' > "$out/racecheck.log" 2>&1
echo "rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -3
step done
