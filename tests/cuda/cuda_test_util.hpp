// The shared harness of the CUDA suites (test_cuda_forward.cpp, test_cuda_backward.cpp) and of
// the stage benchmark (bench/cuda_stage_bench.cpp): device buffers, upload / download, gate modes,
// cases and their random inputs, options, tensor views, the float64 reference runs, the backward
// paths a test can pick. Free of GoogleTest (the benchmark does not link it) except for the
// SKIP_WITHOUT_GPU macro, which only tests expand. Error metrics and tolerances: test_util.hpp.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "linattn/linattn.hpp"
#include "test_util.hpp"

#define SKIP_WITHOUT_GPU()                                    \
  do {                                                        \
    if (!linattn::cuda_available()) GTEST_SKIP() << "no GPU"; \
  } while (0)

namespace linattn::test {

// ------------------------------------------------------------------ device memory

// An owning device allocation (p is null when the allocation failed or bytes is 0).
struct DevBuf {
  void* p = nullptr;
  std::size_t n = 0;
  DevBuf() = default;
  explicit DevBuf(std::size_t bytes) : n(bytes) {
    if (bytes && cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  DevBuf(DevBuf&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

// Device copy of a host tensor, owned by `keep`; an absent tensor stays absent.
inline TensorView upload(const HostTensor& h, std::vector<DevBuf>& keep) {
  if (!h.present()) return TensorView{};
  keep.emplace_back(h.bytes.size());
  cudaMemcpy(keep.back().p, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice);
  TensorView v = h.view;
  v.data = keep.back().p;
  v.device = Device{DeviceType::kCUDA, 0};
  return v;
}

// Copies a device tensor back into h (nothing when h is absent).
inline void download(const TensorView& d, HostTensor& h) {
  if (h.present()) cudaMemcpy(h.bytes.data(), d.data, h.bytes.size(), cudaMemcpyDeviceToHost);
}

// ------------------------------------------------------------------ cases and inputs

enum class Gate {
  kLogsigmoid,    // g = logsigmoid(randn) / 16 passed directly
  kClamped,       // g in [L, 0) passed directly (safe_gate promise)
  kVeryNegative,  // g = logsigmoid(randn) * 8 (down to ~ -40 per token)
  kSoftplus,      // in-kernel: -exp(A_log) softplus(g + dt_bias)
  kLowerBound,    // in-kernel: L sigmoid(exp(A_log) (g + dt_bias))
  kLowerBoundNoAlog,
};

struct Case {
  Family fam = Family::kKDA;
  DType dt = DType::kBFloat16;
  int64_t B = 1, T = 64, H = 2, HV = 2, K = 64, V = 64;
  std::vector<int64_t> cu;  // varlen when non-empty (B must be 1)
  bool cu64 = false;        // cu_seqlens as int64 (torch's default) instead of int32
  Gate gate = Gate::kLogsigmoid;
  bool dt_bias = true, l2norm = true, beta_sigmoid = false, neg_eigval = false;
  bool h0 = false;
  bool final_state = false, inter = false;  // forward outputs: final state, chunk states h
  bool dht = false;                         // backward: a final-state gradient
  bool all_outputs = true;                  // backward: false = dq, dk, dv only
  bool v_first = false, safe_gate = false;
  bool g16 = false;  // the raw gate in the inputs' dtype when that is 16-bit (float32 otherwise)
  int draw = 0;      // which of the case's random draws make_inputs takes (see there)
  float lower_bound = -5.f;
  // simple GLA: whether g is passed (false: g_gamma alone) and whether g_gamma is
  bool has_g = true, g_gamma = false;
  double scale = 0;  // 0: the default K^-0.5

  std::string name() const {
    char b[320];
    std::snprintf(b, sizeof b,
                  "%s %s B%lld T%lld H%lld HV%lld K%lld V%lld N%zu gate%d l2%d bsig%d neg%d h0%d ht%d h%d dht%d "
                  "vf%d safe%d g%d gamma%d scale%g g16%d",
                  family_name(fam), dtype_name(dt), (long long)B, (long long)T, (long long)H, (long long)HV,
                  (long long)K, (long long)V, cu.empty() ? size_t(0) : cu.size() - 1, int(gate), l2norm,
                  beta_sigmoid, neg_eigval, h0, final_state, inter, dht, v_first, safe_gate, has_g, g_gamma,
                  scale, int(g16));
    return b;
  }
  bool in_kernel_gate() const {
    return gate == Gate::kSoftplus || gate == Gate::kLowerBound || gate == Gate::kLowerBoundNoAlog;
  }
  bool varlen() const { return !cu.empty(); }
  bool delta() const { return fam == Family::kKDA || fam == Family::kGDN; }
};

// A case of a family without the delta rule (GLA, simple GLA): no beta or in-kernel gate, and
// the l2norm off by default (FLA's chunk_gla / chunk_simple_gla have none; linattn accepts it).
inline Case no_delta_case(Family fam) {
  Case c;
  c.fam = fam;
  c.l2norm = false;
  c.dt_bias = false;
  return c;
}

// The no-delta families' small varlen layout: lengths 1, 63, 0, 65, 1, 170 on two value heads of
// one key head, simple GLA with g_gamma, initial state and the final state's gradient.
inline Case no_delta_varlen_case(Family fam, DType dt) {
  Case c = no_delta_case(fam);
  c.dt = dt;
  c.cu = {0, 1, 64, 64, 129, 130, 300};
  c.T = 300;
  c.H = 1;
  c.HV = 2;
  c.g_gamma = fam == Family::kSimpleGLA;
  c.h0 = true;
  c.dht = true;
  return c;
}

// ---- the case lists the forward and backward tests share

// Every dtype the CUDA backend takes.
inline constexpr DType kDtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};

// Which test runs a case: the forward checks o and the states, the backward every gradient.
enum class Pass { kForward, kBackward };

// The state outputs a case asks for: forward, the final state (with_h: and the chunk states h);
// backward, the final state's gradient dht.
inline void ask_state(Case& c, Pass pass, bool with_h = false) {
  if (pass == Pass::kForward) {
    c.final_state = true;
    c.inter = with_h;
  } else {
    c.dht = true;
  }
}

// Every option of a delta-rule family (KDA, GDN) on the small shape (T = 130), one case each; the
// base case (every option off) first.
inline std::vector<Case> option_cases(Family fam, Pass pass) {
  std::vector<Case> v;
  Case base;
  base.fam = fam;
  base.T = 130;
  v.push_back(base);
  { Case c = base; c.l2norm = false; v.push_back(c); }
  { Case c = base; c.beta_sigmoid = true; v.push_back(c); }
  { Case c = base; c.beta_sigmoid = true; c.neg_eigval = true; v.push_back(c); }
  { Case c = base; c.gate = Gate::kSoftplus; v.push_back(c); }
  { Case c = base; c.gate = Gate::kSoftplus; c.dt_bias = false; v.push_back(c); }
  { Case c = base; c.h0 = true; ask_state(c, pass, true); v.push_back(c); }
  { Case c = base; c.h0 = true; ask_state(c, pass, true); c.v_first = true; v.push_back(c); }
  { Case c = base; ask_state(c, pass); v.push_back(c); }
  { Case c = base; c.H = 1; c.HV = 3; c.h0 = true; ask_state(c, pass); v.push_back(c); }  // GVA G = 3
  { Case c = base; c.gate = Gate::kVeryNegative; ask_state(c, pass); v.push_back(c); }
  { Case c = base; c.B = 2; c.T = 65; c.h0 = true; ask_state(c, pass, true); v.push_back(c); }
  if (pass == Pass::kBackward) { Case c = base; c.all_outputs = false; c.h0 = true; v.push_back(c); }
  if (fam == Family::kKDA) {
    { Case c = base; c.gate = Gate::kLowerBound; v.push_back(c); }
    { Case c = base; c.gate = Gate::kLowerBound; c.safe_gate = true; ask_state(c, pass); v.push_back(c); }
    { Case c = base; c.gate = Gate::kLowerBoundNoAlog; c.safe_gate = true; v.push_back(c); }
    { Case c = base; c.gate = Gate::kLowerBoundNoAlog; c.dt_bias = false; v.push_back(c); }
    { Case c = base; c.gate = Gate::kClamped; c.safe_gate = true; ask_state(c, pass); v.push_back(c); }
    { Case c = base; c.gate = Gate::kClamped; c.safe_gate = true; c.lower_bound = -1.f; v.push_back(c); }
    // the raw gate in bf16 / fp16, as models pass it: the kernels' widening path
    { Case c = base; c.gate = Gate::kSoftplus; c.g16 = true; v.push_back(c); }
    { Case c = base; c.gate = Gate::kLowerBound; c.safe_gate = true; c.g16 = true; v.push_back(c); }
  }
  return v;
}

// Every option of GLA and simple GLA (no β or in-kernel gate; simple GLA's gate modes: g and
// g_gamma, g alone, g_gamma alone) on the small shape, the base case (an initial state and the
// state output) first.
inline std::vector<Case> no_delta_cases(Family fam, Pass pass) {
  std::vector<Case> v;
  Case base = no_delta_case(fam);
  base.T = 130;
  base.h0 = true;
  ask_state(base, pass);
  if (fam == Family::kSimpleGLA) base.g_gamma = true;  // g and g_gamma
  v.push_back(base);
  { Case c = base; c.l2norm = true; v.push_back(c); }
  { Case c = base; c.scale = 0.3; c.h0 = false; v.push_back(c); }
  { Case c = base; ask_state(c, pass, true); c.v_first = true; v.push_back(c); }
  { Case c = base; c.final_state = false; c.dht = false; v.push_back(c); }  // no state output
  { Case c = base; c.H = 1; c.HV = 3; v.push_back(c); }  // GVA G = 3
  { Case c = base; c.gate = Gate::kVeryNegative; v.push_back(c); }
  { Case c = base; c.B = 2; c.T = 65; ask_state(c, pass, true); v.push_back(c); }
  { Case c = base; c.K = 128; c.V = 64; v.push_back(c); }  // K != V
  { Case c = base; c.K = 64; c.V = 128; c.H = 1; c.HV = 2; ask_state(c, pass, true); v.push_back(c); }
  if (pass == Pass::kBackward) { Case c = base; c.all_outputs = false; v.push_back(c); }
  if (fam == Family::kSimpleGLA) {
    { Case c = base; c.g_gamma = false; v.push_back(c); }  // g alone
    { Case c = base; c.has_g = false; ask_state(c, pass, true); v.push_back(c); }  // g_gamma alone
    { Case c = base; c.has_g = false; c.H = 1; c.HV = 2; c.final_state = false; c.dht = false; v.push_back(c); }
  }
  return v;
}

// The cases of the Hopper kernels (K = 128, V >= 128): every option of the family (option_cases or
// no_delta_cases), then a varlen layout with empty sequences first, inside and last and lengths
// around the chunk, and an odd length at V = 256 (four V tiles) with GVA; both with an initial
// state and the state output (forward) or dht (backward).
inline std::vector<Case> hopper_cases(Family fam, Pass pass) {
  const bool delta = fam == Family::kKDA || fam == Family::kGDN;
  std::vector<Case> v = delta ? option_cases(fam, pass) : no_delta_cases(fam, pass);
  {
    Case c = v.front();
    c.B = 1;
    c.cu = {0, 0, 1, 64, 64, 193, 258, 258};
    c.T = 258;
    c.h0 = true;
    ask_state(c, pass);
    v.push_back(c);
  }
  {
    Case c = v.front();
    c.T = 317;
    c.H = 1;
    c.HV = 2;
    c.V = 256;
    c.h0 = true;
    ask_state(c, pass);
    v.push_back(c);
  }
  for (Case& c : v) {
    c.K = 128;
    if (c.V < 128) c.V = 128;
  }
  return v;
}

struct Inputs {
  HostTensor q, k, v, g, beta, A_log, dt_bias, h0, cu, d_o, dht, g_gamma;
  int64_t N = 0, NT = 0;  // sequences, chunks (NT_total)
};

// A state-shaped host tensor: [N, HV, K, V] ([N, HV, V, K] with v_first).
inline HostTensor state_tensor(const Case& c, int64_t N, DType dt = DType::kFloat32) {
  return c.v_first ? HostTensor(dt, {N, c.HV, c.V, c.K}) : HostTensor(dt, {N, c.HV, c.K, c.V});
}

// Random inputs of case c. backward: also d_o and, with c.dht, the final-state gradient. The
// shared generator (test_util.hpp's rng()) is first seeded from the case (its name, cu_seqlens,
// c.draw and the direction), so a case gets the same values whichever tests ran before it: a
// failure reproduces under --gtest_filter and under compute-sanitizer (whose filtered runs once
// fed a case other draws than the full suite). The draw order is fixed (q, k, v, [d_o], g,
// [A_log], [dt_bias], beta, [h0], [dht]).
inline void seed_inputs(const Case& c, bool backward) {
  std::string key = c.name() + (backward ? " bwd" : " fwd") + " draw" + std::to_string(c.draw) + " cu";
  for (int64_t b : c.cu) key += " " + std::to_string(b);
  seed_rng(key);
}

inline Inputs make_inputs(const Case& c, bool backward) {
  seed_inputs(c, backward);
  Inputs x;
  const int64_t B = c.B, T = c.T, H = c.H, HV = c.HV, K = c.K, V = c.V;
  const bool vec = c.fam == Family::kKDA || c.fam == Family::kGLA;
  x.q = HostTensor(c.dt, {B, T, H, K});
  x.k = HostTensor(c.dt, {B, T, H, K});
  x.v = HostTensor(c.dt, {B, T, HV, V});
  fill_normal(x.q);
  // without the in-kernel l2norm keep ||k|| ~ 1 so the delta rule stays contractive
  fill_normal(x.k, 0.0, c.l2norm ? 1.0 : 1.0 / std::sqrt(double(K)));
  fill_normal(x.v);
  if (backward) {
    x.d_o = HostTensor(c.dt, {B, T, HV, V});
    fill_normal(x.d_o);
  }
  x.g = vec ? HostTensor(DType::kFloat32, {B, T, HV, K}) : HostTensor(DType::kFloat32, {B, T, HV});
  switch (c.gate) {
    case Gate::kLogsigmoid: fill_logsigmoid_gate(x.g, 16.0); break;
    case Gate::kClamped: fill_uniform(x.g, c.lower_bound, -1e-4); break;
    case Gate::kVeryNegative: fill_logsigmoid_gate(x.g, 1.0 / 8.0); break;
    default: fill_normal(x.g); break;
  }
  if (c.g16 && (c.dt == DType::kBFloat16 || c.dt == DType::kFloat16)) x.g = x.g.as(c.dt);
  if (c.gate == Gate::kSoftplus || c.gate == Gate::kLowerBound) {
    x.A_log = HostTensor(DType::kFloat32, {HV});
    fill_uniform(x.A_log, 0.0, 2.7);
  }
  if (c.in_kernel_gate() && c.dt_bias) {
    x.dt_bias = vec ? HostTensor(DType::kFloat32, {HV * K}) : HostTensor(DType::kFloat32, {HV});
    fill_normal(x.dt_bias);
  }
  x.beta = HostTensor(c.dt, {B, T, HV});
  if (c.beta_sigmoid) fill_normal(x.beta);
  else fill_uniform(x.beta, 0.05, 1.0);
  x.N = c.varlen() ? int64_t(c.cu.size()) - 1 : B;
  if (c.varlen()) {
    x.cu = HostTensor(c.cu64 ? DType::kInt64 : DType::kInt32, {x.N + 1});
    for (int64_t i = 0; i <= x.N; ++i) {
      if (c.cu64) static_cast<int64_t*>(x.cu.view.data)[i] = c.cu[i];
      else static_cast<int32_t*>(x.cu.view.data)[i] = int32_t(c.cu[i]);
    }
    x.NT = 0;
    for (int64_t i = 0; i < x.N; ++i) x.NT += (c.cu[i + 1] - c.cu[i] + 63) / 64;
  } else {
    x.NT = (T + 63) / 64;
  }
  if (c.h0) {
    x.h0 = state_tensor(c, x.N);
    fill_normal(x.h0, 0.0, 0.5);
  }
  if (backward && c.dht) {
    x.dht = state_tensor(c, x.N);
    fill_normal(x.dht, 0.0, 0.5);
  }
  // Families without the delta rule: no beta (drawn above all the same, so that the draw order
  // of the other inputs is the families'); simple GLA's g_gamma drawn last, g dropped on request.
  if (!c.delta()) x.beta = HostTensor{};
  if (!c.has_g) x.g = HostTensor{};
  if (c.g_gamma) {
    x.g_gamma = HostTensor(DType::kFloat32, {HV});
    fill_uniform(x.g_gamma, -0.4, -0.01);
  }
  return x;
}

// The same values with q, k, v, beta and d_o in float64: the reference's float64 path.
inline Inputs as_f64(const Inputs& x) {
  Inputs w = x;
  w.q = x.q.as(DType::kFloat64);
  w.k = x.k.as(DType::kFloat64);
  w.v = x.v.as(DType::kFloat64);
  if (x.beta.present()) w.beta = x.beta.as(DType::kFloat64);
  if (x.d_o.present()) w.d_o = x.d_o.as(DType::kFloat64);
  return w;
}

inline Options make_options(const Case& c) {
  Options o;
  o.use_qk_l2norm_in_kernel = c.l2norm;
  o.use_beta_sigmoid_in_kernel = c.beta_sigmoid;
  o.allow_neg_eigval = c.neg_eigval;
  o.state_v_first = c.v_first;
  o.use_gate_in_kernel = c.in_kernel_gate();
  if (c.scale != 0) o.scale = c.scale;
  if (c.gate == Gate::kLowerBound || c.gate == Gate::kLowerBoundNoAlog) o.lower_bound = c.lower_bound;
  if (c.safe_gate) {
    o.safe_gate = true;
    o.lower_bound = c.lower_bound;
  }
  return o;
}

// Views of the inputs: on the device (copies owned by `keep`; cu_seqlens_host then points at the
// host copy) or the host tensors themselves.
inline ForwardInputs forward_views(const Inputs& x, bool dev, std::vector<DevBuf>& keep) {
  auto put = [&](const HostTensor& h) { return dev ? upload(h, keep) : (h.present() ? h.view : TensorView{}); };
  ForwardInputs in;
  in.q = put(x.q);
  in.k = put(x.k);
  in.v = put(x.v);
  in.g = put(x.g);
  in.beta = put(x.beta);
  in.A_log = put(x.A_log);
  in.dt_bias = put(x.dt_bias);
  in.g_gamma = put(x.g_gamma);
  in.initial_state = put(x.h0);
  if (x.cu.present()) {
    in.cu_seqlens = put(x.cu);
    if (dev) in.cu_seqlens_host = x.cu.view;
  }
  return in;
}

inline BackwardInputs backward_views(const Inputs& x, bool dev, std::vector<DevBuf>& keep) {
  BackwardInputs in;
  in.fwd = forward_views(x, dev, keep);
  in.d_o = dev ? upload(x.d_o, keep) : x.d_o.view;
  in.dht = dev ? upload(x.dht, keep) : (x.dht.present() ? x.dht.view : TensorView{});
  return in;
}

// ------------------------------------------------------------------ forward outputs, reference

// The neighbour-isolation cases (Cuda{Forward,Backward}.SmallNeighbourSequencesIsolated):
// sequences of 100, 64 and 136 tokens, K = V = 128, one key head of two value heads. The first
// sequence's 36-token tail chunk overlaps the second: a kernel's tile of it covers the next
// sequence's rows (a TMA box, an unpredicated copy), which must be cleared or masked without
// arithmetic (0 x inf is NaN).
inline Case isolation_case(Family fam, DType dt) {
  Case c = fam == Family::kKDA || fam == Family::kGDN ? Case{} : no_delta_case(fam);
  c.fam = fam;
  c.dt = dt;
  c.K = c.V = 128;
  c.H = 1;
  c.HV = 2;
  c.cu = {0, 100, 164, 300};
  c.T = 300;
  return c;
}
// x with the middle sequence's q, k, v and dO set to inf, its gate and β to NaN.
inline Inputs poison_middle_sequence(const Case& c, const Inputs& x) {
  Inputs bad = x;
  auto poison = [&](HostTensor& t, double value) {
    if (t.numel() == 0) return;
    const int64_t per = t.numel() / c.T;  // elements a token
    for (int64_t i = c.cu[1] * per; i < c.cu[2] * per; ++i) t.set(i, value);
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (HostTensor* t : {&bad.q, &bad.k, &bad.v, &bad.d_o}) poison(*t, inf);
  for (HostTensor* t : {&bad.g, &bad.beta}) poison(*t, nan);
  return bad;
}
// Token-major a and b ([.., T, ..]): bitwise equal, and b finite, on every token outside the middle
// sequence.
inline void expect_tokens_unchanged(const HostTensor& a, const HostTensor& b, const Case& c, const char* what) {
  if (!a.present() || a.numel() == 0) return;
  const int64_t per = a.numel() / c.T, esz = static_cast<int64_t>(a.bytes.size()) / a.numel();
  for (int64_t t = 0; t < c.T; ++t) {
    if (t >= c.cu[1] && t < c.cu[2]) continue;
    ASSERT_EQ(0, std::memcmp(a.bytes.data() + t * per * esz, b.bytes.data() + t * per * esz, per * esz))
        << what << " of token " << t << " changed with the poisoned neighbour";
    for (int64_t i = t * per; i < (t + 1) * per; ++i) ASSERT_TRUE(std::isfinite(b.get(i))) << what << ", token " << t;
  }
}
// States [N, ...] a and b: sequences 0 and 2 (the poisoned one's neighbours) bitwise equal.
inline void expect_neighbour_states_unchanged(const HostTensor& a, const HostTensor& b, const char* what) {
  const std::size_t st = a.bytes.size() / 3;
  for (std::size_t n : {0, 2}) EXPECT_EQ(0, std::memcmp(a.bytes.data() + n * st, b.bytes.data() + n * st, st)) << what << " " << n;
}

struct FwdResult {
  HostTensor o, ht, h;  // h and ht absent unless the case asks for them
};

// Poisoned host outputs of case c: o in `o_dt`, the states in `state_dt`.
inline FwdResult forward_outputs(const Case& c, const Inputs& x, DType o_dt, DType state_dt) {
  FwdResult r;
  r.o = HostTensor(o_dt, {c.B, c.T, c.HV, c.V});
  r.o.poison();
  if (c.final_state) {
    r.ht = state_tensor(c, x.N, state_dt);
    r.ht.poison();
  }
  if (c.inter) {
    const int64_t b_h = c.varlen() ? 1 : c.B;
    const int64_t nt_h = c.varlen() ? x.NT : x.NT;  // fixed length: per batch entry
    r.h = c.v_first ? HostTensor(state_dt, {b_h, nt_h, c.HV, c.V, c.K}) : HostTensor(state_dt, {b_h, nt_h, c.HV, c.K, c.V});
    r.h.poison();
  }
  return r;
}

// The float64 reference forward on the same (already rounded) input values.
inline Status run_reference_forward(const Case& c, const Inputs& x, FwdResult* r) {
  std::vector<DevBuf> keep;
  const Inputs w = as_f64(x);
  const ForwardInputs in = forward_views(w, false, keep);
  *r = forward_outputs(c, x, DType::kFloat64, DType::kFloat64);
  ForwardOutputs out;
  out.o = r->o.view;
  if (c.final_state) out.final_state = r->ht.view;
  if (c.inter) out.h = r->h.view;
  return reference_forward(c.fam, in, out, make_options(c));
}

// ------------------------------------------------------------------ backward paths, gradients

// The backward a test or benchmark runs: one of the product's forms (Options::backward_precision)
// or the token replay (a test hook, common/testing.hpp).
enum class BwdPath { kAuto, kSplit, kFast16, kFloat32, kTokenReplay };

inline const char* path_name(BwdPath m) {
  switch (m) {
    case BwdPath::kAuto: return "auto";
    case BwdPath::kSplit: return "split";
    case BwdPath::kFast16: return "fast16";
    case BwdPath::kFloat32: return "float32";
    case BwdPath::kTokenReplay: return "token replay";
  }
  return "?";
}

// Options with the path's backward_precision (the token replay keeps the default's).
inline Options with_path(Options o, BwdPath m) {
  switch (m) {
    case BwdPath::kSplit: o.backward_precision = BackwardPrecision::kSplit; break;
    case BwdPath::kFast16: o.backward_precision = BackwardPrecision::kFast16; break;
    case BwdPath::kFloat32: o.backward_precision = BackwardPrecision::kFloat32; break;
    default: break;
  }
  return o;
}

// Gradients (host); absent ones stay absent.
constexpr int kNumGrads = 9;
struct Grads {
  HostTensor dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0, dg_gamma;
  HostTensor* at(int i) {
    HostTensor* a[kNumGrads] = {&dq, &dk, &dv, &dg, &dbeta, &dA_log, &ddt_bias, &dh0, &dg_gamma};
    return a[i];
  }
};
inline const char* const kGradNames[kNumGrads] = {"dq",     "dk",       "dv",  "dg",      "dbeta",
                                                  "dA_log", "ddt_bias", "dh0", "dg_gamma"};

// Poisoned gradients shaped like the inputs; `f64` makes the q/k/v/beta ones float64 (for the
// reference, whose q/k/v/beta/d_o are float64).
inline Grads make_grads(const Case& c, const Inputs& x, bool f64) {
  Grads g;
  auto like = [&](const HostTensor& t, bool wide) {
    HostTensor r = t;
    if (wide) r = t.as(DType::kFloat64);
    r.poison();
    return r;
  };
  g.dq = like(x.q, f64);
  g.dk = like(x.k, f64);
  g.dv = like(x.v, f64);
  if (c.all_outputs) {
    if (x.g.present()) g.dg = like(x.g, false);
    if (x.beta.present()) g.dbeta = like(x.beta, f64);
    if (x.g_gamma.present()) g.dg_gamma = like(x.g_gamma, false);
    if (x.A_log.present()) g.dA_log = like(x.A_log, false);
    if (x.dt_bias.present()) g.ddt_bias = like(x.dt_bias, false);
    if (x.h0.present()) g.dh0 = like(x.h0, false);
  }
  return g;
}

// Views of the gradients: device copies (owned by `keep`) or the host tensors.
inline BackwardOutputs grad_views(Grads& g, bool dev, std::vector<DevBuf>& keep) {
  auto put = [&](HostTensor& h) { return dev ? upload(h, keep) : (h.present() ? h.view : TensorView{}); };
  BackwardOutputs o;
  o.dq = put(g.dq);
  o.dk = put(g.dk);
  o.dv = put(g.dv);
  o.dg = put(g.dg);
  o.dbeta = put(g.dbeta);
  o.dA_log = put(g.dA_log);
  o.ddt_bias = put(g.ddt_bias);
  o.dh0 = put(g.dh0);
  o.dg_gamma = put(g.dg_gamma);
  return o;
}

// Copies device gradients back into g.
inline void download_grads(const BackwardOutputs& o, Grads& g) {
  const TensorView* dv[kNumGrads] = {&o.dq,     &o.dk,       &o.dv,  &o.dg,      &o.dbeta,
                                     &o.dA_log, &o.ddt_bias, &o.dh0, &o.dg_gamma};
  for (int i = 0; i < kNumGrads; ++i) download(*dv[i], *g.at(i));
}

// The float64 reference backward on the same input values.
inline Status run_reference_backward(const Case& c, const Inputs& x, Grads* g) {
  std::vector<DevBuf> keep;
  const Inputs w = as_f64(x);
  *g = make_grads(c, x, true);
  const BackwardInputs in = backward_views(w, false, keep);
  const BackwardOutputs out = grad_views(*g, false, keep);
  return reference_backward(c.fam, in, out, make_options(c));
}

// Index of a dtype in the per-dtype error tables: 0 fp16, 1 bf16, 2 fp32.
inline int dtype_index(DType dt) { return dt == DType::kFloat16 ? 0 : (dt == DType::kBFloat16 ? 1 : 2); }

}  // namespace linattn::test
