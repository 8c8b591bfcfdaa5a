// Validation of decode calls (linattn::decode). The q/k/v/gate/beta rules are the forward's
// (resolve_inputs); this adds the state pool, its indices, the accepted-token counts, per-channel
// beta, the outputs and their aliasing. Nothing is written here.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/decode.hpp"

namespace linattn::detail {
namespace {

#define LINATTN_DTRY(expr)    \
  do {                        \
    Status _s = (expr);       \
    if (!_s.ok()) return _s;  \
  } while (0)

std::string dims_str(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

bool same_dev(const Device& a, const Device& b) {
  return a.type == b.type && (a.type == DeviceType::kCPU || a.index == b.index);
}

Status check_dense(const char* name, const TensorView& t, std::initializer_list<int64_t> dims,
                   const Device& dev) {
  bool ok = t.ndim == static_cast<int32_t>(dims.size());
  int i = 0;
  for (int64_t d : dims) ok = ok && t.shape[i++] == d;
  if (!ok) return Status::Invalid(std::string(name) + " must have shape " + dims_str(make_view(nullptr, DType::kFloat32, dims)) +
                                  ", got " + (t.ndim < 0 ? std::string("nothing") : dims_str(t)));
  if (!t.is_contiguous()) return Status::Invalid(std::string(name) + " must be contiguous (row-major, dense)");
  if (t.numel() > 0 && t.data == nullptr) return Status::Invalid(std::string(name) + " has a null data pointer");
  if (!same_dev(t.device, dev)) return Status::Invalid(std::string(name) + " is on a different device than q");
  return Status::Ok();
}

Status check_index_dtype(const char* name, const TensorView& t) {
  if (t.dtype != DType::kInt32 && t.dtype != DType::kInt64) {
    return Status::Invalid(std::string(name) + " must be int32 or int64, got " + dtype_name(t.dtype));
  }
  return Status::Ok();
}

// float32 or bfloat16 (float64 too on the CPU, for float64 reference runs).
Status check_state_dtype(const char* name, const TensorView& t, const Device& dev) {
  if (t.dtype == DType::kFloat32 || t.dtype == DType::kBFloat16) return Status::Ok();
  if (t.dtype == DType::kFloat64 && dev.type == DeviceType::kCPU) return Status::Ok();
  return Status::Invalid(std::string(name) + " must be float32 or bfloat16, got " + dtype_name(t.dtype));
}

int64_t read_int(const TensorView& t, int64_t i) {
  return t.dtype == DType::kInt64 ? static_cast<const int64_t*>(t.data)[i]
                                  : static_cast<const int32_t*>(t.data)[i];
}

}  // namespace

Status resolve_decode(Family family, const DecodeInputs& in, const DecodeOutputs& out, const Options& opt,
                      DecodeProblem* d) {
  *d = DecodeProblem{};
  if (!in.q.present() || !in.v.present()) return Status::Invalid("q and v are required");
  // The forward's rules for everything the two calls share. Per-channel beta [B, T, HV, V] is
  // checked here; resolve_inputs sees a stand-in of the per-head shape at the same address.
  ForwardInputs fin;
  fin.q = in.q;
  fin.k = in.k;
  fin.v = in.v;
  fin.g = in.g;
  fin.g_gamma = in.g_gamma;
  fin.beta = in.beta;
  fin.A_log = in.A_log;
  fin.dt_bias = in.dt_bias;
  fin.cu_seqlens = in.cu_seqlens;
  fin.cu_seqlens_host = in.cu_seqlens_host;
  const Device dev = in.q.device;
  if (in.beta.present() && in.beta.ndim == 5) return Status::Invalid("beta must be [B, T, HV] or [B, T, HV, V]");
  if (in.beta.present() && in.beta.ndim == 4) {
    if (in.v.ndim != 4) return Status::Invalid("v must be 4-D [B, T, HV, V], got " + dims_str(in.v));
    const auto& s = in.v.shape;
    LINATTN_DTRY(check_dense("beta (per value channel)", in.beta, {s[0], s[1], s[2], s[3]}, dev));
    d->beta_per_v = true;
    fin.beta = make_view(in.beta.data, in.beta.dtype, {s[0], s[1], s[2]}, dev);
  }
  // CUDA without cu_seqlens_host: the kernel reads cu_seqlens (no host synchronisation).
  if (dev.type == DeviceType::kCUDA && in.cu_seqlens.present() && !in.cu_seqlens_host.present()) {
    const TensorView& cu = in.cu_seqlens;
    if (cu.ndim != 1 || cu.shape[0] < 2) return Status::Invalid("cu_seqlens must be 1-D [N + 1] with N >= 1, got " + dims_str(cu));
    LINATTN_DTRY(check_index_dtype("cu_seqlens", cu));
    if (!cu.is_contiguous() || cu.data == nullptr) return Status::Invalid("cu_seqlens must be contiguous and non-null");
    if (!same_dev(cu.device, dev)) return Status::Invalid("cu_seqlens is on a different device than q");
    if (in.q.ndim == 4 && in.q.shape[0] != 1) return Status::Invalid("with cu_seqlens the batch size B must be 1");
    fin.cu_seqlens = TensorView{};
    d->cu_device_only = true;
  }
  LINATTN_DTRY(resolve_inputs(family, fin, opt, &d->p));
  Problem& p = d->p;
  if (d->cu_device_only) {
    p.varlen = true;
    p.N = in.cu_seqlens.shape[0] - 1;
    p.cu.clear();
    p.chunk_offsets.clear();
    p.num_chunks = 0;
  }
  d->total_tokens = p.B * p.T;
  if (d->beta_per_v && !p.delta) return Status::Invalid(std::string("beta is only for the delta rule, not ") + family_name(family));
  if (p.K > 256 || p.V > 256) {
    return Status::Unsupported("decode supports head sizes K, V up to 256, got K = " + std::to_string(p.K) +
                               ", V = " + std::to_string(p.V));
  }
  if (p.N > (int64_t{1} << 31) / std::max<int64_t>(p.HV, 1) / 64) {
    return Status::Unsupported("decode: too many sequences x heads for one launch");
  }

  // ---- indices and accepted tokens
  d->has_indices = in.ssm_state_indices.present();
  if (d->has_indices) {
    const TensorView& ix = in.ssm_state_indices;
    LINATTN_DTRY(check_index_dtype("ssm_state_indices", ix));
    if (ix.ndim == 1) {
      LINATTN_DTRY(check_dense("ssm_state_indices", ix, {p.N}, dev));
    } else if (ix.ndim == 2) {
      if (ix.shape[0] != p.N || ix.shape[1] < 1) {
        return Status::Invalid("ssm_state_indices must be [N] or [N, T_max] with N = " + std::to_string(p.N) +
                               " sequences, got " + dims_str(ix));
      }
      LINATTN_DTRY(check_dense("ssm_state_indices", ix, {p.N, ix.shape[1]}, dev));
      d->indices_2d = true;
      d->index_cols = ix.shape[1];
    } else {
      return Status::Invalid("ssm_state_indices must be [N] or [N, T_max], got " + dims_str(ix));
    }
    d->indices_64 = ix.dtype == DType::kInt64;
    if (!in.state.present()) return Status::Invalid("ssm_state_indices needs the state pool (state)");
  }
  d->has_accepted = in.num_accepted_tokens.present();
  if (d->has_accepted) {
    if (!d->indices_2d) return Status::Invalid("num_accepted_tokens needs the per-token ssm_state_indices [N, T_max]");
    LINATTN_DTRY(check_index_dtype("num_accepted_tokens", in.num_accepted_tokens));
    LINATTN_DTRY(check_dense("num_accepted_tokens", in.num_accepted_tokens, {p.N}, dev));
    d->accepted_64 = in.num_accepted_tokens.dtype == DType::kInt64;
  }
  if (d->indices_2d) {
    if (!in.inplace_final_state) {
      return Status::Invalid("per-token ssm_state_indices [N, T_max] write the pool in place: set inplace_final_state");
    }
    if (!p.varlen && p.T > d->index_cols) {
      return Status::Invalid("ssm_state_indices has T_max = " + std::to_string(d->index_cols) +
                             " columns, fewer than the T = " + std::to_string(p.T) + " tokens per sequence");
    }
    if (p.varlen && !d->cu_device_only) {
      for (int64_t n = 0; n < p.N; ++n) {
        if (p.seq_len(n) > d->index_cols) {
          return Status::Invalid("sequence " + std::to_string(n) + " has " + std::to_string(p.seq_len(n)) +
                                 " tokens, more than the T_max = " + std::to_string(d->index_cols) +
                                 " columns of ssm_state_indices");
        }
      }
    }
  }

  // ---- state (initial states, or the pool)
  d->has_state = in.state.present();
  d->inplace = in.inplace_final_state;
  if (d->inplace && !d->has_state) return Status::Invalid("inplace_final_state needs state");
  if (d->has_state) {
    const TensorView& s = in.state;
    LINATTN_DTRY(check_state_dtype("state", s, dev));
    const int64_t a = p.opt.state_v_first ? p.V : p.K, b = p.opt.state_v_first ? p.K : p.V;
    const char* layout = p.opt.state_v_first ? "[P, HV, V, K]" : "[P, HV, K, V]";
    if (s.ndim != 4 || s.shape[1] != p.HV || s.shape[2] != a || s.shape[3] != b || s.shape[0] < 1) {
      return Status::Invalid(std::string("state must be ") + layout + " with HV = " + std::to_string(p.HV) +
                             ", K = " + std::to_string(p.K) + ", V = " + std::to_string(p.V) + ", got " +
                             (s.ndim < 0 ? std::string("nothing") : dims_str(s)));
    }
    if (s.strides[3] != 1 || s.strides[2] != b || s.strides[1] != a * b) {
      return Status::Invalid("state's three inner dims [HV, K, V] must be dense (row-major)");
    }
    if (s.shape[0] > 1 && s.strides[0] < p.HV * a * b) {
      return Status::Invalid("state's slot stride (dim 0) must be at least HV * K * V = " +
                             std::to_string(p.HV * a * b) + ", got " + std::to_string(s.strides[0]));
    }
    if (s.data == nullptr) return Status::Invalid("state has a null data pointer");
    if (!same_dev(s.device, dev)) return Status::Invalid("state is on a different device than q");
    d->pool_slots = s.shape[0];
    d->state_stride = s.shape[0] > 1 ? s.strides[0] : p.HV * a * b;
    d->state_dtype = s.dtype;
    if (!d->has_indices && d->pool_slots != p.N) {
      return Status::Invalid("without ssm_state_indices, state holds one initial state per sequence: "
                             "dim 0 must be N = " + std::to_string(p.N) + ", got " + std::to_string(d->pool_slots));
    }
  }

  // ---- outputs
  if (!out.o.present()) return Status::Invalid("o (the output) is required");
  if (out.o.dtype != in.v.dtype) {
    return Status::Invalid(std::string("o must have v's dtype (") + dtype_name(in.v.dtype) + "), got " + dtype_name(out.o.dtype));
  }
  LINATTN_DTRY(check_dense("o", out.o, {in.v.shape[0], in.v.shape[1], in.v.shape[2], in.v.shape[3]}, dev));
  d->has_final = out.final_state.present();
  if (d->has_final) {
    if (d->inplace) return Status::Invalid("final_state is given with inplace_final_state (the state is updated in place)");
    LINATTN_DTRY(check_state_dtype("final_state", out.final_state, dev));
    if (p.opt.state_v_first) {
      LINATTN_DTRY(check_dense("final_state", out.final_state, {p.N, p.HV, p.V, p.K}, dev));
    } else {
      LINATTN_DTRY(check_dense("final_state", out.final_state, {p.N, p.HV, p.K, p.V}, dev));
    }
    d->final_dtype = out.final_state.dtype;
  }
  d->has_status = out.status.present();
  if (d->has_status) {
    if (out.status.dtype != DType::kInt32) return Status::Invalid("status must be int32");
    LINATTN_DTRY(check_dense("status", out.status, {1}, dev));
  }

  // ---- aliasing: no output may share memory with an input or another output; the state is an
  // input and (in place) an output, so it may overlap neither o nor status.
  LINATTN_DTRY(check_no_alias(
      {{"o", &out.o}, {"final_state", &out.final_state}, {"status", &out.status}},
      {{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"g", &in.g}, {"g_gamma", &in.g_gamma}, {"beta", &in.beta},
       {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias}, {"state", &in.state},
       {"ssm_state_indices", &in.ssm_state_indices}, {"num_accepted_tokens", &in.num_accepted_tokens},
       {"cu_seqlens", &in.cu_seqlens}, {"cu_seqlens_host", &in.cu_seqlens_host}}));
  return Status::Ok();
}

Status check_decode_values(const DecodeProblem& d, const DecodeInputs& in) {
  const Problem& p = d.p;
  if (!d.has_indices) return Status::Ok();
  const TensorView& ix = in.ssm_state_indices;
  for (int64_t n = 0; n < p.N; ++n) {
    const int64_t len = p.seq_len(n);
    if (len == 0) continue;
    int64_t a = 1;
    if (d.has_accepted) {
      a = read_int(in.num_accepted_tokens, n);
      if (a < 1 || a > d.index_cols) {
        return Status::Invalid("num_accepted_tokens[" + std::to_string(n) + "] = " + std::to_string(a) +
                               " is outside [1, T_max = " + std::to_string(d.index_cols) + "]");
      }
    }
    const int64_t r = read_int(ix, n * d.index_cols + (a - 1));
    if (r >= d.pool_slots) {
      return Status::Invalid("ssm_state_indices: sequence " + std::to_string(n) + " reads slot " + std::to_string(r) +
                             " of a pool of " + std::to_string(d.pool_slots));
    }
    if (d.indices_2d && r >= 0) {
      for (int64_t t = 0; t < len; ++t) {
        const int64_t w = read_int(ix, n * d.index_cols + t);
        if (w >= d.pool_slots) {
          return Status::Invalid("ssm_state_indices: sequence " + std::to_string(n) + " token " + std::to_string(t) +
                                 " writes slot " + std::to_string(w) + " of a pool of " + std::to_string(d.pool_slots));
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace linattn::detail
