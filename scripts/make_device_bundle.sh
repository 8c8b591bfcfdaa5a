#!/usr/bin/env bash
# On the dev machine: pack what the GPU machine lacks (CUTLASS headers from the nvidia-cutlass
# wheel, GoogleTest sources from Debian's googletest package) into .device/ (git-ignored), to be
# named in the device tool's `carry`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.device"
inc=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")
tar -czf "$root/.device/cutlass-include.tar.gz" -C "$inc/.." include
tar -czf "$root/.device/googletest.tar.gz" -C /usr/src googletest
ls -la "$root/.device"
