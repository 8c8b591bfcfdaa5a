#!/usr/bin/env python3
"""Run flash-linear-attention's own operator tests against linattn (issue #18).

FLA is installed from its PyPI release into a private directory (``pip install --target``, so
the environment linattn is tested in is not changed), its test files come from the matching
source tag on GitHub (FLA's sdist and wheel ship no tests), and linattn replaces FLA's operators
only on the side under test (see ``linattn_fla_compat_plugin.py``). Nothing of FLA is copied into
this repository.

    python3 tests/fla_compat/run_fla_tests.py                 # CPU, the four families
    python3 tests/fla_compat/run_fla_tests.py --device cuda   # on a GPU machine
    python3 tests/fla_compat/run_fla_tests.py --fla-tests /path/to/flash-linear-attention/tests

Exit status: 0 when every test that ran on linattn passed (refused and unrunnable ones are
reported, not failures: see the report), 1 when any failed, 2 when no call reached linattn (a run
that substituted nothing must not look green), 77 when FLA or its tests cannot be obtained here
(the reason is printed: the caller decides whether that is a skip).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

FLA_VERSION = "0.6.0"
# Where FLA's tests come from (its sdist and wheel ship none). The default is the FLA source
# commit whose tests this harness was validated against (main of 2026-08-22, the newest FLA
# source our machines could read; FLA 0.6.0's own tag was not reachable from them): a CI machine
# that reaches GitHub then runs exactly the files we ran. LINATTN_FLA_TESTS_REF=refs/tags/v0.6.0
# picks the release's tag instead.
FLA_TESTS_REF = os.environ.get("LINATTN_FLA_TESTS_REF", "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89")
FLA_TESTS_URL = f"https://codeload.github.com/fla-org/flash-linear-attention/tar.gz/{FLA_TESTS_REF}"
# FLA's operator tests for the four families linattn implements.
TEST_FILES = ["ops/test_kda.py", "ops/test_gdn.py", "ops/test_gla.py", "ops/test_simple_gla.py"]
SKIP_EXIT = 77
HERE = Path(__file__).resolve().parent


def log(msg: str) -> None:
    print(f"[fla-compat] {msg}", flush=True)


def install_fla(site: Path) -> None:
    """fla-core from PyPI (pure Python) and einops, into ``site`` only."""
    marker = site / f".fla-{FLA_VERSION}"
    if marker.exists():
        return
    # flash-linear-attention adds FLA's layers (used by the GPU-only layer test); both are pure
    # Python, and --no-deps keeps transformers & co. out.
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
           "--target", str(site), f"fla-core=={FLA_VERSION}", f"flash-linear-attention=={FLA_VERSION}",
           "einops"]
    log("installing " + " ".join(cmd[-3:]) + f" into {site}")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pip could not install fla-core=={FLA_VERSION}: {r.stderr.strip()[-500:]}")
    marker.touch()


def fetch_tests(cache: Path) -> Path:
    """FLA's tests/ at FLA_TESTS_REF, downloaded once into ``cache``."""
    dest = cache / f"fla-tests-{FLA_TESTS_REF.replace('/', '_')}"
    if (dest / "tests" / "ops").is_dir():
        return dest / "tests"
    log(f"downloading FLA's tests from {FLA_TESTS_URL}")
    with urllib.request.urlopen(FLA_TESTS_URL, timeout=60) as resp:
        data = resp.read()
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts
            # <top>/tests/... only, regular files and directories, no absolute or .. paths
            if len(parts) < 2 or parts[1] != "tests" or ".." in parts or not (m.isfile() or m.isdir()):
                continue
            m.name = str(Path(*parts[1:]))
            members.append(m)
        tar.extractall(dest, members=members)
    return dest / "tests"


def copy_tests(src: Path, work: Path) -> Path:
    """A copy of a local FLA tests/ directory away from its source tree: FLA's tests/ is a
    package, so pytest puts its parent on sys.path, where a checkout's own fla/ would shadow the
    installed release."""
    if not (src / "ops").is_dir():
        raise RuntimeError(f"{src} is not FLA's tests/ directory (no ops/ in it)")
    dest = work / "fla-tests-local" / "tests"
    if src.resolve() == dest.resolve():  # a copy made by an earlier run (e.g. carried to a GPU machine)
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--fla-tests", default=os.environ.get("LINATTN_FLA_TESTS"),
                    help="FLA's tests/ directory (default: download FLA's source at %s)" % FLA_TESTS_REF)
    default_work = os.environ.get("LINATTN_FLA_WORK", str(Path.home() / ".cache" / "linattn-fla-compat"))
    ap.add_argument("--work", default=default_work,
                    help="where FLA is installed and its tests cached")
    ap.add_argument("--files", default=",".join(TEST_FILES), help="comma-separated test files under tests/")
    ap.add_argument("--report", default=None, help="JSON report path (default: <work>/report-<device>.json)")
    ap.add_argument("--prepare-only", action="store_true",
                    help="install FLA and get its tests into --work, then stop (to carry them to a "
                         "machine without network, e.g. the GPU machine: scripts/make_device_bundle.sh)")
    ap.add_argument("--skip-backend-tests", action="store_true",
                    help="do not run linattn's own FLA-backend test first (it compiles FLA's layers: minutes on a fresh GPU machine)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --), e.g. -k varlen")
    args = ap.parse_args()

    work = Path(args.work).resolve()
    site = work / "site"
    try:
        install_fla(site)
        tests = copy_tests(Path(args.fla_tests), work) if args.fla_tests else fetch_tests(work)
    except Exception as e:  # noqa: BLE001 - any reason the inputs are unavailable is reported as such
        log(f"SKIPPED: FLA {FLA_VERSION} or its tests cannot be obtained here: {e}")
        return SKIP_EXIT
    if args.prepare_only:
        log(f"prepared: FLA in {site}, its tests in {tests}")
        return 0
    files = [str(tests / f) for f in args.files.split(",") if f]
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        log(f"SKIPPED: test files not found: {missing}")
        return SKIP_EXIT

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["LINATTN_FLA_DEVICE"] = args.device
    if args.device == "cpu":
        env.setdefault("CUDA_VISIBLE_DEVICES", "")  # FLA's and torch's device probing sees no GPU
    check = subprocess.run([sys.executable, "-c", "import fla, linattn; print(fla.__version__, linattn.__version__)"],
                           env=env, capture_output=True, text=True, cwd=str(tests))
    if check.returncode != 0:
        log("SKIPPED: FLA does not import here: " + check.stderr.strip().splitlines()[-1])
        return SKIP_EXIT
    fla_version, linattn_version = check.stdout.split()
    log(f"FLA {fla_version} (tests from {tests}), linattn {linattn_version}, device {args.device}")
    if fla_version != FLA_VERSION:
        log(f"warning: FLA {fla_version} is not the pinned {FLA_VERSION}")

    # linattn.fla (the registry backend) first: linattn's own test, with this FLA.
    backend_ok = True
    if args.skip_backend_tests:
        log("linattn.fla backend tests: skipped (--skip-backend-tests)")
    else:
        backend = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  str(HERE / "test_linattn_backend.py")], env=env, cwd=str(HERE))
        backend_ok = backend.returncode == 0
        log("linattn.fla backend tests: " + ("passed" if backend_ok else "FAILED"))

    report = Path(args.report) if args.report else work / f"report-{args.device}.json"
    cmd = [sys.executable, "-m", "pytest", "-p", "linattn_fla_compat_plugin", "-p", "no:cacheprovider",
           "--rootdir", str(tests), f"--linattn-device={args.device}", f"--linattn-report={report}",
           "-q", "-rN", "--tb=line", *files, *args.pytest_args]
    subprocess.run(cmd, env=env, cwd=str(tests))
    if not report.exists():
        log("no report was written (pytest did not get to the end)")
        return 1
    data = json.loads(report.read_text())
    total = data["total"]
    log("total: " + ", ".join(f"{k} {v}" for k, v in total.items()) + f"; report: {report}")
    if total["linattn_calls"] == 0:
        log("FAIL: no call reached linattn")
        return 2
    if total["failed"] or total["collection-error"] or not backend_ok:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
