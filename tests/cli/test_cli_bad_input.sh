#!/usr/bin/env bash
# Bad command lines of linattn-run: each must end with exit status 2 and a "linattn-run: <reason>"
# message on stderr, never with a signal (uncaught exception, abort, OOM kill) or a success.
# Usage: test_cli_bad_input.sh path/to/linattn-run
set -u
run=$1
fail=0
check() {  # check "<expected message part>" args...
  local want=$1
  shift
  local err rc
  err=$("$run" --no-backward --repeat 1 "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -ne 2 ]; then
    echo "FAIL: linattn-run $* exited with $rc (want 2): $err"
    fail=1
  elif [[ "$err" != *"linattn-run: "*"$want"* ]]; then
    echo "FAIL: linattn-run $*: message '$err' does not mention '$want'"
    fail=1
  else
    echo "ok: linattn-run $* -> ${err%%$'\n'*}"
  fi
}
check "B >= 1 and T >= 1" --T -1
check "not an integer: 'abc'" --cu-seqlens abc
check "not an integer: '10x'" --cu-seqlens 0,10x,20
check "not an integer: ''" --cu-seqlens 0,,20
check "empty list" --cu-seqlens ""
check "non-decreasing" --cu-seqlens 0,5,3,10 --K 16 --V 16
check "not a number: 'abc'" --scale abc
check "not finite" --scale nan
check "out of range" --scale 1e400
check "scale must be" --scale 1e39
check "out of range" --T 99999999999999999999
check "not an integer" --T 12abc
check "GiB of host memory" --T 100000000000
check "GiB of host memory" --T 1000000000
check "GiB of host memory" --B 100000000000000 --T 1 --H 1 --K 1 --V 1
check "B >= 1 and T >= 1" --T -100000000000
check "head counts" --H 0
check "head size K" --K 0
check "not supported" --K 300
check "multiple of" --H 2 --HV 3
check "lower_bound" --lower-bound 1e39 --gate-in-kernel
check "not a number" --lower-bound x
check "--repeat" --repeat 0
check "--num-seqs" --num-seqs -3
check "exceeds T" --num-seqs 99999999999
check "exclusive" --disable-recompute --keep-chunk-local --T 8 --K 16 --V 16
check "nothing is kept" --family gla --keep-chunk-local --T 8 --K 16 --V 16
check "unknown option" --bogus
check "missing value" --T
exit $fail
