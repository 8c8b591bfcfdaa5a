"""linattn as a backend of flash-linear-attention's operator registry (``fla.backends``, FLA >= 0.6).

``import linattn.fla`` registers linattn for FLA's dispatched entry points that it implements:

* ``fla.ops.kda.chunk_kda``
* ``fla.ops.gated_delta_rule.chunk_gated_delta_rule``
* ``fla.ops.simple_gla.fused_chunk_simple_gla``
* ``fla.ops.simple_gla.parallel_simple_gla``

From then on FLA's own functions, and FLA's layers that call them, run on linattn whenever
linattn can run the call; otherwise FLA's next backend (finally its Triton code) runs it.
Each call is checked by a verifier that applies every rule a real linattn call applies (the
Python argument rules and the C++ core's validation for the tensors' device, without computing),
so a call is accepted exactly when linattn would run it. ``FLA_LINATTN=0`` in the environment
disables the backend; ``FLA_DISABLE_BACKEND_DISPATCH=1`` disables FLA's dispatch altogether.

Not registered: FLA dispatches ``fused_recurrent_kda_fwd`` (its serving entry point) and GLA's
chunk internals, not the public ``fused_recurrent_*`` / ``chunk_gla`` functions; call
``linattn.fused_recurrent_kda`` / ``linattn.chunk_gla`` directly for those.
"""

from __future__ import annotations

import torch

try:
    import fla.backends as _fla_backends
except ImportError as e:  # FLA < 0.6 has no registry
    raise ImportError("linattn.fla needs flash-linear-attention >= 0.6 (fla.backends); "
                      f"import it failed: {e}. Without FLA's registry, call linattn's functions "
                      "directly (from linattn import chunk_kda, ...)") from e

import fla.ops.gated_delta_rule  # noqa: F401  (creates the 'gated_delta_rule' registry)
from fla.ops.kda.chunk import chunk_kda as _fla_chunk_kda
from fla.ops.simple_gla.fused_chunk import fused_chunk_simple_gla as _fla_fused_chunk_simple_gla
from fla.ops.simple_gla.parallel import parallel_simple_gla as _fla_parallel_simple_gla

from . import _C
from ._torch_ops import ValidatedOnly, validate_only
from .gated_delta_rule import chunk_gated_delta_rule
from .kda import chunk_kda
from .simple_gla import fused_chunk_simple_gla, parallel_simple_gla

__all__ = ["LinattnBackend", "calls"]

# How many calls each entry point dispatched to linattn (a test or a user can see that the
# backend is really used).
calls = {"chunk_kda": 0, "chunk_gated_delta_rule": 0, "fused_chunk_simple_gla": 0, "parallel_simple_gla": 0}


def _verify(fn, args, kwargs):
    q = args[0] if args else kwargs.get("q")
    if not isinstance(q, torch.Tensor):
        return False, "q is not a torch.Tensor"
    if q.device.type == "cuda" and not _C.cuda_available():
        return False, "this linattn build has no CUDA backend"
    if q.device.type not in ("cpu", "cuda"):
        return False, f"linattn runs on CPU and CUDA tensors, not {q.device.type}"
    try:
        with validate_only():
            fn(*args, **kwargs)
    except ValidatedOnly:
        return True, None
    except (ValueError, TypeError, NotImplementedError) as e:
        return False, str(e)
    return False, "linattn's validation did not reach the kernels"


def _counted(name, fn):
    def run(self, *args, **kwargs):
        calls[name] += 1
        return fn(*args, **kwargs)

    run.__name__ = name
    return run


class LinattnBackend(_fla_backends.BaseBackend):
    """linattn's C++/CUDA kernels (CPU and CUDA tensors)."""

    backend_type = "linattn"
    package_name = "linattn"
    env_var = "FLA_LINATTN"
    default_enable = True
    # Ahead of FLA's optional vendor backends (3-5): importing linattn.fla asks for linattn.
    priority = 1

    chunk_kda = _counted("chunk_kda", chunk_kda)
    chunk_gated_delta_rule = _counted("chunk_gated_delta_rule", chunk_gated_delta_rule)
    fused_chunk_simple_gla = _counted("fused_chunk_simple_gla", fused_chunk_simple_gla)
    parallel_simple_gla = _counted("parallel_simple_gla", parallel_simple_gla)

    def chunk_kda_verifier(self, *args, **kwargs):
        return _verify(chunk_kda, args, kwargs)

    def chunk_gated_delta_rule_verifier(self, *args, **kwargs):
        return _verify(chunk_gated_delta_rule, args, kwargs)

    def fused_chunk_simple_gla_verifier(self, *args, **kwargs):
        return _verify(fused_chunk_simple_gla, args, kwargs)

    def parallel_simple_gla_verifier(self, *args, **kwargs):
        return _verify(parallel_simple_gla, args, kwargs)


_fla_backends.register(_fla_chunk_kda)(LinattnBackend)
_fla_backends.register("gated_delta_rule")(LinattnBackend)
_fla_backends.register(_fla_fused_chunk_simple_gla)(LinattnBackend)
_fla_backends.register(_fla_parallel_simple_gla)(LinattnBackend)
