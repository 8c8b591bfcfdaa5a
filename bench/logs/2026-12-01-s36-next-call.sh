#!/usr/bin/env bash
# Session 37's first two device calls (one-off; copy to .device/run.sh; `bash .device/run.sh 1`,
# then `bash .device/run.sh 2`, on the same machine if it is still warm). Here, first:
#   git archive main | gzip > .device/a.tar.gz
#   git checkout -b s37-x main && git am bench/logs/2026-12-01-s36-wip-pqk16.patch
#   bash scripts/make_device_bundle.sh   (if .device/ is gone)
#   git rev-parse HEAD > .device/LINATTN_COMMIT
# X = the working tree (main + pqk16: pass 2's dq̂ / dk̂ partials in bfloat16 in the bfloat16
# form), A = main. Expected: every float32-form, fp16 and no-l2norm (G = 1) case bitwise the same
# as A (the float32 kernels' SASS is identical, fp16 keeps float32 partials, the direct path is
# untouched); bf16 cases with l2norm or GVA differ in dq, dk only, within SPEC (the suite's bounds).
# Predicted (H200, KDA / GDN split form at the reference shape, l2norm): finish_qk 0.32 -> ~0.24 ms
# (1.07 -> 0.80 GB at its 79% of the copy rate), pass 2 -0.02..-0.06 (268 MB fewer stores), so the
# split backward 4.17 -> ~4.05-4.08 ms; the float32 form unchanged.
# Call 1: build X, X's CUDA suite while A builds; bits X vs A; memcheck on the backward's small
# cases; A/B X A X A of the split and float32 backward (--stages) and the forward (unchanged).
# Call 2: BENCHMARKS rows at 2x8192 merged into bench/results (the l2norm KDA / GDN rows this
# changes, then the H200 rows the report still lacks: simple GLA, GDN H=32, disable_recompute).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}; mkdir -p $out/l
t0=$SECONDS; step() { echo "== $1 ($((SECONDS - t0)) s)" | tee -a $out/l/steps.log; }
fin() { (cd $out && tar -czf logs.tgz l && rm -rf l); }
trap fin EXIT
trap "exit 143" TERM
bin() { case $1 in X) echo ./build-gpu/$2 ;; A) echo /tmp/a/build/$2 ;; esac; }
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
  step suite-x+build-a
  (timeout 280 ./build-gpu/linattn_cuda_tests > $out/l/suite.log 2>&1; echo "suite rc=$?" >> $out/l/suite.log) &
  side_build a .device/a.tar.gz
  wait
  grep -E "^\[  (PASSED|FAILED)|FAILED|suite rc|worst rel err" $out/l/suite.log | head -20
  step bits
  # first four: the same bits expected; the rest: dq, dk differ (bf16 partials), all else the same
  cases=("--family kda --T 900 --gate-in-kernel --backward-precision float32 --l2norm"
         "--family kda --T 777 --dtype fp16 --l2norm --HV 16"
         "--family gla --T 3000 --num-seqs 4 --initial-state --final-state"
         "--family gla --dtype fp16 --backward-precision float32 --T 777 --HV 16"
         "--family kda --T 1100 --num-seqs 2 --initial-state --final-state --l2norm"
         "--family kda --T 900 --backward-precision split --l2norm"
         "--family gdn --T 1300 --l2norm --beta-sigmoid"
         "--family kda --T 500 --K 128 --V 64 --H 8 --HV 16")
  for c in "${cases[@]}"; do
    for v in X A; do echo "$v $c | $(timeout 60 $(bin $v linattn-run) $c --repeat 1 2>&1 | grep -E '^bits|rror' | head -2)" >> $out/l/bits.log; done
  done
  cut -c1-260 $out/l/bits.log
  step memcheck
  timeout 120 compute-sanitizer --tool memcheck ./build-gpu/linattn_cuda_tests --gtest_filter='CudaBackward.Small*' > $out/l/memcheck.log 2>&1; tail -1 $out/l/memcheck.log
  step ab
  for v in X A X A; do
    [ $((SECONDS - t0)) -gt 500 ] && { echo "ab cut at $((SECONDS - t0)) s"; break; }
    B=$(bin $v linattn_cuda_stage_bench)
    timeout 60 $B backward --family kda --gate logsigmoid --only split --stages > $out/l/kda-split-$v.log 2>&1
    timeout 60 $B backward --family gdn --gate logsigmoid --only split --stages > $out/l/gdn-split-$v.log 2>&1
    timeout 70 $B backward --family kda --gate softplus_fla --only float32 --stages > $out/l/kda-f32-$v.log 2>&1
    for f in kda-split gdn-split kda-f32; do echo "$v $f: $(grep -h 'profile\] auto' $out/l/$f-$v.log | tr '\n' ' ' | sed 's/\[bwd profile\] auto//g')"; done
    cat $out/l/kda-split-$v.log $out/l/gdn-split-$v.log $out/l/kda-f32-$v.log >> $out/l/ab-all-$v.log
  done
  step done
else
  rows=kda@2x8192,kda_dr@2x8192,gdn_gva@2x8192,kda_safe_gate@2x8192,simple_gla@2x8192,simple_gla_gamma@2x8192,gdn@2x8192
  bash scripts/gpu_bench.sh $rows 560 --no-varlen --skip-cpu
fi
