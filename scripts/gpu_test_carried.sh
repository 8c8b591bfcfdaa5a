#!/usr/bin/env bash
# On the GPU machine: the CUDA test binaries packed by scripts/pack_test_binaries.sh (carried in
# build-carry/), run at once on the one card under a time guard (nothing here is timed):
#   - the first pack (the card's own build): the whole suite, and memcheck over the small cases
#     (CudaForward.*Small*, CudaBackward.*Small*, CudaDecode.*, CudaBadInput.*);
#   - every other pack: CudaForward.*, CudaBackward.*Small*, CudaConfig.* (an sm_80 build runs by
#     PTX JIT on a Hopper card; the JIT cache is kept in /tmp/nvjit for a warm machine's next call).
# With --rest, instead: the tests of the first pack that the last call on this warm machine did not
# finish (its guard cut the suite), and nothing else.
# With --race, also racecheck and synccheck over CudaForward.*Small* and CudaDecode.* (first pack).
#
#   bash scripts/gpu_test_carried.sh [GUARD_S] [--rest] [--race]
#
# GUARD_S (default 300): every run is cut at it. The logs go into one tarball, $OUT/tests.tgz (the
# device returns a handful of files; one archive always comes back), and one line per run to stdout.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
guard=300; rest=0; race=0
for a in "$@"; do
  case "$a" in
    --rest) rest=1 ;;
    --race) race=1 ;;
    ''|*[!0-9]*) echo "gpu_test_carried.sh: unknown argument $a" >&2; exit 2 ;;
    *) guard=$a ;;
  esac
done
t0=$SECONDS
logs=/tmp/linattn-test-logs
out=${OUT:-$root/gpu-logs}
[ $rest = 1 ] || rm -rf "$logs"
mkdir -p "$logs" "$out"
[ -f build-carry/order.txt ] || { echo "no build-carry/order.txt: run scripts/pack_test_binaries.sh first and carry build-carry" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "packed at $(head -1 build-carry/COMMIT)"
export CUDA_CACHE_MAXSIZE=4294967296 CUDA_CACHE_PATH=/tmp/nvjit
names=()
while read -r _ name; do
  [ -x "/tmp/lct_$name" ] && [ "/tmp/lct_$name" -nt "build-carry/cuda_tests_$name.xz" ] ||
    { xz -dc "build-carry/cuda_tests_$name.xz" > "/tmp/lct_$name" && chmod +x "/tmp/lct_$name"; }
  names+=("$name")
done < build-carry/order.txt
first=${names[0]}

# run NAME ARGS...: one run under the guard, its summary line to $logs/NAME.sum
run() {
  local name=$1; shift
  timeout --signal=INT --kill-after=10 "$guard" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local ok; ok=$(grep -c '^\[       OK \]' "$logs/$name.log")
  echo "$name rc $rc ($([ $rc = 124 ] || [ $rc = 130 ] && echo 'cut by the guard, ' )$ok passed): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) |FAILED  \]' "$logs/$name.log" | head -6 | tr '\n' ' ') at $((SECONDS - t0)) s" >"$logs/$name.sum"
}

pids=()
if [ $rest = 1 ]; then
  [ -f "$logs/suite_$first.log" ] || { echo "--rest: no earlier suite log on this machine" >&2; exit 2; }
  done_tests=$(grep '^\[       OK \]' "$logs"/suite_"$first"*.log | awk '{print $4}' | sort -u | paste -sd: -)
  run "suite_${first}_rest" "/tmp/lct_$first" --gtest_filter="-${done_tests}" & pids+=($!)
else
  run "suite_$first" "/tmp/lct_$first" & pids+=($!)
  run "memcheck_$first" compute-sanitizer --tool memcheck --error-exitcode 3 "/tmp/lct_$first" \
    --gtest_filter='CudaForward.*Small*:CudaBackward.*Small*:CudaDecode.*:CudaBadInput.*' & pids+=($!)
  for name in "${names[@]:1}"; do
    run "fwd_bwd_$name" "/tmp/lct_$name" --gtest_filter='CudaForward.*:CudaBackward.*Small*:CudaConfig.*' & pids+=($!)
  done
  if [ $race = 1 ]; then
    for tool in racecheck synccheck; do
      run "${tool}_$first" compute-sanitizer --tool $tool --error-exitcode 3 "/tmp/lct_$first" \
        --gtest_filter='CudaForward.*Small*:CudaDecode.*' & pids+=($!)
    done
  fi
fi
wait "${pids[@]}"
cat "$logs"/*.sum
grep -h '^\[ device' "$logs"/*.log | sort -u
(cd "$logs" && tar -czf "$out/tests.tgz" ./*.log ./*.sum)
echo "done at $((SECONDS - t0)) s; logs in \$OUT/tests.tgz"
