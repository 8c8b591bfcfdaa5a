#!/usr/bin/env bash
# ncu profile of the CUDA forward kernels at the bench shape (linattn_cuda_stage_bench forward: two
# forwards after the warm-ups). On the GPU machine, after scripts/gpu_setup.sh:
#   bash scripts/cuda_fwd_profile.sh OUTDIR [configs, default gdn,kda_safe_gate] [ncu --set, default full]
# configs: kda, kda_steep, kda_safe_gate, gdn, gla, simple_gla (the bench's --only names).
# Writes OUTDIR/<config>.details.txt (all sections), <config>.source.csv (per CUDA line) and
# <config>.sass.csv (per SASS instruction, with source counters). KREGEX: the kernel-name regex
# (default chunk_|fused_). BIN: the stage bench (default ./build-gpu/linattn_cuda_stage_bench; e.g. a
# binary built on the dev machine and carried, as scripts/pack_test_binaries.sh's tests are).
set -u
out=${1:-/tmp/prof}
cfgs=${2:-gdn,kda_safe_gate}
set_name=${3:-full}
bin=${BIN:-./build-gpu/linattn_cuda_stage_bench}
mkdir -p "$out"
for c in ${cfgs//,/ }; do
  timeout 300 ncu --clock-control none --kernel-name "regex:${KREGEX:-chunk_|fused_}" --launch-skip 4 \
    --launch-count 2 --set "$set_name" --import-source yes -f -o "$out/$c" "$bin" \
    forward --only "$c" > "$out/$c.ncu.log" 2>&1
  ncu -i "$out/$c.ncu-rep" --page details > "$out/$c.details.txt" 2>&1 || true
  ncu -i "$out/$c.ncu-rep" --page source --csv --print-source cuda > "$out/$c.source.csv" 2>&1 || true
  ncu -i "$out/$c.ncu-rep" --page source --csv --print-source sass > "$out/$c.sass.csv" 2>&1 || true
done
