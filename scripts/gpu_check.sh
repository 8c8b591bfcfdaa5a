#!/usr/bin/env bash
# On the GPU machine: build with CUDA, run the GPU test suite, compute-sanitizer (memcheck and
# racecheck) on the small cases, build the Python package with CUDA and run its tests (against
# FLA too when third_party_ref/fla is carried). Logs go to $OUT (or ./gpu-logs).
#   --bench  also linattn_cuda_stage_bench (bench/cuda_stage_bench.cpp) at the reference shape
#            (B=2, T=8192, K=V=128, bf16): the forward's four configurations, and the backward's
#            times and per-stage split (the split form and the default, logsigmoid gate), KDA and GDN
#   --no-sanitizers  skip memcheck / racecheck (a host-side check; scripts/gpu_sanitize.sh runs them all)
set -uo pipefail
bench=0
san=1
for a in "$@"; do
  case "$a" in
    --bench) bench=1 ;;
    --no-sanitizers) san=0 ;;
    *) echo "gpu_check.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-logs}
mkdir -p "$out"
t0=$SECONDS
status=0
step() { echo "== $1 ($((SECONDS - t0)) s)"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
step "build (the Python package beside it)"
bash scripts/gpu_setup.sh --deps-only >/dev/null 2>&1
# the Python package builds in its own folder on the other cores while the tests below run
( python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build-gpu/python \
    -Ccmake.define.LINATTN_ENABLE_CUDA=ON -Ccmake.define.LINATTN_CUDA_ARCHS=90a \
    -Ccmake.define.CUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include . \
    >"$out/pip.log" 2>&1; echo $? >"$out/pip.rc" ) &
pip_pid=$!
bash scripts/gpu_setup.sh >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; wait $pip_pid; exit 1; }
step "GPU tests"
./build-gpu/linattn_cuda_tests 2>&1 | tee "$out/cuda_tests.log" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" || status=1
grep -q "FAILED" "$out/cuda_tests.log" && status=1
if [ $san = 1 ]; then
step "memcheck (small cases)"
timeout 180 compute-sanitizer --tool memcheck --error-exitcode 3 ./build-gpu/linattn_cuda_tests --gtest_filter='*Small*' \
  >"$out/memcheck.log" 2>&1; rc=$?; tail -3 "$out/memcheck.log"; [ $rc -eq 0 ] || status=1
# racecheck: the forward's small cases and four backward ones (all backward small cases take
# over 3 minutes under racecheck; every kernel of the backward, and the disable_recompute
# forward's state pass + output kernel, run in these four)
step "racecheck (small cases)"
timeout 180 compute-sanitizer --tool racecheck --error-exitcode 3 ./build-gpu/linattn_cuda_tests \
  --gtest_filter='CudaForward.*Small*:CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen:CudaBackward.SmallChunkedMatchesTokenReplay:CudaBackward.SmallSavedMatchesRecompute' \
  >"$out/racecheck.log" 2>&1; rc=$?; tail -3 "$out/racecheck.log"; [ $rc -eq 0 ] || status=1
fi
if [ $bench = 1 ]; then
  step "forward bench (reference shape)"
  timeout 120 ./build-gpu/linattn_cuda_stage_bench forward >"$out/bench_forward.log" 2>&1 || status=1
  grep linattn "$out/bench_forward.log"
  step "backward bench (reference shape)"
  for fam in gdn kda; do
    timeout 90 ./build-gpu/linattn_cuda_stage_bench backward --family $fam --gate logsigmoid --only split \
      --stages >"$out/bench_$fam.log" 2>&1 || status=1
    grep -E "bench\]" "$out/bench_$fam.log" | head -2; grep "profile\] auto" "$out/bench_$fam.log"
  done
fi
step "python package"
wait $pip_pid
[ "$(cat "$out/pip.rc" 2>/dev/null)" = 0 ] || { tail -30 "$out/pip.log"; status=1; }
step "python tests"
# FLA for the tests that compare with it: a checkout in third_party_ref, else the bundled release
fla_site=; [ -d "$root/third_party_ref/fla" ] || { [ -d "$root/.device/fla-compat/site/fla" ] && fla_site=":$root/.device/fla-compat/site"; }
# PYTEST_FILES: the files to run (default all; the files with CUDA cases, which CI cannot run:
# "tests/python/test_cuda.py tests/python/test_decode.py tests/python/test_errors.py tests/python/test_cp.py")
PYTHONPATH="$root/third_party_ref$fla_site" python3 -m pytest ${PYTEST_FILES:-tests/python} -q -x -rs --durations=15 \
  2>&1 | tee "$out/pytest.log" | tail -30
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ -d "$root/.device/fla-compat/site" ]; then
  # FLA 0.6.0's own operator tests with linattn (CUDA) on the side under test, file by file with a
  # time limit each (FLA's Triton compiles dominate; the tests that substitute nothing are
  # deselected on CUDA), bundled by scripts/make_device_bundle.sh (tests/fla_compat/README.md)
  fla_tests="$root/.device/fla-compat/fla-tests-local/tests"
  [ -d "$fla_tests" ] || fla_tests="$root/.device/fla-compat/fla-tests-v0.6.0/tests"
  for f in ${FLA_FILES-test_kda test_gdn test_gla test_simple_gla}; do  # FLA_FILES= : none
    step "FLA's $f against linattn (cuda)"
    timeout "${FLA_SECONDS:-240}" python3 tests/fla_compat/run_fla_tests.py --device cuda --work "$root/.device/fla-compat" \
      --fla-tests "$fla_tests" --files "ops/$f.py" --report "$out/fla_compat_$f.json" >"$out/fla_compat_$f.log" 2>&1 || status=1
    grep -A4 "linattn in FLA's tests" "$out/fla_compat_$f.log"; tail -1 "$out/fla_compat_$f.log"
  done
fi
step "done: status $status"
exit $status
