#!/usr/bin/env bash
# Session 56, call 1: TMA stage loads in the one-kernel simple GLA forward. Tests, sanitizers, A/B bench.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
for b in sb_main sb_tma tests_tma; do xz -dc build-carry/$b.xz > /tmp/$b & done; wait; chmod +x /tmp/sb_main /tmp/sb_tma /tmp/tests_tma
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F='CudaForward.*SimpleGla*:CudaForward.SmallNeighbourSequencesIsolated:CudaForward.*NoDelta*:CudaForward.*Gla*'
timeout 150 /tmp/tests_tma --gtest_filter="$F" 2>&1 | grep -E "^\[  (PASSED|FAILED)|FAILED|OK \]|rror" | tail -30
echo "tests done at $((SECONDS - t0)) s"
for r in 1 2 3; do
  for b in sb_main sb_tma; do echo "== $b"; timeout 60 /tmp/$b forward --only simple_gla,simple_gla_gamma 2>&1 | grep -E "linattn|rror"; done
done
echo "bench done at $((SECONDS - t0)) s"
SAN=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck synccheck; do
  timeout 120 $SAN --tool $tool --error-exitcode 9 /tmp/tests_tma --gtest_filter='CudaForward.SmallSimpleGlaOneKernel:CudaForward.SmallNeighbourSequencesIsolated' > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/san_$tool.log | tr '\n' ' ')"
done
echo "all done at $((SECONDS - t0)) s"
