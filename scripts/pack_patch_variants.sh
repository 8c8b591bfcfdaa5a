#!/usr/bin/env bash
# On the dev machine: the stage bench of HEAD and of HEAD plus each prefix of a patch stack, and
# the CUDA tests of the whole stack, packed as one xz stream into build-carry/bins.tar.xz for one
# device call that tests the stack and benches every step beside the others (A/B/C/...).
#
#   bash scripts/pack_patch_variants.sh bench/logs/a.patch bench/logs/b.patch ...
#
# Why one stream: the binaries share most of their bytes (the kernels of every untouched file), and
# xz -9's 64 MiB window finds them when they are adjacent (five binaries of session 56: 40 MB as
# one stream, 48 MB as separate files; the call's carry is 64 MiB with the tree).
#
# Builds in a git worktree of HEAD (WORKTREE, default /tmp/linattn-variants; its build folder is
# reused, so the first variant builds everything and each later one only what its patch touches;
# ARCHS, default 90a). The patches apply in order with `git apply`, each on the ones before.
# Output in build-carry/ (ignored; name it in the call's carry): bins.tar.xz with sb_0 (HEAD),
# sb_1 .. sb_N (HEAD + patches 1..N) and tests_N (the CUDA tests with every patch), and MANIFEST
# (the commit and each patch's sha256). On the device: `tar -xJf build-carry/bins.tar.xz -C /tmp`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 PATCH [PATCH ...]" >&2; exit 2; }
for p in "$@"; do [ -f "$p" ] || { echo "no patch $p" >&2; exit 2; }; done
wt=${WORKTREE:-/tmp/linattn-variants}
archs=${ARCHS:-90a}
out="$root/build-carry"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
patches=()
for p in "$@"; do patches+=("$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"); done

head=$(git -C "$root" rev-parse HEAD)
if [ -d "$wt/.git" ] || [ -f "$wt/.git" ]; then
  # (separate commands: set -e ignores a failure inside an && list; -f: a patched tree left behind)
  git -C "$wt" checkout -q -f --detach "$head"
  git -C "$wt" reset -q --hard
  git -C "$wt" clean -qfd -e build
else
  git -C "$root" worktree prune  # (a worktree left registered by an earlier session whose /tmp is gone)
  git -C "$root" worktree add -q --detach "$wt" "$head"
fi
if [ ! -f "$wt/build/build.ninja" ]; then
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_ENABLE_CUDA=ON \
    -DLINATTN_CUDA_ARCHS="$archs" > "$stage/configure.log"
fi
build() {  # $1: the stage bench's name in the pack; $2: also the tests
  local t0=$SECONDS
  ninja -C "$wt/build" -j "$(nproc)" linattn_cuda_stage_bench ${2:+linattn_cuda_tests} > "$stage/build.log" ||
    { tail -40 "$stage/build.log" >&2; exit 1; }
  cp "$wt/build/linattn_cuda_stage_bench" "$stage/$1"
  [ -z "${2:-}" ] || cp "$wt/build/linattn_cuda_tests" "$stage/$2"
  echo "$1${2:+ + $2}: built in $((SECONDS - t0)) s"
}
build sb_0
n=0
for p in "${patches[@]}"; do
  n=$((n + 1))
  git -C "$wt" apply "$p"
  if [ "$n" -eq "${#patches[@]}" ]; then build "sb_$n" "tests_$n"; else build "sb_$n"; fi
done

mkdir -p "$out"
order=("sb_$n" "tests_$n")  # adjacent: the tests share the last stage bench's kernels
for ((i = n - 1; i >= 0; --i)); do order+=("sb_$i"); done
tar -C "$stage" -cf - "${order[@]}" | xz -9 -T1 > "$out/bins.tar.xz"
{
  echo "HEAD $head; sb_0 = HEAD, sb_i = HEAD + patches 1..i, tests_$n = HEAD + every patch"
  i=0
  for p in "${patches[@]}"; do i=$((i + 1)); echo "patch $i: $(sha256sum "$p" | cut -d' ' -f1) ${p#"$root"/}"; done
} > "$out/MANIFEST"
git -C "$wt" reset -q --hard
ls -l "$out/bins.tar.xz"
cat "$out/MANIFEST"
