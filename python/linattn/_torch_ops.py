"""PyTorch custom operators (``torch.ops.linattn.*``) around the C++ core, with autograd.

Two operators carry every family: ``linattn::chunk_fwd`` and ``linattn::chunk_bwd``. Both
allocate their outputs with ``torch.empty`` on the inputs' device, call the C++ core on
the current CUDA stream (CPU tensors run on the CPU backend) and have fake (meta)
implementations, so ``torch.compile(fullgraph=True)`` traces through them without a graph
break. Autograd is attached to ``chunk_fwd`` with ``torch.library.register_autograd``. Plain
eager calls (no tracer, transform, mode or tensor subclass: ``_plain_eager``) run the same
implementations as a ``torch.autograd.Function`` without the operator dispatch, whose cost is
most of a small call's host time; tracers see the operators.

Absent outputs are returned as empty tensors (custom operators cannot return None); the
public functions turn them back into None.
"""

from __future__ import annotations

import threading
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _C
from ._args import align_qkv_dtypes, finish_output, intermediate_states_as, state_in_float32
from .ops import BACKWARD_PRECISIONS, CHUNK_SIZE, FAMILIES, make_options

__all__ = ["chunk_fwd", "chunk_bwd", "run_forward"]


def _stream(t: Tensor) -> int:
    if t.device.type == "cuda":
        return torch.cuda.current_stream(t.device).cuda_stream
    return 0


class _device_guard:
    """Make the tensors' CUDA device current (DLPack export requires it)."""

    def __init__(self, t: Tensor):
        self.ctx = torch.cuda.device(t.device) if t.device.type == "cuda" else None

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


def _c(t: Optional[Tensor]) -> Optional[Tensor]:
    """Contiguous and detached (DLPack refuses tensors that require grad)."""
    return None if t is None else t.detach().contiguous()


def _state_dtype(q: Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _state_shape(q: Tensor, v: Tensor, cu_seqlens: Optional[Tensor], v_first: bool):
    B, _, _, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return (N, HV, V, K) if v_first else (N, HV, K, V)


def _h_shape(q: Tensor, v: Tensor, nt_per_batch, v_first: bool, varlen: bool):
    B = 1 if varlen else q.shape[0]
    HV, K, V = v.shape[2], q.shape[3], v.shape[3]
    return (B, nt_per_batch, HV, V, K) if v_first else (B, nt_per_batch, HV, K, V)


def _host_cu(q: Tensor, cu_seqlens: Optional[Tensor], cu_seqlens_cpu: Optional[Tensor]):
    """The host copy of cu_seqlens handed to C++ (None: not needed or not available)."""
    if cu_seqlens is None:
        return None
    if cu_seqlens_cpu is not None:
        return cu_seqlens_cpu
    if q.device.type == "cpu":
        return None  # the C++ core reads cu_seqlens itself
    return cu_seqlens.cpu()


def _options(scale, l2, gate, bsig, neg, safe, lb, v_first, bwd_precision):
    return make_options(scale=scale, use_qk_l2norm_in_kernel=l2, use_gate_in_kernel=gate,
                        use_beta_sigmoid_in_kernel=bsig, allow_neg_eigval=neg, safe_gate=safe,
                        lower_bound=lb, state_v_first=v_first, backward_precision=bwd_precision)


# --------------------------------------------------------------------------- forward op
def _chunk_fwd_impl(
    family: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Optional[Tensor],
    g_gamma: Optional[Tensor],
    beta: Optional[Tensor],
    A_log: Optional[Tensor],
    dt_bias: Optional[Tensor],
    initial_state: Optional[Tensor],
    cu_seqlens: Optional[Tensor],
    cu_seqlens_cpu: Optional[Tensor],
    scale: Optional[float],
    use_qk_l2norm_in_kernel: bool,
    use_gate_in_kernel: bool,
    use_beta_sigmoid_in_kernel: bool,
    allow_neg_eigval: bool,
    safe_gate: bool,
    lower_bound: Optional[float],
    state_v_first: bool,
    output_final_state: bool,
    return_intermediate_states: bool,
    disable_recompute: bool,
    backward_precision: str = "auto",
    state_map: bool = False,
    keep_chunk_local: bool = False,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Returns (o, final_state, h, saved, state_map_o, state_map_final); absent ones are empty
    tensors. state_map: also how o and the final states depend on the initial state (linattn.hpp,
    ForwardOutputs; for linattn.cp). keep_chunk_local: `saved` keeps GLA's chunk-local
    intermediates for the backward where the backend does that (Options::keep_chunk_local; empty
    elsewhere)."""
    inp = dict(q=_c(q), k=_c(k), v=_c(v), g=_c(g), g_gamma=_c(g_gamma), beta=_c(beta),
               A_log=_c(A_log), dt_bias=_c(dt_bias), initial_state=_c(initial_state),
               cu_seqlens=_c(cu_seqlens),
               cu_seqlens_host=_c(_host_cu(q, cu_seqlens, cu_seqlens_cpu)))
    opt = _options(scale, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                   allow_neg_eigval, safe_gate, lower_bound, state_v_first, backward_precision)
    opt.disable_recompute = bool(disable_recompute)  # sizes the workspace for filling `saved`
    opt.keep_chunk_local = bool(keep_chunk_local)
    q = inp["q"]
    sdt = _state_dtype(q)
    with _device_guard(q):
        # The size query validates every input (ValueError naming the argument) before any
        # shape below is read.
        nws = _C.forward_workspace_size(family, **inp, options=opt)
        o = torch.empty_like(inp["v"])
        fs = (q.new_empty(_state_shape(q, v, cu_seqlens, state_v_first), dtype=sdt)
              if output_final_state else q.new_empty(0, dtype=sdt))
        if return_intermediate_states:
            nt = _C.num_chunks(q, inp["k"], inp["v"], inp["cu_seqlens"], inp["cu_seqlens_host"])
            varlen = cu_seqlens is not None
            per = nt if varlen else nt // q.shape[0]
            h = q.new_empty(_h_shape(q, v, per, state_v_first, varlen), dtype=sdt)
        else:
            h = q.new_empty(0, dtype=sdt)
        nsaved = _C.saved_bytes(family, **inp, options=opt) if disable_recompute or keep_chunk_local else 0
        saved = q.new_empty(nsaved, dtype=torch.uint8)
        ws = q.new_empty(nws, dtype=torch.uint8) if nws > 0 else None
        qmap, mmap = _state_map_outputs(q, inp["v"], cu_seqlens, state_map)
        _C.forward(family, **inp, o=o, final_state=fs if output_final_state else None,
                   h=h if return_intermediate_states else None,
                   saved=saved if nsaved > 0 else None, options=opt, workspace=ws,
                   stream=_stream(q), state_map_o=qmap if state_map else None,
                   state_map_final=mmap if state_map else None)
    return o, fs, h, saved, qmap, mmap


def _state_map_outputs(q, v, cu_seqlens, state_map):
    """state_map_o [B, T, HV, K] in v's dtype and state_map_final [N, HV, K, K] float32 (empty
    without state_map)."""
    if not state_map:
        return v.new_empty(0), q.new_empty(0, dtype=torch.float32)
    B, T, _, K = q.shape
    HV = v.shape[2]
    N = B if cu_seqlens is None else cu_seqlens.shape[0] - 1
    return v.new_empty(B, T, HV, K), q.new_empty(N, HV, K, K, dtype=torch.float32)


def _spec(t: Optional[Tensor]):
    if t is None:
        return None
    return (str(t.dtype).replace("torch.", ""), [int(s) for s in t.shape])


def _is_static(*ts) -> bool:
    return all(not isinstance(s, torch.SymInt) for t in ts if t is not None for s in t.shape)


chunk_fwd = torch.library.custom_op("linattn::chunk_fwd", mutates_args=())(_chunk_fwd_impl)


@chunk_fwd.register_fake
def _chunk_fwd_fake(family, q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens,
                    cu_seqlens_cpu, scale, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                    use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound,
                    state_v_first, output_final_state, return_intermediate_states,
                    disable_recompute, backward_precision="auto", state_map=False,
                    keep_chunk_local=False):
    opt = _options(scale, use_qk_l2norm_in_kernel, use_gate_in_kernel,
                   use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate, lower_bound,
                   state_v_first, backward_precision)
    dev = q.device
    static = _is_static(q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state)
    if static:
        # The C++ rules on shapes and dtypes (no data is read), so that a bad call fails at
        # trace time with the ValueError an eager call gives, before any shape below is read.
        _C.saved_bytes_from_shapes(
            family, 2 if dev.type == "cuda" else 1, dev.index or 0, _spec(q), _spec(k), _spec(v),
            _spec(g), _spec(g_gamma), _spec(beta), _spec(A_log), _spec(dt_bias),
            _spec(initial_state) if cu_seqlens is None else None, opt)
    sdt = _state_dtype(q)
    o = torch.empty_like(v, memory_format=torch.contiguous_format)
    fs = (q.new_empty(_state_shape(q, v, cu_seqlens, state_v_first), dtype=sdt)
          if output_final_state else q.new_empty(0, dtype=sdt))
    varlen = cu_seqlens is not None
    if return_intermediate_states:
        if varlen:
            per = torch.library.get_ctx().new_dynamic_size()
        else:
            per = (q.shape[1] + CHUNK_SIZE - 1) // CHUNK_SIZE
        h = q.new_empty(_h_shape(q, v, per, state_v_first, varlen), dtype=sdt)
    else:
        h = q.new_empty(0, dtype=sdt)
    if not disable_recompute and not keep_chunk_local:
        nsaved = 0
    elif varlen or not static or keep_chunk_local:
        # The size depends on the sequence boundaries (or on symbolic shapes; keep_chunk_local's
        # on the device too: 0 where it does not apply).
        nsaved = torch.library.get_ctx().new_dynamic_size()
    else:
        nsaved = _C.saved_bytes_from_shapes(
            family, 2 if dev.type == "cuda" else 1, dev.index or 0, _spec(q), _spec(k), _spec(v),
            _spec(g), _spec(g_gamma), _spec(beta), _spec(A_log), _spec(dt_bias),
            _spec(initial_state), opt)
    saved = q.new_empty(nsaved, dtype=torch.uint8)
    qmap, mmap = _state_map_outputs(q, v, cu_seqlens, state_map)
    return o, fs, h, saved, qmap, mmap


# --------------------------------------------------------------------------- backward op
def _chunk_bwd_impl(
    family: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Optional[Tensor],
    g_gamma: Optional[Tensor],
    beta: Optional[Tensor],
    A_log: Optional[Tensor],
    dt_bias: Optional[Tensor],
    initial_state: Optional[Tensor],
    cu_seqlens: Optional[Tensor],
    cu_seqlens_cpu: Optional[Tensor],
    do: Tensor,
    dht: Optional[Tensor],
    saved: Optional[Tensor],
    scale: Optional[float],
    use_qk_l2norm_in_kernel: bool,
    use_gate_in_kernel: bool,
    use_beta_sigmoid_in_kernel: bool,
    allow_neg_eigval: bool,
    safe_gate: bool,
    lower_bound: Optional[float],
    state_v_first: bool,
    backward_precision: str = "auto",
    keep_chunk_local: bool = False,
    saved_as_filled: bool = False,
) -> List[Tensor]:
    """Returns [dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0]; absent: empty.
    saved_as_filled: `saved` is the forward's own output, unchanged (the autograd path): the
    backend skips reading its header back (BackwardInputs::saved_as_filled, no stream sync)."""
    inp = dict(q=_c(q), k=_c(k), v=_c(v), g=_c(g), g_gamma=_c(g_gamma), beta=_c(beta),
               A_log=_c(A_log), dt_bias=_c(dt_bias), initial_state=_c(initial_state),
               cu_seqlens=_c(cu_seqlens),
               cu_seqlens_host=_c(_host_cu(q, cu_seqlens, cu_seqlens_cpu)))
    opt = _options(scale, use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel,
                   allow_neg_eigval, safe_gate, lower_bound, state_v_first, backward_precision)
    opt.keep_chunk_local = bool(keep_chunk_local)  # which kind of saved buffer (the forward's)
    q = inp["q"]
    if saved is not None and saved.numel() == 0:
        saved = None
    with _device_guard(q):
        nws = _C.backward_workspace_size(family, **inp, options=opt, saved=_c(saved))  # validates
        grads = {"dq": torch.empty_like(q), "dk": torch.empty_like(inp["k"]),
                 "dv": torch.empty_like(inp["v"])}
        for src, dst in (("g", "dg"), ("g_gamma", "dg_gamma"), ("beta", "dbeta"),
                         ("A_log", "dA_log"), ("dt_bias", "ddt_bias"), ("initial_state", "dh0")):
            grads[dst] = None if inp[src] is None else torch.empty_like(inp[src])
        ws = q.new_empty(nws, dtype=torch.uint8) if nws > 0 else None
        _C.backward(family, **inp, d_o=_c(do), dht=_c(dht), saved=_c(saved), **grads,
                    options=opt, workspace=ws, stream=_stream(q),
                    saved_as_filled=bool(saved_as_filled) and saved is not None)
    return [x if x is not None else q.new_empty(0) for x in grads.values()]


chunk_bwd = torch.library.custom_op("linattn::chunk_bwd", mutates_args=())(_chunk_bwd_impl)


@chunk_bwd.register_fake
def _chunk_bwd_fake(family, q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens,
                    cu_seqlens_cpu, do, dht, saved, *flags):
    out = []
    for t in (q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state):
        out.append(q.new_empty(0) if t is None
                   else torch.empty_like(t, memory_format=torch.contiguous_format))
    return out


# --------------------------------------------------------------------------- autograd
class _SavedInitialStates(threading.local):
    def __init__(self):
        self.entries = None
        self.maps = None
        self.want_map = False


_SAVED_H0 = _SavedInitialStates()


class _Record:
    def __init__(self, entries, maps):
        self.entries, self.maps = entries, maps


class capture_saved_initial_states:
    """Within it, every ``chunk_fwd`` that builds a graph appends ``(initial_state, saved)`` to
    the list ``entries`` of what it yields: the tensor its backward will read as the initial
    state, and whether it keeps a ``disable_recompute`` buffer. ``linattn.cp`` uses it to give a
    graph built from a zero incoming state the incoming state computed afterwards (the backward
    recomputes everything from its saved inputs, so only that tensor's values matter).
    ``state_map=True`` also asks every forward for its state map (``ForwardOutputs`` in
    linattn.hpp), appended to ``maps`` as ``(state_map_o, state_map_final)``; a backend that
    does not compute it raises NotImplementedError before writing anything."""

    def __init__(self, state_map: bool = False):
        self._state_map = state_map

    def __enter__(self):
        self._prev = (_SAVED_H0.entries, _SAVED_H0.maps, _SAVED_H0.want_map)
        rec = _Record([], [])
        _SAVED_H0.entries, _SAVED_H0.maps, _SAVED_H0.want_map = rec.entries, rec.maps, self._state_map
        return rec

    def __exit__(self, *exc):
        _SAVED_H0.entries, _SAVED_H0.maps, _SAVED_H0.want_map = self._prev


def _setup_context(ctx, inputs, output):
    (family, q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens,
     cu_seqlens_cpu, scale, l2, gate, bsig, neg, safe, lb, v_first, output_final_state,
     _return_h, disable_recompute, bwd_precision, _state_map, keep_chunk_local) = inputs
    if _SAVED_H0.entries is not None:  # (the chunk-local intermediates do not depend on it)
        _SAVED_H0.entries.append((initial_state, bool(disable_recompute)))
    # Without disable_recompute / keep_chunk_local the buffer is empty; its size may be symbolic
    # under torch.compile, so decide by the flags rather than by the size.
    saved = output[3] if disable_recompute or keep_chunk_local else None
    ctx.save_for_backward(q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens,
                          cu_seqlens_cpu, saved)
    # h (return_intermediate_states) has no backward, and the saved buffer is internal: mark
    # them so that using them in a loss raises instead of silently contributing no gradient.
    ctx.mark_non_differentiable(output[2], output[3], output[4], output[5])
    # Gradients of unused outputs arrive as None rather than materialised zeros: a zero tensor
    # the size of the saved buffer (1.4 GiB at 2x8192x32x128) would otherwise be allocated for
    # the non-differentiable output in every backward.
    ctx.set_materialize_grads(False)
    ctx.family = family
    ctx.flags = (scale, l2, gate, bsig, neg, safe, lb, v_first, bwd_precision, bool(keep_chunk_local))
    ctx.output_final_state = output_final_state


def _backward(ctx, do, dfinal, _dh, _dsaved, _dmap_o, _dmap_final):
    (q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_cpu,
     saved) = ctx.saved_tensors
    if do is None:
        do = torch.zeros_like(v)
    dht = dfinal if (ctx.output_final_state and dfinal is not None) else None
    args = (ctx.family, q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens,
            cu_seqlens_cpu, do.contiguous(), None if dht is None else dht.contiguous(), saved,
            *ctx.flags, True)  # saved_as_filled: this forward's own buffer (its header is not read back)
    op = _chunk_bwd_impl if _plain_eager(args) else torch.ops.linattn.chunk_bwd
    dq, dk, dv, dg, dgg, db, dA, ddt, dh0 = op(*args)
    grads = [dq, dk, dv]
    for present, d in ((g, dg), (g_gamma, dgg), (beta, db), (A_log, dA), (dt_bias, ddt),
                       (initial_state, dh0)):
        grads.append(d if present is not None else None)
    # family, 9 differentiable tensors, cu_seqlens, cu_seqlens_cpu, 14 non-tensor options
    return (None, *grads, None, None) + (None,) * 14


torch.library.register_autograd("linattn::chunk_fwd", _backward, setup_context=_setup_context)


_PLAIN_TENSORS = (Tensor, torch.nn.Parameter)


def _plain_eager(args) -> bool:
    """True where the operators' implementations may run without torch.library's dispatch: eager
    mode on plain tensors (no torch.compile tracing, no functorch transform, no dispatch or
    torch-function mode, no tensor subclass). Elsewhere the custom operators run, so tracers see
    them. The dispatch costs the host time a small layer is made of: torch.library's autograd
    wrapper alone fills the 26-argument schema's defaults at ~155 µs a call (session 31, CPU
    profile of chunk_gla in training)."""
    if (torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active()
            or torch._C._len_torch_dispatch_stack() > 0 or torch._C._len_torch_function_stack() > 0):
        return False
    return all(type(a) in _PLAIN_TENSORS for a in args if isinstance(a, Tensor))


class _ChunkFwdEager(torch.autograd.Function):
    """linattn::chunk_fwd's autograd in eager mode: the same implementation, setup_context and
    backward as the registered operator (bitwise the same results), as a plain autograd node."""

    @staticmethod
    def forward(ctx, *args):
        out = _chunk_fwd_impl(*args)
        _setup_context(ctx, args, out)
        return out

    @staticmethod
    def backward(ctx, *grads):
        return _backward(ctx, *grads)


def _chunk_fwd_call(*args):
    """torch.ops.linattn.chunk_fwd, or in plain eager mode the same computation without the
    operator dispatch (_plain_eager)."""
    if not _plain_eager(args):
        return torch.ops.linattn.chunk_fwd(*args)
    if torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args):
        return _ChunkFwdEager.apply(*args)
    return _chunk_fwd_impl(*args)


# --------------------------------------------------------------------------- helper
# GLA's and simple GLA's training forward keeps its chunk-local intermediates where the backend
# does (run_forward);
# a module attribute only so that tests can compare against the recomputing backward.
KEEP_CHUNK_LOCAL = True
_KEEPS_CHUNK_LOCAL = (FAMILIES["gla"], FAMILIES["simple_gla"])


def run_forward(family: int, q, k, v, *, g=None, g_gamma=None, beta=None, A_log=None,
                dt_bias=None, initial_state=None, cu_seqlens=None, cu_seqlens_cpu=None,
                scale=None, use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
                lower_bound=None, state_v_first=False, output_final_state=False,
                return_intermediate_states=False, disable_recompute=False,
                backward_precision="auto", keep_chunk_local=None, fn_name="linattn"):
    """Checks common to every public function, then the custom operator.

    keep_chunk_local (GLA, simple GLA): None keeps the chunk-local intermediates and the chunk
    states for the backward where the backend does (a training call on CUDA), False keeps nothing.

    Returns ``(o, final_state or None, h or None)``.
    """
    if not isinstance(q, Tensor) or not isinstance(k, Tensor) or not isinstance(v, Tensor):
        raise TypeError(f"{fn_name}: q, k and v must be torch.Tensors "
                        "(use linattn.ops for NumPy arrays)")
    dev = q.device
    named = dict(k=k, v=v, g=g, g_gamma=g_gamma, beta=beta, A_log=A_log, dt_bias=dt_bias,
                 initial_state=initial_state, cu_seqlens=cu_seqlens)
    for name, t in named.items():
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn_name}: {name} must be a torch.Tensor or None, got {type(t).__name__}")
        if t.device != dev:
            raise ValueError(f"{fn_name}: {name} is on {t.device} but q is on {dev}; "
                             "move all tensors to one device (linattn never moves data itself)")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{fn_name}: tensors on {dev} are not supported (CPU or CUDA only)")
    if cu_seqlens_cpu is not None:
        if cu_seqlens is None:
            raise ValueError(f"{fn_name}: cu_seqlens_cpu is given without cu_seqlens")
        if not isinstance(cu_seqlens_cpu, Tensor):
            raise TypeError(f"{fn_name}: cu_seqlens_cpu must be a torch.Tensor")
        if cu_seqlens_cpu.device.type != "cpu":
            raise ValueError(f"{fn_name}: cu_seqlens_cpu must be a CPU tensor, got {cu_seqlens_cpu.device}")
        if cu_seqlens_cpu.dtype != cu_seqlens.dtype:
            cu_seqlens_cpu = cu_seqlens_cpu.to(cu_seqlens.dtype)
    if cu_seqlens is not None:
        if cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{fn_name}: cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
        if dev.type == "cuda" and cu_seqlens_cpu is None:
            cu_seqlens_cpu = cu_seqlens.cpu()
    if return_intermediate_states and disable_recompute:
        raise ValueError(f"{fn_name}: return_intermediate_states is for inference and cannot be "
                         "combined with disable_recompute=True")
    if keep_chunk_local is not None and not isinstance(keep_chunk_local, bool):
        raise TypeError(f"{fn_name}: keep_chunk_local must be None or a bool, got {type(keep_chunk_local).__name__}")
    if backward_precision not in BACKWARD_PRECISIONS:
        raise ValueError(f"{fn_name}: backward_precision must be one of {list(BACKWARD_PRECISIONS)}, "
                         f"got {backward_precision!r}")
    backward_precision = effective_backward_precision(backward_precision, g_gamma, A_log, dt_bias)
    # Shapes, dtypes and values are the C++ core's to check (one set of rules for every
    # interface): nothing here reads a shape. scale=None is K ** -0.5, resolved there.
    if scale is not None:
        scale = _scale_value(fn_name, scale)

    if _VALIDATE_ONLY.active:
        _validate_only_check(family, q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state,
                             cu_seqlens, cu_seqlens_cpu, scale, use_qk_l2norm_in_kernel,
                             use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                             safe_gate, lower_bound, state_v_first, disable_recompute,
                             backward_precision)
        raise ValidatedOnly()

    want_map = _SAVED_H0.maps is not None and _SAVED_H0.want_map
    # GLA and simple GLA in training keep their chunk-local intermediates and chunk states for the
    # backward where the backend does (CUDA on Hopper, Options::keep_chunk_local: the backward then
    # skips chunk_prep and the state recompute, with bitwise the same gradients), unless the caller
    # asks it not to (keep_chunk_local=False: nothing kept, less memory between the passes);
    # elsewhere saved_bytes is 0 and nothing is kept (the flag is passed on every device, so the
    # CPU runs this path too). Not with return_intermediate_states: the kept states are where h
    # would be written.
    keep = (KEEP_CHUNK_LOCAL and keep_chunk_local is not False and family in _KEEPS_CHUNK_LOCAL
            and not disable_recompute and not return_intermediate_states and torch.is_grad_enabled()
            and any(t is not None and t.requires_grad for t in (q, k, v, g, g_gamma, initial_state)))
    o, fs, h, _, qmap, mmap = _chunk_fwd_call(
        family, q.contiguous(), k.contiguous(), v.contiguous(), _cc(g), _cc(g_gamma), _cc(beta),
        _cc(A_log), _cc(dt_bias), _cc(initial_state), _cc(cu_seqlens), _cc(cu_seqlens_cpu),
        scale, bool(use_qk_l2norm_in_kernel), bool(use_gate_in_kernel),
        bool(use_beta_sigmoid_in_kernel), bool(allow_neg_eigval), bool(safe_gate),
        None if lower_bound is None else float(lower_bound), bool(state_v_first),
        bool(output_final_state), bool(return_intermediate_states), bool(disable_recompute),
        str(backward_precision), want_map, keep)
    if want_map:
        _SAVED_H0.maps.append((qmap, mmap))
    return o, (fs if output_final_state else None), (h if return_intermediate_states else None)


def effective_backward_precision(backward_precision, g_gamma, A_log, dt_bias) -> str:
    """``"auto"`` as the backward will run it. The C++ core's auto computes in float32 whenever
    A_log / dt_bias (with the in-kernel gate) or g_gamma is given, for the per-head sums dA_log,
    ddt_bias, dg_gamma (``needs_float32``, src/cuda/config/backward_form.cpp): it cannot know
    whether they are wanted. Here it is known: when none of the three will take a gradient (a
    frozen decay parameter; FLA's g_gamma, which FLA never differentiates), auto's choice without
    that clause is ``"split"`` (the hi + lo form for the delta rules, the 16-bit type without
    them). Decided at the forward, so that a kept buffer and the backward agree."""
    if backward_precision != "auto":
        return backward_precision
    wants_head_sums = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (g_gamma, A_log, dt_bias))
    return "auto" if wants_head_sums else "split"


def _scale_value(fn_name, scale) -> float:
    if isinstance(scale, Tensor):
        if scale.numel() != 1:
            raise ValueError(f"{fn_name}: scale must be a number, got a tensor of shape {tuple(scale.shape)}")
        scale = scale.item()
    try:
        return float(scale)
    except OverflowError:
        raise ValueError(f"{fn_name}: scale is outside the floating-point range (a {type(scale).__name__} too large for a float)") from None


def _cc(t):
    return None if t is None else t.contiguous()


# --------------------------------------------------------------------------- validation only
class ValidatedOnly(Exception):
    """Raised by :func:`run_forward` under :func:`validate_only` once every rule has passed."""


class _ValidateOnlyState(threading.local):
    active = False


_VALIDATE_ONLY = _ValidateOnlyState()


class validate_only:
    """Within this context a public function checks its arguments by every rule a real call
    applies (Python and C++, with the tensors' data where a rule reads it, e.g. cu_seqlens) and
    then raises :class:`ValidatedOnly` instead of computing. ``linattn.fla``'s verifiers use it,
    so that they accept exactly what linattn runs."""

    def __enter__(self):
        self.prev = _VALIDATE_ONLY.active
        _VALIDATE_ONLY.active = True
        return self

    def __exit__(self, *exc):
        _VALIDATE_ONLY.active = self.prev
        return False


def _validate_only_check(family, q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens,
                         cu_seqlens_cpu, scale, l2, gate, bsig, neg, safe, lb, v_first,
                         disable_recompute, bwd_precision):
    inp = dict(q=_c(q), k=_c(k), v=_c(v), g=_c(g), g_gamma=_c(g_gamma), beta=_c(beta),
               A_log=_c(A_log), dt_bias=_c(dt_bias), initial_state=_c(initial_state),
               cu_seqlens=_c(cu_seqlens),
               cu_seqlens_host=_c(_host_cu(q, cu_seqlens, cu_seqlens_cpu)))
    opt = _options(scale, l2, gate, bsig, neg, safe, None if lb is None else float(lb), v_first,
                   bwd_precision)
    opt.disable_recompute = bool(disable_recompute)
    with _device_guard(q):
        _C.forward_workspace_size(family, **inp, options=opt)
        _C.backward_workspace_size(family, **inp, options=opt)


# --------------------------------------------------------------------------- head sizes > 256
MAX_HEAD_SIZE = 256


def _parts(n: int):
    """Slices of a head dimension, 256 wide and then the rest (320 = 256 + 64: sizes the CUDA
    kernels run)."""
    return [slice(a, min(a + MAX_HEAD_SIZE, n)) for a in range(0, n, MAX_HEAD_SIZE)]


def _is4(t) -> bool:
    return isinstance(t, Tensor) and t.dim() == 4


def run_forward_split(family: int, q, k, v, *, g=None, g_per_key=False, split_k=False, initial_state=None,
                      scale=None, state_v_first=False, output_final_state=False,
                      return_intermediate_states=False, **rest):
    """:func:`run_forward`, also for head sizes FLA accepts beyond the kernels' 256.

    Every family's recurrence is separable along the value dimension: column j of the state and
    of ``o`` only ever meets column j of ``v`` (the delta rule's ``S'^T k`` included). Without the
    delta rule (``split_k``: GLA, simple GLA) it is separable along the key dimension as well:
    each key slice has its own state rows and ``o = scale * S^T q`` is the sum of the slices'
    outputs. So V > 256 runs as value slices (outputs and states concatenated) and, with
    ``split_k``, K > 256 as key slices (the full K's default scale, outputs summed in float32,
    states concatenated). A call whose shapes do not fit that is left to :func:`run_forward`,
    whose validation explains it."""
    kw = dict(g=g, initial_state=initial_state, scale=scale, state_v_first=state_v_first,
              output_final_state=output_final_state,
              return_intermediate_states=return_intermediate_states, **rest)
    if not (_is4(q) and _is4(k) and _is4(v) and k.shape == q.shape
            and (initial_state is None or _is4(initial_state))):
        return run_forward(family, q, k, v, **kw)
    K, V = q.shape[-1], v.shape[-1]
    k_axis, v_axis = (-1, -2) if state_v_first else (-2, -1)  # of states [N, HV, K, V] / [N, HV, V, K]
    if initial_state is not None and (initial_state.shape[k_axis] != K or initial_state.shape[v_axis] != V):
        return run_forward(family, q, k, v, **kw)

    def state_slice(t, part, axis):
        if t is None:
            return None
        index = [slice(None)] * t.dim()
        index[axis] = part
        return t[tuple(index)]

    if V > MAX_HEAD_SIZE:
        outs = [run_forward_split(family, q, k, v[..., part], g_per_key=g_per_key, split_k=split_k,
                                  **{**kw, "initial_state": state_slice(initial_state, part, v_axis)})
                for part in _parts(V)]
        o = torch.cat([x[0] for x in outs], dim=-1)
        fs = torch.cat([x[1] for x in outs], dim=v_axis) if output_final_state else None
        h = torch.cat([x[2] for x in outs], dim=v_axis) if return_intermediate_states else None
        return o, fs, h
    if not (split_k and K > MAX_HEAD_SIZE) or (g_per_key and not (_is4(g) and g.shape[-1] == K)):
        return _run_padded(family, q, k, v, **kw)
    if scale is None:
        scale = K ** -0.5
    o_sum, states, hs = None, [], []
    for part in _parts(K):
        o, fs, h = _run_padded(family, q[..., part], k[..., part], v,
                               **{**kw, "g": g[..., part] if g_per_key else g, "scale": scale,
                                  "initial_state": state_slice(initial_state, part, k_axis)})
        o_sum = o.float() if o_sum is None else o_sum + o.float()
        states.append(fs)
        hs.append(h)
    o = o_sum.to(v.dtype)
    fs = torch.cat(states, dim=k_axis) if output_final_state else None
    h = torch.cat(hs, dim=k_axis) if return_intermediate_states else None
    return o, fs, h


# --------------------------------------------------------------------------- head sizes < 256 the CUDA kernels lack
# src/cuda/config/limits.cpp: the CUDA kernels take K and V in these sizes.
CUDA_HEAD_SIZES = (64, 128, 256)


def _needs_padding(t: Tensor) -> bool:
    """Whether a call on t's device pads K / V to CUDA_HEAD_SIZES (the CPU backend takes any size;
    the tests replace this to run the padded path on the CPU)."""
    return t.device.type == "cuda"


def _run_padded(family: int, q, k, v, **kw):
    """:func:`run_forward`, with K and V below 256 that the CUDA kernels lack (FLA's tests use 60
    and 100) padded with zeros to the next size they run.

    Exact for every family: a zero key / query column adds exactly 0 to every product (Q Kᵀ, K Kᵀ,
    Sᵀ q, S k), l2norm's sums are unchanged, and that column's state row starts at 0 and only ever
    gains k ⊗ (…) = 0, whatever its decay; a zero value column gives a zero output column and state
    column. The padded gate columns (0, or the in-kernel gate of 0 with a zero dt_bias) are finite
    and only scale those zero rows, so their gradients are 0 and add nothing to dA_log. Autograd's
    pad / slice carry the gradients of the real columns. Costs the padded columns' work (60 → 64:
    7%; 100 → 128: 28%) and the copies; kernels with a partial K / V tile would save both."""
    K, V = q.shape[-1], v.shape[-1]
    if (not _needs_padding(q) or (K in CUDA_HEAD_SIZES and V in CUDA_HEAD_SIZES)
            or K > MAX_HEAD_SIZE or V > MAX_HEAD_SIZE or K < 1 or V < 1
            or not (_is4(q) and _is4(k) and _is4(v)) or k.shape[-1] != K):
        return run_forward(family, q, k, v, **kw)
    v_first = kw.get("state_v_first", False)
    k_axis, v_axis = (-1, -2) if v_first else (-2, -1)
    g, dt_bias, h0 = kw.get("g"), kw.get("dt_bias"), kw.get("initial_state")
    # Shapes that do not fit together go unpadded, so that validation names the caller's sizes.
    if (k.shape != q.shape or v.shape[:2] != q.shape[:2]
            or (_is4(g) and g.shape[-1] != K)
            or (h0 is not None and not (_is4(h0) and h0.shape[k_axis] == K and h0.shape[v_axis] == V))):
        return run_forward(family, q, k, v, **kw)
    Kp = next(n for n in CUDA_HEAD_SIZES if n >= K)
    Vp = next(n for n in CUDA_HEAD_SIZES if n >= V)
    pk, pv = Kp - K, Vp - V
    fn = torch.nn.functional.pad
    kw = dict(kw)
    if kw.get("scale") is None:
        kw["scale"] = K ** -0.5  # the real K's default
    if pk:
        q, k = fn(q, (0, pk)), fn(k, (0, pk))
        if _is4(g) and g.shape[-1] == K:  # a per-key gate (KDA, GLA); a scalar gate has no K axis
            kw["g"] = fn(g, (0, pk))
            if isinstance(dt_bias, Tensor) and dt_bias.numel() == g.shape[-2] * K:
                kw["dt_bias"] = fn(dt_bias.reshape(-1, K), (0, pk)).reshape(-1)
    if pv:
        v = fn(v, (0, pv))
    if h0 is not None:
        kw["initial_state"] = fn(h0, (0, pk, 0, pv) if v_first else (0, pv, 0, pk))

    def crop(t):  # a state [.., K, V] / [.., V, K] back to the real sizes
        if t is None:
            return None
        return (t[..., :V, :K] if v_first else t[..., :K, :V]).contiguous()

    o, fs, h = run_forward(family, q, k, v, **kw)
    return o[..., :V].contiguous(), crop(fs), crop(h)


def run_chunked(family: int, name: str, q, k, v, *, initial_state=None, return_intermediate_states=False,
                intermediate_states_dtype=None, **rest):
    """The chunked entry points' common body (``chunk_kda``, ``chunk_gated_delta_rule``,
    ``chunk_gla``, ``chunk_simple_gla``): q / k / v in one dtype, the initial state in float32,
    :func:`run_forward_split`, ``o`` back in v's dtype, and the chunk states in the dtype asked
    for. Returns ``(o, final_state)``, or ``(o, final_state, h)`` with
    ``return_intermediate_states``. ``rest``: the family's keywords for :func:`run_forward_split`."""
    k_in = k
    q, k, v, o_dtype = align_qkv_dtypes(q, k, v)
    o, fs, h = run_forward_split(family, q, k, v, initial_state=state_in_float32(initial_state),
                                 return_intermediate_states=return_intermediate_states, fn_name=name, **rest)
    o = finish_output(o, o_dtype, None)
    if return_intermediate_states:
        return o, fs, intermediate_states_as(name, h, k_in, intermediate_states_dtype)
    return o, fs
