#!/usr/bin/env bash
# On the dev machine: bring the CUDA test binary of each named build folder up to date and pack it
# (xz) into build-carry/ (ignored, as every build*/), for scripts/gpu_test_carried.sh on the GPU
# machine. Building here costs no device time: the device's 16 cores build the suite in minutes of
# held time, the 2 cores here in the background.
#
#   bash scripts/pack_test_binaries.sh build-sass-new:90a build-sm80:sm80
#
# Each argument is BUILD_DIR:NAME; the pack is build-carry/cuda_tests_NAME.xz. The first one is
# the card's own build (sm_90a on a Hopper device): gpu_test_carried.sh runs the whole suite and
# memcheck with it, the others their forward / small backward / config tests (an sm_80 build runs
# through PTX JIT on a Hopper card). Name build-carry and .device in the call's carry (64 MiB in
# all: two packs are ~26 MiB).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR:NAME [BUILD_DIR:NAME ...]" >&2; exit 2; }
out="$root/build-carry"
rm -rf "$out" && mkdir -p "$out"
i=0
for spec in "$@"; do
  dir=${spec%%:*}; name=${spec#*:}
  [ "$dir" != "$spec" ] && [ -n "$name" ] || { echo "not BUILD_DIR:NAME: $spec" >&2; exit 2; }
  case "$dir" in /*) ;; *) dir="$root/$dir" ;; esac
  [ -f "$dir/build.ninja" ] || { echo "no configured build in $dir" >&2; exit 2; }
  ninja -C "$dir" -j "$(nproc)" linattn_cuda_tests | tail -1
  xz -T0 -6 -c "$dir/linattn_cuda_tests" > "$out/cuda_tests_$name.xz"
  echo "$i $name" >> "$out/order.txt"
  i=$((i + 1))
done
git -C "$root" rev-parse HEAD > "$out/COMMIT"
git -C "$root" diff --quiet HEAD -- src include tests || echo "(the packed tree differs from HEAD under src/include/tests)" | tee -a "$out/COMMIT"
ls -la "$out"
