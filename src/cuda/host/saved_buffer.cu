#include "cuda/host/saved_buffer.hpp"

#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/host_util.hpp"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::host {
namespace {

using config::align_up;
using config::Compute;
constexpr std::size_t kC = config::kChunk;

constexpr char kSavedMagic[8] = {'L', 'N', 'A', 'C', 'U', 'D', 'A', '1'};

struct SavedHeader {
  char magic[8];
  int32_t family, dtype, compute, v_first;
  int32_t chunk_local, pad;  // 1: Options::keep_chunk_local's layout (SavedLayout)
  int64_t tokens, N, H, HV, K, V, num_chunks;
  uint64_t layout;  // detail::saved_problem_hash
};
static_assert(sizeof(SavedHeader) <= 128, "written by one 128-thread block");
static_assert(sizeof(SavedHeader) <= kSavedHeaderBytes, "the header fits its region");

SavedHeader saved_header(const detail::Problem& p, Compute compute) {
  SavedHeader h{};
  std::memcpy(h.magic, kSavedMagic, sizeof h.magic);
  h.family = static_cast<int32_t>(p.family);
  h.dtype = static_cast<int32_t>(p.dtype);
  h.compute = static_cast<int32_t>(compute);
  h.v_first = p.opt.state_v_first ? 1 : 0;
  h.chunk_local = p.opt.keep_chunk_local ? 1 : 0;
  h.tokens = p.B * p.T;
  h.N = p.N;
  h.H = p.H;
  h.HV = p.HV;
  h.K = p.K;
  h.V = p.V;
  h.num_chunks = p.num_chunks;
  h.layout = detail::saved_problem_hash(p);
  return h;
}

__global__ void write_saved_header_kernel(const SavedHeader h, unsigned char* dst) {
  if (threadIdx.x < sizeof(SavedHeader)) dst[threadIdx.x] = reinterpret_cast<const unsigned char*>(&h)[threadIdx.x];
}

}  // namespace

int state_dtype_code(const detail::Problem& p, Compute compute) {
  const config::ComputeForm cf(p.dtype, compute);
  const bool h16 = !p.delta && !cf.f32 && !cf.split && !p.opt.state_v_first &&
                   kern::recurrence_wgmma_supported(dtype_code(p.dtype), static_cast<int>(p.K), static_cast<int>(p.V));
  return h16 ? dtype_code(p.dtype) : 2;
}

SavedLayout::SavedLayout(const detail::Problem& p, Compute compute) {
  const config::ComputeForm cf(p.dtype, compute);
  const std::size_t es = cf.f32 ? 4 : 2;
  const std::size_t nb = static_cast<std::size_t>(p.num_chunks) * p.HV;
  const std::size_t K = static_cast<std::size_t>(p.K), V = static_cast<std::size_t>(p.V);
  FrontOffsets& f = front;
  std::size_t o = kSavedHeaderBytes;
  if (p.opt.keep_chunk_local) {
    // GLA's chunk-local intermediates as the plain forward's chunk_prep writes them, and the states
    // its state pass reaches (the recompute's values: the same pass over the same operands), in
    // the type the backward's pass 2 reads
    f.Qg = o; o = align_up(o + nb * kC * K * es);
    f.KgT = o; o = align_up(o + nb * kC * K * es);
    f.Aqk = o; o = align_up(o + nb * kC * kC * es);
    f.gexp = o; o = align_up(o + nb * K * 4);
    f.h_dt = state_dtype_code(p, compute);
    f.h = o; o = align_up(o + nb * K * V * (f.h_dt == 2 ? 4 : es));
    total = o;
    return;
  }
  // without the delta rule (GLA, simple GLA) no W and no M⁻¹ (zero-sized)
  const std::size_t wy = p.delta ? 1 : 0;
  f.W = o; o = align_up(o + wy * nb * kC * K * es);
  f.Qg = o; o = align_up(o + nb * kC * K * es);
  f.KgT = o; o = align_up(o + nb * kC * K * es);
  f.Aqk = o; o = align_up(o + nb * kC * kC * es);
  f.Ainv = o; o = align_up(o + wy * nb * kC * kC * es);
  f.gexp = o; o = align_up(o + nb * K * 4);
  f.h = o; o = align_up(o + nb * K * V * 4);
  f.vnew = o; o = align_up(o + nb * kC * V * es);
  if (cf.split) {
    f.KgT_lo = o; o = align_up(o + nb * kC * K * es);
    f.vnew_lo = o; o = align_up(o + nb * kC * V * es);
  }
  // The forward's chunk_prep writes U and its low half where V_new and its low half go: the
  // state pass reads each element before it overwrites it, same thread. The backward does not
  // read U.
  f.U = f.vnew;
  f.U_lo = f.vnew_lo;
  total = o;
}

Status write_saved_header(const detail::Problem& p, Compute compute, void* saved, cudaStream_t st) {
  write_saved_header_kernel<<<1, 128, 0, st>>>(saved_header(p, compute), static_cast<unsigned char*>(saved));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_error("saved header launch", e);
  return Status::Ok();
}

Status check_saved_header(const detail::Problem& p, Compute compute, const void* saved, cudaStream_t st) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(st, &cs);
  if (e != cudaSuccess) return cuda_error("cudaStreamIsCapturing", e);
  if (cs != cudaStreamCaptureStatusNone) return Status::Ok();
  SavedHeader got{};
  if ((e = cudaMemcpyAsync(&got, saved, sizeof got, cudaMemcpyDeviceToHost, st)) != cudaSuccess ||
      (e = cudaStreamSynchronize(st)) != cudaSuccess)
    return cuda_error("reading the saved buffer's header", e);
  const SavedHeader want = saved_header(p, compute);
  if (std::memcmp(&got, &want, sizeof want) == 0) return Status::Ok();
  if (got.chunk_local != want.chunk_local && std::memcmp(got.magic, want.magic, sizeof got.magic) == 0)
    return Status::Invalid(std::string("saved was written ") +
                           (got.chunk_local ? "with keep_chunk_local (chunk-local intermediates only)" : "without keep_chunk_local") +
                           ", this backward is called " + (want.chunk_local ? "with" : "without") +
                           " it (Options::keep_chunk_local differs between the forward and the backward)");
  SavedHeader same = got;
  same.compute = want.compute;
  if (std::memcmp(&same, &want, sizeof want) == 0)
    return Status::Invalid(std::string("saved was written for the ") + config::compute_name(got.compute) +
                           " backward form, this backward runs the " + config::compute_name(want.compute) +
                           " form (Options::backward_precision differs between the forward and the backward)");
  return Status::Invalid("saved was not written by a CUDA forward of this problem (family, dtype, sizes, "
                         "sequences, input transforms, scale or state layout differ)");
}

}  // namespace linattn::cuda::host
