#!/usr/bin/env bash
# The device call that validates session 34's three parked patches (one-off; copy it to .device/
# and run it there as `bash .device/run.sh`). Here, first:
#   git checkout -b s35-stack main && git am bench/logs/2026-11-27-s34-wip-{f32-pair,prep-loop,l2-fused}.patch
#   git archive main | gzip > .device/a.tar.gz; bash scripts/make_device_bundle.sh (if .device/ is gone)
# X = the working tree (the stack), A = main (.device/a.tar.gz). Build X; X's CUDA suite while A's
# stage bench and linattn-run build; bits X vs A (the f32-pair and prep-loop steps keep every bit;
# l2-fused changes dq, dk in the last bits where l2norm is on: compare the no-l2norm cases);
# sanitizers on X's small cases; A/B of the stage benches, alternated X A X A.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}; mkdir -p $out/l
t0=$SECONDS; step() { echo "== $1 ($((SECONDS - t0)) s)" | tee -a $out/l/steps.log; }
fin() { (cd $out && tar -czf logs.tgz l && rm -rf l); }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $out/l/device.txt
step build-x
bash scripts/gpu_setup.sh -DCMAKE_BUILD_TYPE=Release > $out/l/build.log 2>&1 || { tail -60 $out/l/build.log; fin; exit 1; }
step suite-x+build-a
(timeout 240 ./build-gpu/linattn_cuda_tests > $out/l/suite.log 2>&1; echo "suite rc=$?" >> $out/l/suite.log) &
sp=$!
mkdir -p /tmp/a && tar -xzf .device/a.tar.gz -C /tmp/a
cmake -S /tmp/a -B /tmp/a/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_ENABLE_CUDA=ON \
  -DCUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include -DCMAKE_PREFIX_PATH=/tmp/linattn-deps/gtest-install >/dev/null 2>&1
cmake --build /tmp/a/build -j 14 --target linattn_cuda_stage_bench linattn-run > $out/l/build-a.log 2>&1 || tail -20 $out/l/build-a.log
wait $sp
step "suite done"
grep -E "^\[  (PASSED|FAILED)|FAILED|suite rc|worst" $out/l/suite.log | head -30
step bits
cases=("--family gla --T 3000 --num-seqs 4 --initial-state --final-state"
       "--family gla --dtype fp16 --backward-precision float32 --T 777 --HV 16"
       "--family kda --T 1100 --num-seqs 2 --initial-state --final-state"
       "--family kda --T 900 --gate-in-kernel --backward-precision float32"
       "--family kda --T 900 --gate-in-kernel --backward-precision float32 --l2norm"
       "--family gdn --T 1300 --l2norm --beta-sigmoid")
for c in "${cases[@]}"; do
  for v in X A; do
    B=./build-gpu/linattn-run; [ $v = A ] && B=/tmp/a/build/linattn-run
    echo "$v $c | $(timeout 60 $B $c --repeat 1 2>&1 | grep -E '^bits|rror' | head -2)" >> $out/l/bits.log
  done
done
cat $out/l/bits.log | cut -c1-300
step sanitizers
timeout 150 compute-sanitizer --tool memcheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaBackward.Small*:CudaBackward.NoDeltaSmall*:CudaForward.*Small*:-CudaBackward.SmallHopperPass1EveryOption:CudaBackward.SmallLongOdd' > $out/l/memcheck.log 2>&1
tail -2 $out/l/memcheck.log
timeout 60 compute-sanitizer --tool racecheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen:CudaBackward.SmallWorkspaceOffsetsSameBits' > $out/l/racecheck.log 2>&1
tail -1 $out/l/racecheck.log
timeout 60 compute-sanitizer --tool synccheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen' > $out/l/synccheck.log 2>&1
tail -1 $out/l/synccheck.log
step ab
for v in X A X A; do
  B=./build-gpu/linattn_cuda_stage_bench; [ $v = A ] && B=/tmp/a/build/linattn_cuda_stage_bench
  timeout 60 $B forward --only kda,gla > $out/l/fwd-$v.log 2>&1
  timeout 80 $B backward --family kda --gate logsigmoid --only split --stages > $out/l/kda-split-$v.log 2>&1
  timeout 90 $B backward --family kda --gate softplus_fla --only float32 --stages > $out/l/kda-f32-$v.log 2>&1
  echo "$v fwd: $(grep -h '^linattn' $out/l/fwd-$v.log | awk '{print $2, $7}' | tr '\n' ' ')"
  for f in kda-split kda-f32; do echo "  $f: $(grep -h 'bench\].*backward ms' $out/l/$f-$v.log | head -1 | sed 's/.*backward ms: //') | $(grep -h 'profile\] auto' $out/l/$f-$v.log | tr '\n' ' ' | sed 's/\[bwd profile\] auto//g')"; done
  cat $out/l/fwd-$v.log $out/l/kda-split-$v.log $out/l/kda-f32-$v.log >> $out/l/ab-all.log
  step "$v"
done
fin
