#!/usr/bin/env bash
# Session 3, run A: the fused state pass's V tile (64 vs 32, 1 vs 2 stages) at B = 1 and 2;
# forward tests with each tile forced; the reference-shape backward in bf16 / f32 (chunked).
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
step build
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
step "forward tests: auto, vt64, vt32 s2"
timeout 100 $B --gtest_filter='CudaForward*' > "$out/fwd_auto.log" 2>&1; echo "auto rc=$?"
LINATTN_FUSED_VT=64 timeout 100 $B --gtest_filter='CudaForward*' > "$out/fwd_vt64.log" 2>&1; echo "vt64 rc=$?"
LINATTN_FUSED_VT=32 LINATTN_FUSED_STAGES=2 timeout 100 $B --gtest_filter='CudaForward*' > "$out/fwd_vt32.log" 2>&1; echo "vt32s2 rc=$?"
LINATTN_FUSED_VT=32 LINATTN_FUSED_STAGES=1 timeout 100 $B --gtest_filter='CudaForward*' > "$out/fwd_vt32s1.log" 2>&1; echo "vt32s1 rc=$?"
grep -hE "FAILED|Failure" "$out"/fwd_*.log | head -10
step "forward bench matrix"
for bt in "2 8192" "1 8192" "1 32768" "8 4096"; do
  set -- $bt
  for cfg in "auto" "64 2" "32 2" "32 1"; do
    if [ "$cfg" = auto ]; then envs=""; else c=($cfg); envs="LINATTN_FUSED_VT=${c[0]} LINATTN_FUSED_STAGES=${c[1]}"; fi
    r=$(env $envs LINATTN_BENCH_B=$1 LINATTN_BENCH_T=$2 LINATTN_BENCH_ONLY=gdn,kda timeout 60 $B --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Forward*' 2>&1 | grep linattn | awk '{print $2, $5}' | tr '\n' ' ')
    echo "B=$1 T=$2 cfg=[$cfg] $r"
  done
done | tee "$out/fused_tile_matrix.log"
step "backward bench bf16 / f32"
timeout 100 $B --gtest_also_run_disabled_tests --gtest_filter='CudaBackwardBench.*' 2>&1 | grep -E "bench\]" | tee "$out/bwd_bf16.log"
LINATTN_BENCH_DTYPE=f32 timeout 150 $B --gtest_also_run_disabled_tests --gtest_filter='CudaBackwardBench.*' 2>&1 | grep -E "bench\]" | tee "$out/bwd_f32.log"
step "memcheck forward small (auto)"
timeout 120 compute-sanitizer --tool memcheck $B --gtest_filter='CudaForward.*Small*' > "$out/memcheck.log" 2>&1; echo "rc=$?"; grep -E "ERROR SUMMARY" "$out/memcheck.log" | tail -1
step done
