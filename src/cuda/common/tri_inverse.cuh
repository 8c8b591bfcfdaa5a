// The unit-lower-triangular inverse T = (I + A)^-1 of a chunk (64 x 64, A strictly lower
// triangular: the delta rule's tril(diag(β) K Kᵀ ⊙ decay, -1)), in blocks of 16:
//   diagonal blocks T_II by forward substitution (one thread a column, in registers);
//   off-diagonal blocks by levels on the TF32 tensor cores, T_IJ = -T_II sum_{J <= K' < I} A_IK' T_K'J.
// Two storage forms: the full 64 x 64 row-major float matrices of chunk_prep (kLdA stride), and
// the compact one of the Hopper producer (sm90/intra_chunk_scalar_delta.cuh): ten 16 x 16 blocks
// of A (diagonal ones replaced by T_II) and six off-diagonal blocks of T, 20 floats a row, in
// 25.6 KB instead of 34.8 KB — what lets three stages of the fused forward fit shared memory.
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

// Column cc of the inverse of a unit-lower-triangular 16 x 16 block (strictly lower part in blk,
// row stride LD), by forward substitution in registers: one thread a column.
template <int LD>
__device__ __forceinline__ void tri_diag_column(const float* blk, int cc, float (&tcol)[16]) {
#pragma unroll
  for (int ii = 0; ii < 16; ++ii) {
    float s = 0.f;
    if (ii > 0) {
      float arow[16];
#pragma unroll
      for (int q4 = 0; q4 < (ii + 3) / 4; ++q4) {
        const float4 a4 = *reinterpret_cast<const float4*>(blk + ii * LD + 4 * q4);
        arow[4 * q4] = a4.x; arow[4 * q4 + 1] = a4.y; arow[4 * q4 + 2] = a4.z; arow[4 * q4 + 3] = a4.w;
      }
#pragma unroll
      for (int jj = 0; jj < ii; ++jj) s = fmaf(arow[jj], tcol[jj], s);
    }
    tcol[ii] = ii < cc ? 0.f : (ii == cc ? 1.f : -s);
  }
}

// A warp's 16x16 accumulator (two m16n8 C fragments) times sign into a row-major tile (stride ld).
__device__ __forceinline__ void store_acc16(float* dst, int ld, const float (&v)[2][4], float sign) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ni = 0; ni < 2; ++ni) {
    *reinterpret_cast<float2*>(dst + g * ld + 8 * ni + 2 * t) = make_float2(sign * v[ni][0], sign * v[ni][1]);
    *reinterpret_cast<float2*>(dst + (g + 8) * ld + 8 * ni + 2 * t) = make_float2(sign * v[ni][2], sign * v[ni][3]);
  }
}

// The second half of an off-diagonal block, by one warp: given x = sum_{J <= K' < I} A_IK' T_K'J,
// T_IJ = -T_II x (x goes through the warp-private scratch X to become a B operand).
template <bool SPLIT>
__device__ __forceinline__ void tri_offdiag_finish(const float (&x)[2][4], const float* Tii, int ldt, float* X,
                                                   int ldx, float* out, int ldo) {
  float y[2][4] = {};
  store_acc16(X, ldx, x, 1.f);
  __syncwarp();
  mma16x16_f32<SPLIT>(y, Tii, ldt, X, ldx, 16);
  store_acc16(out, ldo, y, -1.f);
}

// One off-diagonal 16x16 block of T = (I + A)^-1 (unit lower triangular), by one warp:
// T_IJ = -T_II (sum_{J <= K' < I} A_IK' T_K'J), from the diagonal blocks and the blocks of rows
// J..I-1 of column block J (earlier levels). X is a warp-private 16x16 scratch (row stride kLdA).
template <bool SPLIT>
__device__ __forceinline__ void inv_offdiag_block(float* Ti, const float* Akk, float* X, int I, int J) {
  float x[2][4] = {};
  mma16x16_f32<SPLIT>(x, Akk + 16 * I * kLdA + 16 * J, kLdA, Ti + 16 * J * kLdA + 16 * J, kLdA, 16 * (I - J));
  tri_offdiag_finish<SPLIT>(x, Ti + 16 * I * kLdA + 16 * I, kLdA, X, kLdA, Ti + 16 * I * kLdA + 16 * J, kLdA);
}


// ---- compact block form: block (I, J <= I) of A at tri_block(I, J); off-diagonal T at tri_off(I, J)
constexpr int kTriLd = 20;                  // floats a block row: 16 + 4 (fragment loads on distinct banks)
constexpr int kTriBlock = 16 * kTriLd;      // floats a block
__host__ __device__ constexpr int tri_block(int I, int J) { return (I * (I + 1) / 2 + J) * kTriBlock; }
__host__ __device__ constexpr int tri_off(int I, int J) { return (I * (I - 1) / 2 + J) * kTriBlock; }

// Diagonal block b's column cc (threads 16 b + cc of one warp: a block's 16 threads share a warp),
// substituted in registers and written over A_bb once the warp has read it.
__device__ __forceinline__ void tri_diag_compact(float* Ab, int b, int cc) {
  float* blk = Ab + tri_block(b, b);
  float tcol[16];
  tri_diag_column<kTriLd>(blk, cc, tcol);
  __syncwarp();  // every thread of the block has read A_bb
#pragma unroll
  for (int ii = 0; ii < 16; ++ii) blk[ii * kTriLd + cc] = tcol[ii];
}

// One off-diagonal block T_IJ by one warp; X: a warp-private 16 x kTriLd float scratch.
template <bool SPLIT>
__device__ __forceinline__ void tri_offdiag_compact(float* Ab, float* Tb, float* X, int I, int J) {
  float x[2][4] = {};
  for (int Kp = J; Kp < I; ++Kp)  // T_K'J: the diagonal block (in Ab) for K' = J
    mma16x16_f32<SPLIT>(x, Ab + tri_block(I, Kp), kTriLd, Kp == J ? Ab + tri_block(J, J) : Tb + tri_off(Kp, J), kTriLd, 16);
  tri_offdiag_finish<SPLIT>(x, Ab + tri_block(I, I), kTriLd, X, kTriLd, Tb + tri_off(I, J), kTriLd);
  __syncwarp();  // X is reused by this warp's next block
}

}  // namespace linattn::cuda::kern
