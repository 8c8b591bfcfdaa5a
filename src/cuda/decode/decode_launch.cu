// Host side of the CUDA decode: a validated DecodeProblem into the kernel's Params, then one launch.
// No allocation, no host synchronisation: the call can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/decode.hpp"
#include "cuda/common/host_util.hpp"
#include "cuda/decode/recurrent_decode_head.cuh"

namespace linattn::cuda {

namespace {
bool aligned(const void* p, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

// The whole-head kernel (recurrent_decode_head.cuh) where it applies: sm_90+, the fast path's
// aligned pieces with K = V = 128 (either state layout), every state slot (and the final_state it
// writes, if any) whole 16-byte-aligned blocks of the pool's dtype, and for a bfloat16 pool one
// token per sequence (so no per-token state indices either).
bool head_form(const detail::DecodeProblem& d, const recurrent::Params& p, bool fast, bool st_bf16, int device) {
  const detail::Problem& pr = d.p;
  if (!fast || pr.K != recurrent::kHeadK || pr.V != recurrent::kHeadV) return false;
  const int64_t es = st_bf16 ? 2 : 4;
  if (d.has_state && (!aligned(p.state, 16) || (d.state_stride * es) % 16 != 0)) return false;
  if (st_bf16 && (pr.varlen || pr.T != 1 || d.indices_2d)) return false;
  if (!d.inplace && d.has_final &&
      (d.final_dtype != (st_bf16 ? DType::kBFloat16 : DType::kFloat32) || !aligned(p.final_state, 16))) {
    return false;
  }
  return config::device_code_arch(device) >= 90;  // the head kernel's body is sm_90+ code
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
  // a bfloat16 pool moves half a float32 pool's bytes for the same per-tile work: 64-column tiles
  // (16-byte pieces of 8), where the pool's pieces are 16-byte aligned
  // (at K = 256 only where sm_90+ code runs: its static shared memory is past sm_8x's 48 KB, and
  // below sm_90 that form is compiled as a trap)
  const bool wide = fast && st_bf16 && !vf && pr.V % (2 * recurrent::kTileV) == 0 && aligned(p.state, 16) &&
                    d.state_stride % 8 == 0 && (!d.has_final || aligned(p.final_state, 16)) &&
                    (kb < 256 || config::device_code_arch(pr.device.index) >= 90);
  recurrent::DecodeForm form = wide ? recurrent::DecodeForm::kWide : recurrent::DecodeForm::kTiled;
  if (head_form(d, p, fast, st_bf16, pr.device.index)) form = recurrent::DecodeForm::kHead;
  cudaError_t e;
  switch (pr.dtype) {
    case DType::kFloat16: e = recurrent::launch_fp16(p, st_bf16, vf, kb, fast, form, st); break;
    case DType::kBFloat16: e = recurrent::launch_bf16(p, st_bf16, vf, kb, fast, form, st); break;
    default: e = recurrent::launch_fp32(p, st_bf16, vf, kb, fast, form, st); break;
  }
  if (e != cudaSuccess) return cuda_error("recurrent decode launch", e);
  return Status::Ok();
}

}  // namespace linattn::cuda
