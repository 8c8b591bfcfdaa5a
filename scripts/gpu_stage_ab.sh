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
#   there: bash scripts/gpu_stage_ab.sh --bits [CASES_FILE]
#          the same swap for a bitwise check of a change meant to keep results: linattn-run on each
#          case (one line of its arguments each; default: the cases below), on the tree as sent
#          and on REV's files, comparing the FNV-1a hashes of the output and of every gradient
#          that linattn-run's "bits" line prints. Exits 1 if a case differs or prints no bits.
#
# Output: "== new N" / "== old N" headers with the bench's lines, on stdout; --bits: one line a
# case, "same" or the tensors that differ.
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
  --bits)
    build=${BUILD_DIR:-build-gpu}
    [ -f "$ab/REV" ] || { echo "gpu_stage_ab: no $ab (run --prepare here first)" >&2; exit 1; }
    if [ -n "${2:-}" ]; then
      mapfile -t cases <"$2"
    else  # both gate shapes of the no-delta families, every dtype and form, K != 128, varlen,
          # state layouts, and the delta-rule families
      cases=("--family gla --T 3000 --num-seqs 4 --initial-state --final-state"
             "--family gla --K 64 --V 64 --T 700"
             "--family gla --dtype fp32 --T 900"
             "--family gla --dtype fp16 --backward-precision float32 --T 777 --HV 16"
             "--family gla --T 800 --state-v-first --initial-state --final-state"
             "--family simple_gla --T 2100 --num-seqs 3"
             "--family simple_gla --g-gamma --T 1500"
             "--family simple_gla --dtype fp16 --K 256 --V 128 --T 500"
             "--family kda --T 1100 --num-seqs 2 --initial-state --final-state"
             "--family kda --T 900 --gate-in-kernel --lower-bound -5 --safe-gate --l2norm"
             "--family gdn --T 1300 --l2norm --beta-sigmoid")
    fi
    keep=$(mktemp -d)
    files=$(cd "$ab" && find src -type f)
    for f in $files; do mkdir -p "$keep/$(dirname "$f")"; cp "$f" "$keep/$f"; done
    restore() { for f in $files; do cp "$keep/$f" "$f"; done; }
    trap restore EXIT
    side() {  # $1: output file
      cmake --build "$build" --target linattn-run >/dev/null
      : >"$1"
      for c in "${cases[@]}"; do
        # shellcheck disable=SC2086  # a case is a list of arguments
        out=$("$build/linattn-run" $c --repeat 1 2>&1 || true)
        # the bits line, or the run's error when there is none
        echo "$c | $(grep -E '^bits' <<<"$out" || grep -m 1 -iE 'error|^linattn-run:' <<<"$out" || tail -n 1 <<<"$out")" >>"$1"
      done
    }
    restore
    side "$keep/bits-new"
    for f in $files; do cp "$ab/$f" "$f"; done
    side "$keep/bits-old"
    restore
    cmake --build "$build" --target linattn-run >/dev/null
    python3 - "$keep/bits-new" "$keep/bits-old" <<'PY'
import sys
def parse(line):
    return dict(t.split("=", 1) for t in line.split("|", 1)[-1].split() if "=" in t)
new = open(sys.argv[1]).read().splitlines()
old = open(sys.argv[2]).read().splitlines()
bad = 0
for n, o in zip(new, old):
    fn, fo = parse(n), parse(o)
    if not fn or not fo:
        verdict, bad = "no bits line: " + n.split("|", 1)[-1].strip()[:200], bad + 1
    else:
        diff = [k for k in fn if fn[k] != fo.get(k)]
        verdict = "same" if not diff else "differ: " + " ".join(diff)
        bad += bool(diff)
    print(f"{n.split('|', 1)[0].strip():<80} {verdict}")
sys.exit(1 if bad else 0)
PY
    ;;
  *)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
