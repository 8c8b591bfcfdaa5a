#!/usr/bin/env bash
# A/B of a kernel change with the stage bench, both sides in one GPU call (same machine, same
# clocks), alternating so that drift shows. The GPU machine gets the working tree without git, so
# the old side travels as files:
#
#   here:  bash scripts/gpu_stage_ab.sh --prepare REV
#          copies REV's version of every file under src/ that differs from the working tree into
#          .device/ab/ (git-ignored, carried with .device); files new since REV cannot be swapped out
#          and are refused.
#   there: bash scripts/gpu_stage_ab.sh --run ROUNDS BENCH_ARGS...
#          after scripts/gpu_setup.sh: ROUNDS times, the stage bench on the tree as sent ("new"),
#          then with .device/ab/'s files swapped in ("old"), rebuilding the bench target between;
#          the tree is restored at the end (also on failure). BENCH_ARGS go to
#          linattn_cuda_stage_bench (e.g. forward --only kda,gla). BUILD_DIR (default build-gpu).
#
# Output: "== new N" / "== old N" headers with the bench's lines, on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ab=.device/ab
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
  --run)
    rounds=${2:?usage: --run ROUNDS BENCH_ARGS...}
    shift 2
    build=${BUILD_DIR:-build-gpu}
    [ -f "$ab/REV" ] || { echo "gpu_stage_ab: no $ab (run --prepare here first)" >&2; exit 1; }
    keep=$(mktemp -d)
    files=$(cd "$ab" && find src -type f)
    for f in $files; do mkdir -p "$keep/$(dirname "$f")"; cp "$f" "$keep/$f"; done
    restore() { for f in $files; do cp "$keep/$f" "$f"; done; }
    trap restore EXIT
    rebuild() { cmake --build "$build" --target linattn_cuda_stage_bench >/dev/null; }
    for r in $(seq 1 "$rounds"); do
      restore
      rebuild
      echo "== new $r"
      "$build/linattn_cuda_stage_bench" "$@"
      for f in $files; do cp "$ab/$f" "$f"; done
      rebuild
      echo "== old $r ($(cat "$ab/REV"))"
      "$build/linattn_cuda_stage_bench" "$@"
    done
    restore
    rebuild
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
