#!/usr/bin/env bash
# s56 prepared call B (same warm machine): the whole CUDA suite with patch 1 + 2 (the consumer's
# paired factor loads reach every wgmma state pass and the backward's recompute).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -x /tmp/tests_c ] || { xz -dc build-carry/tests_c.xz > /tmp/tests_c; chmod +x /tmp/tests_c; }
timeout 560 /tmp/tests_c > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/suite.log | head -30; tail -3 $OUT/suite.log
