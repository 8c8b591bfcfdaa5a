#!/usr/bin/env bash
# Session 6, final: build, every GPU test, memcheck on every small case, racecheck, the split
# backward's stage times at the reference shape (KDA, GDN), then the suite's kda_dr rows
# (disable_recompute against FLA's) merged into the carried bench/results.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head; tail -20 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
step "GPU tests"
timeout 240 $B > "$out/cuda_tests.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |worst rel|Failure|actual" "$out/cuda_tests.log" | head -20
step memcheck
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B --gtest_filter='CudaBackward.*Small*:CudaForward.*Small*' > "$out/memcheck.log" 2>&1
echo "rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$out/memcheck.log" | head -6
step racecheck
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 3 $B --gtest_filter='CudaBackward.SmallSavedMatchesRecompute:CudaBackward.SmallOddLengths' > "$out/racecheck.log" 2>&1
echo "rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" "$out/racecheck.log" | tail -3
step bench
F='--gtest_also_run_disabled_tests --gtest_filter=CudaBackwardBench.KdaReferenceShape'
for fam in gdn kda; do
  LINATTN_BENCH_FAMILY=$fam LINATTN_BENCH_GATE=logsigmoid LINATTN_BENCH_ONLY=split LINATTN_BWD_PROFILE=1 timeout 60 $B $F > "$out/bench_$fam.log" 2>&1
  grep -E "bench\]" "$out/bench_$fam.log" | head -2; grep profile "$out/bench_$fam.log" | tail -4
done
step suite
TRITON_CACHE_SAVE=0 bash scripts/gpu_bench.sh kda_dr 300 --directions fwd,fwdbwd --skip-cpu 2>&1 | grep -E "2×8192|fwdbwd|wrote" | head -30
step done
