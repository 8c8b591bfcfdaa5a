#!/usr/bin/env bash
# The main job: build linattn-run (installing build dependencies on first use) and run one
# operator forward + backward on random inputs. Without arguments: KDA, B=1, T=4096, H=8,
# K=V=128, bf16, on the GPU when one is present, else the CPU. Arguments go to linattn-run
# (see: bash scripts/run.sh --help).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
bash scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target linattn-run -j "$(nproc)"
exec ./build/linattn-run "$@"
