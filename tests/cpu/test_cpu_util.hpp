// Helpers of the CPU backend tests: a configurable problem, its random inputs, and runners for
// the CPU backend and the float64 reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "linattn/linattn.hpp"
#include "test_util.hpp"

namespace linattn::test::cpu {

enum class Gate { kLogSigmoid, kSoftplus, kLowerBound, kLowerBoundNoALog, kClamped };

struct Config {
  Family family = Family::kKDA;
  DType dtype = DType::kFloat32;
  int64_t B = 2, T = 100, H = 2, G = 1, K = 32, V = 32;
  std::vector<int64_t> cu;  // varlen offsets (B == 1) when non-empty
  bool h0 = false;          // initial_state, dh0
  bool final_state = false; // final_state, dht
  bool v_first = false;
  bool l2norm = false;
  bool h_out = false;
  bool beta_sigmoid = false;
  bool neg_eigval = false;
  Gate gate = Gate::kLogSigmoid;
  bool has_g = true;        // simple GLA may run on g_gamma alone
  bool g_gamma = false;     // simple GLA
  bool bf16_gate = false;   // g in bfloat16 (accepted like float32)
  double scale = 0;         // 0: the default K ** -0.5
  int draw = 0;             // which of the config's random draws make_data takes

  bool delta() const { return family == Family::kKDA || family == Family::kGDN; }
  bool vector_gate() const { return family == Family::kKDA || family == Family::kGLA; }
  int64_t HV() const { return H * G; }
  int64_t N() const { return cu.empty() ? B : static_cast<int64_t>(cu.size()) - 1; }
  DType side_dtype() const { return dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }
  Options options() const {
    Options o;
    o.use_qk_l2norm_in_kernel = l2norm;
    o.use_beta_sigmoid_in_kernel = beta_sigmoid || neg_eigval;
    o.allow_neg_eigval = neg_eigval;
    o.state_v_first = v_first;
    if (scale != 0) o.scale = scale;
    if (gate == Gate::kSoftplus || gate == Gate::kLowerBound || gate == Gate::kLowerBoundNoALog) {
      o.use_gate_in_kernel = true;
    }
    if (gate == Gate::kLowerBound || gate == Gate::kLowerBoundNoALog ||
        (gate == Gate::kClamped && family == Family::kKDA)) {
      o.safe_gate = true;
      o.lower_bound = -5.0f;
    }
    return o;
  }
};

struct Data {
  HostTensor q, k, v, g, g_gamma, beta, A_log, dt_bias, h0, cu, d_o, dht;

  ForwardInputs inputs() const {
    ForwardInputs in;
    in.q = q.view;
    in.k = k.view;
    in.v = v.view;
    in.g = g.view;
    in.g_gamma = g_gamma.view;
    in.beta = beta.view;
    in.A_log = A_log.view;
    in.dt_bias = dt_bias.view;
    in.initial_state = h0.view;
    in.cu_seqlens = cu.view;
    return in;
  }
  // The same values in float64 (exact for every input dtype): the reference's inputs.
  Data as_f64() const {
    Data d;
    auto cvt = [](const HostTensor& t) { return t.present() ? t.as(DType::kFloat64) : HostTensor(); };
    d.q = cvt(q); d.k = cvt(k); d.v = cvt(v); d.g = cvt(g); d.g_gamma = cvt(g_gamma);
    d.beta = cvt(beta); d.A_log = cvt(A_log); d.dt_bias = cvt(dt_bias); d.h0 = cvt(h0);
    d.cu = cu; d.d_o = cvt(d_o); d.dht = cvt(dht);
    return d;
  }
};

inline HostTensor state_tensor(const Config& c, DType dt) {
  return c.v_first ? HostTensor(dt, {c.N(), c.HV(), c.V, c.K}) : HostTensor(dt, {c.N(), c.HV(), c.K, c.V});
}

// Everything that defines a config's inputs, for seeding its draw (test_util.hpp's seed_rng).
inline std::string data_key(const Config& c) {
  std::string k = std::to_string(static_cast<int>(c.family)) + " " + std::to_string(static_cast<int>(c.dtype));
  for (int64_t x : {c.B, c.T, c.H, c.G, c.K, c.V}) k += " " + std::to_string(x);
  k += " cu";
  for (int64_t x : c.cu) k += " " + std::to_string(x);
  for (bool b : {c.h0, c.final_state, c.v_first, c.l2norm, c.h_out, c.beta_sigmoid, c.neg_eigval, c.has_g,
                 c.g_gamma, c.bf16_gate})
    k += b ? '1' : '0';
  k += " gate" + std::to_string(static_cast<int>(c.gate)) + " scale" + std::to_string(c.scale) + " draw" +
       std::to_string(c.draw);
  return k;
}

// Random inputs of config c, the same values whichever tests ran before (seeded from data_key).
inline Data make_data(const Config& c) {
  seed_rng(data_key(c));
  Data d;
  const DType dt = c.dtype, sd = c.side_dtype();
  const int64_t B = c.B, T = c.T, H = c.H, HV = c.HV(), K = c.K, V = c.V;
  const double qk_std = c.l2norm ? 1.0 : 1.0 / std::sqrt(static_cast<double>(K));
  d.q = HostTensor(dt, {B, T, H, K});
  d.k = HostTensor(dt, {B, T, H, K});
  d.v = HostTensor(dt, {B, T, HV, V});
  fill_normal(d.q, 0.0, qk_std);
  fill_normal(d.k, 0.0, qk_std);
  fill_normal(d.v);
  if (c.has_g) {
    const DType gd = c.bf16_gate ? DType::kBFloat16 : sd;
    d.g = c.vector_gate() ? HostTensor(gd, {B, T, HV, K}) : HostTensor(gd, {B, T, HV});
    switch (c.gate) {
      case Gate::kLogSigmoid: fill_logsigmoid_gate(d.g); break;
      case Gate::kClamped: fill_uniform(d.g, -5.0, -1e-3); break;
      default: fill_normal(d.g); break;  // raw gate, activated in the kernel
    }
  }
  if (c.gate == Gate::kSoftplus || c.gate == Gate::kLowerBound) {
    d.A_log = HostTensor(sd, {HV});
    fill_uniform(d.A_log, -1.5, 0.5);
  }
  if (c.gate == Gate::kSoftplus || c.gate == Gate::kLowerBound || c.gate == Gate::kLowerBoundNoALog) {
    d.dt_bias = c.family == Family::kKDA ? HostTensor(sd, {HV * K}) : HostTensor(sd, {HV});
    fill_normal(d.dt_bias, 0.0, 0.5);
  }
  if (c.g_gamma) {
    d.g_gamma = HostTensor(sd, {HV});
    fill_logsigmoid_gate(d.g_gamma, 8.0);
  }
  if (c.delta()) {
    d.beta = HostTensor(dt, {B, T, HV});
    if (c.beta_sigmoid || c.neg_eigval) fill_normal(d.beta); else fill_uniform(d.beta, 0.05, 1.0);
  }
  if (c.h0) {
    d.h0 = state_tensor(c, sd);
    fill_normal(d.h0, 0.0, 0.5);
  }
  if (!c.cu.empty()) {
    d.cu = HostTensor(DType::kInt64, {static_cast<int64_t>(c.cu.size())});
    for (size_t i = 0; i < c.cu.size(); ++i) static_cast<int64_t*>(d.cu.view.data)[i] = c.cu[i];
  }
  d.d_o = HostTensor(dt, {B, T, HV, V});
  fill_normal(d.d_o);
  if (c.final_state) {
    d.dht = state_tensor(c, sd);
    fill_normal(d.dht, 0.0, 0.5);
  }
  return d;
}

struct FwdResult {
  HostTensor o, final_state, h, saved;
};
struct BwdResult {
  HostTensor dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0;
};

inline HostTensor like(const HostTensor& t, DType dt) {
  if (!t.present()) return HostTensor();
  HostTensor r = t.as(dt);
  r.poison();
  return r;
}

inline int64_t total_chunks(const Data& d) {
  int64_t nt = 0;
  EXPECT_TRUE(num_chunks(d.inputs(), &nt).ok());
  return nt;
}

// Runs the forward on the CPU backend (reference == false) or the float64 reference.
inline FwdResult run_forward(const Config& c, const Data& d, bool reference, bool want_saved = false) {
  FwdResult r;
  const DType sd = reference ? DType::kFloat64 : c.side_dtype();
  r.o = like(d.v, reference ? DType::kFloat64 : c.dtype);
  if (c.final_state) r.final_state = like(state_tensor(c, sd), sd);
  if (c.h_out) {
    const int64_t nt = total_chunks(d);
    const int64_t b = c.cu.empty() ? c.B : 1;
    r.h = c.v_first ? HostTensor(sd, {b, nt / b, c.HV(), c.V, c.K}) : HostTensor(sd, {b, nt / b, c.HV(), c.K, c.V});
    r.h.poison();
  }
  ForwardOutputs out;
  out.o = r.o.view;
  out.final_state = r.final_state.view;
  out.h = r.h.view;
  const ForwardInputs in = d.inputs();
  Status s;
  if (reference) {
    s = reference_forward(c.family, in, out, c.options());
  } else {
    if (want_saved) {
      std::size_t sb = 0;
      EXPECT_TRUE(saved_bytes(c.family, in, c.options(), &sb).ok());
      r.saved = HostTensor(DType::kUInt8, {static_cast<int64_t>(sb)});
      out.saved = r.saved.view;
    }
    std::size_t wb = 0;
    s = forward_workspace_size(c.family, in, c.options(), &wb);
    EXPECT_TRUE(s.ok()) << s.message;
    std::vector<unsigned char> ws(wb);
    s = forward(c.family, in, out, c.options(), Workspace{ws.data(), ws.size()});
  }
  EXPECT_TRUE(s.ok()) << s.message;
  return r;
}

// reference: the float64 reference; token_replay: the backend's token-replay backward (a test hook,
// common/testing.hpp) instead of its chunked one.
inline BwdResult run_backward(const Config& c, const Data& d, bool reference, const HostTensor* saved = nullptr,
                              bool token_replay = false) {
  BwdResult r;
  auto grad = [&](const HostTensor& t) { return like(t, reference ? DType::kFloat64 : t.dtype()); };
  r.dq = grad(d.q);
  r.dk = grad(d.k);
  r.dv = grad(d.v);
  r.dg = grad(d.g);
  r.dg_gamma = grad(d.g_gamma);
  r.dbeta = grad(d.beta);
  r.dA_log = grad(d.A_log);
  r.ddt_bias = grad(d.dt_bias);
  r.dh0 = grad(d.h0);
  BackwardInputs in;
  in.fwd = d.inputs();
  in.d_o = d.d_o.view;
  in.dht = d.dht.view;
  if (saved) in.saved = saved->view;
  BackwardOutputs out;
  out.dq = r.dq.view; out.dk = r.dk.view; out.dv = r.dv.view; out.dg = r.dg.view;
  out.dg_gamma = r.dg_gamma.view; out.dbeta = r.dbeta.view; out.dA_log = r.dA_log.view;
  out.ddt_bias = r.ddt_bias.view; out.dh0 = r.dh0.view;
  Status s;
  if (reference) {
    s = reference_backward(c.family, in, out, c.options());
  } else if (token_replay) {
    std::size_t wb = 0;
    s = linattn::testing::token_replay_backward_workspace_size(c.family, in, c.options(), &wb);
    EXPECT_TRUE(s.ok()) << s.message;
    std::vector<unsigned char> ws(wb);
    s = linattn::testing::token_replay_backward(c.family, in, out, c.options(), Workspace{ws.data(), ws.size()});
  } else {
    std::size_t wb = 0;
    s = backward_workspace_size(c.family, in, c.options(), &wb);
    EXPECT_TRUE(s.ok()) << s.message;
    std::vector<unsigned char> ws(wb);
    s = backward(c.family, in, out, c.options(), Workspace{ws.data(), ws.size()});
  }
  EXPECT_TRUE(s.ok()) << s.message;
  return r;
}

inline bool bitwise_equal(const HostTensor& a, const HostTensor& b) {
  if (a.present() != b.present() || a.bytes.size() != b.bytes.size()) return false;
  return a.bytes.empty() || std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

}  // namespace linattn::test::cpu
