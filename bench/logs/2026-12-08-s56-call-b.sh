#!/usr/bin/env bash
# s56 prepared call B (same warm machine): the whole CUDA suite with patches 1-3 (the consumer's
# paired factor loads reach every wgmma state pass and the backward's recompute; patch 3's
# epilogue, chunk_prep's simple GLA path).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -x /tmp/tests_d ] || tar -xJf build-carry/bins.tar.xz -C /tmp tests_d
timeout 560 /tmp/tests_d > $OUT/suite.log 2>&1
echo "suite rc=$?"; grep -E "^\[  (PASSED|FAILED)|^\[  FAILED" $OUT/suite.log | head -30; tail -3 $OUT/suite.log
