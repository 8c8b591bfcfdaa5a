#!/usr/bin/env bash
# Session 36's first two device calls (one-off; copy to .device/run.sh; `bash .device/run.sh 1`,
# then on the warm machine `bash .device/run.sh 2`). Here, first:
#   git checkout -b s36-x main
#   git archive main | gzip > .device/a.tar.gz
#   git am bench/logs/2026-11-28-s35-wip-wide-diag.patch && git archive HEAD | gzip > .device/x1.tar.gz
#   git am bench/logs/2026-11-28-s35-wip-{fwd-loop,gate-helper}.patch
#   bash scripts/make_device_bundle.sh   (if .device/ is gone)
# X = the working tree (main + wide-diag + fwd-loop + gate-helper), X1 = main + wide-diag, A = main.
# All three keep every bit (same operations in the same order), so bits X vs A on every case; if
# one differs, bits X1 vs A tells which half.
# Call 1: build X (build-gpu), X's CUDA suite while A and X1 build; bits; memcheck / racecheck on
# the forward's small cases; A/B X X1 A, twice, of the forward and the split and float32 backward.
# Call 2: ncu warp states of the preps (X, A), pass 2 and pass 1 (does instruction fetch matter
# there too?); the Python package and the CUDA tests of session 35's frozen-decay-parameter choice.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}; mkdir -p $out/l
t0=$SECONDS; step() { echo "== $1 ($((SECONDS - t0)) s)" | tee -a $out/l/steps.log; }
fin() { (cd $out && tar -czf logs.tgz l && rm -rf l); }
trap fin EXIT
bin() { case $1 in X) echo ./build-gpu/$2 ;; A) echo /tmp/a/build/$2 ;; X1) echo /tmp/x1/build/$2 ;; esac; }
side_build() {  # $1: name, $2: tarball
  mkdir -p /tmp/$1 && tar -xzf $2 -C /tmp/$1
  cmake -S /tmp/$1 -B /tmp/$1/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_ENABLE_CUDA=ON \
    -DCUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include -DCMAKE_PREFIX_PATH=/tmp/linattn-deps/gtest-install >/dev/null 2>&1
  cmake --build /tmp/$1/build -j 6 --target linattn_cuda_stage_bench linattn-run > $out/l/build-$1.log 2>&1 || tail -20 $out/l/build-$1.log
}
if [ "${1:-1}" = 1 ]; then
  nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $out/l/device.txt
  step build-x
  bash scripts/gpu_setup.sh -DCMAKE_BUILD_TYPE=Release > $out/l/build.log 2>&1 || { tail -60 $out/l/build.log; exit 1; }
  step suite-x+build-a+x1
  (timeout 280 ./build-gpu/linattn_cuda_tests > $out/l/suite.log 2>&1; echo "suite rc=$?" >> $out/l/suite.log) &
  sp=$!
  side_build a .device/a.tar.gz & side_build x1 .device/x1.tar.gz & wait
  grep -E "^\[  (PASSED|FAILED)|FAILED|suite rc" $out/l/suite.log | head -20
  step bits
  cases=("--family kda --T 1100 --num-seqs 2 --initial-state --final-state"
         "--family kda --T 900 --gate-in-kernel --l2norm"
         "--family kda --T 777 --gate-in-kernel --safe-gate --lower-bound -5 --HV 16"
         "--family kda --T 900 --backward-precision split --l2norm"
         "--family kda --T 500 --K 128 --V 64 --H 8 --HV 16"
         "--family kda --T 900 --gate-in-kernel --backward-precision float32 --l2norm"
         "--family gla --T 3000 --num-seqs 4 --initial-state --final-state"
         "--family gla --dtype fp16 --backward-precision float32 --T 777 --HV 16"
         "--family simple_gla --T 1000 --g-gamma --dtype fp16")
  for c in "${cases[@]}"; do
    for v in X A; do echo "$v $c | $(timeout 60 $(bin $v linattn-run) $c --repeat 1 2>&1 | grep -E '^bits|rror' | head -2)" >> $out/l/bits.log; done
  done
  cut -c1-260 $out/l/bits.log
  step sanitizers
  timeout 100 compute-sanitizer --tool memcheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaForward.*Small*:CudaBackward.SmallOddLengths:CudaBackward.SmallVarlen' > $out/l/memcheck.log 2>&1; tail -1 $out/l/memcheck.log
  timeout 80 compute-sanitizer --tool racecheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaForward.*Small*' > $out/l/racecheck.log 2>&1; tail -1 $out/l/racecheck.log
  step ab
  for v in X X1 A X X1 A; do
    B=$(bin $v linattn_cuda_stage_bench)
    timeout 50 $B forward --only kda,kda_safe_gate,gla > $out/l/fwd-$v.log 2>&1
    timeout 60 $B backward --family kda --gate logsigmoid --only split --stages > $out/l/kda-split-$v.log 2>&1
    timeout 70 $B backward --family kda --gate softplus_fla --only float32 --stages > $out/l/kda-f32-$v.log 2>&1
    echo "$v fwd: $(grep -h '^linattn' $out/l/fwd-$v.log | awk '{print $2, $7}' | tr '\n' ' ')"
    for f in kda-split kda-f32; do echo "  $f: $(grep -h 'profile\] auto' $out/l/$f-$v.log | tr '\n' ' ' | sed 's/\[bwd profile\] auto//g')"; done
    cat $out/l/fwd-$v.log $out/l/kda-split-$v.log $out/l/kda-f32-$v.log >> $out/l/ab-all-$v.log
  done
  step done
else
  step ncu
  ws() { timeout 120 ncu --clock-control none --kernel-name regex:$2 --launch-skip $3 --launch-count 1 \
           --section WarpStateStats --section SchedulerStats --section LaunchStats "${@:4}" > $out/l/ncu-$1.txt 2>&1; }
  ws fwdprep-X chunk_prep_vector 4 $(bin X linattn_cuda_stage_bench) forward --only kda
  ws fwdprep-A chunk_prep_vector 4 $(bin A linattn_cuda_stage_bench) forward --only kda
  ws wideprep-X chunk_prep_vector 2 $(bin X linattn_cuda_stage_bench) backward --family kda --gate softplus_fla --only float32
  ws wideprep-A chunk_prep_vector 2 $(bin A linattn_cuda_stage_bench) backward --family kda --gate softplus_fla --only float32
  # pass 2 (split; 10.6 K instructions at two CTAs an SM) and pass 1: is instruction fetch a large share there too?
  ws wysplit wy_kernel 2 $(bin X linattn_cuda_stage_bench) backward --family kda --gate logsigmoid --only split
  ws dhsplit chunk_dh_wgmma 2 $(bin X linattn_cuda_stage_bench) backward --family kda --gate logsigmoid --only split
  grep -HE "Duration|No Instruction|Eligible Warps|Issue Slots|Registers Per" $out/l/ncu-*.txt | head -40
  step python
  python3 -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build-gpu/python \
    -Ccmake.define.LINATTN_ENABLE_CUDA=ON -Ccmake.define.CUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include . > $out/l/pip.log 2>&1 || tail -20 $out/l/pip.log
  timeout 200 python3 -m pytest tests/python/test_cuda.py -q -x -k "frozen or backward_precision or no_delta_backward" 2>&1 | tail -5 | tee $out/l/pytest.log
  step done
fi
