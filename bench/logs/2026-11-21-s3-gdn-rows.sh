#!/usr/bin/env bash
# Session 3, run B: GDN raw-row state pass (no Qg / KgT round trip) + the fused tile rule.
# Forward tests (auto tile, tile 64 forced), bench at B = 2 / 1, sanitizers on the small cases.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
step "forward tests"
timeout 100 $B --gtest_filter='CudaForward*' > "$out/fwd_auto.log" 2>&1; echo "auto rc=$?"
LINATTN_FUSED_VT=64 timeout 100 $B --gtest_filter='CudaForward*' > "$out/fwd_vt64.log" 2>&1; echo "vt64 rc=$?"
grep -hE "FAILED|Failure|worst" "$out"/fwd_*.log | head -12
step "backward small (recompute path unchanged)"
timeout 100 $B --gtest_filter='CudaBackward.Small*' > "$out/bwd_small.log" 2>&1; echo "rc=$?"; grep -E "FAILED" "$out/bwd_small.log" | head
step "bench"
for bt in "2 8192" "1 8192" "1 32768"; do
  set -- $bt
  r=$(LINATTN_BENCH_B=$1 LINATTN_BENCH_T=$2 timeout 60 $B --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Forward*' 2>&1 | grep linattn | awk '{print $2, $5, "ws", $10}' | tr '\n' ' ')
  echo "B=$1 T=$2 $r"
done | tee "$out/bench.log"
step memcheck
timeout 120 compute-sanitizer --tool memcheck $B --gtest_filter='CudaForward.*Small*' > "$out/memcheck.log" 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1
LINATTN_FUSED_VT=64 timeout 120 compute-sanitizer --tool memcheck $B --gtest_filter='CudaForward.GdnSmall*:CudaForward.SmallVarlen' > "$out/memcheck64.log" 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck64.log" | tail -1
step racecheck
timeout 150 compute-sanitizer --tool racecheck $B --gtest_filter='CudaForward.GdnSmall*:CudaForward.SmallVarlen:CudaForward.SmallOddLengths' > "$out/racecheck.log" 2>&1; echo "rc=$?"; grep -E "RACECHECK SUMMARY" "$out/racecheck.log" | tail -1
step done
