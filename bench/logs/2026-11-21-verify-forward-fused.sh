#!/usr/bin/env bash
# One-off verification call: tree (split state) vs fused-state patch; backward tests + sanitizers.
set -u
out=$OUT; t0=$SECONDS
step() { echo "== $1 ($((SECONDS - t0)) s)"; }
bash scripts/gpu_setup.sh --deps-only >/dev/null 2>&1
rm -rf /tmp/fused && mkdir -p /tmp/fused && cp -r CMakeLists.txt cmake include src tests tools examples python /tmp/fused/ 2>/dev/null
(cd /tmp/fused && patch -p1 -s < "$OLDPWD/bench/cuda_fwd_fused_state.patch") || echo "patch failed"
step build
(bash scripts/gpu_setup.sh > "$out/build.log" 2>&1; echo "tree build rc=$?") &
(cmake -S /tmp/fused -B /tmp/fused/build -G Ninja -DLINATTN_ENABLE_CUDA=ON -DCUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include \
   -DCMAKE_PREFIX_PATH=/tmp/linattn-deps/gtest-install > /dev/null 2>&1 && cmake --build /tmp/fused/build -j 8 > "$out/build_fused.log" 2>&1; echo "fused build rc=$?") &
wait
A=./build-gpu/linattn_cuda_tests; F=/tmp/fused/build/linattn_cuda_tests
for v in A F; do
  B=${!v}; step "forward tests $v"
  timeout 120 $B --gtest_filter='CudaForward*' > "$out/fwd_$v.log" 2>&1; echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) " "$out/fwd_$v.log"
  timeout 90 $B --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Forward*' 2>&1 | grep -E "linattn|ms" | head -8
done
step "backward tests (fused build)"
timeout 200 $F --gtest_filter='CudaBackward*' > "$out/bwd.log" 2>&1; echo "rc=$?"
grep -E "^\[  (PASSED|FAILED) |rel|Failure" "$out/bwd.log" | head -40
step "backward bench"
LINATTN_BWD_PROFILE=1 timeout 60 $F --gtest_also_run_disabled_tests --gtest_filter='CudaBackwardBench.*' 2>&1 | tail -25
step memcheck
timeout 120 compute-sanitizer --tool memcheck $F --gtest_filter='CudaBackward.Small*:CudaForward.*Small*' > "$out/memcheck.log" 2>&1; echo "rc=$?"; tail -2 "$out/memcheck.log"
step racecheck
timeout 150 compute-sanitizer --tool racecheck $F --gtest_filter='CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen:CudaForward.*Small*' > "$out/racecheck.log" 2>&1; echo "rc=$?"; tail -2 "$out/racecheck.log"
step done
