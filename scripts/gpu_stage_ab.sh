#!/usr/bin/env bash
# A/B of a kernel change on the GPU machine, both sides in one call (same machine, same clocks).
# The GPU machine gets the working tree without git, so the old side travels as files:
#
#   here:  bash scripts/gpu_stage_ab.sh --prepare REV
#          copies REV's version of every file under src/ that differs from the working tree into
#          .device/ab/ (git-ignored, carried with .device); files new since REV cannot be swapped out
#          and are refused.
#   there: bash scripts/gpu_stage_ab.sh --build-old [TARGETS...]
#          after scripts/gpu_setup.sh --deps-only: a copy of the tree with .device/ab's files in
#          place, in OLD_TREE (default /tmp/linattn-old), configured like gpu_setup.sh and built
#          (default targets: linattn-run linattn_cuda_stage_bench; OLD_JOBS, default 6) into
#          OLD_TREE/build. Run it in the background beside the new side's build
#          (`bash scripts/gpu_setup.sh --deps-only && { bash scripts/gpu_stage_ab.sh --build-old &
#          bash scripts/gpu_setup.sh; wait; }`: the dependencies unpacked once, first): the two
#          builds share the machine's cores and neither side is rebuilt afterwards.
#   there: bash scripts/gpu_stage_ab.sh --run ROUNDS BENCH_ARGS...
#          ROUNDS times, linattn_cuda_stage_bench BENCH_ARGS on the new side (BUILD_DIR, default
#          build-gpu), then on the old side (OLD_TREE/build), alternating so that drift shows
#          (e.g. forward --only kda,gla, or backward --family gla --only split --stages).
#   there: bash scripts/gpu_stage_ab.sh --bits [CASES_FILE]
#          the bitwise check of a change meant to keep results: linattn-run on each case (one
#          line of its arguments each; default: the cases below) on both sides, comparing the
#          FNV-1a hashes of the output and of every gradient that its "bits" line prints. Exits 1
#          if a case differs or prints no bits.
#
# To attribute several changes measured together: after --run, put one file at a time back to
# .device/ab's version in the new tree, cumulatively, rebuild only the bench target (incremental)
# and --run 1 again after each; consecutive differences are each change's effect
# (docs/backward_v2_plan.md, session 40, did this for six store patches in one call).
#
# Output: "== new N" / "== old N (REV)" headers with the bench's lines, on stdout; --bits: one line
# a case, "same" or the hashes of both sides.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ab=.device/ab
old=${OLD_TREE:-/tmp/linattn-old}
need_old() {
  [ -f "$ab/REV" ] || { echo "gpu_stage_ab: no $ab (run --prepare here first)" >&2; exit 1; }
  [ -x "$old/build/$1" ] || { echo "gpu_stage_ab: no $old/build/$1 (run --build-old first)" >&2; exit 1; }
}
case "${1:-}" in
  --prepare)
    rev=${2:?usage: --prepare REV}
    rm -rf "$ab"
    mkdir -p "$ab"
    n=0
    while IFS= read -r f; do
      if ! git cat-file -e "$rev:$f" 2>/dev/null; then
        echo "gpu_stage_ab: $f is new since $rev: nothing to swap in" >&2
        exit 1
      fi
      mkdir -p "$ab/$(dirname "$f")"
      git show "$rev:$f" >"$ab/$f"
      n=$((n + 1))
    done < <(git diff --name-only "$rev" -- src)
    [ "$n" -gt 0 ] || { echo "gpu_stage_ab: no file under src/ differs from $rev" >&2; exit 1; }
    echo "$rev" >"$ab/REV"
    echo "gpu_stage_ab: $n file(s) of $rev in $ab"
    ;;
  --build-old)
    shift
    [ -f "$ab/REV" ] || { echo "gpu_stage_ab: no $ab (run --prepare here first)" >&2; exit 1; }
    targets=("$@")
    [ ${#targets[@]} -gt 0 ] || targets=(linattn-run linattn_cuda_stage_bench)
    dep=/tmp/linattn-deps
    [ -d "$dep/include/cute" ] || bash scripts/gpu_setup.sh --deps-only
    rm -rf "$old"
    mkdir -p "$old"
    tar -c --exclude='./build*' --exclude=./.device . | tar -x -C "$old"
    (cd "$ab" && find src -type f) | while IFS= read -r f; do cp "$ab/$f" "$old/$f"; done
    cmake -S "$old" -B "$old/build" -G Ninja -DLINATTN_ENABLE_CUDA=ON -DLINATTN_CUDA_ARCHS=90a -DCUTLASS_INCLUDE_DIR="$dep/include" \
          -DCMAKE_PREFIX_PATH="$dep/gtest-install" >/dev/null
    cmake --build "$old/build" -j "${OLD_JOBS:-6}" --target "${targets[@]}" >"$old/build.log" 2>&1 ||
      { tail -30 "$old/build.log" >&2; exit 1; }
    echo "gpu_stage_ab: old side ($(cat "$ab/REV")) built in $old/build"
    ;;
  --run)
    rounds=${2:?usage: --run ROUNDS BENCH_ARGS...}
    shift 2
    build=${BUILD_DIR:-build-gpu}
    need_old linattn_cuda_stage_bench
    for r in $(seq 1 "$rounds"); do
      echo "== new $r"
      "$build/linattn_cuda_stage_bench" "$@"
      echo "== old $r ($(cat "$ab/REV"))"
      "$old/build/linattn_cuda_stage_bench" "$@"
    done
    ;;
  --bits)
    build=${BUILD_DIR:-build-gpu}
    need_old linattn-run
    if [ -n "${2:-}" ]; then
      mapfile -t cases <"$2"
    else  # both gate shapes of the no-delta families, every dtype and form, K != 128, varlen, GVA,
          # fp16 partials, state layouts, and the delta-rule families with their split form
      cases=("--family gla --T 3000 --num-seqs 4 --initial-state --final-state"
             "--family gla --K 64 --V 64 --T 700"
             "--family gla --dtype fp32 --T 900"
             "--family gla --dtype fp16 --backward-precision float32 --T 777 --HV 16"
             "--family gla --T 800 --state-v-first --initial-state --final-state"
             "--family gla --T 1000 --backward-precision split --H 4 --HV 8"
             "--family simple_gla --T 2100 --num-seqs 3"
             "--family simple_gla --g-gamma --T 1500"
             "--family simple_gla --dtype fp16 --K 256 --V 128 --T 500"
             "--family simple_gla --dtype fp16 --l2norm --T 640 --HV 16"
             "--family simple_gla --T 1200 --H 4 --HV 8 --backward-precision split --initial-state --final-state"
             "--family kda --T 1100 --num-seqs 2 --initial-state --final-state"
             "--family kda --T 900 --gate-in-kernel --lower-bound -5 --safe-gate --l2norm"
             "--family kda --T 1500 --backward-precision split"
             "--family kda --dtype fp16 --T 1000 --HV 16 --state-v-first"
             "--family gdn --T 1300 --l2norm --beta-sigmoid"
             "--family gdn --T 1000 --H 4 --HV 8 --dtype fp16"
             "--family gdn --T 2000 --num-seqs 5 --initial-state --final-state --backward-precision split")
    fi
    bad=0
    for c in "${cases[@]}"; do
      # shellcheck disable=SC2086  # a case is a list of arguments
      n=$("$build/linattn-run" $c --repeat 1 2>&1 | grep -E '^bits' || true)
      # shellcheck disable=SC2086
      o=$("$old/build/linattn-run" $c --repeat 1 2>&1 | grep -E '^bits' || true)
      if [ -n "$n" ] && [ "$n" = "$o" ]; then
        v=same
      else
        v="DIFFER new[${n:-no bits line}] old[${o:-no bits line}]"
        bad=1
      fi
      printf '%-100s %s\n' "$c" "$v"
    done
    exit "$bad"
    ;;
  *)
    sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
