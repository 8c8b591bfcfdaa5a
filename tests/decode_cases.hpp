// Decode test cases shared by the CPU and GPU suites: random host inputs for one configuration,
// views over them, and the float64 expectation (the CPU decode on float64 copies of the inputs,
// itself tested against the float64 token recurrence in tests/cpu/test_decode.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace linattn::test {

enum class DecodeGate { kLogsigmoid, kSoftplus, kLowerBound, kWithNegInf };
enum class Pool { kNone, kInitial, kIndices1D, kIndices2D };

struct DecodeConfig {
  Family family = Family::kKDA;
  DType dtype = DType::kBFloat16;
  std::vector<int64_t> lens = {1, 1, 1};  // per sequence; fixed length when all equal and !varlen
  bool varlen = false;
  int64_t H = 2, HV = 2, K = 64, V = 64;
  DecodeGate gate = DecodeGate::kLogsigmoid;
  bool l2norm = true, beta_sigmoid = false, neg_eig = false, beta_per_v = false, v_first = false;
  bool g_gamma = false;  // simple GLA
  Pool pool = Pool::kInitial;
  DType state_dtype = DType::kFloat32;
  int64_t pool_extra = 3;  // slots beyond N (a pool larger than the batch)
  int64_t t_max = 0;       // per-token index columns (0: max length)
  bool accepted = false;
  bool inplace = true;
  bool final_out = false;
  DType final_dtype = DType::kFloat32;
  bool padding = false;  // one sequence reads slot -1 (padding)

  std::string name() const {
    std::string s = family_name(family);
    s += std::string("/") + dtype_name(dtype) + "/K" + std::to_string(K) + "V" + std::to_string(V) + "/HV" +
         std::to_string(HV) + "/N" + std::to_string(lens.size()) + (varlen ? "/varlen" : "") +
         (v_first ? "/vfirst" : "") + (beta_per_v ? "/beta_v" : "") + "/pool" + std::to_string(int(pool)) +
         "/" + dtype_name(state_dtype) + (accepted ? "/accepted" : "") + (padding ? "/pad" : "") + "/gate" +
         std::to_string(int(gate)) + (inplace ? "/inplace" : "") +
         (final_out ? std::string("/final_") + dtype_name(final_dtype) : "");
    return s;
  }
};

struct DecodeCase {
  DecodeConfig cfg;
  int64_t N = 0, B = 0, T = 0, P = 0, t_max = 1;
  HostTensor q, k, v, g, g_gamma, beta, A_log, dt_bias, state, indices, accepted, cu;
  HostTensor o, final_state, status;
  std::vector<int64_t> written_slots;  // pool slots the call writes

  bool delta() const { return cfg.family == Family::kKDA || cfg.family == Family::kGDN; }
  bool vec_gate() const { return cfg.family == Family::kKDA || cfg.family == Family::kGLA; }

  Options options() const {
    Options o;
    o.use_qk_l2norm_in_kernel = cfg.l2norm;
    o.use_beta_sigmoid_in_kernel = delta() && cfg.beta_sigmoid;
    o.allow_neg_eigval = delta() && cfg.beta_sigmoid && cfg.neg_eig;
    o.state_v_first = cfg.v_first;
    if (cfg.gate == DecodeGate::kSoftplus || cfg.gate == DecodeGate::kLowerBound) o.use_gate_in_kernel = true;
    if (cfg.gate == DecodeGate::kLowerBound) o.lower_bound = -5.0f;
    return o;
  }

  DecodeInputs inputs() const {
    DecodeInputs in;
    in.q = q.view;
    in.k = k.view;
    in.v = v.view;
    in.g = g.view;
    in.g_gamma = g_gamma.view;
    in.beta = beta.view;
    in.A_log = A_log.view;
    in.dt_bias = dt_bias.view;
    in.state = state.view;
    in.ssm_state_indices = indices.view;
    in.num_accepted_tokens = accepted.view;
    in.cu_seqlens = cu.view;
    in.inplace_final_state = cfg.pool != Pool::kNone && cfg.inplace;
    return in;
  }
  DecodeOutputs outputs() const {
    DecodeOutputs out;
    out.o = o.view;
    out.final_state = final_state.view;
    out.status = status.view;
    return out;
  }
};

inline DecodeCase make_decode_case(const DecodeConfig& c) {
  DecodeCase d;
  d.cfg = c;
  d.N = static_cast<int64_t>(c.lens.size());
  const int64_t total = std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0});
  const int64_t maxlen = *std::max_element(c.lens.begin(), c.lens.end());
  d.B = c.varlen ? 1 : d.N;
  d.T = c.varlen ? total : c.lens[0];
  d.t_max = c.t_max > 0 ? c.t_max : std::max<int64_t>(maxlen, 1);
  const int64_t B = d.B, T = d.T, H = c.H, HV = c.HV, K = c.K, V = c.V, N = d.N;
  d.q = HostTensor(c.dtype, {B, T, H, K});
  d.k = HostTensor(c.dtype, {B, T, H, K});
  d.v = HostTensor(c.dtype, {B, T, HV, V});
  fill_normal(d.q);
  fill_normal(d.k);
  fill_normal(d.v);
  if (!c.l2norm) {  // keep the state bounded without the norm
    for (int64_t i = 0; i < d.k.numel(); ++i) d.k.set(i, d.k.get(i) / std::sqrt(double(K)));
  }
  const bool vg = d.vec_gate();
  if (c.family != Family::kSimpleGLA || !c.g_gamma) {
    d.g = vg ? HostTensor(DType::kFloat32, {B, T, HV, K}) : HostTensor(DType::kFloat32, {B, T, HV});
    if (c.gate == DecodeGate::kLogsigmoid || c.gate == DecodeGate::kWithNegInf) {
      fill_logsigmoid_gate(d.g);
      if (c.gate == DecodeGate::kWithNegInf) {  // full forgets, exactly representable
        for (int64_t i = 0; i < d.g.numel(); i += 7) d.g.set(i, -std::numeric_limits<double>::infinity());
      }
    } else {
      fill_normal(d.g);
    }
  }
  if (c.family == Family::kSimpleGLA && c.g_gamma) {
    d.g_gamma = HostTensor(DType::kFloat32, {HV});
    fill_uniform(d.g_gamma, -0.2, -0.01);
  }
  if (d.delta()) {
    d.beta = c.beta_per_v ? HostTensor(c.dtype, {B, T, HV, V}) : HostTensor(c.dtype, {B, T, HV});
    if (c.beta_sigmoid) {
      fill_normal(d.beta);
    } else {
      fill_uniform(d.beta, 0.05, 0.95);
    }
  }
  if (c.gate == DecodeGate::kSoftplus || c.gate == DecodeGate::kLowerBound) {
    d.A_log = HostTensor(DType::kFloat32, {HV});
    fill_uniform(d.A_log, 0.0, 2.7);
    d.dt_bias = vg ? HostTensor(DType::kFloat32, {HV * K}) : HostTensor(DType::kFloat32, {HV});
    fill_normal(d.dt_bias, 0.0, 0.5);
  }
  if (c.varlen) {
    d.cu = HostTensor(DType::kInt32, {N + 1});
    int64_t acc = 0;
    d.cu.set(0, 0);
    for (int64_t n = 0; n < N; ++n) d.cu.set(n + 1, acc += c.lens[n]);
  }
  // ---- state / pool and indices
  const int64_t a = c.v_first ? V : K, b = c.v_first ? K : V;
  if (c.pool == Pool::kInitial) {
    d.P = N;
  } else if (c.pool == Pool::kIndices1D || c.pool == Pool::kIndices2D) {
    d.P = (c.pool == Pool::kIndices2D ? N * d.t_max : N) + c.pool_extra;
  }
  if (c.pool != Pool::kNone) {
    d.state = HostTensor(c.state_dtype, {d.P, HV, a, b});
    fill_normal(d.state, 0.0, 0.3);
  }
  std::vector<int64_t> perm(static_cast<size_t>(d.P));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  if (c.pool == Pool::kIndices1D) {
    d.indices = HostTensor(DType::kInt32, {N});
    for (int64_t n = 0; n < N; ++n) d.indices.set(n, perm[n]);
    if (c.padding) d.indices.set(N - 1, -1);
  } else if (c.pool == Pool::kIndices2D) {
    d.indices = HostTensor(DType::kInt64, {N, d.t_max});
    for (int64_t i = 0; i < N * d.t_max; ++i) d.indices.set(i, perm[i]);
    if (c.accepted) {
      d.accepted = HostTensor(DType::kInt32, {N});
      std::uniform_int_distribution<int64_t> ua(1, d.t_max);
      for (int64_t n = 0; n < N; ++n) d.accepted.set(n, ua(rng()));
    }
    if (c.padding) {  // sequence 0 skips the write of its first token; the last is padding
      d.indices.set(0, -1);
      if (c.accepted) d.accepted.set(0, std::min<int64_t>(2, d.t_max));
      for (int64_t t = 0; t < d.t_max; ++t) d.indices.set((N - 1) * d.t_max + t, -1);
    }
  }
  // slots the call writes
  for (int64_t n = 0; n < N; ++n) {
    if (c.lens[n] == 0 || c.pool == Pool::kNone || !c.inplace) continue;
    if (c.pool == Pool::kInitial) {
      d.written_slots.push_back(n);
    } else if (c.pool == Pool::kIndices1D) {
      if (d.indices.get(n) >= 0) d.written_slots.push_back(static_cast<int64_t>(d.indices.get(n)));
    } else {
      const int64_t acc = c.accepted ? static_cast<int64_t>(d.accepted.get(n)) : 1;
      if (d.indices.get(n * d.t_max + acc - 1) < 0) continue;
      for (int64_t t = 0; t < c.lens[n]; ++t) {
        const double w = d.indices.get(n * d.t_max + t);
        if (w >= 0) d.written_slots.push_back(static_cast<int64_t>(w));
      }
    }
  }
  // ---- outputs, poisoned
  d.o = HostTensor(c.dtype, {B, T, HV, V});
  d.o.poison();
  if (c.final_out) {
    d.final_state = HostTensor(c.final_dtype, {N, HV, a, b});
    d.final_state.poison();
  }
  return d;
}

// Every float tensor of `c` converted to float64 (indices and cu_seqlens as they are).
inline DecodeCase to_float64(const DecodeCase& c) {
  DecodeCase d = c;
  auto up = [](HostTensor& t) {
    if (t.present()) t = t.as(DType::kFloat64);
  };
  for (HostTensor* t : {&d.q, &d.k, &d.v, &d.g, &d.g_gamma, &d.beta, &d.A_log, &d.dt_bias, &d.state, &d.o,
                        &d.final_state}) {
    up(*t);
  }
  return d;
}

// The expectation: the CPU decode in float64 on the same input values. Returns the case after
// the call (o, state pool and final_state hold the expected values).
inline DecodeCase expected_decode(const DecodeCase& c, Status* s) {
  DecodeCase e = to_float64(c);
  *s = decode(c.cfg.family, e.inputs(), e.outputs(), e.options());
  return e;
}

// Relative error of the pool's written slots, and whether every other slot is bitwise unchanged.
struct PoolCheck {
  double err = 0;
  bool others_unchanged = true;
};
inline PoolCheck check_pool(const HostTensor& got, const HostTensor& want, const HostTensor& before,
                            const std::vector<int64_t>& written) {
  PoolCheck r;
  if (!got.present()) return r;
  const int64_t P = got.view.shape[0];
  const int64_t slot = got.numel() / P;
  const std::set<int64_t> w(written.begin(), written.end());
  double num = 0, den = 0;
  for (int64_t s = 0; s < P; ++s) {
    for (int64_t i = s * slot; i < (s + 1) * slot; ++i) {
      if (w.count(s)) {
        const double a = got.get(i), b = want.get(i);
        if (!std::isfinite(a)) return {std::numeric_limits<double>::infinity(), r.others_unchanged};
        num += (a - b) * (a - b);
        den += b * b;
      } else {
        const double a = got.get(i), b = before.get(i);
        if (!(a == b || (std::isnan(a) && std::isnan(b)))) r.others_unchanged = false;
      }
    }
  }
  r.err = den > 0 ? std::sqrt(num / den) : (num > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  return r;
}

// A spread of configurations over every option the decode path has.
inline std::vector<DecodeConfig> decode_configs() {
  std::vector<DecodeConfig> v;
  auto add = [&v](DecodeConfig c) { v.push_back(c); };
  for (Family f : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA}) {
    for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
      DecodeConfig c;
      c.family = f;
      c.dtype = dt;
      c.lens = {1, 1, 1, 1};
      c.K = 128;
      c.V = 128;
      c.HV = 4;
      c.H = 2;
      c.pool = Pool::kIndices1D;
      add(c);
    }
    DecodeConfig s;  // speculative: per-token indices, accepted tokens, padding, varlen
    s.family = f;
    s.lens = {4, 3, 0, 4, 2};
    s.varlen = true;
    s.pool = Pool::kIndices2D;
    s.t_max = 4;
    s.accepted = true;
    s.padding = true;
    s.K = 64;
    s.V = 128;
    add(s);
  }
  {
    DecodeConfig c;  // state_v_first, bf16 pool, K != V, per-channel beta, sigmoid beta
    c.v_first = true;
    c.state_dtype = DType::kBFloat16;
    c.K = 128;
    c.V = 64;
    c.beta_per_v = true;
    c.beta_sigmoid = true;
    c.neg_eig = true;
    c.lens = {2, 2, 2};
    add(c);
    c.v_first = false;
    add(c);
  }
  for (int64_t kdim : {16, 60, 100, 256}) {  // head sizes off the 64/128 grid
    DecodeConfig c;
    c.K = kdim;
    c.V = kdim == 256 ? 256 : (kdim == 60 ? 36 : kdim);
    c.lens = {3, 1};
    c.final_out = true;
    c.inplace = false;
    c.family = kdim == 60 ? Family::kGDN : Family::kKDA;
    add(c);
    c.v_first = true;
    add(c);
  }
  for (DecodeGate gt : {DecodeGate::kSoftplus, DecodeGate::kLowerBound, DecodeGate::kWithNegInf}) {
    for (Family f : {Family::kKDA, Family::kGDN}) {
      if (gt == DecodeGate::kLowerBound && f != Family::kKDA) continue;
      DecodeConfig c;
      c.family = f;
      c.gate = gt;
      c.H = 2;
      c.HV = 6;  // GVA
      c.lens = {1, 5, 16};
      c.varlen = true;
      c.pool = Pool::kNone;
      c.final_out = true;
      c.inplace = false;
      add(c);
    }
  }
  // The whole-head CUDA kernel (src/cuda/decode/recurrent_decode_head.cuh, sm_90+): K = V = 128,
  // both state layouts. A float32 pool at any length (varlen with an empty and a 16-token sequence,
  // or T = 3) and with per-token indices (speculative), a bfloat16 pool at T = 1; the three
  // destinations, padding, no initial state, each family, gate and beta form, GVA, every q/k/v dtype.
  {
    int i = 0;
    for (DType st : {DType::kFloat32, DType::kBFloat16}) {
      for (int dest = 0; dest < 3; ++dest) {
        for (Family f : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA}) {
          DecodeConfig c;
          c.family = f;
          c.dtype = i % 3 == 0 ? DType::kBFloat16 : (i % 3 == 1 ? DType::kFloat32 : DType::kFloat16);
          c.state_dtype = st;
          c.K = c.V = 128;
          c.H = 2;
          c.HV = i % 2 ? 4 : 2;
          if (st == DType::kFloat32 && i % 2 == 0) {
            c.lens = {1, 5, dest == 1 ? 2 : 0, 16};  // an empty sequence writes no final_state row
            c.varlen = true;
          } else if (st == DType::kFloat32) {
            c.lens = {3, 3};
          } else {
            c.lens = {1, 1, 1, 1, 1};
          }
          c.pool = i % 4 == 3 ? Pool::kInitial : Pool::kIndices1D;
          if (dest == 1 && i % 3 == 2) c.pool = Pool::kNone;  // no initial state: zeros
          c.padding = c.pool == Pool::kIndices1D && i % 2 == 1 && dest != 1;
          c.inplace = dest == 0;
          c.final_out = dest == 1;
          c.final_dtype = c.pool == Pool::kNone ? DType::kFloat32 : st;
          const DecodeGate gates[] = {DecodeGate::kSoftplus, DecodeGate::kLogsigmoid, DecodeGate::kLowerBound,
                                      DecodeGate::kWithNegInf};
          c.gate = gates[i % 4];
          if (c.gate == DecodeGate::kLowerBound && c.family != Family::kKDA) c.gate = DecodeGate::kSoftplus;
          // the in-kernel gate is KDA's and GDN's
          if (f == Family::kGLA || f == Family::kSimpleGLA) c.gate = i % 2 ? DecodeGate::kLogsigmoid : DecodeGate::kWithNegInf;
          c.g_gamma = f == Family::kSimpleGLA && i % 2 == 0;
          c.beta_per_v = i % 5 == 2;
          c.beta_sigmoid = i % 3 == 1;
          c.neg_eig = i % 7 == 3;
          c.l2norm = i % 6 != 5;
          c.v_first = i % 3 == 2;
          add(c);
          ++i;
        }
      }
    }
    for (Family f : {Family::kKDA, Family::kGDN, Family::kGLA}) {  // speculative: per-token indices
      DecodeConfig c;
      c.family = f;
      c.K = c.V = 128;
      c.lens = {4, 3, 0, 4, 2};
      c.varlen = true;
      c.pool = Pool::kIndices2D;
      c.t_max = 4;
      c.accepted = true;
      c.padding = true;
      c.v_first = f == Family::kGDN;
      c.beta_per_v = f == Family::kKDA;
      add(c);
    }
  }
  // One token per sequence at a fixed length in the [K, V] layout: the tiled kernel's fast path
  // (src/cuda/decode/recurrent_decode.cuh) at head sizes the whole-head kernel does not take. Every pool dtype and head size, the
  // three destinations (in place, a final_state of the pool's dtype, not kept), indices with
  // padding or none, each gate and beta form, GVA, several V tiles.
  {
    int i = 0;
    for (DType st : {DType::kFloat32, DType::kBFloat16}) {
      for (int64_t kdim : {64, 128, 256}) {
        for (int dest = 0; dest < 3; ++dest, ++i) {
          DecodeConfig c;
          c.family = i % 2 ? Family::kGDN : Family::kKDA;
          c.dtype = i % 3 == 0 ? DType::kFloat32 : (i % 3 == 1 ? DType::kBFloat16 : DType::kFloat16);
          c.state_dtype = st;
          c.K = kdim;
          c.V = kdim == 128 ? 192 : (kdim == 64 ? 128 : 64);
          c.H = 2;
          c.HV = 4;
          c.lens = {1, 1, 1, 1, 1};
          c.pool = i % 4 == 3 ? Pool::kInitial : Pool::kIndices1D;
          c.padding = c.pool == Pool::kIndices1D && i % 2 == 0 && dest != 1;  // a padded final_state row stays unwritten
          c.inplace = dest == 0;
          c.final_out = dest == 1;
          c.final_dtype = st;
          const DecodeGate gates[] = {DecodeGate::kLogsigmoid, DecodeGate::kSoftplus, DecodeGate::kWithNegInf,
                                      DecodeGate::kLowerBound};
          c.gate = gates[i % 4];
          if (c.gate == DecodeGate::kLowerBound && c.family != Family::kKDA) c.gate = DecodeGate::kSoftplus;
          c.beta_per_v = i % 5 == 1;
          c.beta_sigmoid = i % 3 == 2;
          c.neg_eig = i % 6 == 2;
          c.l2norm = i % 7 != 4;
          add(c);
        }
      }
    }
    DecodeConfig c;  // a final_state of another dtype than the pool's (the general kernel)
    c.state_dtype = DType::kBFloat16;
    c.K = 128;
    c.V = 128;
    c.inplace = false;
    c.final_out = true;
    add(c);
  }
  {
    DecodeConfig c;  // simple GLA with g_gamma only; no l2norm; fixed length T = 4
    c.family = Family::kSimpleGLA;
    c.g_gamma = true;
    c.l2norm = false;
    c.lens = {4, 4};
    c.pool = Pool::kInitial;
    add(c);
  }
  return v;
}

}  // namespace linattn::test
