"""Framework-free entry points of linattn (NumPy in, NumPy out).

These functions need no deep-learning framework: they take NumPy arrays (anything
``numpy.asarray`` accepts), allocate the outputs with NumPy and run the CPU backend (or
the float64 reference). They are what the PyTorch functions are built on, minus autograd.

Families are named ``"kda"``, ``"gdn"``, ``"gla"`` and ``"simple_gla"``. Shapes follow
flash-linear-attention: ``q, k: [B, T, H, K]``, ``v: [B, T, HV, V]`` with ``HV`` a
multiple of ``H``; gates ``g`` are ``[B, T, HV, K]`` (KDA, GLA) or ``[B, T, HV]`` (GDN,
simple GLA); ``beta: [B, T, HV]``; states ``[N, HV, K, V]`` (``[N, HV, V, K]`` with
``state_v_first``). See SPEC.md for the recurrences.

Lower-level access (caller-allocated outputs, any DLPack array on any device, CUDA
streams) is ``linattn._C.forward`` / ``linattn._C.backward``.

Example::

    import numpy as np
    from linattn.ops import forward_numpy, backward_numpy

    rng = np.random.default_rng(0)
    B, T, H, K, V = 1, 100, 2, 64, 64
    q, k = rng.standard_normal((2, B, T, H, K), dtype=np.float32)
    v = rng.standard_normal((B, T, H, V), dtype=np.float32)
    g = -np.abs(rng.standard_normal((B, T, H), dtype=np.float32)) / 16
    beta = rng.random((B, T, H), dtype=np.float32)
    o, final_state, _ = forward_numpy("gdn", q, k, v, g=g, beta=beta,
                                      output_final_state=True)
    grads = backward_numpy("gdn", q, k, v, np.ones_like(o), g=g, beta=beta)
    grads["dq"].shape   # (1, 100, 2, 64)
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _C

__all__ = [
    "FAMILIES",
    "BACKWARD_PRECISIONS",
    "backward_precision_enum",
    "family_id",
    "make_options",
    "forward_numpy",
    "backward_numpy",
    "reference_forward_numpy",
    "reference_backward_numpy",
]

#: Family name -> the integer the C++ core uses.
FAMILIES: Dict[str, int] = {"simple_gla": 0, "gla": 1, "gdn": 2, "kda": 3}

CHUNK_SIZE: int = int(_C.CHUNK_SIZE)

_INPUT_NAMES = ("g", "g_gamma", "beta", "A_log", "dt_bias", "initial_state", "cu_seqlens")


#: Values of ``backward_precision`` (``linattn::BackwardPrecision``): how the CUDA backward of KDA
#: and GDN computes. ``"auto"`` (default): for bfloat16 / float16 inputs the input type with hi + lo
#: halves of the operands whose rounding matters ("split"), float32 when ``A_log`` / ``dt_bias``
#: gradients are asked for (the in-kernel gate) or at K = 256; every gradient within SPEC.
#: ``"split"``: the hi + lo form always (``dA_log`` / ``ddt_bias`` can miss 1e-2). ``"fast16"``:
#: the 16-bit type alone, fastest (dbeta and the gate gradients can miss 1e-2). ``"float32"``:
#: float32 compute (float32-grade operands), the most accurate. The CPU backend ignores it. A forward with
#: ``disable_recompute`` writes its saved buffer in this form: give the backward the same value.
BACKWARD_PRECISIONS = ("auto", "split", "fast16", "float32")


def backward_precision_enum(value) -> "_C.BackwardPrecision":
    """The C++ enum for a name in :data:`BACKWARD_PRECISIONS` (or the enum itself)."""
    if isinstance(value, _C.BackwardPrecision):
        return value
    if isinstance(value, str) and value in BACKWARD_PRECISIONS:
        return getattr(_C.BackwardPrecision, value)
    raise ValueError(f"backward_precision must be one of {list(BACKWARD_PRECISIONS)}, got {value!r}")


def family_id(family) -> int:
    """Return the C++ family number for a name (``"kda"``...) or pass an int through."""
    if isinstance(family, str):
        try:
            return FAMILIES[family]
        except KeyError:
            raise ValueError(f"unknown family {family!r}; expected one of {sorted(FAMILIES)}") from None
    if isinstance(family, int) and family in FAMILIES.values():
        return family
    raise ValueError(f"unknown family {family!r}")


def make_options(
    scale: Optional[float] = None,
    use_qk_l2norm_in_kernel: bool = False,
    use_beta_sigmoid_in_kernel: bool = False,
    allow_neg_eigval: bool = False,
    use_gate_in_kernel: bool = False,
    safe_gate: bool = False,
    lower_bound: Optional[float] = None,
    state_v_first: bool = False,
    disable_recompute: bool = False,
    backward_precision: str = "auto",
) -> "_C.Options":
    """Build the C++ ``Options`` struct (FLA's option names; ``scale=None`` means ``K ** -0.5``).

    ``disable_recompute`` only sizes the forward's workspace for a forward that fills a saved
    buffer; the buffer itself is what the backward reads. ``backward_precision``: one of
    :data:`BACKWARD_PRECISIONS` (the CUDA backward's compute form).
    """
    return _C.Options(
        scale=None if scale is None else _finite_float("scale", scale),
        use_qk_l2norm_in_kernel=bool(use_qk_l2norm_in_kernel),
        use_beta_sigmoid_in_kernel=bool(use_beta_sigmoid_in_kernel),
        allow_neg_eigval=bool(allow_neg_eigval),
        use_gate_in_kernel=bool(use_gate_in_kernel),
        safe_gate=bool(safe_gate),
        lower_bound=None if lower_bound is None else _finite_float("lower_bound", lower_bound),
        state_v_first=bool(state_v_first),
        disable_recompute=bool(disable_recompute),
        backward_precision=backward_precision_enum(backward_precision),
    )


def _finite_float(name: str, x) -> float:
    """float(x), with a value beyond float's range a ValueError (float() raises OverflowError)."""
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"{name} is outside the floating-point range (a {type(x).__name__} too large for a float)") from None


def _arr(x):
    if x is None:
        return None
    x = np.ascontiguousarray(x)
    if not x.dtype.isnative:  # e.g. big-endian '>f4': DLPack carries native byte order only
        x = x.astype(x.dtype.newbyteorder("="))
    return x


def _inputs(q, k, v, tensors: Dict[str, Any]) -> Dict[str, Any]:
    unknown = set(tensors) - set(_INPUT_NAMES)
    if unknown:
        raise TypeError(f"unexpected input(s) {sorted(unknown)}; known: {list(_INPUT_NAMES)}")
    d = {"q": _arr(q), "k": _arr(k), "v": _arr(v)}
    for name in _INPUT_NAMES:
        d[name] = _arr(tensors.get(name))
    return d


def _state_shape(inp, state_v_first: bool) -> Tuple[int, ...]:
    B, _, _, K = inp["q"].shape
    HV, V = inp["v"].shape[2], inp["v"].shape[3]
    N = B if inp["cu_seqlens"] is None else inp["cu_seqlens"].shape[0] - 1
    return (N, HV, V, K) if state_v_first else (N, HV, K, V)


def _state_dtype(inp):
    return np.float64 if inp["q"].dtype == np.float64 else np.float32


def _h_shape(inp, state_v_first: bool) -> Tuple[int, ...]:
    nt = _C.num_chunks(inp["q"], inp["k"], inp["v"], inp["cu_seqlens"], None)
    B = inp["q"].shape[0] if inp["cu_seqlens"] is None else 1
    HV, K, V = inp["v"].shape[2], inp["q"].shape[3], inp["v"].shape[3]
    per_seq = nt // B
    return (B, per_seq, HV, V, K) if state_v_first else (B, per_seq, HV, K, V)


def _split_options(kwargs):
    names = ("scale", "use_qk_l2norm_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
             "use_gate_in_kernel", "safe_gate", "lower_bound", "state_v_first", "disable_recompute")
    opts = {n: kwargs.pop(n) for n in names if n in kwargs}
    return make_options(**opts), bool(opts.get("state_v_first", False))


def forward_numpy(family, q, k, v, *, output_final_state: bool = False,
                  return_intermediate_states: bool = False, disable_recompute: bool = False,
                  **kwargs):
    """Run the chunked forward of ``family`` on NumPy arrays (CPU backend).

    Args:
        family: ``"kda"``, ``"gdn"``, ``"gla"`` or ``"simple_gla"``.
        q, k: ``[B, T, H, K]``; v: ``[B, T, HV, V]`` (float16/float32/float64; one dtype).
        output_final_state: also return the state after the last token.
        return_intermediate_states: also return the chunk-boundary states ``h``
            (``[B, NT, HV, K, V]``, the state before each 64-token chunk).
        disable_recompute: also return the backend's ``saved`` buffer (uint8), which
            :func:`backward_numpy` can take to skip recomputation.
        **kwargs: the optional tensors ``g``, ``g_gamma``, ``beta``, ``A_log``, ``dt_bias``,
            ``initial_state``, ``cu_seqlens`` and the options of :func:`make_options`.

    Returns:
        ``(o, final_state, h)`` — ``final_state``/``h`` are None unless requested — plus
        ``saved`` as a fourth element when ``disable_recompute`` is set.
    """
    fam = family_id(family)
    opt, v_first = _split_options(kwargs)
    inp = _inputs(q, k, v, kwargs)
    opt.disable_recompute = bool(disable_recompute)
    # The size query validates every input (ValueError naming the argument) before any shape
    # below is read.
    nws = _C.forward_workspace_size(fam, **inp, options=opt)
    o = np.empty_like(inp["v"])
    fs = np.empty(_state_shape(inp, v_first), _state_dtype(inp)) if output_final_state else None
    h = np.empty(_h_shape(inp, v_first), _state_dtype(inp)) if return_intermediate_states else None
    saved = None
    if disable_recompute:
        n = _C.saved_bytes(fam, **inp, options=opt)
        saved = np.empty(n, np.uint8) if n > 0 else None
    ws = np.empty(nws, np.uint8)
    _C.forward(fam, **inp, o=o, final_state=fs, h=h, saved=saved, options=opt, workspace=ws)
    if disable_recompute:
        return o, fs, h, saved
    return o, fs, h


def _grad_buffers(fam: int, inp) -> Dict[str, Any]:
    g = {"dq": np.empty_like(inp["q"]), "dk": np.empty_like(inp["k"]), "dv": np.empty_like(inp["v"])}
    for src, dst in (("g", "dg"), ("g_gamma", "dg_gamma"), ("beta", "dbeta"), ("A_log", "dA_log"),
                     ("dt_bias", "ddt_bias"), ("initial_state", "dh0")):
        g[dst] = None if inp[src] is None else np.empty_like(inp[src])
    return g


def backward_numpy(family, q, k, v, do, *, dht=None, saved=None, **kwargs) -> Dict[str, np.ndarray]:
    """Gradients of the chunked forward on NumPy arrays (CPU backend).

    ``do`` is the gradient of ``o``; ``dht`` (optional) that of the final state; ``saved``
    the buffer a ``forward_numpy(..., disable_recompute=True)`` returned. Other keywords
    as in :func:`forward_numpy`. Returns a dict with ``dq, dk, dv`` and, for each optional
    input that was given, ``dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0`` (gradients of the
    raw inputs: pre-activation ``g`` with ``use_gate_in_kernel``, pre-sigmoid ``beta`` with
    ``use_beta_sigmoid_in_kernel``).
    """
    fam = family_id(family)
    opt, _ = _split_options(kwargs)
    inp = _inputs(q, k, v, kwargs)
    nws = _C.backward_workspace_size(fam, **inp, options=opt, saved=_arr(saved))  # validates
    grads = _grad_buffers(fam, inp)
    ws = np.empty(nws, np.uint8)
    _C.backward(fam, **inp, d_o=_arr(do), dht=_arr(dht), saved=_arr(saved), **grads,
                options=opt, workspace=ws)
    return {n: x for n, x in grads.items() if x is not None}


def reference_forward_numpy(family, q, k, v, *, output_final_state: bool = False,
                            return_intermediate_states: bool = False, **kwargs):
    """float64 token-by-token reference of the forward (the test oracle).

    Float inputs are converted to float64 first; returns ``(o, final_state, h)`` in float64.
    """
    fam = family_id(family)
    opt, v_first = _split_options(kwargs)
    inp = _to64(_inputs(q, k, v, kwargs))
    _C.forward_workspace_size(fam, **inp, options=opt)  # validates the inputs before any shape is read
    o = np.empty_like(inp["v"])
    fs = np.empty(_state_shape(inp, v_first), np.float64) if output_final_state else None
    h = np.empty(_h_shape(inp, v_first), np.float64) if return_intermediate_states else None
    _C.reference_forward(fam, **inp, o=o, final_state=fs, h=h, options=opt)
    return o, fs, h


def reference_backward_numpy(family, q, k, v, do, *, dht=None, **kwargs) -> Dict[str, np.ndarray]:
    """float64 reference gradients (see :func:`backward_numpy`), all in float64."""
    fam = family_id(family)
    opt, _ = _split_options(kwargs)
    inp = _to64(_inputs(q, k, v, kwargs))
    grads = _grad_buffers(fam, inp)
    _C.reference_backward(fam, **inp, d_o=_f64(do), dht=_f64(dht), **grads, options=opt)
    return {n: x for n, x in grads.items() if x is not None}


def _f64(x):
    if x is None:
        return None
    x = np.asarray(x)
    return np.ascontiguousarray(x, dtype=np.float64) if x.dtype.kind == "f" else np.ascontiguousarray(x)


def _to64(inp):
    return {n: _f64(x) for n, x in inp.items()}
