#!/usr/bin/env bash
# Session 3: the CUDA backward's new default for bf16/fp16 inputs, the chunked form computed in
# float32 (16-bit q, k, v, dO widened in the workspace). Builds, runs the backward tests (the
# default on every dtype, chunked16, token, the unknown-LINATTN_CUDA_BWD error, determinism), the
# reference-shape bench in bf16 and float32 (times of default / chunked16 / token, workspace,
# peak, per-stage profile of the default), and memcheck on the small backward tests. Logs in $OUT;
# every step has a time limit so the whole run stays under 6 minutes.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
left() { local l=$((345 - (SECONDS - t0))); [ "$l" -gt 10 ] && echo "$l" || echo 10; }  # seconds to the 345 s mark
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
unset LINATTN_CUDA_BWD
step "backward tests"
timeout 150 $B --gtest_filter='CudaBackward.*' > "$out/bwd_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[       OK |worst rel|Failure|^Expected|actual|Which is" "$out/bwd_tests.log" | head -60
step "backward bench bf16"
LINATTN_BWD_PROFILE=1 timeout 90 $B --gtest_filter='CudaBackwardBench.KdaReferenceShape' > "$out/bench_bf16.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench_bf16.log"; grep "profile" "$out/bench_bf16.log" | tail -5  # the default's last call (widen .. pass2)
step "backward bench float32"
LINATTN_BENCH_DTYPE=f32 timeout 90 $B --gtest_filter='CudaBackwardBench.KdaReferenceShape' > "$out/bench_f32.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench_f32.log" | tail -8
step memcheck
timeout "$(left)" compute-sanitizer --tool memcheck $B --gtest_filter='CudaBackward.Small*' > "$out/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -4
step done
