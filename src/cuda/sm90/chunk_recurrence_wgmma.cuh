// The forward's sequential pass on Hopper warpgroup MMAs, transposed so that the state never
// leaves registers (sm_90a, 16-bit, K = 128, V tile 64):
//   per chunk  V_new = U - W S,  O = Qg S + Aqk V_new,  S = exp(γ_C) S + KgT V_new
// (without the delta rule V_new = V and W is not read). One CTA of one warpgroup per
// (sequence, value head, 64-column V tile); the warpgroup holds Sᵀ (64 columns x K) as the
// float32 accumulator of an m64n128 wgmma.
//
// Why transposed: every product of the chunk has S or V_new on its left once written as
//   V_newᵀ = Uᵀ - Sᵀ Wᵀ,   Oᵀ = Sᵀ Qgᵀ + V_newᵀ Aqkᵀ,   Sᵀ = Sᵀ diag(e^γ_C) + V_newᵀ Kg,
// and a wgmma takes its A operand from registers in exactly the layout of an accumulator
// (16-bit, the same element order). So Sᵀ and V_newᵀ feed the next products straight from
// registers, converted to bf16/fp16, and the chunk's operands W, Qg, Kg, Aqk are B operands read
// from shared memory once per warpgroup instruction. The mma.sync pass (chunk_fused_warp.cu)
// reloads them per warp (4x) and exchanges partial sums through shared memory with barriers; the
// first wgmma form (branch wgmma-state, bench/NOTES_cuda_forward.md v12) wrote S and V_new to
// shared memory element by element every chunk. Here the only per-chunk shared-memory writes are
// the cp.async copies of the next chunk's operands, issued one chunk ahead.
//
// Raw-row mode (scalar gate: GDN, simple GLA): raw q rows with O's row factors and raw k rows
// (an MN-major B operand: channel contiguous) against f ⊙ V_new, as the other passes do.
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

using namespace cute;

constexpr int kC = config::kChunk;  // 64 tokens
constexpr int kK = 128;             // key head size
constexpr int kVT = 64;             // V tile = the wgmma's M
constexpr int kThreads = 128;       // one warpgroup

// CUTLASS's element type for a CUDA 16-bit type, and the wgmma atoms (A from registers, float32
// accumulators) CuTe's selector picks for it: N64 with a K-major B (W, Qg, raw q rows, Aqk), N128
// with a K-major (KgT) or MN-major (raw k rows) B for the state update.
template <class T>
struct Element;
template <>
struct Element<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct Element<__half> {
  using type = cutlass::half_t;
};
template <class T>
struct Atoms {
  using E = typename Element<T>::type;
  template <int N, GMMA::Major MB>
  using RS = decltype(GMMA::rs_op_selector<E, E, float, Shape<_64, Int<N>, _16>, GMMA::Major::K, MB>());
  using N64 = RS<64, GMMA::Major::K>;
  using N128K = RS<128, GMMA::Major::K>;
  using N128MN = RS<128, GMMA::Major::MN>;
};

// B operands (n, k) in wgmma's 128-byte-swizzled canonical layouts.
template <class E>
struct Layouts {
  using TokByK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<_64, Int<kK>>{}));   // W, Qg, q: (tok, ch)
  using ChByTok = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<Int<kK>, _64>{}));  // KgT: (ch, tok)
  using ChByTokMN = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<E>{}, Shape<Int<kK>, _64>{}));  // raw k: (ch, tok)
  using TokByTok = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<_64, _64>{}));     // Aqk: (tok, tok')
};

template <class E, bool DELTA, int STAGES>
struct alignas(1024) RecurrenceSmem {
  static constexpr int ldu = kVT + 8;  // U / V rows, padded: the accumulator-order reads hit distinct banks
  struct alignas(1024) Stage {
    alignas(1024) E w[DELTA ? kC * kK : 8];
    alignas(1024) E q[kC * kK];
    alignas(1024) E k[kK * kC];
    alignas(1024) E a[kC * kC];
    alignas(16) E u[kC * ldu];
    alignas(16) float ge[kK];      // exp(γ_C) per channel
    alignas(16) float rf[2 * kC];  // raw-row mode: O's row factors [0, 64), V_new's [64, 128)
  };
  Stage st[STAGES];
};

// Element offsets in the 128-byte-swizzled canonical layouts of Layouts<E> (16-bit E, tile base
// 1024-byte aligned): 8-row x 64-element atoms, tiled down the rows first, each row's 16-byte
// pieces permuted by XOR with the row mod 8. The same offsets as CuTe's tensors over those
// layouts (checked element by element when this was written); by hand so that a thread's copy
// offsets are a base and compile-time steps, not a swizzle evaluated per piece (ncu: the CuTe
// indexing was 35% of this kernel's instructions).
template <int ROWS>
__device__ __forceinline__ int kmajor_off(int r, int c) {  // (row, col), col contiguous
  return ((r >> 3) + (c >> 6) * (ROWS / 8)) * 512 + (r & 7) * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3);
}
__device__ __forceinline__ int mnmajor_off(int d, int j) {  // (channel d < 128, token j), d contiguous
  return ((d >> 6) + 2 * (j >> 3)) * 512 + (j & 7) * 64 + ((((d >> 3) & 7) ^ (j & 7)) << 3);
}

// 16-byte pieces of a row-major global tile (ROWS x COLS, row stride gld) into a K-major swizzled
// shared tile (kmajor_off). PRED: rows at or past `valid` are zero-filled and not read.
template <class T, int ROWS, int COLS, bool PRED>
__device__ __forceinline__ void copy_kmajor(T* dst, const T* src, int64_t gld, int tid, int valid = ROWS) {
  static_assert(sizeof(T) == 2, "16-bit");
  constexpr int ppr = COLS / 8, rstep = kThreads / ppr, iters = ROWS / rstep;
  static_assert(rstep % 8 == 0 && ROWS % rstep == 0, "whole atoms per pass");
  const int r0 = tid / ppr, c0 = (tid % ppr) * 8;
  T* s0 = dst + kmajor_off<ROWS>(r0, c0);
  const T* g0 = src + r0 * gld + c0;
#pragma unroll
  for (int it = 0; it < iters; ++it) {
    const bool ok = !PRED || r0 + it * rstep < valid;
    cp_async16_zfill(s0 + it * rstep * 64, ok ? g0 + it * rstep * gld : src, ok);
  }
}
// A token-major global tile (64 tokens x 128 channels, row stride gld) into the MN-major swizzled
// (channel, token) tile (mnmajor_off): the raw k rows as the state update's B operand.
template <class T>
__device__ __forceinline__ void copy_mnmajor(T* dst, const T* src, int64_t gld, int tid, int valid) {
  constexpr int ppr = 128 / 8, jstep = kThreads / ppr, iters = 64 / jstep;
  static_assert(jstep == 8, "one token atom per pass");
  const int j0 = tid / ppr, d0 = (tid % ppr) * 8;
  T* s0 = dst + mnmajor_off(d0, j0);
  const T* g0 = src + j0 * gld + d0;
#pragma unroll
  for (int it = 0; it < iters; ++it) {
    const bool ok = j0 + it * jstep < valid;
    cp_async16_zfill(s0 + it * 1024, ok ? g0 + it * jstep * gld : src, ok);
  }
}

template <class Acc>
__device__ __forceinline__ void fence_regs(Acc& a) {
  warpgroup_fence_operand(a);
}

// acc (an m64nN accumulator) into the A-operand registers of an m64 x kN product: the same
// element order (both are the thread's (row, column-pair) values, 8 columns per 4 values).
template <class FragA, class Acc>
__device__ __forceinline__ void acc_to_a(FragA& a, const Acc& acc) {
  using E = typename FragA::value_type;
  static_assert(decltype(size(a))::value == decltype(size(acc))::value, "same element count");
#pragma unroll
  for (int i = 0; i < size(acc); ++i) a(i) = E(acc(i));
}

// k-blocks of 16 over a register A fragment and a B descriptor tensor; the first overwrites acc
// when ZERO.
template <bool ZERO, class Mma, class FA, class FB, class Acc>
__device__ __forceinline__ void wg_gemm(Mma& mma, const FA& a, const FB& b, Acc& acc) {
  mma.accumulate_ = ZERO ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
  for (int kb = 0; kb < size<2>(a); ++kb) {
    cute::gemm(mma, a(_, _, kb), b(_, _, kb), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

template <class T, bool DELTA, bool RAW, int STAGES>
__global__ void __launch_bounds__(kThreads, 1) chunk_recurrence_wgmma_kernel(const StateParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using A = Atoms<T>;
  using E = typename A::E;
  using L = Layouts<E>;
  using Smem = RecurrenceSmem<E, DELTA, STAGES>;
  extern __shared__ unsigned char smem_raw[];
  // the 128-byte swizzle's 1024-byte period; an offset from smem_raw (not an integer round trip)
  // keeps the pointer's shared-memory provenance, so its loads compile to LDS
  const unsigned pad = (1024u - (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) & 1023u)) & 1023u;
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw + pad);
  const int V = p.V, HV = p.HV;
  const int v0 = blockIdx.x * kVT, hv = blockIdx.y, n = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const int hk = hv / p.G;

  auto mma64 = make_tiled_mma(typename A::N64{});
  auto mmaS = make_tiled_mma(std::conditional_t<RAW, typename A::N128MN, typename A::N128K>{});
  auto thr64 = mma64.get_thread_slice(tid);
  auto thrS = mmaS.get_thread_slice(tid);

  // Accumulators: element i = e + 4 nb holds (row 16 warp + g + 8 (e >> 1), column 8 nb + 2 t + (e & 1)).
  Tensor S = partition_fragment_C(mmaS, Shape<_64, Int<kK>>{});  // Sᵀ: (V column, channel)
  Tensor P = partition_fragment_C(mma64, Shape<_64, _64>{});     // Sᵀ Wᵀ: (V column, token)
  Tensor Oi = partition_fragment_C(mma64, Shape<_64, _64>{});    // Oᵀ: (V column, token)
  // A operands from registers: (values, 1, k-blocks of 16), the accumulators' element order
  Tensor Sa = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kK / 16>>{});
  Tensor Va = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
  Tensor Vk = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});  // f ⊙ V_new (raw rows)
  auto row_of = [&](int i) { return 16 * warp + g + 8 * ((i >> 1) & 1); };
  auto col_of = [&](int i) { return 8 * (i >> 2) + 2 * t + (i & 1); };

  const int64_t state_base = (static_cast<int64_t>(n) * HV + hv) * kK * V;
  auto sidx = [&](int ch, int vv) -> int64_t {
    return p.v_first ? static_cast<int64_t>(vv) * kK + ch : static_cast<int64_t>(ch) * V + vv;
  };
#pragma unroll
  for (int i = 0; i < size(S); ++i)
    S(i) = p.h0 ? load_state(p.h0, p.h0_dt, state_base + sidx(col_of(i), v0 + row_of(i))) : 0.f;

  const bool vrows = !DELTA && p.v_raw != nullptr;
  auto issue = [&](int ci) {
    auto& st = sm.st[ci % STAGES];
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    const int valid = min(kC, si.len - ci * kC);
    if constexpr (DELTA)
      copy_kmajor<T, kC, kK, false>(reinterpret_cast<T*>(st.w), static_cast<const T*>(p.W) + blk * kC * kK, kK, tid);
    if constexpr (RAW) {  // raw q / k rows ([tokens][H][K], shared by the value heads of a key head)
      const int64_t rs = static_cast<int64_t>(p.H) * kK;
      const int64_t r0 = static_cast<int64_t>(si.t0 + ci * kC) * rs + static_cast<int64_t>(hk) * kK;
      copy_kmajor<T, kC, kK, true>(reinterpret_cast<T*>(st.q), static_cast<const T*>(p.q_raw) + r0, rs, tid, valid);
      copy_mnmajor<T>(reinterpret_cast<T*>(st.k), static_cast<const T*>(p.k_raw) + r0, rs, tid, valid);
      tile_copy<float, 1, 2 * kC, kThreads>(st.rf, 2 * kC, p.rowfac + blk * 2 * kC, 2 * kC, tid);
    } else {
      copy_kmajor<T, kC, kK, false>(reinterpret_cast<T*>(st.q), static_cast<const T*>(p.Qg) + blk * kC * kK, kK, tid);
      copy_kmajor<T, kK, kC, false>(reinterpret_cast<T*>(st.k), static_cast<const T*>(p.KgT) + blk * kK * kC, kC, tid);
    }
    copy_kmajor<T, kC, kC, false>(reinterpret_cast<T*>(st.a), static_cast<const T*>(p.Aqk) + blk * kC * kC, kC, tid);
    if (vrows) {  // V_new = V from the token-major v rows; rows past the chunk's end zero
      const int64_t vs = static_cast<int64_t>(HV) * V;
      tile_copy<T, kC, kVT, kThreads, true>(reinterpret_cast<T*>(st.u), Smem::ldu,
                                            static_cast<const T*>(p.v_raw) +
                                                static_cast<int64_t>(si.t0 + ci * kC) * vs +
                                                static_cast<int64_t>(hv) * V + v0,
                                            vs, tid, valid);
    } else {
      tile_copy<T, kC, kVT, kThreads>(reinterpret_cast<T*>(st.u), Smem::ldu,
                                      static_cast<const T*>(p.U) + blk * kC * V + v0, V, tid);
    }
    tile_copy<float, 1, kK, kThreads>(st.ge, kK, p.gexp + blk * kK, kK, tid);
    cp_commit();
  };

  T* og = static_cast<T*>(p.o);
  // STAGES - 1 chunks in flight ahead of the one computed
#pragma unroll
  for (int c = 0; c < STAGES - 1; ++c)
    if (c < nch) issue(c);
  for (int ci = 0; ci < nch; ++ci) {
    const int t0 = si.t0 + ci * kC;
    const int Lc = min(kC, si.len - ci * kC);
    __syncthreads();  // every thread (and its waited wgmmas) is done with stage (ci - 1) % STAGES
    const int ahead = ci + STAGES - 1;
    if (ahead < nch) {
      issue(ahead);
      cp_wait<STAGES - 1>();
    } else if (STAGES == 3 && ci + 1 < nch) {
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    cutlass::arch::fence_view_async_shared();  // this thread's cp.async data -> the wgmma (async proxy)
    __syncthreads();
    auto& st = sm.st[ci % STAGES];
    const T* Us = reinterpret_cast<const T*>(st.u);

    Tensor tQ = thr64.partition_fragment_B(make_tensor(make_smem_ptr(st.q), typename L::TokByK{}));
    Tensor tA = thr64.partition_fragment_B(make_tensor(make_smem_ptr(st.a), typename L::TokByTok{}));
    auto tK = [&] {
      if constexpr (RAW) return thrS.partition_fragment_B(make_tensor(make_smem_ptr(st.k), typename L::ChByTokMN{}));
      else return thrS.partition_fragment_B(make_tensor(make_smem_ptr(st.k), typename L::ChByTok{}));
    }();

    acc_to_a(Sa, S);  // S before this chunk, 16-bit, as the A operand of W S and Qg S
    // then S = exp(γ_C) S (Sᵀ: columns are channels), before any wgmma of this chunk is in flight
#pragma unroll
    for (int i = 0; i < size(S); ++i) S(i) *= st.ge[col_of(i)];
    fence_regs(Sa);
    fence_regs(P);
    fence_regs(Oi);
    warpgroup_arrive();
    if constexpr (DELTA) {
      Tensor tW = thr64.partition_fragment_B(make_tensor(make_smem_ptr(st.w), typename L::TokByK{}));
      wg_gemm<true>(mma64, Sa, tW, P);
      warpgroup_commit_batch();
    }
    wg_gemm<true>(mma64, Sa, tQ, Oi);
    warpgroup_commit_batch();
    if constexpr (DELTA) {
      warpgroup_wait<1>();  // W S (Qg S may still run)
      fence_regs(P);
    }
    // V_newᵀ (V column, token) = Uᵀ - (S Wᵀ)ᵀ, in the accumulators' order; its 16-bit form for
    // O and (times the row factor in raw-row mode) for the state update
#pragma unroll
    for (int i = 0; i < size(P); ++i) {
      const int tok = col_of(i), c = row_of(i);
      float vn = to_f(Us[tok * Smem::ldu + c]);
      if constexpr (DELTA) vn -= P(i);
      Va(i) = E(vn);
      if constexpr (RAW) Vk(i) = E(vn * st.rf[kC + tok]);
    }
    // S += Kg V_new
    fence_regs(S);
    fence_regs(Va);
    fence_regs(Vk);
    warpgroup_arrive();
    wg_gemm<false>(mmaS, RAW ? Vk : Va, tK, S);
    warpgroup_commit_batch();
    warpgroup_wait<1>();  // Qg S (groups complete in order)
    fence_regs(Oi);
    if constexpr (RAW) {  // raw q rows: Qg's row factor on Qg S, before Aqk V_new joins it
#pragma unroll
      for (int i = 0; i < size(Oi); ++i) Oi(i) *= st.rf[col_of(i)];
    }
    fence_regs(Oi);
    warpgroup_arrive();
    wg_gemm<false>(mma64, Va, tA, Oi);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(Oi);
    fence_regs(S);

    // O rows: each 8x8 (V column, token) block transposed in registers, so a lane holds two
    // adjacent columns of one token (4-byte stores, 16 bytes per 4 lanes); predicated, no branch
    {
      const int64_t ostride = static_cast<int64_t>(HV) * V;
      T* orow = og + (static_cast<int64_t>(t0) + g) * ostride + static_cast<int64_t>(hv) * V + v0 + 16 * warp + 2 * t;
#pragma unroll
      for (int nb = 0; nb < kC / 8; ++nb)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          uint32_t x = pack2<T>(Oi(4 * nb + 2 * hh), Oi(4 * nb + 2 * hh + 1));
          asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(x) : "r"(x));
          asm volatile(
              "{\n .reg .pred p;\n setp.lt.s32 p, %0, %1;\n @p st.global.b32 [%2], %3;\n}\n" ::"r"(8 * nb + g),
              "r"(Lc), "l"(orow + 8 * nb * ostride + 8 * hh), "r"(x)
              : "memory");
        }
    }
  }

  if (p.ht) {
#pragma unroll
    for (int i = 0; i < size(S); ++i) store_state(p.ht, p.ht_dt, state_base + sidx(col_of(i), v0 + row_of(i)), S(i));
  }
#endif
}

template <class T, bool DELTA, bool RAW, int STAGES>
cudaError_t launch(const StateParams& p, cudaStream_t s) {
  auto kernel = chunk_recurrence_wgmma_kernel<T, DELTA, RAW, STAGES>;
  // + 1024: the kernel aligns its base to the 128-byte swizzle's 1024-byte period
  constexpr int smem = static_cast<int>(sizeof(RecurrenceSmem<typename Atoms<T>::E, DELTA, STAGES>)) + 1024;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid(p.V / kVT, p.HV, p.N);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

// The instantiations of one 16-bit type (one translation unit each: chunk_recurrence_wgmma_{bf16,fp16}.cu).
template <class T>
cudaError_t launch_type(const StateParams& p, int stages, cudaStream_t s) {
  const bool raw = p.q_raw != nullptr;
  if (p.delta) {
    if (stages == 3) return raw ? launch<T, true, true, 3>(p, s) : launch<T, true, false, 3>(p, s);
    return raw ? launch<T, true, true, 2>(p, s) : launch<T, true, false, 2>(p, s);
  }
  if (stages == 3) return raw ? launch<T, false, true, 3>(p, s) : launch<T, false, false, 3>(p, s);
  return raw ? launch<T, false, true, 2>(p, s) : launch<T, false, false, 2>(p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern
