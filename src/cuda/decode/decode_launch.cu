// Host side of the CUDA decode: a validated DecodeProblem into the kernel's Params, then one launch.
// No allocation, no host synchronisation: the call can be captured in a CUDA graph.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/decode.hpp"
#include "cuda/common/host_util.hpp"
#include "cuda/config/limits.hpp"
#include "cuda/decode/stream_decode.cuh"

namespace linattn::cuda {

namespace {
bool aligned(const void* p, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

// The driver's tensor-map encoder, through the runtime (no link to libcuda); null if unavailable.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A TMA map of states [slots][HV][K][V] (slot stride `stride` elements) in boxes of K rows x
// `cols` columns: one decode tile.
bool encode_state_map(CUtensorMap* m, void* base, bool bf16, int64_t slots, int64_t HV, int64_t K, int64_t V,
                      int64_t stride, int cols) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t es = bf16 ? 2 : 4;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(V), static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(HV),
                              static_cast<cuuint64_t>(slots)};
  const cuuint64_t strides[3] = {V * es, K * V * es, stride * es};
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(cols), static_cast<cuuint32_t>(K), 1, 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  return encode(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, dims, strides,
                box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
}  // namespace

Status decode(const detail::DecodeProblem& d, const DecodeInputs& in, const DecodeOutputs& out, Stream stream) {
  const detail::Problem& pr = d.p;
  if (pr.dtype != DType::kBFloat16 && pr.dtype != DType::kFloat16 && pr.dtype != DType::kFloat32) {
    return Status::Unsupported(std::string("CUDA decode takes bfloat16, float16 or float32 q/k/v, got ") +
                               dtype_name(pr.dtype));
  }
  recurrent::Params p{};
  p.q = in.q.data;
  p.k = in.k.data;
  p.v = in.v.data;
  p.g = pr.has_g ? in.g.data : nullptr;
  p.g_gamma = pr.has_g_gamma ? in.g_gamma.data : nullptr;
  p.beta = pr.delta ? in.beta.data : nullptr;
  p.A_log = pr.has_A_log ? in.A_log.data : nullptr;
  p.dt_bias = pr.has_dt_bias ? in.dt_bias.data : nullptr;
  p.o = out.o.data;
  p.state = d.has_state ? in.state.data : nullptr;
  p.final_state = d.has_final ? out.final_state.data : nullptr;
  p.indices = d.has_indices ? in.ssm_state_indices.data : nullptr;
  p.accepted = d.has_accepted ? in.num_accepted_tokens.data : nullptr;
  p.cu = pr.varlen ? in.cu_seqlens.data : nullptr;
  p.status = d.has_status ? static_cast<int*>(out.status.data) : nullptr;
  p.state_stride = d.state_stride;
  p.pool_slots = d.pool_slots;
  p.index_cols = d.index_cols;
  p.T = pr.T;
  p.total_tokens = d.total_tokens;
  p.N = static_cast<int>(pr.N);
  p.H = static_cast<int>(pr.H);
  p.HV = static_cast<int>(pr.HV);
  p.G = static_cast<int>(pr.G);
  p.K = static_cast<int>(pr.K);
  p.V = static_cast<int>(pr.V);
  p.scale = static_cast<float>(pr.scale);
  p.lower_bound = static_cast<float>(pr.gate_tf.lower_bound);
  p.g_dt = pr.has_g ? dtype_code(in.g.dtype) : 2;
  p.gg_dt = pr.has_g_gamma ? dtype_code(in.g_gamma.dtype) : 2;
  p.beta_dt = pr.delta ? dtype_code(in.beta.dtype) : 2;
  p.alog_dt = pr.has_A_log ? dtype_code(in.A_log.dtype) : 2;
  p.dtb_dt = pr.has_dt_bias ? dtype_code(in.dt_bias.dtype) : 2;
  p.final_dt = d.has_final ? dtype_code(d.final_dtype) : 2;
  p.gate_kind = gate_kind_code(pr);
  p.beta_mode = beta_mode_code(pr);
  p.has_g = pr.has_g;
  p.vector_gate = pr.vector_gate;
  p.has_gamma = pr.has_g_gamma;
  p.has_alog = pr.has_A_log;
  p.has_dtb = pr.has_dt_bias;
  p.delta = pr.delta;
  p.beta_per_v = d.beta_per_v;
  p.l2norm = pr.opt.use_qk_l2norm_in_kernel;
  p.varlen = pr.varlen;
  p.cu64 = pr.varlen && in.cu_seqlens.dtype == DType::kInt64;
  p.has_indices = d.has_indices;
  p.indices_2d = d.indices_2d;
  p.idx64 = d.indices_64;
  p.has_accepted = d.has_accepted;
  p.acc64 = d.accepted_64;
  p.has_state = d.has_state;
  p.inplace = d.inplace;
  p.has_final = d.has_final;
  // 4-element pieces along the state's contiguous dim move as one 16-byte (float) or 8-byte
  // (bfloat16) access when that dim, the slot stride and the base allow it.
  const int64_t inner = pr.opt.state_v_first ? pr.K : pr.V;
  const bool st_bf16 = d.has_state && d.state_dtype == DType::kBFloat16;
  p.vec_state = d.has_state && inner % 4 == 0 && d.state_stride % 4 == 0 && aligned(p.state, st_bf16 ? 8 : 16);
  p.vec_final = d.has_final && inner % 4 == 0 && aligned(p.final_state, d.final_dtype == DType::kBFloat16 ? 8 : 16);
  p.vec_o = pr.V % 4 == 0 && aligned(p.o, pr.dtype == DType::kFloat32 ? 16 : 8);
  p.vec_v = pr.V % 4 == 0 && aligned(p.v, pr.dtype == DType::kFloat32 ? 16 : 8);
  if (pr.N == 0) return Status::Ok();

  const int kb = pr.K <= 64 ? 64 : (pr.K <= 128 ? 128 : 256);
  DeviceGuard device;
  if (Status ds = device.enter(pr.device.index); !ds.ok()) return ds;
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const bool vf = pr.opt.state_v_first;
  // every tile whole and every piece an aligned vector: the kernel without masks
  const bool fast = pr.K == kb && pr.V % recurrent::kTileV == 0 && (!d.has_state || p.vec_state) && p.vec_o &&
                    (!d.has_final || p.vec_final);
  cudaError_t e;
  // One token per sequence on Hopper: the streaming kernel (stream_decode.cuh says when and why).
  const int64_t cols = st_bf16 ? 64 : 32;
  const int64_t es = st_bf16 ? 2 : 4;
  const int64_t tiles = pr.N * pr.HV * (pr.V / cols);
  const bool dst_ok = d.inplace || !d.has_final ||
                      (d.final_dtype == d.state_dtype && aligned(out.final_state.data, 16));
  if (config::cc_major(pr.device.index) == 9 && !vf && pr.K == kb && kb <= 128 && pr.V % cols == 0 && !pr.varlen && pr.T == 1 &&
      d.has_state && !d.indices_2d && !d.has_accepted && p.vec_o && aligned(p.state, 16) &&
      (d.state_stride * es) % 16 == 0 && d.pool_slots <= INT_MAX && tiles <= INT_MAX / 2 && dst_ok) {
    CUtensorMap src{}, dst{};
    const bool has_dst = d.inplace || d.has_final;
    bool maps = encode_state_map(&src, in.state.data, st_bf16, d.pool_slots, pr.HV, pr.K, pr.V, d.state_stride,
                                 static_cast<int>(cols));
    if (maps && !d.inplace && d.has_final) {
      maps = encode_state_map(&dst, out.final_state.data, st_bf16, pr.N, pr.HV, pr.K, pr.V, pr.HV * pr.K * pr.V,
                              static_cast<int>(cols));
    } else {
      dst = src;
    }
    if (maps) {  // else (no driver entry point): the general kernel below
      const recurrent::StreamLaunch l{&src, &dst, has_dst, d.inplace, static_cast<int>(tiles),
                                      config::sm_count(pr.device.index)};
      switch (pr.dtype) {
        case DType::kFloat16: e = recurrent::launch_stream_fp16(p, st_bf16, kb, l, st); break;
        case DType::kBFloat16: e = recurrent::launch_stream_bf16(p, st_bf16, kb, l, st); break;
        default: e = recurrent::launch_stream_fp32(p, st_bf16, kb, l, st); break;
      }
      if (e != cudaSuccess) return cuda_error("streaming decode launch", e);
      return Status::Ok();
    }
  }
  switch (pr.dtype) {
    case DType::kFloat16: e = recurrent::launch_fp16(p, st_bf16, vf, kb, fast, st); break;
    case DType::kBFloat16: e = recurrent::launch_bf16(p, st_bf16, vf, kb, fast, st); break;
    default: e = recurrent::launch_fp32(p, st_bf16, vf, kb, fast, st); break;
  }
  if (e != cudaSuccess) return cuda_error("recurrent decode launch", e);
  return Status::Ok();
}

}  // namespace linattn::cuda
