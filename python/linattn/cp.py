"""Context parallelism (CP) for the delta-rule families (KDA, GDN) over ``torch.distributed``.

One packed token stream (``B = 1``, global ``cu_seqlens``) is split into contiguous token
ranges, one per rank of a process group. Each rank calls :func:`linattn.chunk_kda` /
:func:`linattn.chunk_gated_delta_rule` on its own tokens with ``cp_context=`` the context of
:func:`build_cp_context`; the results are those of the single-device call on the whole stream
(see ``docs/context_parallel.md`` for the math, the communication and the accuracy).

Per sequence and value head the recurrence is affine in the incoming state over any run of
tokens, ``S_out = M S_in + C`` (``M``: K x K). A rank whose first sequence started on an
earlier rank needs that sequence's state at its first token: every rank computes ``(M, C)`` of
its last sequence when it continues on the next rank, one ``all_gather`` shares them (or a
recursive-doubling scan: ``CPContext.scan``), and each rank folds the transforms of the ranks
before it (no rank waits for another's local compute). Such a rank runs its local call from a
zero incoming state and adds the incoming state's term afterwards: ``o_t += S_in^T Q~_t`` with
``Q~_t = scale M_t^T q_t`` from one call over the first sequence (identity state, zero values),
and its local graph is given ``S_in`` as its initial state for the backward. The backward
mirrors it: ``dS_in = M^T dS_out + D`` with ``D = sum_t Q~_t do_t^T (+ M^T dht)`` the local
gradient of the incoming state (a product), the ``D``'s shared the same way, a fold from the
last rank, and the one local backward with the right gradient of the outgoing state. ``scan="relay"`` is a sequential reference mode instead (bitwise the
single-device results with chunk-aligned split points). Communication uses the group's backend
(gloo for CPU tensors, NCCL for CUDA tensors); nothing here is device-specific.

Beyond FLA's ``cp_context``: odd split points (``split_points=``), ``initial_state`` and
``output_final_state`` with their gradients (per *local* sequence, below), every gate mode,
GVA, ``state_v_first``. FLA's own contexts (``fla.ops.cp.build_cp_context``, contiguous
layout) are accepted too (they carry the same ``cu_seqlens`` / ``pre_num_ranks`` /
``post_num_ranks`` fields).

States with CP (``N_local`` = number of sequences in the context's local ``cu_seqlens``):

* ``initial_state``: ``[N_local, HV, K, V]``; row ``i`` is the initial state of local sequence
  ``i`` when that sequence starts on this rank. When the first local sequence started on an
  earlier rank (``ctx.pre_num_ranks > 0``) its row is ignored (the state comes from the earlier
  rank) and receives a zero gradient.
* final state: ``[N_local, HV, K, V]``; row ``i`` is the state after the last local token of
  local sequence ``i``: the sequence's final state when it ends on this rank, otherwise the state
  at this rank's boundary (the state the next rank starts from), with a correct gradient either
  way.

Every rank of the group must make the same calls (forward and backward) in the same order:
each forward and each backward communicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.distributed as dist

__all__ = ["CPContext", "build_cp_context", "split_cu_seqlens"]

_SCANS = ("auto", "allgather", "doubling", "relay")

# How many backwards rebuilt their local graph (forward (1) saved a copy of the incoming-state
# tensor: padded head sizes, value slices); the tests read it.
REBUILT_GRAPHS = 0


@dataclass
class CPContext:
    """This rank's part of a packed stream (FLA's ``FLACPContext`` field names, plus more).

    ``cu_seqlens`` / ``cu_seqlens_cpu``: the local sequence boundaries (int32), on the device of
    the global ``cu_seqlens`` / in CPU memory; empty sequences of the stream are kept (each on the
    rank holding its position), so every global sequence is local to the ranks it touches.
    ``pre_num_ranks`` / ``post_num_ranks``: how many earlier / later ranks the first / last local
    sequence spans. ``start`` / ``end``: this rank's global token range; ``seq_ids``: the global
    index of each local sequence. ``scan``: how the ranks' transforms are combined:
    ``"allgather"`` (one all-gather, then each rank folds the ranks before it: one collective,
    ``(W - 1)`` messages received), ``"doubling"`` (recursive doubling with point-to-point
    messages: ``ceil(log2 W) + 1`` rounds of one message), ``"auto"`` (all-gather up to 8 ranks),
    ``"relay"`` (sequential: each rank waits for the state of the rank before it, and in the
    backward for the gradient of the rank after it; no transition, one local pass each way; a
    reference mode: with split points on 64-token chunk boundaries of the sequences it gives
    bitwise the single-device results, but the ranks of one sequence run one after another).
    """

    group: Optional[object] = None
    cu_seqlens: Optional[torch.Tensor] = None
    cu_seqlens_cpu: Optional[torch.Tensor] = None
    is_first_rank: bool = True
    is_last_rank: bool = True
    pre_num_ranks: int = 0
    post_num_ranks: int = 0
    conv1d_kernel_size: Optional[int] = None
    pre_num_conv_tokens: int = 0
    layout: str = "contiguous"
    rank: int = 0
    world_size: int = 1
    start: int = 0
    end: int = 0
    seq_ids: Optional[torch.Tensor] = None
    scan: str = "auto"

    @property
    def num_seqs(self) -> int:
        return 0 if self.cu_seqlens is None else len(self.cu_seqlens) - 1

    @property
    def is_cp_enabled(self) -> bool:
        return self.group is not None


def split_cu_seqlens(cu_seqlens_cpu: torch.Tensor, split_points: Sequence[int], rank: int):
    """Local ``cu_seqlens`` (int64), global sequence ids, and (pre, post) rank counts of ``rank``
    for the token ranges ``[split_points[r], split_points[r + 1])``."""
    cu = [int(x) for x in cu_seqlens_cpu.tolist()]
    sp = [int(x) for x in split_points]
    s, e, T = sp[rank], sp[rank + 1], sp[-1]
    ids, local = [], [0]
    for i in range(len(cu) - 1):
        a, b = cu[i], cu[i + 1]
        if a < b:
            take = a < e and b > s
        else:  # an empty sequence lives on the rank holding its position (the last rank at T)
            take = s <= a < e or (a == T and e == T)
        if take:
            ids.append(i)
            local.append(min(b, e) - s)
    first_a = cu[ids[0]] if ids else s
    last_b = cu[ids[-1] + 1] if ids else e
    pre = sum(1 for r in range(rank) if sp[r + 1] > first_a and sp[r] < sp[r + 1]) if first_a < s else 0
    post = (sum(1 for r in range(rank + 1, len(sp) - 1) if sp[r] < last_b and sp[r] < sp[r + 1])
            if last_b > e else 0)
    return torch.tensor(local, dtype=torch.int64), torch.tensor(ids, dtype=torch.int64), pre, post, first_a


def build_cp_context(
    cu_seqlens: torch.Tensor,
    group=None,
    conv1d_kernel_size: Optional[int] = None,
    cu_seqlens_cpu: Optional[torch.Tensor] = None,
    use_tf32x3_affine_chain: bool = True,
    layout: str = "contiguous",
    *,
    split_points: Optional[Sequence[int]] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    scan: str = "auto",
) -> CPContext:
    """This rank's :class:`CPContext` (FLA's ``build_cp_context`` arguments, plus more).

    Args:
        cu_seqlens: the global ``[N + 1]`` boundaries of the packed stream (before splitting).
        group: the process group (``None``: the default group).
        conv1d_kernel_size: kept for FLA's short-convolution layers (not used by linattn's ops).
        cu_seqlens_cpu: the same values in CPU memory (saves a copy from the device).
        use_tf32x3_affine_chain: FLA's legacy flag; must be True (linattn folds in float32, or
            float64 for float64 inputs).
        layout: ``"contiguous"`` only (FLA's ``"zigzag"`` is refused).
        split_points: the ranks' token ranges, ``world_size + 1`` non-decreasing offsets from 0
            to ``T`` (rank r holds ``[split_points[r], split_points[r+1])``); any offsets, every
            rank at least one token. Default: FLA's equal split (``T`` divisible by the world size).
        rank, world_size: default: those of ``group``.
        scan: ``"auto"``, ``"allgather"``, ``"doubling"`` or ``"relay"`` (see :class:`CPContext`).
    """
    if scan not in _SCANS:
        raise ValueError(f"build_cp_context: scan must be one of {_SCANS}, got {scan!r}")
    if not use_tf32x3_affine_chain:
        raise ValueError("build_cp_context: use_tf32x3_affine_chain=False is not supported (FLA refuses it too)")
    if layout != "contiguous":
        raise NotImplementedError(f"build_cp_context: layout {layout!r} is not supported by linattn (contiguous only)")
    if world_size is None:
        world_size = dist.get_world_size(group=group)
    if rank is None:
        rank = dist.get_rank(group=group)
    if cu_seqlens_cpu is None:
        cu_seqlens_cpu = cu_seqlens.detach().cpu()
    cu_cpu = cu_seqlens_cpu.to(torch.int64)
    if cu_cpu.dim() != 1 or cu_cpu.numel() < 2 or cu_cpu[0] != 0 or bool((cu_cpu[1:] < cu_cpu[:-1]).any()):
        raise ValueError("build_cp_context: cu_seqlens must be 1-D, start at 0 and be non-decreasing")
    T = int(cu_cpu[-1])
    if split_points is None:
        if T % world_size:
            raise ValueError(f"build_cp_context: the total length ({T}) must be divisible by the world size "
                             f"({world_size}) for the equal split; pass split_points for another split")
        split_points = [T // world_size * r for r in range(world_size + 1)]
    sp = [int(x) for x in split_points]
    if len(sp) != world_size + 1 or sp[0] != 0 or sp[-1] != T or any(b <= a for a, b in zip(sp, sp[1:])):
        raise ValueError(f"build_cp_context: split_points must be {world_size + 1} increasing offsets from 0 to {T} "
                         f"(every rank holds at least one token), got {sp}")
    local, ids, pre, post, first_a = split_cu_seqlens(cu_cpu, sp, rank)
    local32 = local.to(torch.int32)
    return CPContext(group=group, cu_seqlens=local32.to(cu_seqlens.device), cu_seqlens_cpu=local32,
                     is_first_rank=pre == 0, is_last_rank=post == 0, pre_num_ranks=pre, post_num_ranks=post,
                     conv1d_kernel_size=conv1d_kernel_size, pre_num_conv_tokens=max(0, sp[rank] - first_a),
                     layout="contiguous", rank=rank, world_size=world_size, start=sp[rank], end=sp[rank + 1],
                     seq_ids=ids, scan=scan)


# --------------------------------------------------------------------------- the operator


def _all_gather(t: torch.Tensor, group) -> torch.Tensor:
    n = dist.get_world_size(group=group)
    out = [torch.empty_like(t) for _ in range(n)]
    dist.all_gather(out, t.contiguous(), group=group)
    return torch.stack(out)


def _slice_tokens(t, a, b):
    return None if t is None else t[:, a:b]


def _use_doubling(cpc, W):
    scan = getattr(cpc, "scan", "auto")
    if scan not in _SCANS:
        raise ValueError(f"cp_context.scan must be one of {_SCANS}, got {scan!r}")
    return scan == "doubling" or (scan == "auto" and W > 8)


def _exchange(t, send_to, recv_from, group):
    """Send ``t`` to group rank ``send_to`` and receive a tensor like it from ``recv_from``
    (either may be None); returns the received tensor or None."""
    def peer(p):
        return p if group is None else dist.get_global_rank(group, p)

    ops, buf = [], None
    if send_to is not None:
        ops.append(dist.P2POp(dist.isend, t.contiguous(), peer(send_to), group))
    if recv_from is not None:
        buf = torch.empty_like(t)
        ops.append(dist.P2POp(dist.irecv, buf, peer(recv_from), group))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    return buf


def _compose(cur, other, K):
    """``[A | B]`` of the map ``x -> A_cur (A_other x + B_other) + B_cur``."""
    a, b, o = cur[..., :K].double(), cur[..., K:].double(), other.double()  # float64: never TF32
    return torch.cat([a @ o[..., :K], a @ o[..., K:] + b], -1).to(cur.dtype)


def _doubling_scan(cur, K, group, W, r, forward):
    """Inclusive scan of affine maps over the ranks (recursive doubling), then a shift by one:
    forward, rank r gets ``B`` of ``f_{r-1} o ... o f_0``; backward, ``B`` of
    ``g_{r+1} o ... o g_{W-1}``. None where there is no such rank."""
    step = 1 if forward else -1
    d = 1
    while d < W:
        to, frm = r + step * d, r - step * d
        got = _exchange(cur, to if 0 <= to < W else None, frm if 0 <= frm < W else None, group)
        if got is not None:
            cur = _compose(cur, got, K)
        d *= 2
    to, frm = r + step, r - step
    return _exchange(cur[..., K:].contiguous(), to if 0 <= to < W else None, frm if 0 <= frm < W else None, group)


def _scan_forward(M, C, HV, K, V, sdt, device, group, W, r, pre, cpc):
    """Every rank's incoming state from the affine maps ``S -> M_j S + C_j`` of the ranks before
    it (``M_j = 0`` where rank j's last sequence starts on it or does not continue: the fold then
    restarts at ``C_j`` exactly, so no flag and no host synchronisation is needed). Returns (the
    gathered M's or None, this rank's incoming state or None)."""
    if _use_doubling(cpc, W):
        cur = torch.zeros(HV, K, K + V, dtype=sdt, device=device)
        if M is not None:
            cur[..., :K] = M
        if C is not None:
            cur[..., K:] = C
        s_in = _doubling_scan(cur, K, group, W, r, forward=True)
        return None, (s_in if pre else None)
    packed = torch.zeros(HV, K, K + V, dtype=sdt, device=device)
    if M is not None:
        packed[..., :K] = M
    if C is not None:
        packed[..., K:] = C
    # one all-gather: [M | C] of the last sequence (zeros when it does not continue)
    gathered = _all_gather(packed, group)  # [W, HV, K, K + V]
    Ms, Cs = gathered[..., :K], gathered[..., K:]
    if not pre:
        return Ms, None
    # the fold in float64 (a few K x K x V products per rank; never TF32 whatever torch's
    # matmul settings)
    S = torch.zeros(HV, K, V, dtype=torch.float64, device=device)
    for j in range(r):  # S <- M_j S + C_j (= C_j where M_j = 0)
        S = Ms[j].double() @ S + Cs[j].double()
    return Ms, S.to(sdt)


def _scan_backward(D, st):
    """The gradient of the state leaving this rank (``dS_in`` of rank r + 1) from the ranks'
    ``D_j`` (gradient of the incoming state from their own outputs) and transitions:
    ``dS_in_j = M_j^T dS_in_{j+1} + D_j`` folded from the last rank."""
    if st.Ms is None:  # recursive doubling over the maps x -> M_j^T x + D_j
        K = D.shape[-2]
        cur = torch.zeros(*D.shape[:-1], K + D.shape[-1], dtype=D.dtype, device=D.device)
        if st.M_own is not None:
            cur[..., :K] = st.M_own.transpose(-1, -2)
        cur[..., K:] = D
        e = _doubling_scan(cur, K, st.group, st.W, st.r, forward=False)
        return e if st.post else None
    gathered = _all_gather(D, st.group)  # [W, HV, K, V]
    if not st.post:
        return None
    e = torch.zeros_like(D, dtype=torch.float64)
    for j in range(st.W - 1, st.r, -1):
        e = st.Ms[j].double().transpose(-1, -2) @ e + gathered[j].double()  # = D_j where M_j = 0
    return e.to(D.dtype)


class _CPState:
    """What a rank needs for its backward: the local graph and the gathered transforms."""


class _exact_fp32_matmul:
    """float32 products in float32 (never TF32, whatever torch's matmul settings say)."""

    def __enter__(self):
        m = torch.backends.cuda.matmul
        self._attr = "fp32_precision" if hasattr(m, "fp32_precision") else "allow_tf32"
        self._prev = getattr(m, self._attr)
        setattr(m, self._attr, "ieee" if self._attr == "fp32_precision" else False)

    def __exit__(self, *exc):
        setattr(torch.backends.cuda.matmul, self._attr, self._prev)


def _first_sequence_map(local_fwd, tensors, b0, K, sdt):
    """``(Q~, M)`` of the local tokens ``[0, b0)`` (the first local sequence): ``M`` (K x K per
    head) maps the state entering the sequence to the state after them, and ``Q~_t = scale M_t^T
    q_t`` is the gradient of ``o_t`` with respect to it (``o_t = o_t(S_in = 0) + S_in^T Q~_t``).
    One call from the identity with zero values: its outputs are ``Q~``, its final state ``M``
    (every gate and option as in the local call: ``M`` and ``Q~`` are those of that call)."""
    q, k, v, g, beta, A_log, dt_bias = tensors
    q, k, g, beta = (_slice_tokens(t, 0, b0) for t in (q, k, g, beta))
    HV = v.shape[2]
    eye = torch.eye(K, dtype=sdt, device=v.device).expand(1, HV, K, K).contiguous()
    qt, fm = local_fwd(q, k, v.new_zeros(1, b0, HV, K), g, beta, A_log, dt_bias, eye, None, None)
    return qt, fm[0]


def _add_incoming_state_term(o, qt, s_in):
    """``o_t += s_in^T Q~_t`` in place for the tokens of ``qt`` (``o``: ``[1, T, HV, V]``, the
    first ``qt.shape[1]`` tokens): one batched product per head, rounded once into o's dtype."""
    b0 = qt.shape[1]
    c = o[0, :b0].transpose(0, 1)  # [HV, b0, V], a view of o
    with _exact_fp32_matmul():
        c.baddbmm_(qt[0].transpose(0, 1).to(c.dtype), s_in.to(c.dtype))


def _incoming_state_gradient(qt, do, M, dfs0):
    """``D = sum_t Q~_t do_t^T (+ M^T dfs0)``: the gradient of this rank's loss terms with respect
    to the state entering its first sequence (``dfs0``: the gradient of that sequence's returned
    final-state row, None if none). Products accumulate in float32 (float64 for float64)."""
    b0 = qt.shape[1]
    sdt = M.dtype
    a = qt[0].permute(1, 2, 0)  # [HV, K, b0]
    d = do[0, :b0].transpose(0, 1).to(a.dtype)  # [HV, b0, V]
    D = None
    if a.dtype in (torch.float16, torch.bfloat16) and a.is_cuda and sdt == torch.float32:
        try:  # 16-bit products with a float32 result (torch >= 2.9 on CUDA)
            D = torch.bmm(a, d, out_dtype=torch.float32)
        except (TypeError, RuntimeError):
            D = None
    with _exact_fp32_matmul():
        if D is None:
            D = torch.bmm(a.to(sdt), d.to(sdt))
        if dfs0 is not None:
            D = D + M.transpose(-1, -2) @ dfs0.to(sdt)
    return D


class _CPChunk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local, local_fwd, cpc, build_graph, q, k, v, g, beta, A_log, dt_bias, h0):
        tensors = (q, k, v, g, beta, A_log, dt_bias)
        group = cpc.group
        W = dist.get_world_size(group=group)
        r = dist.get_rank(group=group)
        cu = [int(x) for x in cpc.cu_seqlens_cpu.tolist()]
        n_local = len(cu) - 1
        pre, post = cpc.pre_num_ranks > 0, cpc.post_num_ranks > 0
        if n_local < 1 or q.shape[1] != cu[-1]:
            raise ValueError(f"cp_context: this rank holds {q.shape[1]} tokens but its local cu_seqlens "
                             f"covers {cu[-1]} in {n_local} sequences")
        K, HV, V = q.shape[-1], v.shape[2], v.shape[-1]
        sdt = torch.float64 if v.dtype == torch.float64 else torch.float32  # the states' dtype
        relay = getattr(cpc, "scan", "auto") == "relay"
        # the incoming row of a continued first sequence starts at zero: its state comes from
        # the earlier ranks
        h0_loc = h0
        if pre:
            h0_loc = (h0.to(sdt).clone() if h0 is not None
                      else torch.zeros(n_local, HV, K, V, dtype=sdt, device=v.device))
            h0_loc[0] = 0
        cu_dev, cu_cpu = cpc.cu_seqlens, cpc.cu_seqlens_cpu

        def run_local(h0_run, fn, grad_h0=False):
            """The local call; with its graph (leaves detached from the inputs) when one is built."""
            if not build_graph:
                with torch.no_grad():
                    o, fs = fn(*tensors, h0_run, cu_dev, cu_cpu)
                return o, fs, None
            with torch.enable_grad():
                leaves = [None if t is None else t.detach().requires_grad_(need)
                          for t, need in zip(tensors + (h0_run,), ctx.needs_input_grad[4:])]
                if grad_h0:
                    leaves[-1].requires_grad_(True)
                o, fs = fn(*leaves, cu_dev, cu_cpu)
            return o, fs, leaves

        st = _CPState()
        st.pre, st.post, st.r, st.W, st.group, st.n_local, st.relay = pre, post, r, W, group, n_local, relay
        st.h0_given, st.Ms, st.M_own, st.qt, st.m_first = h0 is not None, None, None, None, None
        st.rebuild = None
        if relay:  # sequential: wait for rank r - 1's state, hand ours to rank r + 1
            if pre:
                h0_loc[0] = _exchange(torch.zeros(HV, K, V, dtype=sdt, device=v.device), None, r - 1, group)
            o, fs, leaves = run_local(h0_loc, local, grad_h0=pre)  # dh0[0] goes back to rank r - 1
            if post:
                _exchange(fs[-1].detach().to(sdt), r + 1, None, group)
            o_out, fs_out = o.detach(), fs.detach()
        elif not pre:
            # nothing comes in: the local call is final at once, and its last state is what the
            # next rank needs (C with M = 0)
            o, fs, leaves = run_local(h0_loc, local)
            with torch.no_grad():
                st.Ms, _ = _scan_forward(None, fs[-1].detach() if post else None, HV, K, V, sdt,
                                                   v.device, group, W, r, False, cpc)
            o_out, fs_out = o.detach(), fs.detach()
        else:
            from ._torch_ops import capture_saved_initial_states

            # (1) the local call from a zero incoming state, with its graph (no disable_recompute
            # buffer: it would hold this call's states); on CUDA it also computes the state map
            # in its own pass where the backend can (Hopper, 16-bit, K = 128: the prep once, K
            # more columns in the sequential pass)
            qt = None
            if v.is_cuda:
                try:
                    with capture_saved_initial_states(state_map=True) as rec:
                        o, fs, leaves = run_local(h0_loc, local_fwd)
                except NotImplementedError:
                    rec = None
                if rec is not None and len(rec.maps) == 1:
                    qt, m_first = rec.maps[0][0][:, :cu[1]], rec.maps[0][1][0]
                elif rec is not None:  # several calls (value slices): redo without the request
                    rec = None
            if qt is None:
                with capture_saved_initial_states() as rec:
                    o, fs, leaves = run_local(h0_loc, local_fwd)
                # (2) elsewhere the first sequence's map from its own call: Q~ and M
                with torch.no_grad():
                    qt, m_first = _first_sequence_map(local_fwd, tensors, cu[1], K, sdt)
            saved_h0 = rec.entries
            with torch.no_grad():
                # (3) share [M | C] of the last sequence (M where the first sequence is the last)
                # and fold the earlier ranks' maps into the incoming state
                M = m_first if (post and n_local == 1) else None
                st.Ms, s_in = _scan_forward(M, fs[-1].detach() if post else None, HV, K, V, sdt,
                                                      v.device, group, W, r, True, cpc)
                # (4) the outputs from the true incoming state: o_t += S_in^T Q~_t on the first
                # sequence's tokens, its final-state row += M S_in
                o_out, fs_out = o.detach(), fs.detach()
                _add_incoming_state_term(o_out.data, qt, s_in)
                fs_out.data[0] += (m_first.double() @ s_in.double()).to(fs_out.dtype)
            st.M_own, st.qt, st.m_first = M, qt, m_first
            if build_graph:
                # (5) the backward recomputes everything from its saved inputs, so the graph of
                # (1) becomes the graph at the true incoming state once its saved initial state
                # holds it (the same storage, written through .data: autograd's version check
                # stays armed for any other in-place change). Where the call saved a copy of ours
                # (padding, slicing) the backward rebuilds the graph from the true state instead.
                slot = leaves[-1]
                ok = (len(saved_h0) == 1 and not saved_h0[0][1] and isinstance(saved_h0[0][0], torch.Tensor)
                      and saved_h0[0][0].data_ptr() == slot.data_ptr()
                      and saved_h0[0][0].shape == slot.shape and saved_h0[0][0].dtype == slot.dtype)
                if ok:
                    slot.data[0].copy_(s_in)
                else:
                    h0_true = h0_loc.clone()
                    h0_true[0] = s_in
                    st.rebuild = lambda: run_local(h0_true, local_fwd)
        if not build_graph:
            return o_out, fs_out
        st.leaves, st.o, st.fs = leaves, o, fs  # the graph's outputs
        ctx.st = st
        return o_out, fs_out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do, dfs):
        st = ctx.st
        ctx.st = None
        o, fs, leaves = st.o, st.fs, st.leaves
        do = torch.zeros_like(o) if do is None else do
        dfs = torch.zeros_like(fs) if dfs is None else dfs
        if st.rebuild is not None:
            global REBUILT_GRAPHS
            REBUILT_GRAPHS += 1
            o, fs, leaves = st.rebuild()
        want = [i for i, t in enumerate(leaves) if t is not None and t.requires_grad]
        HV, K, V = fs.shape[1], fs.shape[2], fs.shape[3]
        if st.relay:  # sequential from the last rank: one backward per rank
            if st.post:
                dfs = dfs.clone()
                dfs[-1] += _exchange(torch.zeros(HV, K, V, dtype=fs.dtype, device=fs.device), None, st.r + 1,
                                     st.group)
            res = torch.autograd.grad([o, fs], [leaves[i] for i in want], [do, dfs], allow_unused=True)
            grads = dict(zip(want, res))
            if st.pre:
                _exchange(grads[len(leaves) - 1][0].to(fs.dtype), st.r - 1, None, st.group)
        else:
            # the gradient of this rank's own loss terms with respect to its incoming state (a
            # product, no pass over the tokens), shared; the later ranks' part of the gradient of
            # the state leaving this rank comes back folded
            D = (_incoming_state_gradient(st.qt, do, st.m_first, dfs[0]) if st.pre
                 else torch.zeros(HV, K, V, dtype=fs.dtype, device=fs.device))
            e = _scan_backward(D.to(fs.dtype).contiguous(), st)
            if e is not None:
                dfs = dfs.clone()
                dfs[-1] += e
            res = torch.autograd.grad([o, fs], [leaves[i] for i in want], [do, dfs], allow_unused=True)
            grads = dict(zip(want, res))
        out = [grads.get(i) for i in range(len(leaves))]
        dh0 = out[-1] if st.h0_given else None
        if dh0 is not None and st.pre:  # the continued sequence's row was not used
            dh0 = dh0.clone()
            dh0[0] = 0
        out[-1] = dh0
        for i, t in enumerate(out[:-1]):
            if t is None and i in want:
                out[i] = torch.zeros_like(leaves[i])
        return (None, None, None, None, *out)


def cp_forward(fn, fn_name, q, k, v, g, beta, *, cp_context, A_log, dt_bias, initial_state,
               output_final_state, state_v_first, return_intermediate_states, opts):
    """``fn`` (``chunk_kda`` / ``chunk_gated_delta_rule``) under context parallelism."""
    from ._torch_ops import _VALIDATE_ONLY

    cpc = cp_context
    for attr in ("cu_seqlens", "pre_num_ranks", "post_num_ranks"):
        if getattr(cpc, attr, None) is None:
            raise ValueError(f"{fn_name}: cp_context has no {attr}; build it with linattn.cp.build_cp_context "
                             "(or fla.ops.cp.build_cp_context)")
    if getattr(cpc, "layout", "contiguous") != "contiguous":
        raise NotImplementedError(f"{fn_name}: cp_context layout {cpc.layout!r} is not supported by linattn "
                                  "(contiguous only)")
    if return_intermediate_states:
        raise NotImplementedError(f"{fn_name}: return_intermediate_states cannot be combined with cp_context")
    cu_cpu = getattr(cpc, "cu_seqlens_cpu", None)
    if cu_cpu is None:
        cu_cpu = cpc.cu_seqlens.detach().cpu()
    if _VALIDATE_ONLY.active:  # linattn.fla's verifier: the local call's rules
        return fn(q, k, v, g, beta, initial_state=initial_state, output_final_state=output_final_state,
                  state_v_first=state_v_first, cu_seqlens=cpc.cu_seqlens, cu_seqlens_cpu=cu_cpu,
                  A_log=A_log, dt_bias=dt_bias, **opts)
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"{fn_name}: cp_context needs an initialised torch.distributed process group")
    if q.dim() != 4 or q.shape[0] != 1:
        raise ValueError(f"{fn_name}: with cp_context the inputs are one packed stream (batch 1), got q of shape "
                         f"{tuple(q.shape)}")
    if cu_cpu.dtype != torch.int64:
        cu_cpu = cu_cpu.to(torch.int64)
    n_local = cu_cpu.numel() - 1
    if initial_state is not None:
        if initial_state.dim() != 4 or initial_state.shape[0] != n_local:
            raise ValueError(f"{fn_name}: with cp_context initial_state holds one state per local sequence "
                             f"({n_local}), got shape {tuple(initial_state.shape)}")
        if initial_state.dtype in (torch.float16, torch.bfloat16):
            initial_state = initial_state.float()
        if state_v_first:
            initial_state = initial_state.transpose(-1, -2)
        initial_state = initial_state.contiguous()

    class _Ctx:
        pass

    c = _Ctx()
    c.group = getattr(cpc, "group", None)
    c.cu_seqlens = cpc.cu_seqlens
    c.cu_seqlens_cpu = cu_cpu
    c.pre_num_ranks = int(cpc.pre_num_ranks)
    c.post_num_ranks = int(cpc.post_num_ranks)
    c.scan = getattr(cpc, "scan", "auto")

    def local(q, k, v, g, beta, A_log, dt_bias, h0, cu, cu_c):
        return fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, state_v_first=False,
                  cu_seqlens=cu, cu_seqlens_cpu=cu_c, A_log=A_log, dt_bias=dt_bias, **opts)

    def local_fwd(q, k, v, g, beta, A_log, dt_bias, h0, cu, cu_c):  # without a disable_recompute buffer
        return fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, state_v_first=False,
                  cu_seqlens=cu, cu_seqlens_cpu=cu_c, A_log=A_log, dt_bias=dt_bias,
                  **{**opts, "disable_recompute": False})

    inputs = (q, k, v, g, beta, A_log, dt_bias, initial_state)
    build_graph = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
    o, fs = _CPChunk.apply(local, local_fwd, c, build_graph, *inputs)
    if not output_final_state:
        return o, None
    if state_v_first:
        fs = fs.transpose(-1, -2).contiguous()
    return o, fs
