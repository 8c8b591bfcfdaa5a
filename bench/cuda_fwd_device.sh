#!/usr/bin/env bash
# One device call for the CUDA forward work, most important first: build, forward tests, bench,
# memcheck, FLA side by side, racecheck, backward Small tests (they reuse the forward kernels), ncu.
# Usage on the GPU machine (carry .device and third_party_ref): bash bench/cuda_fwd_device.sh "$OUT"
set -u
out=${1:?out dir}
bash scripts/gpu_setup.sh > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
B=./build-gpu/linattn_cuda_tests
timeout 150 $B --gtest_filter='CudaForward*' > "$out/tests.log" 2>&1; fwd=$?
echo "forward tests rc=$fwd"; grep -E "FAILED|worst rel|PASSED|Failure|rel_err|expected" "$out/tests.log" | head -20
timeout 90 $B --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Forward*' > "$out/bench.log" 2>&1
grep linattn "$out/bench.log"
[ "$fwd" = 0 ] || exit 2
timeout 90 compute-sanitizer --tool memcheck $B --gtest_filter='CudaForward.*Small*' > "$out/memcheck.log" 2>&1
tail -1 "$out/memcheck.log"
PYTHONPATH=third_party_ref timeout 240 python3 bench/fla_forward_times.py > "$out/fla.log" 2>&1
grep -v Warn "$out/fla.log" | tail -6
timeout 150 compute-sanitizer --tool racecheck $B --gtest_filter='CudaForward.*Small*' > "$out/racecheck.log" 2>&1
tail -1 "$out/racecheck.log"
timeout 90 $B --gtest_filter='CudaBackward.*Small*' > "$out/bwd.log" 2>&1; echo "backward Small tests rc=$?"
grep -E "FAILED|PASSED" "$out/bwd.log" | head -10
bash bench/cuda_fwd_profile.sh /tmp/prof gdn,kda_safe_gate
(cd /tmp/prof && tar czf "$out/prof.tgz" *.txt *.csv)
grep -E "^  [a-z].*chunk_|Duration  " /tmp/prof/*.details.txt | sed 's/(linattn::cuda::kern::[A-Za-z]*Params)//'
