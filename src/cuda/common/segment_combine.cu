// The sequence-split pass's combine (docs/sequence_split.md): each segment's start state from its
// predecessors' transitions, S_{e+1} = M_e S_e + C_e, in float32 and in a fixed order (bitwise
// reproducible). One CTA per (32 value columns, value head, sequence); its segments are few (the
// split is chosen only when the chains are), so the sequential walk over them is short.
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/mma.cuh"
#include "cuda/common/scheduler.cuh"

namespace linattn::cuda::kern {
namespace {

constexpr int kK = 128;     // the wgmma pass's head size, the only one the split runs with
constexpr int kCols = 32;   // value columns a CTA
constexpr int kThreads = 256;
constexpr int kPerThread = kK * kCols / kThreads;  // 16: one channel, 16 adjacent columns

__device__ __forceinline__ int64_t state_off(const CombineParams& p, int ch, int v) {
  return p.v_first ? static_cast<int64_t>(v) * kK + ch : static_cast<int64_t>(ch) * p.V + v;
}

__global__ void __launch_bounds__(kThreads) segment_combine_kernel(const CombineParams p) {
  __shared__ __align__(16) float S[kK][kCols];  // the current start state's tile
  const auto bc = SequentialScheduler<kCols>::block_coord();
  const int c0 = bc.v0, hv = bc.hv, n = bc.n;
  const int ch = threadIdx.x >> 1, cc = (threadIdx.x & 1) * kPerThread;
  // the first entry of sequence n (entries are in sequence order; every sequence has one)
  int lo = 0, hi = p.M - 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (p.segs[mid].seq < n) lo = mid + 1;
    else hi = mid;
  }
  const int64_t state = static_cast<int64_t>(kK) * p.V;
  float acc[kPerThread];
  {
    const int64_t b = (static_cast<int64_t>(n) * p.HV + hv) * state;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i)
      acc[i] = p.h0 ? load_any(p.h0, p.h0_dt, b + state_off(p, ch, c0 + cc + i)) : 0.f;
  }
  const int W = p.V + (p.gexp ? 0 : kK);  // a transition's row: C's V columns, then M's K
  for (int e = lo; e < p.M && p.segs[e].seq == n; ++e) {
    if (e > lo) {  // acc = M_{e-1} S + C_{e-1}; the first segment's C started from h0 (M not formed)
      const float* row = p.trans + ((static_cast<int64_t>(e - 1) * p.HV + hv) * kK + ch) * W;
      float m = 0.f;  // without the delta rule: M_{e-1}'s diagonal element of this channel
      if (p.gexp && e - 1 > lo) {
        const SeqInfo sp = p.segs[e - 1];
        m = 1.f;
        for (int c = 0; c < (sp.len + 63) / 64; ++c)
          m *= p.gexp[(static_cast<int64_t>(sp.chunk0 + c) * p.HV + hv) * kK + ch];
      }
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) acc[i] = row[c0 + cc + i] + m * acc[i];
      if (!p.gexp && e - 1 > lo) {
        const float4* m4 = reinterpret_cast<const float4*>(row + p.V);
        for (int j4 = 0; j4 < kK / 4; ++j4) {
          const float4 mv = m4[j4];
          const float mj[4] = {mv.x, mv.y, mv.z, mv.w};
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float4* s4 = reinterpret_cast<const float4*>(&S[4 * j4 + u][cc]);
#pragma unroll
            for (int i = 0; i < kPerThread / 4; ++i) {
              const float4 x = s4[i];
              acc[4 * i] = fmaf(mj[u], x.x, acc[4 * i]);
              acc[4 * i + 1] = fmaf(mj[u], x.y, acc[4 * i + 1]);
              acc[4 * i + 2] = fmaf(mj[u], x.z, acc[4 * i + 2]);
              acc[4 * i + 3] = fmaf(mj[u], x.w, acc[4 * i + 3]);
            }
          }
        }
      }
      __syncthreads();  // every thread's reads of S before it is overwritten
    }
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) S[ch][cc + i] = acc[i];
    float* out = p.hseg + (static_cast<int64_t>(e) * p.HV + hv) * state;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) out[state_off(p, ch, c0 + cc + i)] = acc[i];
    __syncthreads();  // S complete before the next segment reads it
  }
}

}  // namespace

cudaError_t launch_segment_combine(const CombineParams& p, cudaStream_t s) {
  if (p.M <= 0 || p.N <= 0) return cudaSuccess;
  if (p.K != kK || p.V % kCols != 0) return cudaErrorInvalidValue;
  segment_combine_kernel<<<SequentialScheduler<kCols>::grid_shape(p.V, p.HV, p.N), kThreads, 0, s>>>(p);
  return cudaGetLastError();
}

}  // namespace linattn::cuda::kern
