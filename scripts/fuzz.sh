#!/usr/bin/env bash
# Builds the libFuzzer target over the C ABI (fuzz/fuzz_c_api.cpp) against a CPU-only build of
# the library with AddressSanitizer + UndefinedBehaviorSanitizer (clang), replays the committed
# corpus (fuzz/corpus: every input must pass) and fuzzes for a fixed budget.
#   LINATTN_FUZZ_SECONDS   fuzzing budget after the replay (default 240; 0: replay only)
#   LINATTN_FUZZ_JOBS      parallel fuzzing processes (default: nproc), each for the whole budget
# New inputs go to build-fuzz/run/corpus (not committed); a failing input is saved in
# build-fuzz/run/artifacts and printed (base64) by libFuzzer, and the script exits non-zero.
# Reproduce one: ./build-fuzz/linattn_fuzz_c_api <file>   (LINATTN_FUZZ_VERBOSE=1 prints the call)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${LINATTN_FUZZ_SECONDS:-240}
jobs=${LINATTN_FUZZ_JOBS:-$(nproc)}
start=$(date +%s)
bash scripts/install_deps.sh --fuzz

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DLINATTN_ENABLE_CUDA=OFF -DLINATTN_BUILD_TESTS=OFF -DLINATTN_BUILD_TOOLS=OFF -DLINATTN_BUILD_FUZZ=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer -Wno-pass-failed" \
  >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target linattn_fuzz_c_api
echo "== fuzz target built after $(( $(date +%s) - start )) s"

fuzzer=$PWD/build-fuzz/linattn_fuzz_c_api
run=build-fuzz/run
rm -rf "$run"
mkdir -p "$run/corpus" "$run/artifacts"
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
common=(-timeout=20 -rss_limit_mb=2048 -max_len=512 -artifact_prefix="$run/artifacts/" -print_final_stats=1)

# 1. the committed corpus: regressions of every input found so far
"$fuzzer" "${common[@]}" -runs=0 fuzz/corpus 2>&1 | tail -n 3
echo "== corpus replayed ($(ls fuzz/corpus | wc -l) inputs) after $(( $(date +%s) - start )) s"

# 2. fuzzing for the budget, one process per core (different seeds), new inputs kept apart
if [ "$seconds" -gt 0 ]; then
  pids=()
  for j in $(seq 1 "$jobs"); do
    mkdir -p "$run/corpus/$j"
    "$fuzzer" "${common[@]}" -max_total_time="$seconds" -seed="$j$(date +%s | tail -c 6)" \
      "$run/corpus/$j" fuzz/corpus > "$run/fuzz-$j.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for j in "${!pids[@]}"; do
    if ! wait "${pids[$j]}"; then
      status=1
      echo "== fuzz job $((j + 1)) FAILED:"
      grep -v -E '^#[0-9]+.*(NEW|REDUCE|pulse)' "$run/fuzz-$((j + 1)).log" | tail -n 60
    else
      grep -E '^(Done|stat::number_of_executed_units)' "$run/fuzz-$((j + 1)).log" | tail -n 2
    fi
  done
  echo "== fuzzed ${seconds} s x ${jobs} jobs after $(( $(date +%s) - start )) s: $([ $status = 0 ] && echo no failures || echo FAILURES)"
  exit $status
fi
