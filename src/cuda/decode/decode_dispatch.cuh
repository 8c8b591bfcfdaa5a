// Which decode kernel runs, per IO element type (instantiated one dtype per translation unit:
// recurrent_decode_{bf16,fp16,fp32}.cu). decode_launch.cu decides the path from the problem.
#pragma once

#include "cuda/decode/recurrent_decode.cuh"
#include "cuda/decode/recurrent_decode_warp.cuh"

namespace linattn::cuda::recurrent {

// How a call runs: the warp-tile kernel ([K, V] state, whole aligned tiles: `warp`), or the
// CTA-per-tile kernel: [V, K] (`fast` without masks) and whatever else (masked pieces).
struct Launch {
  int st_bf16;  // the pool is bfloat16
  bool v_first, fast, warp;
  int kb;       // K rounded up to 64, 128 or 256
};

cudaError_t launch_fp16(const Params& p, const Launch& l, cudaStream_t stream);
cudaError_t launch_bf16(const Params& p, const Launch& l, cudaStream_t stream);
cudaError_t launch_fp32(const Params& p, const Launch& l, cudaStream_t stream);

template <typename IO, typename ST, int KB>
cudaError_t launch_warp(const Params& p, cudaStream_t stream) {
  constexpr int tv = warp_tile_v<ST, KB>();
  constexpr int per_cta = kWarpKernelThreads / 32;
  const long long tiles = static_cast<long long>(p.N) * p.HV * (p.V / tv);
  recurrent_decode_warp_kernel<IO, ST, KB><<<static_cast<unsigned>((tiles + per_cta - 1) / per_cta), kWarpKernelThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename IO>
cudaError_t launch_io(const Params& p, const Launch& l, cudaStream_t stream) {
  if (l.warp) {
#define LINATTN_DECODE_WARP(ST)                                   \
  switch (l.kb) {                                                 \
    case 64: return launch_warp<IO, ST, 64>(p, stream);           \
    case 128: return launch_warp<IO, ST, 128>(p, stream);         \
    default: return launch_warp<IO, ST, 256>(p, stream);          \
  }
    if (l.st_bf16) { LINATTN_DECODE_WARP(__nv_bfloat16) } else { LINATTN_DECODE_WARP(float) }
#undef LINATTN_DECODE_WARP
  }
  const long long blocks = static_cast<long long>(p.N) * p.HV * ((p.V + kTileV - 1) / kTileV);
  auto go = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  };
  const int kb = l.kb;
#define LINATTN_DECODE_KB(ST, VF, F)                                                      \
  switch (kb) {                                                                           \
    case 64: return go(recurrent_decode_kernel<IO, ST, VF, 64, F>);                       \
    case 128: return go(recurrent_decode_kernel<IO, ST, VF, 128, F>);                     \
    default: return go(recurrent_decode_kernel<IO, ST, VF, 256, F>);                      \
  }
#define LINATTN_DECODE_FAST(ST, VF) \
  if (l.fast) {                     \
    LINATTN_DECODE_KB(ST, VF, true) \
  } else {                          \
    LINATTN_DECODE_KB(ST, VF, false) \
  }
  if (l.st_bf16) {
    if (l.v_first) { LINATTN_DECODE_FAST(__nv_bfloat16, true) } else { LINATTN_DECODE_KB(__nv_bfloat16, false, false) }
  } else {
    if (l.v_first) { LINATTN_DECODE_FAST(float, true) } else { LINATTN_DECODE_KB(float, false, false) }
  }
#undef LINATTN_DECODE_FAST
#undef LINATTN_DECODE_KB
  return cudaErrorInvalidValue;
}

}  // namespace linattn::cuda::recurrent
