#!/usr/bin/env bash
# On the GPU machine (no network): unpack the carried CUTLASS headers and GoogleTest sources
# from .device/ (made on the dev machine: see scripts/make_device_bundle.sh) into
# /tmp/linattn-deps, then configure and build linattn with the CUDA backend into build-gpu/.
# Prints the build directory. With --deps-only it stops after unpacking.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dep=/tmp/linattn-deps
mkdir -p "$dep"
if [ ! -d "$dep/include/cute" ]; then tar -xzf "$root/.device/cutlass-include.tar.gz" -C "$dep"; fi
if [ ! -d "$dep/gtest-install" ]; then
  tar -xzf "$root/.device/googletest.tar.gz" -C "$dep"
  cmake -S "$dep/googletest" -B "$dep/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$dep/gtest-install" -DBUILD_GMOCK=OFF >/dev/null
  cmake --build "$dep/gtest-build" --target install >/dev/null
fi
if [ "${1:-}" = "--deps-only" ]; then exit 0; fi
# sm_90a alone: the device is a Hopper card, and the default's sm_80 half would double the build
cmake -S "$root" -B "$root/build-gpu" -G Ninja -DLINATTN_ENABLE_CUDA=ON -DLINATTN_CUDA_ARCHS=90a \
      -DCUTLASS_INCLUDE_DIR="$dep/include" -DCMAKE_PREFIX_PATH="$dep/gtest-install" "$@" >/dev/null
cmake --build "$root/build-gpu" -j "$(nproc)"
echo "$root/build-gpu"
