// The whole-head decode kernel (sm_90): one CTA of 256 threads per (sequence, value head) moves
// the head's K x V state between global and shared memory with one bulk asynchronous copy each
// way (cp.async.bulk, completed on an mbarrier / a bulk group), so the state never passes through
// registers on its way in or out and a CTA has all of its 64 KB (float32) in flight at once.
// recurrent_decode.cuh's tiled kernel holds 16 KB a CTA in registers on the way in; bytes in flight
// per SM, not instructions, bound it at 87% of the copy bandwidth (docs/decode.md). The per-token
// work (staging, gate transform, l2 norms) runs once a head instead of once per 32-column tile.
//
// Applies (decode_launch.cu, `head_form`) on sm_90+ with K = V = 128, every piece aligned (the
// fast path), a state slot of whole 16-byte pieces, either state layout, and:
//   - a float32 pool: any number of tokens (the state stays float32 in shared memory), per-token
//     state indices included (speculative decoding: a bulk store of the state after each token
//     whose write slot is not padding);
//   - a bfloat16 pool: one token per sequence (fixed length T = 1: the state is read, updated and
//     written once, so keeping it bfloat16 in shared memory rounds exactly where the tiled kernel
//     does).
// The new state goes to its pool slot (in place), to final_state when that has the pool's dtype, or
// nowhere. Semantics, flags and skips are the tiled kernel's (the shared prologue helpers).
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/decode/recurrent_decode.cuh"

namespace linattn::cuda::recurrent {

constexpr int kHeadThreads = 256;
constexpr int kHeadK = 128, kHeadV = 128;

// Dynamic shared memory of the head kernel: the state tile first (16-byte aligned for the bulk
// copies), then the staged inputs and the reductions.
template <typename ST>
struct HeadSmem {
  ST state[kHeadK * kHeadV];
  float red_ab[kHeadThreads / 32][2][kHeadV];  // per warp: a, b partial sums over its 16 rows
  float sq[kHeadK], sk[kHeadK], se[kHeadK];
  float sv[kHeadV], sb[kHeadV];
  float4 red_n[kHeadK / 32];                   // per staging warp: |q|^2, |k|^2, q.k partials
  alignas(8) uint64_t bar;                     // the state's arrival
};

template <typename ST>
constexpr int head_min_blocks() { return sizeof(ST) == 4 ? 3 : 4; }

// [K, V]: lane l holds columns 4l .. 4l + 3 of every row, warp w rows 16w .. 16w + 15; the reduction
// over K is in-thread over the warp's rows, then over the 8 warps in a fixed order.
// [V, K] (VFirst): lane l holds K entries 4l .. 4l + 3, warp w the V rows 16w .. 16w + 15; a row's
// reduction over K is a warp's shuffle sum, and each row is read, updated and written in one pass
// (no barrier between the passes). Both orders are fixed: deterministic.
template <typename IO, typename ST, bool VFirst>
__global__ void __launch_bounds__(kHeadThreads, head_min_blocks<ST>()) recurrent_decode_head_kernel(const Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem_raw[];
  HeadSmem<ST>& s = *reinterpret_cast<HeadSmem<ST>*>(smem_raw);
  constexpr int K = kHeadK, V = kHeadV, kWarps = kHeadThreads / 32, kRows = K / kWarps;
  constexpr int kStateBytes = K * V * static_cast<int>(sizeof(ST));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hv = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.HV));
  const int n = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.HV));
  const int h = hv / p.G;
  const long long KV = static_cast<long long>(K) * V;
  if (tid == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(&s.bar, 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();  // the initialised barrier before any use (CUTLASS's order; racecheck checks it)

  long long bos, len;
  if (!seq_span(p, n, tid, &bos, &len)) return;

  const IO* q = static_cast<const IO*>(p.q);
  const IO* k = static_cast<const IO*>(p.k);
  const IO* v = static_cast<const IO*>(p.v);
  IO* o = static_cast<IO*>(p.o);
  // Token inputs: threads 0..127 a row (q, k, raw gate), threads 128..255 a column (v, beta).
  const bool row_thread = tid < K;
  const int rc = row_thread ? tid : tid - K;
  float in_q = 0.f, in_k = 0.f, in_g = 0.f, in_v = 0.f, in_b = 0.f;
  auto request = [&](long long tok) {
    if (row_thread) {
      const long long qk0 = (tok * p.H + h) * K;
      in_q = to_f(q[qk0 + rc]);
      in_k = to_f(k[qk0 + rc]);
      in_g = gate_raw(p, tok, hv, p.vector_gate ? rc : 0);
    } else {
      in_v = to_f(v[(tok * p.HV + hv) * V + rc]);
      in_b = p.delta ? beta_at(p, tok, hv, rc) : 0.f;
    }
  };
  request(bos);  // before the slot index: its latency overlaps the index load

  long long rslot = n;
  if (const int bit = start_slot(p, n, len, &rslot); bit >= 0) {
    skip_sequence<IO, kHeadThreads>(p, bos, len, hv, 0, V, bit);
    return;
  }
  const long long slot_off = rslot * p.state_stride + hv * KV;
  if (p.has_state) {
    if (tid == 0) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&s.bar, kStateBytes);
      cute::SM90_BULK_COPY_G2S::copy(static_cast<const ST*>(p.state) + slot_off, &s.bar, s.state, kStateBytes);
    }
  } else {
    for (int i = tid; i < kStateBytes / 16; i += kHeadThreads) reinterpret_cast<uint4*>(s.state)[i] = make_uint4(0u, 0u, 0u, 0u);
  }

  const int r0 = warp * kRows, c0 = 4 * lane;
  int late_bits = 0;  // a write slot past the pool: raised after the token loop (see start_slot)
  for (long long t = 0; t < len; ++t) {
    const long long tok = bos + t;
    if (t > 0) {
      // a per-token state store (speculative decoding) has read shared memory before anyone
      // rewrites it
      if (p.indices_2d && tid == 0) cute::tma_store_wait<0>();
      __syncthreads();  // the previous token's readers of the staged inputs and partials are done
      request(tok);
    }
    // ---- stage
    if (row_thread) {
      s.sq[rc] = in_q;
      s.sk[rc] = in_k;
      s.se[rc] = expf(log_decay_from(p, in_g, hv, p.vector_gate ? rc : 0));
      const float nq = group_sum<32>(in_q * in_q), nk = group_sum<32>(in_k * in_k), nqk = group_sum<32>(in_q * in_k);
      if (lane == 0) s.red_n[warp] = make_float4(nq, nk, nqk, 0.f);
    } else {
      s.sv[rc] = in_v;
      s.sb[rc] = in_b;
    }
    __syncthreads();
    float4 nn = s.red_n[0];
#pragma unroll
    for (int w = 1; w < K / 32; ++w) {  // fixed order: deterministic
      const float4 x = s.red_n[w];
      nn = make_float4(nn.x + x.x, nn.y + x.y, nn.z + x.z, 0.f);
    }
    const float rq = p.l2norm ? gate::l2_rnorm(nn.x) : 1.f;
    const float rk = p.l2norm ? gate::l2_rnorm(nn.y) : 1.f;
    const float qs = rq * p.scale;
    const float qk = nn.z * qs * rk;
    if (t == 0 && p.has_state) cutlass::arch::ClusterTransactionBarrier::wait(&s.bar, 0);

    if constexpr (VFirst) {
      // ---- each V row in one pass: a_v, b_v by the warp's shuffle sums, then S_v = S'_v + u_v k
      const float4 kq = *reinterpret_cast<const float4*>(s.sk + c0);
      const float4 qq = *reinterpret_cast<const float4*>(s.sq + c0);
      const float4 ee = *reinterpret_cast<const float4*>(s.se + c0);
      float o_row = 0.f;
#pragma unroll 4
      for (int i = 0; i < kRows; ++i) {
        const int vr = r0 + i;
        ST* at = s.state + vr * K + c0;
        float4 x = load_piece(at);
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          f4(x, j) *= f4(ee, j);
          a += f4(kq, j) * f4(x, j);
          b += f4(qq, j) * f4(x, j);
        }
        a = group_sum<32>(a);
        b = group_sum<32>(b);
        const float u = p.delta ? s.sb[vr] * (s.sv[vr] - a * rk) : s.sv[vr];
        if (lane == i) o_row = b * qs + qk * u;
        const float ku = rk * u;
#pragma unroll
        for (int j = 0; j < 4; ++j) f4(x, j) += f4(kq, j) * ku;
        store_piece(at, x);
      }
      if (lane < kRows) o[(tok * p.HV + hv) * V + r0 + lane] = from_f<IO>(o_row);
    } else {
    // ---- pass 1: a = S'^T k, b = S'^T q over this thread's rows and columns
    float a[4] = {0.f, 0.f, 0.f, 0.f}, b[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i4 = 0; i4 < kRows; i4 += 4) {
      const float4 kq = *reinterpret_cast<const float4*>(s.sk + r0 + i4);
      const float4 qq = *reinterpret_cast<const float4*>(s.sq + r0 + i4);
      const float4 ee = *reinterpret_cast<const float4*>(s.se + r0 + i4);
#pragma unroll
      for (int ii = 0; ii < 4; ++ii) {
        const float4 x = load_piece(s.state + (r0 + i4 + ii) * V + c0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float sd = f4(x, j) * f4(ee, ii);
          a[j] += f4(kq, ii) * sd;
          b[j] += f4(qq, ii) * sd;
        }
      }
    }
    *reinterpret_cast<float4*>(&s.red_ab[warp][0][c0]) = make_float4(a[0], a[1], a[2], a[3]);
    *reinterpret_cast<float4*>(&s.red_ab[warp][1][c0]) = make_float4(b[0], b[1], b[2], b[3]);
    __syncthreads();
    float4 A = *reinterpret_cast<const float4*>(&s.red_ab[0][0][c0]);
    float4 B = *reinterpret_cast<const float4*>(&s.red_ab[0][1][c0]);
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {  // fixed order: deterministic
      const float4 x = *reinterpret_cast<const float4*>(&s.red_ab[w][0][c0]);
      const float4 y = *reinterpret_cast<const float4*>(&s.red_ab[w][1][c0]);
      A = make_float4(A.x + x.x, A.y + x.y, A.z + x.z, A.w + x.w);
      B = make_float4(B.x + y.x, B.y + y.y, B.z + y.z, B.w + y.w);
    }
    const float4 vv = *reinterpret_cast<const float4*>(s.sv + c0);
    const float4 bb = *reinterpret_cast<const float4*>(s.sb + c0);
    float u[4];
    float4 ov;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      u[j] = p.delta ? f4(bb, j) * (f4(vv, j) - f4(A, j) * rk) : f4(vv, j);
      f4(ov, j) = f4(B, j) * qs + qk * u[j];
    }
    if (warp == 0) st4(o + (tok * p.HV + hv) * V + c0, ov, true, 4);
    // ---- pass 2: S = S' + k u^T, in place (each thread rewrites exactly the pieces it read)
#pragma unroll
    for (int i4 = 0; i4 < kRows; i4 += 4) {
      const float4 kq = *reinterpret_cast<const float4*>(s.sk + r0 + i4);
      const float4 ee = *reinterpret_cast<const float4*>(s.se + r0 + i4);
#pragma unroll
      for (int ii = 0; ii < 4; ++ii) {
        ST* at = s.state + (r0 + i4 + ii) * V + c0;
        float4 x = load_piece(at);
        const float kn = f4(kq, ii) * rk;
#pragma unroll
        for (int j = 0; j < 4; ++j) f4(x, j) = f4(x, j) * f4(ee, ii) + kn * u[j];
        store_piece(at, x);
      }
    }
    }
    // ---- speculative decoding: the state after token t to slot idx[n, t] (negative: not kept)
    if (p.indices_2d) {
      const long long w = ld_index(p.indices, p.idx64, static_cast<long long>(n) * p.index_cols + t);
      if (w >= p.pool_slots) {
        late_bits |= 1;
      } else if (w >= 0) {
        cute::tma_store_fence();
        __syncthreads();
        if (tid == 0) {
          cute::SM90_BULK_COPY_S2G::copy(s.state, static_cast<ST*>(p.state) + w * p.state_stride + hv * KV, kStateBytes);
          cute::tma_store_arrive();
        }
      }
    }
  }
  if (late_bits != 0 && tid == 0 && p.status) atomicOr(p.status, late_bits);
  if (p.indices_2d) {
    if (tid == 0) cute::tma_store_wait<0>();  // shared memory must outlive the copies' reads
    return;
  }

  // ---- the new state out: one bulk store from shared memory
  ST* dst = nullptr;
  if (p.inplace) {
    dst = static_cast<ST*>(p.state) + slot_off;
  } else if (p.has_final) {
    dst = static_cast<ST*>(p.final_state) + static_cast<long long>(n) * p.HV * KV + hv * KV;
  }
  if (dst != nullptr) {
    cute::tma_store_fence();  // this thread's shared-memory writes, before the async proxy reads them
    __syncthreads();
    if (tid == 0) {
      cute::SM90_BULK_COPY_S2G::copy(s.state, dst, kStateBytes);
      cute::tma_store_arrive();
      cute::tma_store_wait<0>();  // shared memory must outlive the copy's reads
    }
  }
#endif
}

// One launch of the head kernel (the caller checked head_form).
template <typename IO, typename ST, bool VFirst>
cudaError_t launch_head_t(const Params& p, cudaStream_t stream) {
  auto kernel = recurrent_decode_head_kernel<IO, ST, VFirst>;
  constexpr int smem = static_cast<int>(sizeof(HeadSmem<ST>));
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const long long blocks = static_cast<long long>(p.N) * p.HV;
  kernel<<<static_cast<unsigned>(blocks), kHeadThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

// The launch of every decode form for IO element type `io` (one dtype per translation unit).
template <typename IO>
cudaError_t launch_form(const Params& p, int st_bf16, bool v_first, int kb, bool fast, DecodeForm form,
                        cudaStream_t stream) {
  if (form == DecodeForm::kHead) {
    if (v_first) return st_bf16 ? launch_head_t<IO, __nv_bfloat16, true>(p, stream) : launch_head_t<IO, float, true>(p, stream);
    return st_bf16 ? launch_head_t<IO, __nv_bfloat16, false>(p, stream) : launch_head_t<IO, float, false>(p, stream);
  }
  return launch_io<IO>(p, st_bf16, v_first, kb, fast, form == DecodeForm::kWide, stream);
}

}  // namespace linattn::cuda::recurrent
