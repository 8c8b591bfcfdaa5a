#!/usr/bin/env bash
# On the GPU machine: validate a device-code change in one call. X is the working tree as sent,
# A a base commit carried as a `git archive` tarball; both are built, X's whole CUDA suite runs
# while A builds, then linattn-run's bitwise hashes of every output and gradient are compared X
# against A case by case, the sanitizers run on X's small cases, and the stage bench alternates
# X A X A (same machine, same clocks, so drift shows). What used to be a one-off script a session.
#
#   here:  git archive BASE | gzip > .device/a.tar.gz     (and scripts/make_device_bundle.sh once)
#   there: bash scripts/gpu_validate.sh [options]          (carry .device)
#
# Options (each optional):
#   --base TARBALL     A's tree (default .device/a.tar.gz); --no-base: X alone (no bits, no A/B)
#   --cases FILE       linattn-run argument lines, one case a line, '#' comments (default
#                      scripts/validate_cases.txt); --no-bits skips the comparison
#   --no-suite         skip X's linattn_cuda_tests
#   --memcheck FILTER  gtest filter run under compute-sanitizer memcheck (default
#                      'CudaForward.*Small*:CudaBackward.Small*'; '' skips it)
#   --racecheck FILTER the same under racecheck (default '': skipped; it is slow)
#   --ab ARGS          a linattn_cuda_stage_bench invocation to A/B (repeatable), e.g.
#                      --ab 'backward --family kda --gate logsigmoid --only split --stages'
#   --rounds N         A/B rounds of X A (default 2)
#   --budget S         start no A/B round after S seconds (default 500: the call's 600 s limit)
#   --pytest ARGS      after the A/B: install X's Python package (CUDA) and run pytest ARGS, e.g.
#                      --pytest 'tests/python/test_cuda.py -q -x' (default: none)
# Output: $OUT/logs.tgz (every log; the device returns at most 8 files) and a summary on stdout:
# the suite's result lines, one bits line a case ("same" or the tensors that differ), the
# sanitizers' last lines, and each A/B run's timing lines.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base=.device/a.tar.gz cases=scripts/validate_cases.txt suite=1 bits=1
memf='CudaForward.*Small*:CudaBackward.Small*' racef='' rounds=2 budget=500 pyt=''
ab=()
while [ $# -gt 0 ]; do
  case $1 in
    --base) base=$2; shift ;;
    --no-base) base='' ;;
    --cases) cases=$2; shift ;;
    --no-bits) bits=0 ;;
    --no-suite) suite=0 ;;
    --memcheck) memf=$2; shift ;;
    --racecheck) racef=$2; shift ;;
    --ab) ab+=("$2"); shift ;;
    --rounds) rounds=$2; shift ;;
    --budget) budget=$2; shift ;;
    --pytest) pyt=$2; shift ;;
    *) echo "gpu_validate: unknown option $1 (see the header)" >&2; exit 2 ;;
  esac
  shift
done
out=${OUT:-$root/gpu-logs}
mkdir -p "$out/l"
t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)" | tee -a "$out/l/steps.log"; }
fin() { (cd "$out" && tar -czf logs.tgz l && rm -rf l); }
trap fin EXIT
trap "exit 143" TERM
bin() { if [ "$1" = X ]; then echo "$root/build-gpu/$2"; else echo /tmp/gpu-validate-a/build/$2; fi; }

nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$out/l/device.txt"
step build-x
bash scripts/gpu_setup.sh -DCMAKE_BUILD_TYPE=Release >"$out/l/build-x.log" 2>&1 || { tail -60 "$out/l/build-x.log"; exit 1; }
step "suite-x${base:++build-a}"
if [ $suite = 1 ]; then
  (timeout 280 "$(bin X linattn_cuda_tests)" >"$out/l/suite.log" 2>&1; echo "suite rc=$?" >>"$out/l/suite.log") &
fi
if [ -n "$base" ]; then
  a=/tmp/gpu-validate-a
  rm -rf $a && mkdir -p $a && tar -xzf "$base" -C $a
  cmake -S $a -B $a/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_ENABLE_CUDA=ON \
    -DCUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include -DCMAKE_PREFIX_PATH=/tmp/linattn-deps/gtest-install \
    >"$out/l/build-a.log" 2>&1
  cmake --build $a/build -j "$(nproc)" --target linattn_cuda_stage_bench linattn-run >>"$out/l/build-a.log" 2>&1 ||
    { echo "A's build failed:"; tail -20 "$out/l/build-a.log"; base=''; }
fi
wait
[ $suite = 1 ] && grep -E "^\[  (PASSED|FAILED)|FAILED|suite rc|worst rel err" "$out/l/suite.log" | head -20
if [ -n "$base" ] && [ $bits = 1 ]; then
  step bits
  while IFS= read -r c; do
    case $c in '' | '#'*) continue ;; esac
    hx=$(timeout 60 "$(bin X linattn-run)" $c --repeat 1 2>&1 | grep -E '^bits' | head -1)
    ha=$(timeout 60 "$(bin A linattn-run)" $c --repeat 1 2>&1 | grep -E '^bits' | head -1)
    printf 'X %s | %s\nA %s | %s\n' "$c" "$hx" "$c" "$ha" >>"$out/l/bits.log"
    if [ -z "$hx" ] || [ -z "$ha" ]; then echo "no bits: $c"
    elif [ "$hx" = "$ha" ]; then echo "same: $c"
    else  # the tensors whose hashes differ
      d=""
      for kv in ${hx#*:}; do
        case " ${ha#*:} " in *" $kv "*) ;; *) d+="${kv%%=*} " ;; esac
      done
      echo "differ: ${d}: $c"
    fi
  done <"$cases"
fi
if [ -n "$memf" ]; then
  step memcheck
  timeout 150 compute-sanitizer --tool memcheck "$(bin X linattn_cuda_tests)" --gtest_filter="$memf" >"$out/l/memcheck.log" 2>&1
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/l/memcheck.log" | tail -3
fi
if [ -n "$racef" ]; then
  step racecheck
  timeout 150 compute-sanitizer --tool racecheck "$(bin X linattn_cuda_tests)" --gtest_filter="$racef" >"$out/l/racecheck.log" 2>&1
  grep -E "ERROR SUMMARY|hazard|PASSED|FAILED" "$out/l/racecheck.log" | tail -3
fi
if [ -n "$base" ] && [ ${#ab[@]} -gt 0 ]; then
  step ab
  for r in $(seq 1 "$rounds"); do
    for v in X A; do
      [ $((SECONDS - t0)) -gt "$budget" ] && { echo "ab cut at $((SECONDS - t0)) s (round $r, $v)"; break 2; }
      i=0
      for args in "${ab[@]}"; do
        i=$((i + 1))
        timeout 90 "$(bin $v linattn_cuda_stage_bench)" $args >"$out/l/ab-$v-$r-$i.log" 2>&1
        echo "$v$r [$args]: $(grep -hE '^linattn|profile\] auto' "$out/l/ab-$v-$r-$i.log" |
          sed -E 's/\[bwd profile\] auto//; s/ +B=[^ ]+ T=[^ ]+ H=[^ ]+ HV=[^ ]+//; s/\(min [^)]*\)//; s/workspace.*//' | tr -s ' \n' ' ')"
      done
    done
  done
fi
if [ -n "$pyt" ]; then
  step pytest
  python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build-gpu/python \
    -Ccmake.define.LINATTN_ENABLE_CUDA=ON -Ccmake.define.CUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include . \
    >"$out/l/pip.log" 2>&1 || { echo "pip install failed:"; tail -20 "$out/l/pip.log"; }
  timeout 300 python3 -m pytest $pyt -p no:cacheprovider >"$out/l/pytest.log" 2>&1
  tail -3 "$out/l/pytest.log"
fi
step done
