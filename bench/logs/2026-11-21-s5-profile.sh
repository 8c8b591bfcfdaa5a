#!/usr/bin/env bash
# Session 5, run A: build, the split backward at the reference shape with the per-stage profile,
# and Nsight Compute (full set + per-SASS stall samples) on one launch of each chunked kernel.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
F='CudaBackwardBench.KdaReferenceShape'
step "bench split"
LINATTN_BENCH_ONLY=split LINATTN_BWD_PROFILE=1 timeout 100 $B --gtest_also_run_disabled_tests --gtest_filter=$F > "$out/bench.log" 2>&1
echo "rc=$?"; grep -E "bench\]|FAILED" "$out/bench.log"; grep profile "$out/bench.log" | tail -8
step ncu
LINATTN_BENCH_ONLY=split timeout 300 ncu --clock-control none --set full --import-source no \
  --kernel-name regex:'chunk_prep_kernel|chunk_state_kernel|dh_kernel|wy_kernel' --launch-count 4 \
  -o "$out/bwd" $B --gtest_also_run_disabled_tests --gtest_filter=$F > "$out/ncu_run.log" 2>&1
echo "rc=$?"; tail -3 "$out/ncu_run.log"
ncu --import "$out/bwd.ncu-rep" --page details > "$out/details.txt" 2>&1
ncu --import "$out/bwd.ncu-rep" --page source --print-source sass --csv --kernel-name regex:wy_kernel > "$out/wy_sass.csv" 2>&1
ncu --import "$out/bwd.ncu-rep" --page source --print-source sass --csv --kernel-name regex:chunk_prep > "$out/prep_sass.csv" 2>&1
ls -la "$out"; gzip -k "$out"/*.csv
grep -E "^  [a-z_]+.*\(|Duration|Registers|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|Compute \(SM\) Throughput|Local" "$out/details.txt" | head -80
step done
