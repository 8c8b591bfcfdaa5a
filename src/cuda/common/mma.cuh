// Warp-level tensor-core products for the chunk kernels (CuTe SM80 mma.sync atoms).
//
// warp_mma accumulates a (16*MI) x (8*NI) tile of A * B into float accumulators in the C
// fragment layout of m16n8k*: acc[mi][ni][0..3] holds rows (g, g, g+8, g+8) and columns
// (2t, 2t+1, 2t, 2t+1) of its 16x8 tile, with g = lane / 4, t = lane % 4.
//
// Operands come through loaders, so they can live in shared memory, in global memory, or be
// computed on the fly (decay factors):
//   16-bit types: la.pair(m, k) packs A(m,k), A(m,k+1); lb.pair(k, n) packs B(k,n), B(k+1,n)
//   float:        la.at(m, k), lb.at(k, n); the product runs as 3xTF32 (big*big + big*small +
//                 small*big), close to float32 accuracy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include <cute/arch/mma_sm80.hpp>

namespace linattn::cuda::kern {

template <class T>
inline constexpr bool kIs16 = !std::is_same_v<T, float>;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }

// Adds the squares of the eight 16-bit values packed in a to sq, and of those in b to sk, in
// element order: exact squares, float32 sums (the l2 norms' sums of the Hopper backward's pass 2).
template <class T>
__device__ __forceinline__ void add_squares8(uint4 a, uint4 b, float& sq, float& sk) {
  const T* ae = reinterpret_cast<const T*>(&a);
  const T* be = reinterpret_cast<const T*>(&b);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    sq += to_f(ae[e]) * to_f(ae[e]);
    sk += to_f(be[e]) * to_f(be[e]);
  }
}

template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

template <class T>
__device__ __forceinline__ uint32_t pack2(float a, float b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Stores two adjacent elements (x at p[0], y at p[1]).
template <class T>
__device__ __forceinline__ void store2(T* p, float x, float y) {
  if constexpr (kIs16<T>) {
    *reinterpret_cast<uint32_t*>(p) = pack2<T>(x, y);
  } else {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
  }
}

// Row-major operand: element (r, c) at p[r * ld + c]; pairs run along c.
template <class T>
struct RowOp {
  const T* p;
  int ld;
  __device__ __forceinline__ uint32_t pair(int r, int c) const {
    return *reinterpret_cast<const uint32_t*>(p + static_cast<int64_t>(r) * ld + c);
  }
  __device__ __forceinline__ float at(int r, int c) const { return to_f(p[static_cast<int64_t>(r) * ld + c]); }
};

// B operand stored n-major (element (k, n) at p[n * ld + k]).
template <class T>
struct ColOp {
  const T* p;
  int ld;
  __device__ __forceinline__ uint32_t pair(int k, int n) const {
    return *reinterpret_cast<const uint32_t*>(p + static_cast<int64_t>(n) * ld + k);
  }
  __device__ __forceinline__ float at(int k, int n) const { return to_f(p[static_cast<int64_t>(n) * ld + k]); }
};

// Operand computed by a functor f(r, c) -> float; pairs run along the second index.
template <class T, class F>
struct FnOp {
  F f;
  __device__ __forceinline__ uint32_t pair(int r, int c) const { return pack2<T>(f(r, c), f(r, c + 1)); }
  __device__ __forceinline__ float at(int r, int c) const { return f(r, c); }
};
template <class T, class F>
__device__ __forceinline__ FnOp<T, F> fn_op(F f) { return FnOp<T, F>{f}; }

// Same, for a B operand whose pairs run along the first index (k).
template <class T, class F>
struct FnOpK {
  F f;
  __device__ __forceinline__ uint32_t pair(int k, int n) const { return pack2<T>(f(k, n), f(k + 1, n)); }
  __device__ __forceinline__ float at(int k, int n) const { return f(k, n); }
};
template <class T, class F>
__device__ __forceinline__ FnOpK<T, F> fn_opk(F f) { return FnOpK<T, F>{f}; }

__device__ __forceinline__ uint32_t tf32_bits(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// x = big + small for 3xTF32, both parts truncated to TF32 (two LOP3s; inf and NaN stay what they
// are): big = x with its low 13 bits cleared, small = x - big (exact in float32) likewise.
// cvt.rna is a 4-5 instruction sequence on sm_90 (ncu: 35% of the float32 pass 2's instructions
// with two per element). The split's error is < 2^-20 |x| (two cvt.rna: <= 2^-22 |x|); the
// precision emulation (tools/precision, --site-dtype tf32x3tt) and the GPU suite's many-draw runs
// find the gradients unchanged in accuracy (bench/NOTES_cuda_forward.md, v16b).
__device__ __forceinline__ void tf32_split(float x, uint32_t& big, uint32_t& small) {
  big = __float_as_uint(x) & 0xffffe000u;
  small = __float_as_uint(x - __uint_as_float(big)) & 0xffffe000u;
}

template <class T>
__device__ __forceinline__ void mma16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    cute::SM80_16x8x16_F32BF16BF16F32_TN::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0],
                                              b[1], d[0], d[1], d[2], d[3]);
  } else {
    cute::SM80_16x8x16_F32F16F16F32_TN::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0],
                                            b[1], d[0], d[1], d[2], d[3]);
  }
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  cute::SM80_16x8x8_F32TF32TF32F32_TN::fma(d[0], d[1], d[2], d[3], a[0], a[1], a[2], a[3], b[0], b[1],
                                           d[0], d[1], d[2], d[3]);
}

// acc += A[m0 : m0+16*MI, k_begin : k_end] * B[k_begin : k_end, n0 : n0+8*NI]
// (k_begin, k_end multiples of 16; the whole warp calls it).
// A_TF32 (float): A's elements are TF32 values already (16-bit inputs widened exactly: bf16 and
// fp16 mantissas fit TF32's 10 bits, the exponent range is float32's), so A is not split and the
// small(A) x big(B) product, exactly zero, is not run: two TF32 products a step instead of three,
// a shorter dependent chain on each accumulator, the same sums.
template <class T, int MI, int NI, class LA, class LB, bool A_TF32 = false>
__device__ __forceinline__ void warp_mma(float (&acc)[MI][NI][4], const LA& la, const LB& lb, int m0,
                                         int n0, int k_begin, int k_end) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  if constexpr (kIs16<T>) {
#pragma unroll 2
    for (int k0 = k_begin; k0 < k_end; k0 += 16) {
      uint32_t a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = m0 + 16 * mi + g;
        a[mi][0] = la.pair(r, k0 + 2 * t);
        a[mi][1] = la.pair(r + 8, k0 + 2 * t);
        a[mi][2] = la.pair(r, k0 + 2 * t + 8);
        a[mi][3] = la.pair(r + 8, k0 + 2 * t + 8);
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int c = n0 + 8 * ni + g;
        b[ni][0] = lb.pair(k0 + 2 * t, c);
        b[ni][1] = lb.pair(k0 + 2 * t + 8, c);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma16<T>(acc[mi][ni], a[mi], b[ni]);
    }
  } else {
#pragma unroll 2
    for (int k0 = k_begin; k0 < k_end; k0 += 8) {
      uint32_t ab[MI][4], as[MI][4], bb[NI][2], bs[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int r = m0 + 16 * mi + g;
        const float x[4] = {la.at(r, k0 + t), la.at(r + 8, k0 + t), la.at(r, k0 + t + 4),
                            la.at(r + 8, k0 + t + 4)};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (A_TF32) ab[mi][e] = __float_as_uint(x[e]);
          else tf32_split(x[e], ab[mi][e], as[mi][e]);
        }
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int c = n0 + 8 * ni + g;
        const float x[2] = {lb.at(k0 + t, c), lb.at(k0 + t + 4, c)};
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          tf32_split(x[e], bb[ni][e], bs[ni][e]);
        }
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if constexpr (!A_TF32) mma_tf32(acc[mi][ni], as[mi], bb[ni]);
          mma_tf32(acc[mi][ni], ab[mi], bs[ni]);
          mma_tf32(acc[mi][ni], ab[mi], bb[ni]);
        }
    }
  }
}

// float (3xTF32) only: acc1 += A1 * B and acc2 += A2 * B over the same B tile, whose fragments are
// loaded and split once a step instead of once per product (the float32 form's pass 2 forms dO Sᵀ
// and dY Sᵀ from one S tile: ncu found those splits the kernel's largest cost, session 34). Each
// accumulator receives the products warp_mma would give it, in the same order: the same sums.
// A1_TF32: A1 holds TF32 values already (as warp_mma's A_TF32).
template <int MI, int NI, class LA1, class LA2, class LB, bool A1_TF32 = false>
__device__ __forceinline__ void warp_mma_pair_tf32(float (&acc1)[MI][NI][4], float (&acc2)[MI][NI][4], const LA1& la1,
                                                   const LA2& la2, const LB& lb, int m0, int n0, int k_begin,
                                                   int k_end) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 2
  for (int k0 = k_begin; k0 < k_end; k0 += 8) {
    uint32_t bb[NI][2], bs[NI][2];
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const int c = n0 + 8 * ni + g;
      tf32_split(lb.at(k0 + t, c), bb[ni][0], bs[ni][0]);
      tf32_split(lb.at(k0 + t + 4, c), bb[ni][1], bs[ni][1]);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int r = m0 + 16 * mi + g;
      uint32_t a1b[4], a1s[4], a2b[4], a2s[4];
      const float x1[4] = {la1.at(r, k0 + t), la1.at(r + 8, k0 + t), la1.at(r, k0 + t + 4), la1.at(r + 8, k0 + t + 4)};
      const float x2[4] = {la2.at(r, k0 + t), la2.at(r + 8, k0 + t), la2.at(r, k0 + t + 4), la2.at(r + 8, k0 + t + 4)};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (A1_TF32) a1b[e] = __float_as_uint(x1[e]);
        else tf32_split(x1[e], a1b[e], a1s[e]);
        tf32_split(x2[e], a2b[e], a2s[e]);
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        if constexpr (!A1_TF32) mma_tf32(acc1[mi][ni], a1s, bb[ni]);
        mma_tf32(acc1[mi][ni], a1b, bs[ni]);
        mma_tf32(acc1[mi][ni], a1b, bb[ni]);
        mma_tf32(acc2[mi][ni], a2s, bb[ni]);
        mma_tf32(acc2[mi][ni], a2b, bs[ni]);
        mma_tf32(acc2[mi][ni], a2b, bb[ni]);
      }
    }
  }
}

// ---- ldmatrix fragment loads (16-bit operands in shared memory, rows 16-byte aligned)
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// stmatrix: four 8 x 8 matrices, each lane's register m its accumulator-fragment pair of matrix
// m (row l / 4, columns 2 (l % 4), + 1); lane l gives the 16-byte row l % 8 of matrix l / 8.
__device__ __forceinline__ void stsm_x4(const uint32_t (&r)[4], void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}
// stmatrix .trans: the inverse of ldsm_x4_t (lane l's row address for matrix l / 8, row l % 8).
__device__ __forceinline__ void stsm_x4_t(const uint32_t (&r)[4], void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// A fragment (m16n8k16) of the 16x16 tile at (m0, k0) of a row-major matrix p[m * ld + k].
template <class T>
__device__ __forceinline__ void ldsm_a(uint32_t (&a)[4], const T* p, int ld, int m0, int k0) {
  const int l = threadIdx.x & 31;
  ldsm_x4(a, p + (m0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + k0 + (l >> 4) * 8);
}
// Same, the matrix stored k-major (A(m, k) at p[k * ld + m]): transposed 8x8 loads.
template <class T>
__device__ __forceinline__ void ldsm_a_k(uint32_t (&a)[4], const T* p, int ld, int m0, int k0) {
  const int l = threadIdx.x & 31;
  ldsm_x4_t(a, p + (k0 + (l & 7) + ((l >> 4) & 1) * 8) * ld + m0 + ((l >> 3) & 1) * 8);
}
// B fragments of the two 8-column tiles n0..n0+15 over k0..k0+15, B stored n-major
// (B(k, n) at p[n * ld + k]).
template <class T>
__device__ __forceinline__ void ldsm_b_n(uint32_t (&b)[2][2], const T* p, int ld, int k0, int n0) {
  const int l = threadIdx.x & 31;
  uint32_t r[4];
  ldsm_x4(r, p + (n0 + (l & 7) + (l >> 4) * 8) * ld + k0 + ((l >> 3) & 1) * 8);
  b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
}
// Same, B stored k-major (B(k, n) at p[k * ld + n]).
template <class T>
__device__ __forceinline__ void ldsm_b_k(uint32_t (&b)[2][2], const T* p, int ld, int k0, int n0) {
  const int l = threadIdx.x & 31;
  uint32_t r[4];
  ldsm_x4_t(r, p + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + n0 + (l >> 4) * 8);
  b[0][0] = r[0]; b[0][1] = r[1]; b[1][0] = r[2]; b[1][1] = r[3];
}

// acc += A[m0 : m0+16*MI, k_begin : k_end] * B[k_begin : k_end, n0 : n0+8*NI] for 16-bit
// operands in shared memory. A row-major (pa[m * lda + k]), or k-major when AK (pa[k * lda + m],
// e.g. Kᵀ read from token-major k rows); B n-major (pb[n * ldb + k]), or k-major when BK
// (pb[k * ldb + n]). NI even; offsets multiples of 8, k range multiples of 16.
template <class T, int MI, int NI, bool AK = false, bool BK = false>
__device__ __forceinline__ void warp_mma_sm(float (&acc)[MI][NI][4], const T* pa, int lda, const T* pb,
                                            int ldb, int m0, int n0, int k_begin, int k_end) {
  static_assert(NI % 2 == 0, "NI must be even");
#pragma unroll 2
  for (int k0 = k_begin; k0 < k_end; k0 += 16) {
    uint32_t a[MI][4], b[NI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      if constexpr (AK) ldsm_a_k(a[mi], pa, lda, m0 + 16 * mi, k0);
      else ldsm_a(a[mi], pa, lda, m0 + 16 * mi, k0);
    }
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
      uint32_t bb[2][2];
      if constexpr (BK) ldsm_b_k(bb, pb, ldb, k0, n0 + 16 * nj);
      else ldsm_b_n(bb, pb, ldb, k0, n0 + 16 * nj);
      b[2 * nj][0] = bb[0][0]; b[2 * nj][1] = bb[0][1];
      b[2 * nj + 1][0] = bb[1][0]; b[2 * nj + 1][1] = bb[1][1];
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma16<T>(acc[mi][ni], a[mi], b[ni]);
  }
}

// 4 consecutive 16-bit elements <-> floats (8-byte aligned).
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&x)[4]) {
  if constexpr (kIs16<T>) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int m = 0; m < 4; ++m) x[m] = to_f(e[m]);
  } else {
    const float4 u = *reinterpret_cast<const float4*>(p);
    x[0] = u.x; x[1] = u.y; x[2] = u.z; x[3] = u.w;
  }
}
template <class T>
__device__ __forceinline__ void store4(T* p, const float (&x)[4]) {
  if constexpr (kIs16<T>) {
    uint2 u;
    u.x = pack2<T>(x[0], x[1]);
    u.y = pack2<T>(x[2], x[3]);
    *reinterpret_cast<uint2*>(p) = u;
  } else {
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  }
}

template <int MI, int NI>
__device__ __forceinline__ void zero_acc(float (&acc)[MI][NI][4]) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.f;
}

// ---- scalar loads/stores of runtime dtype (small per-token tensors, states)
// dtype codes: config::DtypeCode (config/limits.hpp), equal to linattn::DType: 0 fp16, 1 bf16, 2 fp32, 3 fp64.
__device__ __forceinline__ float load_any(const void* p, int dt, int64_t i) {
  switch (dt) {
    case 0: return __half2float(static_cast<const __half*>(p)[i]);
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case 2: return static_cast<const float*>(p)[i];
    default: return static_cast<float>(static_cast<const double*>(p)[i]);
  }
}
__device__ __forceinline__ void store_state(void* p, int dt, int64_t i, float x) {
  if (dt == 3) static_cast<double*>(p)[i] = x;
  else static_cast<float*>(p)[i] = x;
}
__device__ __forceinline__ float load_state(const void* p, int dt, int64_t i) {
  return dt == 3 ? static_cast<float>(static_cast<const double*>(p)[i]) : static_cast<const float*>(p)[i];
}
// Element (key channel ch, value column vv) of one [K][V] state, or [V][K] with v_first: the
// index within a (sequence, head) state of h0, ht, h, dht, dh0.
template <int K>
__device__ __forceinline__ int64_t state_index(int V, int v_first, int ch, int vv) {
  return v_first ? static_cast<int64_t>(vv) * K + ch : static_cast<int64_t>(ch) * V + vv;
}

}  // namespace linattn::cuda::kern
