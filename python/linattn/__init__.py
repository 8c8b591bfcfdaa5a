"""linattn: chunked linear-attention operators (KDA, GDN, GLA, simple GLA) on a C++/CUDA core.

The PyTorch functions mirror flash-linear-attention's public API (names, arguments,
defaults, return values), so switching is one import::

    from linattn import chunk_kda          # instead of: from fla.ops.kda import chunk_kda

They support autograd and ``torch.compile(fullgraph=True)`` and run on CPU tensors (CPU
backend) or CUDA tensors (CUDA backend, when built). ``linattn.ops`` has framework-free
NumPy entry points; ``linattn.reference`` the float64 reference used by the tests.
"""

from . import _C
from . import ops
from ._C import cuda_available

__version__ = _C.version()

__all__ = ["cuda_available", "ops", "__version__"]

try:
    import torch as _torch  # noqa: F401
except ImportError:  # NumPy-only install: the PyTorch functions are unavailable.
    _torch = None

if _torch is not None:
    from . import _torch_ops  # registers torch.ops.linattn.*
    from . import reference
    from .gated_delta_rule import (
        chunk_gated_delta_rule,
        chunk_gdn,
        fused_recurrent_gated_delta_rule,
        fused_recurrent_gdn,
    )
    from .gla import chunk_gla, fused_recurrent_gla
    from .kda import chunk_kda, fused_recurrent_kda, fused_recurrent_kda_fwd
    from .simple_gla import chunk_simple_gla, fused_chunk_simple_gla, fused_recurrent_simple_gla, parallel_simple_gla

    __all__ += [
        "chunk_kda",
        "fused_recurrent_kda",
        "fused_recurrent_kda_fwd",
        "chunk_gated_delta_rule",
        "chunk_gdn",
        "fused_recurrent_gated_delta_rule",
        "fused_recurrent_gdn",
        "chunk_gla",
        "fused_recurrent_gla",
        "chunk_simple_gla",
        "fused_chunk_simple_gla",
        "fused_recurrent_simple_gla",
        "parallel_simple_gla",
        "reference",
    ]
