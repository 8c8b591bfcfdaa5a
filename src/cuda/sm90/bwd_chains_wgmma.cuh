// The backward's two sequential chains of one (sequence, value head, 64-column V tile) in one CTA
// (docs/backward_v2_plan.md, end): the state recompute (recurrence_chain, kRecompute, reading the v
// rows: no delta rule) and pass 1 (dh_chain, 16-bit), which reads neither h nor V_new, so the two
// are independent. Each alone is a latency-bound chain of one CTA an SM at 252-254 registers;
// here four warpgroups interleave them: 0 and 1 the recompute's producer and consumer, 2 and 3
// pass 1's. Registers by setmaxnreg: producers 72, consumers 184 (2 x 128 x (72 + 184) = 64 K; ptxas: no spills, no wgmma serialisation; 40 / 216 and 56 / 200 spill).
// Shared memory: both rings at two stages, 161 KB (GLA); the delta rule's would not fit.
// Launched by the chunked backward where bwd::bwd_chains_apply holds (built in session 31, not yet
// run on a GPU: .device/NEXT_s32.md).
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/sm90/chunk_dh_wgmma.cuh"
#include "cuda/sm90/chunk_recurrence_wgmma.cuh"

namespace linattn::cuda::kern::wgmma_recurrence {

template <class T>
struct BwdChainsSmem {
  using StateE = typename RecurrenceConsumer<T, false, false, PassOut::kRecompute, false>::E;
  using DhE = typename DhConsumer<T, false, DhForm::kSixteen>::E;
  RecurrenceSmem<StateE, false, 2, PassOut::kRecompute> state;
  DhSmem<DhE, false, DhForm::kSixteen, 2> dh;
};

template <class T>
__global__ void __launch_bounds__(4 * kThreads, 1) bwd_chains_wgmma_kernel(const StateParams sp, const bwd::DhParams dp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Smem = BwdChainsSmem<T>;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  init_ring_barriers(sm.state.full, sm.state.empty);  // (each ends in a __syncthreads of all 512)
  init_ring_barriers(sm.dh.full, sm.dh.empty);
  ChainTile ct = ChainTile::get(sp.seqs);  // wg 0 .. 3: chain wg / 2, its role wg % 2
  const int chain = ct.wg >> 1;
  ct.wg &= 1;
  // each role's code under its own register count (ptxas allocates per branch)
  if (ct.wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<72>();
    if (chain == 0) recurrence_chain<T, false, false, 2, PassOut::kRecompute, false, false, 0>(sp, sm.state, ct);
    else dh_chain<T, false, DhForm::kSixteen, 2, false, 0>(dp, sm.dh, ct);
  } else {
    cutlass::arch::warpgroup_reg_alloc<184>();
    if (chain == 0) recurrence_chain<T, false, false, 2, PassOut::kRecompute, false, false, 1>(sp, sm.state, ct);
    else dh_chain<T, false, DhForm::kSixteen, 2, false, 1>(dp, sm.dh, ct);
  }
#endif
}

// sp: the recompute's parameters (h written, v rows read, no U); dp: pass 1's (16-bit, no delta
// rule). The caller checks both apply (recurrence_wgmma_applies, dh_wgmma_applies) and that they
// share the sequence map.
template <class T>
cudaError_t launch_bwd_chains(const StateParams& sp, const bwd::DhParams& dp, cudaStream_t s) {
  constexpr int smem = smem_bytes_of<BwdChainsSmem<T>>();
  static_assert(smem <= 227 * 1024, "both rings fit one CTA's shared memory");
  auto kernel = bwd_chains_wgmma_kernel<T>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<SequentialScheduler<kVT>::grid_shape(sp.V, sp.HV, sp.N), 4 * kThreads, smem, s>>>(sp, dp);
  return cudaGetLastError();
}

}  // namespace linattn::cuda::kern::wgmma_recurrence
