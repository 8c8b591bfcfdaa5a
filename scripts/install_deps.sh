#!/usr/bin/env bash
# Installs what building (and, with --python, the Python package and its tests) needs, from
# Debian's packages and PyPI. Safe to re-run: it installs only what is missing.
set -euo pipefail
want_python=0
[ "${1:-}" = "--python" ] && want_python=1

need_apt=()
for pkg in cmake ninja-build g++ libgtest-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

pip_pkgs=()
# CUTLASS/CuTe headers for the CUDA backend (built when nvcc is found).
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  python3 -c "import cutlass_library" 2>/dev/null || pip_pkgs+=("nvidia-cutlass")
fi
if [ $want_python -eq 1 ]; then
  for mod in numpy torch nanobind scikit_build_core pytest matplotlib; do
    python3 -c "import $mod" 2>/dev/null || pip_pkgs+=("${mod//_/-}")
  done
fi
if [ ${#pip_pkgs[@]} -gt 0 ]; then
  python3 -m pip install -q --disable-pip-version-check "${pip_pkgs[@]}"
fi
