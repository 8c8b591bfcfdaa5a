#!/usr/bin/env bash
# On the dev machine: pack what the GPU machine lacks (CUTLASS headers from the nvidia-cutlass
# wheel, GoogleTest sources from Debian's googletest package, FLA 0.6.0 with its operator tests)
# into .device/ (git-ignored), to be named in the device tool's `carry`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.device"
inc=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")
tar -czf "$root/.device/cutlass-include.tar.gz" -C "$inc/.." include
tar -czf "$root/.device/googletest.tar.gz" -C /usr/src googletest
# FLA 0.6.0 and its operator tests for tests/fla_compat (the GPU machine has no network);
# LINATTN_FLA_TESTS=DIR takes FLA's tests/ from a checkout when GitHub cannot be reached here (a
# mirror of fla-org/flash-linear-attention at bc3b101 gives one: `git --git-dir=MIRROR archive
# bc3b101 tests | tar -x -C D`, then LINATTN_FLA_TESTS=D/tests; session 44).
python3 "$root/tests/fla_compat/run_fla_tests.py" --prepare-only --work "$root/.device/fla-compat" \
  ${LINATTN_FLA_TESTS:+--fla-tests "$LINATTN_FLA_TESTS"} || echo "(FLA's tests not bundled: see above)"
ls -la "$root/.device"
