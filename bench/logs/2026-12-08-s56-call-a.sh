#!/usr/bin/env bash
# s56 prepared call A (H100 or H200): the focused tests and the sanitizers of patches 1-3 (tests_d),
# then the stage bench of main / patch 1 (TMA loads) / 1 + 2 (O by TMA, paired factor loads) /
# 1 + 2 + 3 (the producer's Aqk by stmatrix) alternating. build-carry/bins.tar.xz holds the five
# binaries (sb_d, tests_d, sb_c, sb_tma, sb_main; one xz stream: they share most of their bytes).
# ~7-8 minutes.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$SECONDS
tar -xJf build-carry/bins.tar.xz -C /tmp && echo "unpacked at $((SECONDS - t0)) s"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
F='CudaForward.SmallSimpleGlaOneKernel:CudaForward.SmallNeighbourSequencesIsolated:CudaForward.SimpleGlaSmallOptions:CudaForward.*StageNames*'
timeout 120 /tmp/tests_d --gtest_filter="$F" > $OUT/tests_focus.log 2>&1
echo "focused tests rc=$? $(grep -cE '^\[       OK' $OUT/tests_focus.log) ok, $(grep -cE '^\[  FAILED' $OUT/tests_focus.log) failed lines"
grep -E "FAILED|Failure|rror" $OUT/tests_focus.log | head -20
echo "tests done at $((SECONDS - t0)) s"
for r in 1 2 3; do
  for b in sb_main sb_tma sb_c sb_d; do echo "== $b"; timeout 60 /tmp/$b forward --only simple_gla,simple_gla_gamma 2>&1 | grep -E "linattn|rror"; done
done
for b in sb_main sb_d; do echo "== $b"; timeout 60 /tmp/$b forward --only gdn,gla 2>&1 | grep -E "linattn|rror"; done
echo "bench done at $((SECONDS - t0)) s"
SAN=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck synccheck; do
  timeout 100 $SAN --tool $tool --error-exitcode 9 /tmp/tests_d --gtest_filter='CudaForward.SmallSimpleGlaOneKernel:CudaForward.SmallNeighbourSequencesIsolated' > $OUT/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Hazard|PASSED|FAILED' $OUT/san_$tool.log | head -5 | tr '\n' ' ')"
done
echo "all done at $((SECONDS - t0)) s"
