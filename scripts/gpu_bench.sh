#!/usr/bin/env bash
# On the GPU machine: build the Python package with CUDA and run the benchmark suite for one
# group of operators, writing straight into $OUT so that a call cut off by its time limit still
# returns what it measured (the device keeps nothing outside $OUT).
#
#   bash scripts/gpu_bench.sh OPS SECONDS [run_benchmarks.py args...]
#
# OPS: variant keys or families for --ops (e.g. kda, or gdn,gla,simple_gla). SECONDS: the time
# this call may take in all (default 540). Results of earlier calls placed in bench/results/
# (unpacked from their results.tgz) are merged. Triton's compile cache is restored from
# .device/triton-cache.tgz when carried and saved to $OUT/triton-cache.tgz, so FLA's kernels
# compile once per cache rather than once per call. Returns $OUT/results.tgz (results.json,
# BENCHMARKS.md, plots) and $OUT/bench.log.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ops=${1:-kda}
total=${2:-540}
shift $(( $# >= 2 ? 2 : $# ))
out=${OUT:-$root/gpu-logs}
mkdir -p "$out/results"
t0=$SECONDS

bash scripts/gpu_setup.sh --deps-only
export TRITON_CACHE_DIR=/tmp/triton-cache
mkdir -p "$TRITON_CACHE_DIR"
[ -f .device/triton-cache.tgz ] && tar -xzf .device/triton-cache.tgz -C "$TRITON_CACHE_DIR"
python3 -c "import linattn" 2>/dev/null ||
  python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build-gpu/python \
    -Ccmake.define.LINATTN_ENABLE_CUDA=ON -Ccmake.define.CUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include . \
    >"$out/pip.log" 2>&1 || { tail -20 "$out/pip.log"; exit 1; }
merge=()
if [ -f bench/results/results.json ]; then
  cp -r bench/results/. "$out/results/"
  merge=(--merge)
fi
# Leave 40 s for packing; the suite itself stops starting new shapes at its --time-budget.
left=$(( total - (SECONDS - t0) - 40 ))
PYTHONUNBUFFERED=1 timeout "$left" python3 bench/run_benchmarks.py --out "$out/results" \
  --report "$out/results/BENCHMARKS.md" --ops "$ops" --time-budget $(( left - 90 )) "${merge[@]}" "$@" \
  2>&1 | tee "$out/bench.log" | grep -v "^\s*$" | tail -40
(cd "$out" && tar -czf results.tgz results && rm -rf results)
tar -czf "$out/triton-cache.tgz" -C "$TRITON_CACHE_DIR" . 2>/dev/null
ls -la "$out"
