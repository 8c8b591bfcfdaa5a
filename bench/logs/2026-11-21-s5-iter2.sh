#!/usr/bin/env bash
# Session 5 run E: build (-ftz=true, vector finish_qk); the reference-shape backward bench with
# the suite's gate, every kernel's duration (ncu), and every CUDA test.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
F='--gtest_also_run_disabled_tests --gtest_filter=CudaBackwardBench.KdaReferenceShape'
step "bench split, logsigmoid gate"
LINATTN_BENCH_GATE=logsigmoid LINATTN_BENCH_ONLY=split LINATTN_BWD_PROFILE=1 timeout 100 $B $F > "$out/bench.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench.log"; grep profile "$out/bench.log" | sed -n 5,8p
step "ncu durations"
LINATTN_BENCH_GATE=logsigmoid LINATTN_BENCH_ONLY=split timeout 200 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-count 8 \
  $B $F > "$out/durations.csv" 2>&1; echo "rc=$?"
grep gpu__time "$out/durations.csv" | awk -F'","' '{print $NF, substr($5,1,60)}' | head -8
step "bench, in-kernel softplus gate (all modes)"
timeout 150 $B $F > "$out/bench_ik.log" 2>&1; echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench_ik.log"
step tests
timeout 300 $B > "$out/tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|^Expected|actual|Which is|tests ran" "$out/tests.log" | head -40
step done
