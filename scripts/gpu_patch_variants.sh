#!/usr/bin/env bash
# On the GPU machine: one call over scripts/pack_patch_variants.sh's pack (carry build-carry):
# the CUDA tests of the whole patch stack (a filter, or the whole suite), compute-sanitizer on a
# small filter, then the stage bench of every variant, alternating so that drift shows.
#
#   bash scripts/gpu_patch_variants.sh                       # the defaults below
#   SUITE=1 bash scripts/gpu_patch_variants.sh               # the whole suite instead (no bench)
#
# Environment (defaults in brackets):
#   TESTS     gtest filter of the focused tests [the one-kernel simple GLA forward's, the isolation
#             test, the stage names, the no-delta forwards and GDN's (patch 3 touches its prep)]
#   SAN       gtest filter for memcheck, racecheck and synccheck [the one-kernel forward's test and the isolation test]
#   ROUNDS    rounds of the stage bench over every variant [3]
#   BENCH     the stage bench's arguments [forward --only simple_gla,simple_gla_gamma]
#   BENCH2    arguments run once on the first and the last variant only [forward --only gdn,gla]; empty: none
#   SUITE     1: the whole suite (timeout 560 s) and nothing else
# Logs in $OUT (tests.log, san_TOOL.log); the bench lines on stdout, "== sb_i" before each.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
t0=$SECONDS
bins=/tmp/variants
if [ ! -d "$bins" ]; then
  mkdir -p "$bins" && tar -xJf build-carry/bins.tar.xz -C "$bins" || { echo "no build-carry/bins.tar.xz" >&2; exit 2; }
fi
cat build-carry/MANIFEST 2>/dev/null
tests=$(ls "$bins"/tests_* | head -1)
mapfile -t sbs < <(ls "$bins"/sb_* | sort -V)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
echo "unpacked at $((SECONDS - t0)) s: ${#sbs[@]} stage benches, $(basename "$tests")"
if [ "${SUITE:-0}" = 1 ]; then
  timeout 560 "$tests" > "$OUT/suite.log" 2>&1
  echo "suite rc=$?"
  grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" "$OUT/suite.log" | head -30
  exit 0
fi
focus=${TESTS:-CudaForward.SmallSimpleGlaOneKernel:CudaForward.SmallNeighbourSequencesIsolated:CudaForward.SimpleGlaSmallOptions:CudaForward.SmallStagesMarked:CudaForward.NoDeltaSmallOddLengthsAndVarlen:CudaForward.GdnSmallOptions}
timeout 150 "$tests" --gtest_filter="$focus" > "$OUT/tests.log" 2>&1
echo "tests rc=$?: $(grep -cE '^\[       OK' "$OUT/tests.log") ok, $(grep -cE '^\[  FAILED' "$OUT/tests.log") failed lines"
grep -E "Failure|FAILED|rror" "$OUT/tests.log" | head -20
echo "tests done at $((SECONDS - t0)) s"
read -r -a bench <<< "${BENCH:-forward --only simple_gla,simple_gla_gamma}"
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for b in "${sbs[@]}"; do
    echo "== $(basename "$b")"
    timeout 90 "$b" "${bench[@]}" 2>&1 | grep -E "linattn|rror"
  done
done
if [ -n "${BENCH2-forward --only gdn,gla}" ]; then
  read -r -a bench2 <<< "${BENCH2-forward --only gdn,gla}"
  for b in "${sbs[0]}" "${sbs[-1]}"; do
    echo "== $(basename "$b")"
    timeout 90 "$b" "${bench2[@]}" 2>&1 | grep -E "linattn|rror"
  done
fi
echo "bench done at $((SECONDS - t0)) s"
san=${SAN:-CudaForward.SmallSimpleGlaOneKernel:CudaForward.SmallNeighbourSequencesIsolated}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  timeout 120 "$sanitizer" --tool "$tool" --error-exitcode 9 "$tests" --gtest_filter="$san" > "$OUT/san_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Hazard' "$OUT/san_$tool.log" | head -3 | tr '\n' ' ')"
done
echo "all done at $((SECONDS - t0)) s"
