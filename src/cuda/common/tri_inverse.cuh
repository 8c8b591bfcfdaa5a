// The unit-lower-triangular inverse T = (I + A)^-1 of a chunk (64 x 64, A strictly lower
// triangular: the delta rule's tril(diag(β) K Kᵀ ⊙ decay, -1)), in blocks of 16:
//   diagonal blocks T_II by forward substitution (one thread a column, in registers);
//   off-diagonal blocks by levels on the TF32 tensor cores, T_IJ = -T_II sum_{J <= K' < I} A_IK' T_K'J.
// Storage: the full 64 x 64 row-major float matrices of chunk_prep (kLdA stride).
#pragma once

#include "cuda/common/mma.cuh"

namespace linattn::cuda::kern {

constexpr int kLdA = 68;  // row stride (floats) of chunk_prep's 64 x 64 float matrices

// acc (16x16, two m16n8 C fragments) += A[16 x kdim] B[kdim x 16], float32 operands in shared memory
// (A row-major A[m * lda + k], B row-major B[k * ldb + n]) on the TF32 tensor cores; SPLIT: 3xTF32
// (big*big + big*small + small*big), close to float32 accuracy.
template <bool SPLIT>
__device__ __forceinline__ void mma16x16_f32(float (&acc)[2][4], const float* A, int lda, const float* B, int ldb,
                                             int kdim) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int k0 = 0; k0 < kdim; k0 += 8) {
    const float xa[4] = {A[g * lda + k0 + t], A[(g + 8) * lda + k0 + t], A[g * lda + k0 + t + 4],
                         A[(g + 8) * lda + k0 + t + 4]};
    uint32_t ab[4], as[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (SPLIT) tf32_split(xa[e], ab[e], as[e]);
      else ab[e] = tf32_bits(xa[e]);
    }
#pragma unroll
    for (int ni = 0; ni < 2; ++ni) {
      const float xb[2] = {B[(k0 + t) * ldb + 8 * ni + g], B[(k0 + t + 4) * ldb + 8 * ni + g]};
      uint32_t bb[2], bs[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if constexpr (SPLIT) tf32_split(xb[e], bb[e], bs[e]);
        else bb[e] = tf32_bits(xb[e]);
      }
      if constexpr (SPLIT) {
        mma_tf32(acc[ni], as, bb);
        mma_tf32(acc[ni], ab, bs);
      }
      mma_tf32(acc[ni], ab, bb);
    }
  }
}

// One off-diagonal 16x16 block of T = (I + A)^-1 (unit lower triangular), by one warp:
// T_IJ = -T_II (sum_{J <= K' < I} A_IK' T_K'J), from the diagonal blocks and the blocks of rows
// J..I-1 of column block J (earlier levels). X is a warp-private 16x16 scratch (row stride kLdA).
template <bool SPLIT>
__device__ __forceinline__ void inv_offdiag_block(float* Ti, const float* Akk, float* X, int I, int J) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float x[2][4], y[2][4];
#pragma unroll
  for (int ni = 0; ni < 2; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) x[ni][e] = y[ni][e] = 0.f;
  mma16x16_f32<SPLIT>(x, Akk + 16 * I * kLdA + 16 * J, kLdA, Ti + 16 * J * kLdA + 16 * J, kLdA, 16 * (I - J));
#pragma unroll
  for (int ni = 0; ni < 2; ++ni) {
    *reinterpret_cast<float2*>(X + g * kLdA + 8 * ni + 2 * t) = make_float2(x[ni][0], x[ni][1]);
    *reinterpret_cast<float2*>(X + (g + 8) * kLdA + 8 * ni + 2 * t) = make_float2(x[ni][2], x[ni][3]);
  }
  __syncwarp();
  mma16x16_f32<SPLIT>(y, Ti + 16 * I * kLdA + 16 * I, kLdA, X, kLdA, 16);
  float* out = Ti + 16 * I * kLdA + 16 * J;
#pragma unroll
  for (int ni = 0; ni < 2; ++ni) {
    *reinterpret_cast<float2*>(out + g * kLdA + 8 * ni + 2 * t) = make_float2(-y[ni][0], -y[ni][1]);
    *reinterpret_cast<float2*>(out + (g + 8) * kLdA + 8 * ni + 2 * t) = make_float2(-y[ni][2], -y[ni][3]);
  }
}


}  // namespace linattn::cuda::kern
