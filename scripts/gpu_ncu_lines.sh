#!/usr/bin/env bash
# ncu of one kernel of a linattn_cuda_stage_bench run, exported per SASS instruction with source
# counters, for scripts/ncu_source_lines.py on the dev machine (which joins it with the line table
# of the same object compiled there: the build's -lineinfo objects under build-*/CMakeFiles).
# On the GPU machine, after scripts/gpu_setup.sh:
#   bash scripts/gpu_ncu_lines.sh OUTDIR NAME KERNEL_REGEX SKIP BENCH_ARGS...
# e.g.  bash scripts/gpu_ncu_lines.sh $OUT/l wysplit wy_kernel 2 backward --family kda --only split
#       bash scripts/gpu_ncu_lines.sh $OUT/l fwdprep chunk_prep_vector 4 forward --only kda
# SKIP: launches of the kernel to skip (the bench's warm-ups). Writes OUTDIR/NAME.details.txt (all
# sections) and OUTDIR/NAME.sass.csv (~4 MB: compress before bringing it back). Then, here:
#   python3 scripts/ncu_source_lines.py NAME.sass.csv OBJECT.o KERNEL_SUBSTRING --outer [--phases ...]
# (forward stage profiles of several configurations at once: scripts/cuda_fwd_profile.sh)
set -uo pipefail
out=${1:?OUTDIR}; name=${2:?NAME}; re=${3:?KERNEL_REGEX}; skip=${4:?SKIP}; shift 4
bin=${BENCH:-./build-gpu/linattn_cuda_stage_bench}
mkdir -p "$out"
timeout 300 ncu --clock-control none --kernel-name "regex:$re" --launch-skip "$skip" --launch-count 1 --set full \
  --import-source yes -f -o "$out/$name" "$bin" "$@" > "$out/$name.ncu.log" 2>&1
ncu -i "$out/$name.ncu-rep" --page details > "$out/$name.details.txt" 2>&1 || true
ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass > "$out/$name.sass.csv" 2>&1 || true
rm -f "$out/$name.ncu-rep"
grep -E "^  [a-z_:<>0-9A-Z]|Duration|Registers Per|Achieved Occupancy|Eligible Warps Per|Issue Slots Busy" "$out/$name.details.txt" | head -12
