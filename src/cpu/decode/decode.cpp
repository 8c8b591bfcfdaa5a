// CPU decode: the recurrence token by token (SPEC.md) with FLA's fused_recurrent_* state-pool
// semantics (linattn.hpp, "decode"). Arithmetic in float32, or float64 for float64 inputs: the
// reference the CUDA decode kernels are tested against. OpenMP over (sequence, value head).
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/decode.hpp"
#include "common/dtype.hpp"
#include "cpu/decode/decode.hpp"

namespace linattn::cpu {
namespace {

using detail::DecodeProblem;
using detail::Problem;

int64_t read_int(const TensorView& t, int64_t i) {
  return t.dtype == DType::kInt64 ? static_cast<const int64_t*>(t.data)[i]
                                  : static_cast<const int32_t*>(t.data)[i];
}

template <typename Acc>
void decode_head(const DecodeProblem& d, const DecodeInputs& in, const DecodeOutputs& out, int64_t n,
                 int64_t hv, std::vector<Acc>& S, std::vector<Acc>& buf) {
  const Problem& p = d.p;
  const int64_t K = p.K, V = p.V, KV = K * V, bos = p.cu[n], len = p.seq_len(n);
  if (len == 0) return;
  const int64_t h = p.qk_head(hv);
  auto put_state = [&](void* base, DType dt, int64_t slot_off) {
    for (int64_t i = 0; i < KV; ++i) detail::store_from_double(base, dt, slot_off + i, static_cast<double>(S[i]));
  };
  // ---- the state to start from
  int64_t read_slot = -1;
  S.assign(KV, Acc(0));
  if (d.has_indices) {
    const int64_t a = d.has_accepted ? read_int(in.num_accepted_tokens, n) : 1;
    read_slot = read_int(in.ssm_state_indices, n * d.index_cols + (a - 1));
    if (read_slot < 0) {  // padding: o rows 0, nothing else written
      for (int64_t t = 0; t < len; ++t) {
        for (int64_t j = 0; j < V; ++j) detail::store_from_double(out.o.data, out.o.dtype, p.v_offset(bos + t, hv) + j, 0.0);
      }
      return;
    }
  }
  if (d.has_state) {
    const int64_t slot = d.has_indices ? read_slot : n;
    const int64_t off = slot * d.state_stride + hv * KV;
    for (int64_t i = 0; i < KV; ++i) S[i] = static_cast<Acc>(detail::load_as_double(in.state.data, d.state_dtype, off + i));
  }
  // S[state_index(i, j)]: i over K, j over V
  buf.assign(3 * K + 2 * V, Acc(0));
  Acc* q = buf.data();
  Acc* k = q + K;
  Acc* e = k + K;  // decay factor per K row
  Acc* u = e + K;
  Acc* bv = u + V;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t tok = bos + t;
    for (int64_t i = 0; i < K; ++i) {
      q[i] = static_cast<Acc>(detail::load_as_double(in.q.data, in.q.dtype, p.qk_offset(tok, h) + i));
      k[i] = static_cast<Acc>(detail::load_as_double(in.k.data, in.k.dtype, p.qk_offset(tok, h) + i));
    }
    if (p.opt.use_qk_l2norm_in_kernel) {
      detail::l2norm_forward(q, q, K);
      detail::l2norm_forward(k, k, K);
    }
    for (int64_t i = 0; i < K; ++i) q[i] *= static_cast<Acc>(p.scale);
    // log decay per row (vector gate) or one for all rows (scalar gate, g_gamma)
    for (int64_t i = 0; i < K; ++i) {
      Acc lg = 0;
      if (p.has_g && (p.vector_gate || i == 0)) {
        const int64_t c = p.vector_gate ? i : 0;
        const Acc raw = static_cast<Acc>(detail::load_as_double(in.g.data, in.g.dtype, p.g_offset(tok, hv) + c));
        const Acc bias = p.has_dt_bias ? static_cast<Acc>(detail::load_as_double(
                                             in.dt_bias.data, in.dt_bias.dtype, p.vector_gate ? hv * K + c : hv))
                                       : Acc(0);
        const Acc alog = p.has_A_log ? static_cast<Acc>(detail::load_as_double(in.A_log.data, in.A_log.dtype, hv)) : Acc(0);
        lg = p.gate_tf.forward(raw, bias, alog, p.has_A_log);
      } else if (!p.vector_gate && i > 0) {
        e[i] = e[0];
        continue;
      }
      if (p.has_g_gamma) lg += static_cast<Acc>(detail::load_as_double(in.g_gamma.data, in.g_gamma.dtype, hv));
      e[i] = std::exp(lg);
    }
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t j = 0; j < V; ++j) S[p.state_index(i, j)] *= e[i];
    }
    for (int64_t j = 0; j < V; ++j) u[j] = static_cast<Acc>(detail::load_as_double(in.v.data, in.v.dtype, p.v_offset(tok, hv) + j));
    if (p.delta) {
      for (int64_t j = 0; j < V; ++j) {
        const int64_t bi = d.beta_per_v ? p.v_offset(tok, hv) + j : p.beta_offset(tok, hv);
        bv[j] = p.beta_tf.forward(static_cast<Acc>(detail::load_as_double(in.beta.data, in.beta.dtype, bi)));
      }
      for (int64_t j = 0; j < V; ++j) {
        Acc kS = 0;
        for (int64_t i = 0; i < K; ++i) kS += k[i] * S[p.state_index(i, j)];
        u[j] = bv[j] * (u[j] - kS);
      }
    }
    for (int64_t i = 0; i < K; ++i) {
      for (int64_t j = 0; j < V; ++j) S[p.state_index(i, j)] += k[i] * u[j];
    }
    for (int64_t j = 0; j < V; ++j) {
      Acc o = 0;
      for (int64_t i = 0; i < K; ++i) o += q[i] * S[p.state_index(i, j)];
      detail::store_from_double(out.o.data, out.o.dtype, p.v_offset(tok, hv) + j, static_cast<double>(o));
    }
    if (d.indices_2d) {  // per-token states, in place (validation guarantees inplace)
      const int64_t w = read_int(in.ssm_state_indices, n * d.index_cols + t);
      if (w >= 0) put_state(in.state.data, d.state_dtype, w * d.state_stride + hv * KV);
    }
  }
  if (d.indices_2d) return;
  if (d.inplace) {
    put_state(in.state.data, d.state_dtype, (d.has_indices ? read_slot : n) * d.state_stride + hv * KV);
  } else if (d.has_final) {
    put_state(out.final_state.data, d.final_dtype, (n * p.HV + hv) * KV);
  }
}

template <typename Acc>
void decode_all(const DecodeProblem& d, const DecodeInputs& in, const DecodeOutputs& out) {
  const int64_t tasks = d.p.N * d.p.HV;
#pragma omp parallel
  {
    std::vector<Acc> S, buf;
#pragma omp for schedule(dynamic, 4)
    for (int64_t x = 0; x < tasks; ++x) decode_head<Acc>(d, in, out, x / d.p.HV, x % d.p.HV, S, buf);
  }
}

}  // namespace

Status decode(const DecodeProblem& d, const DecodeInputs& in, const DecodeOutputs& out) {
  if (Status s = detail::check_decode_values(d, in); !s.ok()) return s;
  if (d.p.dtype == DType::kFloat64) {
    decode_all<double>(d, in, out);
  } else {
    decode_all<float>(d, in, out);
  }
  return Status::Ok();
}

}  // namespace linattn::cpu
