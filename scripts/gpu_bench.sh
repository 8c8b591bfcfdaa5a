#!/usr/bin/env bash
# On the GPU machine: build the Python package with CUDA and run the benchmark suite for one
# group of operators, writing straight into $OUT so that a call cut off by its time limit still
# returns what it measured (the device keeps nothing outside $OUT).
#
#   bash scripts/gpu_bench.sh OPS SECONDS [run_benchmarks.py args...]
#
# OPS: all, or variant keys or families for --ops (e.g. kda, or gdn,gla). SECONDS: the time
# this call may take in all (default 540). Results of earlier calls placed in bench/results/
# (unpacked from their results.tgz), or a warm machine's previous call, are merged. Triton's cache (compiled kernels and, with
# TRITON_CACHE_AUTOTUNING=1, FLA's autotuning choices) is restored from
# .device/triton-cache.txz.part-* when carried and saved to $OUT/triton-cache.txz.part-* (xz, half
# gzip's size, which keeps .device under the device's 64 MiB carry limit; split to pass its
# 16 MiB per-file limit; older .tgz parts are still read), so FLA's kernels are compiled and autotuned once
# per cache rather than once per call; FLA still runs the configurations its own autotuner chose.
# Returns $OUT/results.tgz (results.json, BENCHMARKS.md, plots) and $OUT/bench.log.
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
# linattn's commit, for the report: the device machine's git metadata can be older than the tree
# it was sent, so the caller writes `git rev-parse HEAD > .device/LINATTN_COMMIT` (on a clean
# tree) before the call.
[ -f .device/LINATTN_COMMIT ] && export LINATTN_COMMIT=$(cat .device/LINATTN_COMMIT)
# FLA's commit, for the report (written beside the carried copy: third_party_ref/FLA_COMMIT)
[ -f third_party_ref/FLA_COMMIT ] && export FLA_COMMIT=$(cat third_party_ref/FLA_COMMIT)
export TRITON_CACHE_DIR=/tmp/triton-cache TRITON_CACHE_AUTOTUNING=1
mkdir -p "$TRITON_CACHE_DIR"
if ls .device/triton-cache.txz.part-* >/dev/null 2>&1; then
  cat .device/triton-cache.txz.part-* | tar -xJ -C "$TRITON_CACHE_DIR"
  echo "restored Triton cache: $(du -sh "$TRITON_CACHE_DIR" | cut -f1)"
elif ls .device/triton-cache.tgz.part-* >/dev/null 2>&1; then
  cat .device/triton-cache.tgz.part-* | tar -xz -C "$TRITON_CACHE_DIR"
  echo "restored Triton cache: $(du -sh "$TRITON_CACHE_DIR" | cut -f1)"
fi
case " $* " in *" --no-ours "*) no_ours=1 ;; *) no_ours=0 ;; esac
[ $no_ours = 1 ] || python3 -c "import linattn" 2>/dev/null ||
  python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build-gpu/python \
    -Ccmake.define.LINATTN_ENABLE_CUDA=ON -Ccmake.define.LINATTN_CUDA_ARCHS=90a \
    -Ccmake.define.CUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include . \
    >"$out/pip.log" 2>&1 || { tail -20 "$out/pip.log"; exit 1; }
sel=()
[ "$ops" = all ] || sel+=(--ops "$ops")
# FLA from the device bundle (scripts/make_device_bundle.sh) unless the caller names a copy
case " $* " in *" --fla-path "*) ;; *) [ -d .device/fla-compat/site/fla ] && sel+=(--fla-path .device/fla-compat/site) ;; esac
# The merge base: the tree's bench/results, or, on a warm machine, the previous call's results
# (kept in /tmp/linattn-bench-results) when they descend from the tree's (the tree's run is theirs
# or among their merged runs): calls in a row then merge without unpacking results.tgz between them.
base=bench/results
keep=/tmp/linattn-bench-results
if [ -f "$keep/results.json" ] && python3 - "$keep/results.json" bench/results/results.json <<'PY'
import json, os, sys
kept = json.load(open(sys.argv[1]))["environment"]
tree = json.load(open(sys.argv[2]))["environment"]["run_id"] if os.path.exists(sys.argv[2]) else None
runs = [kept.get("run_id")] + [r.get("run_id") for r in kept.get("merged_runs") or []]
sys.exit(0 if tree is None or tree in runs else 1)
PY
then
  base=$keep
  echo "merge base: this machine's previous call ($keep)"
fi
if [ -f "$base/results.json" ]; then
  cp -r "$base/." "$out/results/"
  sel+=(--merge)
fi
# Leave 40 s for packing; the suite itself stops starting new shapes at its --time-budget.
left=$(( total - (SECONDS - t0) - 40 ))
PYTHONUNBUFFERED=1 timeout "$left" python3 bench/run_benchmarks.py --out "$out/results" \
  --report "$out/results/BENCHMARKS.md" --time-budget $(( left - 60 )) "${sel[@]}" "$@" \
  2>&1 | tee "$out/bench.log" | grep -v "^\s*$" | tail -40
rm -rf "$keep" && cp -r "$out/results" "$keep"
(cd "$out" && tar -czf results.tgz results && rm -rf results)
# Keep what loading a cached kernel reads (cubin, metadata, launchers, autotuning choices); the
# intermediate IRs are only written, and get_group skips children that are absent.
[ "${TRITON_CACHE_SAVE:-1}" = 0 ] && { ls -la "$out"; exit 0; }  # TRITON_CACHE_SAVE=0: results only
find "$TRITON_CACHE_DIR" -type f \( -name '*.ttir' -o -name '*.ttgir' -o -name '*.llir' -o -name '*.ptx' \
  -o -name '*.source' \) -delete
tar -c -C "$TRITON_CACHE_DIR" . 2>/dev/null | xz -T0 -6 | split -b 15m - "$out/triton-cache.txz.part-"
du -sh "$TRITON_CACHE_DIR"
ls -la "$out"
