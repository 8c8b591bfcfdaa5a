#!/usr/bin/env bash
# Session 36's first device call (one-off; copy it to .device/run.sh and run `bash .device/run.sh`).
# Here, first:
#   git checkout -b s36-x main && git am bench/logs/2026-11-28-s35-wip-{fwd-loop,gate-helper}.patch
#   git archive main | gzip > .device/a.tar.gz; bash scripts/make_device_bundle.sh (if .device/ is gone)
# X = the working tree (main + the forward prep's P_I loop + the gate-scan helper), A = main. Build
# X; X's CUDA suite while A builds; bits X vs A (both keep every bit: same operations, same order;
# if a case differs, `git am` one patch at a time to find which); the Python
# CUDA tests of session 35's frozen-decay-parameter choice; sanitizers on the prep's small cases;
# A/B X A X A of the forward and the split backward; ncu warp states of the forward prep (X, A)
# and of the WIDE prep (main), to confirm the instruction-fetch account of 10cb9c2's -48%.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}; mkdir -p $out/l
t0=$SECONDS; step() { echo "== $1 ($((SECONDS - t0)) s)" | tee -a $out/l/steps.log; }
fin() { (cd $out && tar -czf logs.tgz l && rm -rf l); }
trap fin EXIT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $out/l/device.txt
step build-x
bash scripts/gpu_setup.sh -DCMAKE_BUILD_TYPE=Release > $out/l/build.log 2>&1 || { tail -60 $out/l/build.log; exit 1; }
step suite-x+build-a
(timeout 240 ./build-gpu/linattn_cuda_tests > $out/l/suite.log 2>&1; echo "suite rc=$?" >> $out/l/suite.log) &
sp=$!
mkdir -p /tmp/a && tar -xzf .device/a.tar.gz -C /tmp/a
cmake -S /tmp/a -B /tmp/a/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_ENABLE_CUDA=ON \
  -DCUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include -DCMAKE_PREFIX_PATH=/tmp/linattn-deps/gtest-install >/dev/null 2>&1
cmake --build /tmp/a/build -j 12 --target linattn_cuda_stage_bench linattn-run > $out/l/build-a.log 2>&1 || tail -20 $out/l/build-a.log
wait $sp
grep -E "^\[  (PASSED|FAILED)|FAILED|suite rc" $out/l/suite.log | head -20
step bits
cases=("--family kda --T 1100 --num-seqs 2 --initial-state --final-state"
       "--family kda --T 900 --gate-in-kernel --l2norm"
       "--family kda --T 777 --gate-in-kernel --safe-gate --lower-bound -5 --HV 16"
       "--family kda --T 900 --backward-precision split --l2norm"
       "--family kda --T 500 --K 128 --V 64 --H 8 --HV 16"
       "--family gla --T 3000 --num-seqs 4 --initial-state --final-state"
       "--family gla --dtype fp16 --backward-precision float32 --T 777 --HV 16"
       "--family kda --T 900 --gate-in-kernel --backward-precision float32 --l2norm"
       "--family simple_gla --T 1000 --g-gamma --dtype fp16")
for c in "${cases[@]}"; do
  for v in X A; do
    B=./build-gpu/linattn-run; [ $v = A ] && B=/tmp/a/build/linattn-run
    echo "$v $c | $(timeout 60 $B $c --repeat 1 2>&1 | grep -E '^bits|rror' | head -2)" >> $out/l/bits.log
  done
done
cut -c1-260 $out/l/bits.log
step sanitizers
timeout 120 compute-sanitizer --tool memcheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaForward.*Small*:CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen' > $out/l/memcheck.log 2>&1; tail -1 $out/l/memcheck.log
timeout 90 compute-sanitizer --tool racecheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaForward.*Small*' > $out/l/racecheck.log 2>&1; tail -1 $out/l/racecheck.log
step ab
for v in X A X A; do
  B=./build-gpu/linattn_cuda_stage_bench; [ $v = A ] && B=/tmp/a/build/linattn_cuda_stage_bench
  timeout 60 $B forward --only kda,kda_safe_gate,gla > $out/l/fwd-$v.log 2>&1
  timeout 80 $B backward --family kda --gate logsigmoid --only split --stages > $out/l/kda-split-$v.log 2>&1
  echo "$v fwd: $(grep -h '^linattn' $out/l/fwd-$v.log | awk '{print $2, $7}' | tr '\n' ' ')"
  echo "  kda-split: $(grep -h 'profile\] auto' $out/l/kda-split-$v.log | tr '\n' ' ' | sed 's/\[bwd profile\] auto//g')"
done
step ncu
for v in X A; do
  B=./build-gpu/linattn_cuda_stage_bench; [ $v = A ] && B=/tmp/a/build/linattn_cuda_stage_bench
  timeout 120 ncu --clock-control none --kernel-name regex:chunk_prep_vector --launch-skip 4 --launch-count 1 \
    --section WarpStateStats --section SchedulerStats --section LaunchStats $B forward --only kda > $out/l/ncu-fwdprep-$v.txt 2>&1
done
timeout 150 ncu --clock-control none --kernel-name regex:chunk_prep_vector --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section LaunchStats ./build-gpu/linattn_cuda_stage_bench \
  backward --family kda --gate softplus_fla --only float32 > $out/l/ncu-wideprep.txt 2>&1
# pass 2 (split) and pass 1: is instruction fetch a large share there too (pass 2 is 10.6 K
# instructions of mostly straight-line code at two CTAs an SM)?
timeout 120 ncu --clock-control none --kernel-name regex:wy_kernel --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section LaunchStats ./build-gpu/linattn_cuda_stage_bench \
  backward --family kda --gate logsigmoid --only split > $out/l/ncu-wysplit.txt 2>&1
timeout 120 ncu --clock-control none --kernel-name regex:chunk_dh_wgmma --launch-skip 2 --launch-count 1 \
  --section WarpStateStats --section SchedulerStats --section LaunchStats ./build-gpu/linattn_cuda_stage_bench \
  backward --family kda --gate logsigmoid --only split > $out/l/ncu-dhsplit.txt 2>&1
grep -HE "Duration|No Instruction|Eligible Warps|Issue Slots|Registers Per" $out/l/ncu-*.txt | head -40
step python
python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build-gpu/python \
  -Ccmake.define.LINATTN_ENABLE_CUDA=ON -Ccmake.define.CUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include . > $out/l/pip.log 2>&1 || tail -20 $out/l/pip.log
timeout 150 python3 -m pytest tests/python/test_cuda.py -q -x -k "frozen or backward_precision or no_delta_backward" 2>&1 | tail -5 | tee $out/l/pytest.log
step done
