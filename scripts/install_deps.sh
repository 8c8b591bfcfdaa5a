#!/usr/bin/env bash
# Installs what building (and, with --python, the Python package and its tests) needs, from
# Debian's packages and PyPI. Safe to re-run: it installs only what is missing.
set -euo pipefail
# --python: also the Python package's build and test requirements (PyPI);
# --fuzz: also clang with its libFuzzer / sanitizer runtimes and OpenMP (scripts/fuzz.sh).
want_python=0
want_fuzz=0
for arg in "$@"; do
  case "$arg" in
    --python) want_python=1 ;;
    --fuzz) want_fuzz=1 ;;
  esac
done

apt_pkgs=(cmake ninja-build g++ libgtest-dev)
[ $want_fuzz -eq 1 ] && apt_pkgs+=(clang libclang-rt-dev libomp-dev)
need_apt=()
for pkg in "${apt_pkgs[@]}"; do
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
  for mod in numpy torch nanobind scikit_build_core pytest matplotlib hypothesis; do
    python3 -c "import $mod" 2>/dev/null || pip_pkgs+=("${mod//_/-}")
  done
fi
if [ ${#pip_pkgs[@]} -gt 0 ]; then
  python3 -m pip install -q --disable-pip-version-check "${pip_pkgs[@]}"
fi
