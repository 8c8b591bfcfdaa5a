"""The benchmark suite's own checks (bench/selftest.py) run in CI: the float64 torch recurrence
against linattn.reference, a dry run through the report and plot code, the status paths
("not implemented", "refuses", FLA skipped where linattn has no kernel) and a --smoke run."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_selftest():
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "selftest.py")], capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "FAIL" not in r.stdout
