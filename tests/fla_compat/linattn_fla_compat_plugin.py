"""pytest plugin: run flash-linear-attention's own operator tests with linattn on the side under test.

Loaded by ``run_fla_tests.py`` (``-p linattn_fla_compat_plugin``) into a pytest session whose
root is FLA's ``tests/`` directory. For each test it replaces, in the test module's namespace
only, FLA's public operator functions with linattn's, wrapped to count the calls that reach
linattn. The reference side (FLA's naive / torch code) is never touched. Which functions count as
"under test" follows the test's name: a ``test_*fused_recurrent*`` test gets linattn's
``fused_recurrent_*`` (and keeps FLA's ``chunk_*``), a ``test_*chunk*`` test gets linattn's
``chunk_*`` (and keeps FLA's ``fused_recurrent_*`` when that is its reference), a
``test_*parallel*`` test linattn's ``parallel_simple_gla``; any other test (FLA's vendor backends,
its gates, ...) tests FLA alone and gets nothing.
Each outcome is then classified:

  passed        passed, and at least one call reached linattn
  passed-no-linattn  passed without any call reaching linattn (FLA's own helpers: not counted for linattn)
  failed        a wrong result, or an exception that is neither of the two below
  refused       linattn raised ValueError / TypeError / NotImplementedError from its own code
  unrunnable    the failure is inside Triton or torch.cuda: an FLA kernel left on FLA's side
                (e.g. the reference of a chunk test) cannot run on this device
  skipped       FLA's own skip marks

The report (per file and in total, with the number of linattn calls) is printed at the end and
written as JSON to ``--linattn-report``.
"""

from __future__ import annotations

import json
import os
import traceback
from collections import defaultdict
from pathlib import Path

import pytest

# FLA's public name -> (linattn attribute, kind). The kind decides which tests it is the side
# under test for (see the module docstring).
SUBSTITUTES = {
    "chunk_kda": ("chunk_kda", "chunk"),
    "fused_recurrent_kda": ("fused_recurrent_kda", "fused_recurrent"),
    "fused_recurrent_kda_fwd": ("fused_recurrent_kda_fwd", "fused_recurrent"),
    "chunk_gated_delta_rule": ("chunk_gated_delta_rule", "chunk"),
    "chunk_gdn": ("chunk_gated_delta_rule", "chunk"),
    "fused_recurrent_gated_delta_rule": ("fused_recurrent_gated_delta_rule", "fused_recurrent"),
    "fused_recurrent_gdn": ("fused_recurrent_gated_delta_rule", "fused_recurrent"),
    "chunk_gla": ("chunk_gla", "chunk"),
    "chunk_simple_gla": ("chunk_simple_gla", "chunk"),
    "fused_chunk_simple_gla": ("fused_chunk_simple_gla", "chunk"),
    "fused_recurrent_gla": ("fused_recurrent_gla", "fused_recurrent"),
    "fused_recurrent_simple_gla": ("fused_recurrent_simple_gla", "fused_recurrent"),
    "parallel_simple_gla": ("parallel_simple_gla", "parallel"),
}

class CPUReferenceUnavailable(RuntimeError):
    """An FLA reference this CPU adapter cannot express (classified unrunnable)."""


def _scaled_q(q, scale):
    # FLA's naive GLA has no scale argument (it uses K ** -0.5): fold the requested one into q.
    K = q.shape[-1]
    return q if scale is None else q * (scale / K ** -0.5)


def _per_sequence(run, q, k, v, g, initial_state, cu_seqlens, state_v_first):
    """FLA's naive recurrences take equal-length batches: run packed sequences one by one."""
    import torch

    h0 = initial_state.transpose(-1, -2) if (initial_state is not None and state_v_first) else initial_state
    if cu_seqlens is None:
        o, ht = run(q, k, v, g, h0)
    else:
        bounds = cu_seqlens.tolist()
        outs, finals = [], []
        for n in range(len(bounds) - 1):
            sl = slice(bounds[n], bounds[n + 1])
            h0_n = None if h0 is None else h0[n:n + 1]
            if bounds[n + 1] == bounds[n]:
                outs.append(v[:, sl])
                finals.append(h0_n if h0_n is not None else q.new_zeros(1, v.shape[2], q.shape[-1], v.shape[-1]))
                continue
            o_n, ht_n = run(q[:, sl], k[:, sl], v[:, sl], g[:, sl], h0_n)
            outs.append(o_n)
            finals.append(ht_n)
        o, ht = torch.cat(outs, 1), torch.cat(finals, 0)
    if ht is not None and state_v_first:
        ht = ht.transpose(-1, -2)
    return o, ht


def cpu_fused_recurrent_gla(q, k, v, gk=None, gv=None, scale=None, initial_state=None,
                            output_final_state=False, reverse=False, state_v_first=False,
                            cu_seqlens=None, **kwargs):
    """FLA's fused_recurrent_gla as a reference on CPU, through FLA's naive_recurrent_gla."""
    import torch
    from fla.ops.gla.naive import naive_recurrent_gla

    if gv is not None or reverse:
        raise CPUReferenceUnavailable("no CPU reference for gv / reverse")
    gk = torch.zeros_like(k, dtype=torch.float32) if gk is None else gk
    o, ht = _per_sequence(lambda q_, k_, v_, g_, h0: naive_recurrent_gla(q_, k_, v_, g_, h0, True),
                          _scaled_q(q, scale), k, v, gk, initial_state, cu_seqlens, state_v_first)
    return o, (ht if output_final_state else None)


def cpu_fused_recurrent_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None,
                                   output_final_state=False, reverse=False, state_v_first=False,
                                   cu_seqlens=None, **kwargs):
    """FLA's fused_recurrent_simple_gla as a reference on CPU, through FLA's naive_recurrent_simple_gla."""
    import torch
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla

    if reverse:
        raise CPUReferenceUnavailable("no CPU reference for reverse")
    gate = torch.zeros(v.shape[:3], dtype=torch.float32, device=v.device) if g is None else g.float()
    if g_gamma is not None:
        gate = gate + g_gamma.float()
    o, ht = _per_sequence(
        lambda q_, k_, v_, g_, h0: naive_recurrent_simple_gla(q_, k_, v_, g_, scale, h0, True),
        q, k, v, gate, initial_state, cu_seqlens, state_v_first)
    return o, (ht if output_final_state else None)


# On CPU, FLA's Triton references of the families linattn implements are replaced by FLA's naive
# ones (through the adapters above) in tests where they are not the side under test.
CPU_REFERENCES = {
    "fused_recurrent_gla": (cpu_fused_recurrent_gla, "fused_recurrent"),
    "fused_recurrent_simple_gla": (cpu_fused_recurrent_simple_gla, "fused_recurrent"),
}
_DEVICE = {"name": "cpu"}

_LINATTN_DIR = None  # the installed linattn package directory (for classifying refusals)
_calls: dict[str, int] = defaultdict(int)  # nodeid -> calls that reached linattn
_current = {"nodeid": None}
_results: dict[str, dict] = {}
_cpu_reference: set[str] = set()  # tests whose Triton reference ran as FLA's naive code


def pytest_addoption(parser):
    group = parser.getgroup("linattn-fla-compat")
    group.addoption("--linattn-device", default="cpu", help="torch device FLA's tests run on (cpu or cuda)")
    group.addoption("--linattn-report", default=None, help="write the JSON report here")
    group.addoption("--linattn-max-work", type=float, default=None,
                    help="deselect cases whose B*T*HV*K*V (the recurrence's work) exceeds this; "
                         "default unlimited (every case of the four files ran in 5 minutes on a 2-core "
                         "CPU machine, FLA's naive references included); a limit for slower machines")
    group.addoption("--linattn-fla-only", choices=("run", "deselect"), default=None,
                    help="tests in which nothing is substituted (FLA's vendor backends, gates, "
                         "internal kernels: they test FLA alone): run them, or "
                         "deselect them; default deselect on cuda (there they only cost FLA's Triton "
                         "compiles: test_gdn's test_prepare_wy_repr_bwd_no_g alone outlasted a "
                         "7-minute device call), run on cpu")


def _point_fla_at(device: str) -> None:
    """FLA's tests and conftest read ``device`` / ``device_torch_lib`` from fla.utils when they
    are imported; FLA derives them from Triton's active driver, which can say "cuda" on a machine
    without a GPU. Set them before FLA's conftest is loaded (this plugin loads first, via -p)."""
    import torch
    import fla.utils
    import fla.utils.hardware as hw

    fla.utils.device = hw.device = device
    fla.utils.device_torch_lib = hw.device_torch_lib = getattr(torch, device)


_point_fla_at(os.environ.get("LINATTN_FLA_DEVICE", "cpu"))


def pytest_configure(config):
    global _LINATTN_DIR
    import linattn

    _LINATTN_DIR = str(Path(linattn.__file__).resolve().parent)
    _DEVICE["name"] = config.getoption("--linattn-device")
    _point_fla_at(_DEVICE["name"])


def _wrap(fla_name: str, fn):
    def counted(*args, **kwargs):
        if _current["nodeid"] is not None:
            _calls[_current["nodeid"]] += 1
        return fn(*args, **kwargs)

    counted.__name__ = fla_name
    counted.__wrapped_linattn__ = fn
    return counted


def _kinds_under_test(test_name: str) -> set[str]:
    # FLA's tests of its vendor backends (flash_kda, flash_qla, Ascend) and of kernels linattn
    # has no counterpart for (the gates, ...) test FLA, not linattn: nothing
    # is substituted there (a chunk_* call in them is their reference).
    if test_name.startswith("test_flash_") or "ascend" in test_name or "blackwell" in test_name:
        return set()
    if "fused_recurrent" in test_name:
        return {"fused_recurrent"}
    if "chunk" in test_name:
        return {"chunk"}
    if "parallel" in test_name:
        return {"parallel"}
    return set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    import linattn

    module = getattr(item, "module", None)
    saved = {}
    kinds = _kinds_under_test(item.originalname if hasattr(item, "originalname") else item.name)
    if module is not None:
        for fla_name, (ours, kind) in SUBSTITUTES.items():
            # (a linattn without one of these functions keeps FLA's: the run still reports)
            if kind in kinds and fla_name in vars(module) and hasattr(linattn, ours):
                saved[fla_name] = vars(module)[fla_name]
                setattr(module, fla_name, _wrap(fla_name, getattr(linattn, ours)))
        if _DEVICE["name"] == "cpu":
            for fla_name, (reference, kind) in CPU_REFERENCES.items():
                if kind not in kinds and fla_name in vars(module) and fla_name not in saved:
                    saved[fla_name] = vars(module)[fla_name]
                    setattr(module, fla_name, reference)
                    _cpu_reference.add(item.nodeid)
    _current["nodeid"] = item.nodeid
    try:
        yield
    finally:
        _current["nodeid"] = None
        for name, original in saved.items():
            setattr(module, name, original)


def _classify_failure(excinfo) -> tuple[str, str]:
    exc = excinfo.value
    frames = traceback.extract_tb(excinfo.tb)
    files = [f.filename for f in frames]
    message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    if isinstance(exc, CPUReferenceUnavailable):
        return "unrunnable", message
    in_linattn = any(f.startswith(_LINATTN_DIR) for f in files)
    if in_linattn and isinstance(exc, (ValueError, TypeError, NotImplementedError)):
        # Raised by linattn's own argument handling or its C++ validation (whose errors come
        # back through linattn's Python frames).
        return "refused", message
    innermost = files[-1] if files else ""
    device_markers = (f"{os.sep}triton{os.sep}", f"{os.sep}torch{os.sep}cuda{os.sep}")
    if any(m in innermost for m in device_markers) or any(
            m in f for f in files[-3:] for m in device_markers):
        return "unrunnable", message
    text = str(exc)
    if "Triton" in text and ("driver" in text or "not supported" in text) or "CUDA" in text and "not" in text:
        return "unrunnable", message
    return "failed", message


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _record(item, call)
    # pytest's own summary shows an unrunnable case as a skip with its reason, not a failure.
    rep = outcome.get_result()
    r = _results.get(item.nodeid, {})
    if rep.failed and call.when == "call" and r.get("outcome") == "unrunnable":
        rep.outcome = "skipped"
        rep.longrepr = (str(item.path), item.location[1] or 0,
                        "unrunnable here (an FLA kernel on FLA's side): " + r.get("message", ""))


def _record(item, call):
    nodeid = item.nodeid
    if call.when == "teardown":
        # A teardown error (FLA's fixtures) fails a test that had passed.
        if call.excinfo is not None and _results.get(nodeid, {}).get("outcome", "").startswith("passed"):
            outcome, message = _classify_failure(call.excinfo)
            _results[nodeid] = {"outcome": "failed" if outcome == "refused" else outcome,
                                "message": "teardown: " + message}
        return
    if call.excinfo is None:
        if call.when == "call":
            _results[nodeid] = {"outcome": "passed" if _calls[nodeid] > 0 else "passed-no-linattn"}
        return
    if call.excinfo.errisinstance(pytest.skip.Exception):
        _results[nodeid] = {"outcome": "skipped"}
        return
    if call.excinfo.errisinstance(pytest.xfail.Exception):
        _results[nodeid] = {"outcome": "skipped"}
        return
    outcome, message = _classify_failure(call.excinfo)
    _results[nodeid] = {"outcome": outcome, "message": message}


def _work(params: dict):
    """B * T * HV * K * V of a parametrized case (None when its sizes are not all named)."""
    T = params.get("T")
    cu = params.get("cu_seqlens")
    if cu is not None:
        try:
            T = int(list(cu)[-1])
        except (TypeError, ValueError, IndexError):
            pass
    heads = max(int(params.get(n) or 0) for n in ("H", "HV"))
    K = params.get("K", params.get("D"))
    V = params.get("V", params.get("D", K))
    if T is None or K is None or not heads:
        return None
    return int(params.get("B", 1)) * int(T) * heads * int(K) * int(V)


_deselected: dict[str, int] = defaultdict(int)


_fla_only: dict[str, int] = defaultdict(int)


def pytest_collection_modifyitems(session, config, items):
    device = config.getoption("--linattn-device")
    fla_only = config.getoption("--linattn-fla-only") or ("deselect" if device == "cuda" else "run")
    limit = config.getoption("--linattn-max-work")
    if limit is None:
        limit = 0  # unlimited
    keep, drop = [], []
    for item in items:
        name = item.originalname if hasattr(item, "originalname") else item.name
        if fla_only == "deselect" and not _kinds_under_test(name):
            _fla_only[item.nodeid.split("::")[0]] += 1
            drop.append(item)
            continue
        callspec = getattr(item, "callspec", None)
        work = _work(callspec.params) if callspec is not None and limit else None
        if work is not None and work > limit:
            _deselected[item.nodeid.split("::")[0]] += 1
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collectreport(report):
    if report.failed:
        _results[report.nodeid] = {"outcome": "collection-error",
                                   "message": str(report.longrepr).splitlines()[-1][:300]}


OUTCOMES = ("passed", "failed", "refused", "unrunnable", "skipped", "passed-no-linattn",
            "collection-error")


def summarize() -> dict:
    per_file: dict[str, dict] = {}
    for nodeid, r in _results.items():
        f = nodeid.split("::")[0]
        d = per_file.setdefault(f, {**{o: 0 for o in OUTCOMES}, "linattn_calls": 0})
        d[r["outcome"]] += 1
        d["linattn_calls"] += _calls.get(nodeid, 0)
    for f, n in _deselected.items():
        per_file.setdefault(f, {**{o: 0 for o in OUTCOMES}, "linattn_calls": 0})["too-large"] = n
    for f, n in _fla_only.items():
        per_file.setdefault(f, {**{o: 0 for o in OUTCOMES}, "linattn_calls": 0})["fla-only"] = n
    for d in per_file.values():
        d.setdefault("too-large", 0)
        d.setdefault("fla-only", 0)
    total = {**{o: 0 for o in OUTCOMES}, "too-large": 0, "fla-only": 0, "linattn_calls": 0}
    for d in per_file.values():
        for key in total:
            total[key] += d[key]
    return {"per_file": per_file, "total": total,
            "tests": {n: {**r, "linattn_calls": _calls.get(n, 0), "cpu_reference": n in _cpu_reference}
                      for n, r in sorted(_results.items())}}


def pytest_sessionfinish(session, exitstatus):
    report = summarize()
    path = session.config.getoption("--linattn-report")
    if path:
        Path(path).write_text(json.dumps(report, indent=1))
    session.config._linattn_fla_report = report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    report = getattr(config, "_linattn_fla_report", None) or summarize()
    tr = terminalreporter
    tr.section("linattn in FLA's tests")
    cols = ("passed", "failed", "refused", "unrunnable", "skipped", "passed-no-linattn", "too-large",
            "fla-only", "linattn_calls")
    short = ("pass", "fail", "refused", "unrunnable", "skip", "pass-no-linattn", "too-large", "fla-only",
             "calls")
    tr.write_line(f"{'file':24s} " + " ".join(f"{c:>10s}" for c in short))
    for f, d in sorted(report["per_file"].items()):
        tr.write_line(f"{f:24s} " + " ".join(f"{d[c]:>10d}" for c in cols))
    d = report["total"]
    tr.write_line(f"{'total':24s} " + " ".join(f"{d[c]:>10d}" for c in cols))
    for kind in ("failed", "refused", "collection-error"):
        rows = [(n, r) for n, r in report["tests"].items() if r["outcome"] == kind]
        if rows:
            tr.write_line(f"-- {kind}:")
            for n, r in rows:
                tr.write_line(f"   {n}: {r.get('message', '')}")
