#!/usr/bin/env bash
# Session 5, run C: build; the reference-shape bench with the suite's KDA gate (logsigmoid/16,
# g given); every kernel's duration in one split backward (ncu); Nsight Compute full set + SASS
# stall samples of wy_kernel and chunk_prep_kernel.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
F='--gtest_also_run_disabled_tests --gtest_filter=CudaBackwardBench.KdaReferenceShape'
export LINATTN_BENCH_GATE=logsigmoid
step "bench split, logsigmoid gate"
LINATTN_BENCH_ONLY=split LINATTN_BWD_PROFILE=1 timeout 100 $B $F > "$out/bench.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench.log"; grep profile "$out/bench.log" | sed -n 5,8p
step "ncu durations"
LINATTN_BENCH_ONLY=split timeout 200 ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-count 24 \
  $B $F > "$out/durations.csv" 2>&1; echo "rc=$?"
grep gpu__time "$out/durations.csv" | awk -F'","' '{print $NF, substr($5,1,60)}' | head -24
step "ncu full"
LINATTN_BENCH_ONLY=split timeout 200 ncu --clock-control none --set full --import-source no \
  --kernel-name regex:'chunk_prep_kernel|wy_kernel' --launch-skip 2 --launch-count 2 \
  -o "$out/bwd" $B $F > "$out/ncu_run.log" 2>&1
echo "rc=$?"; tail -2 "$out/ncu_run.log"
ncu --import "$out/bwd.ncu-rep" --page details > "$out/details.txt" 2>&1
ncu --import "$out/bwd.ncu-rep" --page source --print-source sass --csv --kernel-name regex:wy_kernel > "$out/wy_sass.csv" 2>&1
ncu --import "$out/bwd.ncu-rep" --page source --print-source sass --csv --kernel-name regex:chunk_prep > "$out/prep_sass.csv" 2>&1
rm -f "$out/bwd.ncu-rep"
grep -E "^  [a-z_]+.*\(|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Local Memory Spilling Requests  " "$out/details.txt" | head -30
step done
