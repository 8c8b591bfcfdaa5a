// GPU tests of the CUDA delta-rule backward (KDA, GDN: src/cuda/common/chunk_bwd.*) against the
// float64 reference (linattn::reference_backward). Skips itself without a GPU. Tests named
// *Small* use small shapes, for compute-sanitizer. The backward is called through
// cuda::backward_kda_gdn directly (the public entry point is wired by the backend); one test
// also goes through linattn::backward when the backend routes it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/problem.hpp"
#include "cuda/common/chunk_bwd.hpp"
#include "test_util.hpp"

namespace linattn::test {
namespace {

#define SKIP_WITHOUT_GPU()                                    \
  do {                                                        \
    if (!linattn::cuda_available()) GTEST_SKIP() << "no GPU"; \
  } while (0)

struct DBuf {
  void* p = nullptr;
  explicit DBuf(std::size_t bytes) {
    if (bytes && cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  DBuf(DBuf&& o) noexcept : p(o.p) { o.p = nullptr; }
  ~DBuf() {
    if (p) cudaFree(p);
  }
};

TensorView to_dev(const HostTensor& h, std::vector<DBuf>& keep) {
  if (!h.present()) return TensorView{};
  keep.emplace_back(h.bytes.size());
  cudaMemcpy(keep.back().p, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice);
  TensorView v = h.view;
  v.data = keep.back().p;
  v.device = Device{DeviceType::kCUDA, 0};
  return v;
}
void to_host(const TensorView& d, HostTensor& h) {
  if (h.present()) cudaMemcpy(h.bytes.data(), d.data, h.bytes.size(), cudaMemcpyDeviceToHost);
}

enum class Gate { kLogsigmoid, kClamped, kVeryNegative, kSoftplus, kLowerBound, kLowerBoundNoAlog };

struct Case {
  Family fam = Family::kKDA;
  DType dt = DType::kBFloat16;
  int64_t B = 1, T = 64, H = 2, HV = 2, K = 64, V = 64;
  std::vector<int64_t> cu;
  Gate gate = Gate::kLogsigmoid;
  bool dt_bias = true, l2norm = true, beta_sigmoid = false, neg_eigval = false;
  bool h0 = false, dht = false, v_first = false, safe_gate = false;
  float lower_bound = -5.f;
  bool all_outputs = true;  // false: dq, dk, dv only

  std::string name() const {
    char b[256];
    std::snprintf(b, sizeof b, "%s %s B%lld T%lld H%lld HV%lld K%lld V%lld N%zu gate%d l2%d bsig%d neg%d h0%d dht%d vf%d",
                  family_name(fam), dtype_name(dt), (long long)B, (long long)T, (long long)H, (long long)HV,
                  (long long)K, (long long)V, cu.empty() ? size_t(0) : cu.size() - 1, int(gate), l2norm,
                  beta_sigmoid, neg_eigval, h0, dht, v_first);
    return b;
  }
  bool in_kernel_gate() const { return gate == Gate::kSoftplus || gate == Gate::kLowerBound || gate == Gate::kLowerBoundNoAlog; }
};

struct Inputs {
  HostTensor q, k, v, g, beta, A_log, dt_bias, h0, cu, d_o, dht;
  int64_t N = 0;
};

Inputs make_inputs(const Case& c) {
  Inputs x;
  const int64_t B = c.B, T = c.T, H = c.H, HV = c.HV, K = c.K, V = c.V;
  const bool vec = c.fam == Family::kKDA;
  x.q = HostTensor(c.dt, {B, T, H, K});
  x.k = HostTensor(c.dt, {B, T, H, K});
  x.v = HostTensor(c.dt, {B, T, HV, V});
  x.d_o = HostTensor(c.dt, {B, T, HV, V});
  fill_normal(x.q);
  fill_normal(x.k, 0.0, c.l2norm ? 1.0 : 1.0 / std::sqrt(double(K)));
  fill_normal(x.v);
  fill_normal(x.d_o);
  x.g = vec ? HostTensor(DType::kFloat32, {B, T, HV, K}) : HostTensor(DType::kFloat32, {B, T, HV});
  switch (c.gate) {
    case Gate::kLogsigmoid: fill_logsigmoid_gate(x.g, 16.0); break;
    case Gate::kClamped: fill_uniform(x.g, c.lower_bound, -1e-4); break;
    case Gate::kVeryNegative: fill_logsigmoid_gate(x.g, 1.0 / 8.0); break;
    default: fill_normal(x.g); break;
  }
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
  x.N = c.cu.empty() ? B : int64_t(c.cu.size()) - 1;
  if (!c.cu.empty()) {
    x.cu = HostTensor(DType::kInt32, {x.N + 1});
    for (int64_t i = 0; i <= x.N; ++i) static_cast<int32_t*>(x.cu.view.data)[i] = int32_t(c.cu[i]);
  }
  auto state = [&]() {
    return c.v_first ? HostTensor(DType::kFloat32, {x.N, HV, V, K}) : HostTensor(DType::kFloat32, {x.N, HV, K, V});
  };
  if (c.h0) {
    x.h0 = state();
    fill_normal(x.h0, 0.0, 0.5);
  }
  if (c.dht) {
    x.dht = state();
    fill_normal(x.dht, 0.0, 0.5);
  }
  return x;
}

Options make_options(const Case& c) {
  Options o;
  o.use_qk_l2norm_in_kernel = c.l2norm;
  o.use_beta_sigmoid_in_kernel = c.beta_sigmoid;
  o.allow_neg_eigval = c.neg_eigval;
  o.state_v_first = c.v_first;
  o.use_gate_in_kernel = c.in_kernel_gate();
  if (c.gate == Gate::kLowerBound || c.gate == Gate::kLowerBoundNoAlog) o.lower_bound = c.lower_bound;
  if (c.safe_gate) {
    o.safe_gate = true;
    o.lower_bound = c.lower_bound;
  }
  return o;
}

// Gradients (host); absent ones stay absent.
struct Grads {
  HostTensor dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0;
  HostTensor* at(int i) {
    HostTensor* a[8] = {&dq, &dk, &dv, &dg, &dbeta, &dA_log, &ddt_bias, &dh0};
    return a[i];
  }
};
const char* kGradNames[8] = {"dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"};

// Shapes the gradient tensors like the inputs; `f64` makes them float64 (for the reference,
// whose q/k/v/beta/d_o are float64).
Grads make_grads(const Case& c, const Inputs& x, bool f64) {
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
    g.dg = like(x.g, false);
    g.dbeta = like(x.beta, f64);
    if (x.A_log.present()) g.dA_log = like(x.A_log, false);
    if (x.dt_bias.present()) g.ddt_bias = like(x.dt_bias, false);
    if (x.h0.present()) g.dh0 = like(x.h0, false);
  }
  return g;
}

BackwardOutputs out_views(Grads& g, bool dev, std::vector<DBuf>& keep) {
  auto put = [&](HostTensor& h) { return dev ? to_dev(h, keep) : (h.present() ? h.view : TensorView{}); };
  BackwardOutputs o;
  o.dq = put(g.dq);
  o.dk = put(g.dk);
  o.dv = put(g.dv);
  o.dg = put(g.dg);
  o.dbeta = put(g.dbeta);
  o.dA_log = put(g.dA_log);
  o.ddt_bias = put(g.ddt_bias);
  o.dh0 = put(g.dh0);
  return o;
}

BackwardInputs in_views(const Inputs& x, bool dev, std::vector<DBuf>& keep) {
  auto put = [&](const HostTensor& h) { return dev ? to_dev(h, keep) : (h.present() ? h.view : TensorView{}); };
  BackwardInputs in;
  in.fwd.q = put(x.q);
  in.fwd.k = put(x.k);
  in.fwd.v = put(x.v);
  in.fwd.g = put(x.g);
  in.fwd.beta = put(x.beta);
  in.fwd.A_log = put(x.A_log);
  in.fwd.dt_bias = put(x.dt_bias);
  in.fwd.initial_state = put(x.h0);
  if (x.cu.present()) {
    in.fwd.cu_seqlens = put(x.cu);
    if (dev) in.fwd.cu_seqlens_host = x.cu.view;
  }
  in.d_o = put(x.d_o);
  in.dht = put(x.dht);
  return in;
}

// Runs the CUDA backward (cuda::backward_kda_gdn, or the public API when `api`).
Status run_cuda(const Case& c, const Inputs& x, Grads* g, bool api = false, double* ms = nullptr) {
  std::vector<DBuf> keep;
  keep.reserve(32);
  *g = make_grads(c, x, false);
  BackwardInputs in = in_views(x, true, keep);
  BackwardOutputs out = out_views(*g, true, keep);
  const Options opt = make_options(c);
  Status s;
  if (api) {
    std::size_t bytes = 0;
    s = backward_workspace_size(c.fam, in, opt, &bytes);
    if (!s.ok()) return s;
    DBuf ws(bytes);
    s = backward(c.fam, in, out, opt, Workspace{ws.p, bytes}, nullptr);
    if (!s.ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
  } else {
    detail::Problem p;
    s = detail::resolve_backward(c.fam, in, out, opt, &p);
    if (!s.ok()) return s;
    const std::size_t bytes = cuda::backward_kda_gdn_workspace_bytes(p);
    if (bytes == 0) return Status::Unsupported("backward_kda_gdn: unsupported");
    DBuf ws(bytes);
    if (!ws.p) return {StatusCode::kBackendError, "workspace allocation failed"};
    s = cuda::backward_kda_gdn(p, in, out, Workspace{ws.p, bytes}, nullptr);
    if (!s.ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
    if (ms) {  // timing: a few more runs
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      const int iters = 3;
      cudaEventRecord(a);
      for (int i = 0; i < iters; ++i) cuda::backward_kda_gdn(p, in, out, Workspace{ws.p, bytes}, nullptr);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      *ms = t / iters;
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }
  if (cudaGetLastError() != cudaSuccess) return {StatusCode::kBackendError, "CUDA error"};
  BackwardOutputs o = out;
  TensorView* dv[8] = {&o.dq, &o.dk, &o.dv, &o.dg, &o.dbeta, &o.dA_log, &o.ddt_bias, &o.dh0};
  for (int i = 0; i < 8; ++i) to_host(*dv[i], *g->at(i));
  return Status::Ok();
}

Status run_reference(const Case& c, const Inputs& x, Grads* g) {
  Inputs w = x;  // float64 q, k, v, beta, d_o: the reference's float64 path
  w.q = x.q.as(DType::kFloat64);
  w.k = x.k.as(DType::kFloat64);
  w.v = x.v.as(DType::kFloat64);
  w.beta = x.beta.as(DType::kFloat64);
  w.d_o = x.d_o.as(DType::kFloat64);
  std::vector<DBuf> keep;
  *g = make_grads(c, x, true);
  BackwardInputs in = in_views(w, false, keep);
  BackwardOutputs out = out_views(*g, false, keep);
  return reference_backward(c.fam, in, out, make_options(c));
}

struct Worst {
  double err[3][8] = {};  // [fp16, bf16, fp32][gradient]
  ~Worst() {
    const char* dn[3] = {"fp16", "bf16", "fp32"};
    for (int d = 0; d < 3; ++d) {
      std::printf("[worst rel err %s]", dn[d]);
      for (int i = 0; i < 8; ++i) std::printf(" %s %.2e", kGradNames[i], err[d][i]);
      std::printf("\n");
    }
  }
};
Worst& worst() {
  static Worst w;
  return w;
}

// The chunked backward computed in the 16-bit input type (chunked16, opt-in; the default computes
// in float32). dq, dk, dv and dh0 meet SPEC's 1e-2. dβ and dg (per token) are held to 5e-2
// (measured worst 1.6e-2); dA_log and ddt_bias (one sum over all tokens, ill-conditioned in the
// 16-bit intermediates: measured 1.8e-2 and 8.6e-2, up to 0.2 in an emulation) only to 0.5, which
// still catches a wrong sign, scale or term. Why: chunk_bwd.cu and docs/chunked_backward.md.
double chunked16_bound(int i, double tol) {
  if (i == 3 || i == 4) return 5e-2;   // dg, dbeta
  if (i == 5 || i == 6) return 0.5;    // dA_log, ddt_bias
  return tol;
}
// The split form (hi + lo halves, cuda::kBackwardSplit) meets SPEC on every per-token gradient and
// dh0; dA_log and ddt_bias (per-head sums over all tokens) only to 0.5, as above (measured 0.2):
// the default runs float32 when they are asked for.
double split_bound(int i, double tol) { return (i == 5 || i == 6) ? 0.5 : tol; }

struct Worst16Chunked {
  double err[2][8] = {};  // [fp16, bf16][gradient]
  ~Worst16Chunked() {
    const char* dn[2] = {"fp16", "bf16"};
    for (int d = 0; d < 2; ++d) {
      bool any = false;
      for (double e : err[d]) any |= e > 0;
      if (!any) continue;
      std::printf("[worst rel err %s, chunked16]", dn[d]);
      for (int i = 0; i < 8; ++i) std::printf(" %s %.2e", kGradNames[i], err[d][i]);
      std::printf("\n");
    }
  }
};

// Sets a backward mode for one scope (then back to the default, LINATTN_CUDA_BWD or chunked).
struct ModeScope {
  explicit ModeScope(int mode) { cuda::set_backward_mode(mode); }
  ~ModeScope() { cuda::set_backward_mode(cuda::kBackwardFromEnv); }
};

// `mode`: a cuda::BackwardMode (the default: the automatic choice, chunked).
void check_case(const Case& c, bool api = false, int mode = cuda::kBackwardFromEnv) {
  const bool chunked16 = mode == cuda::kBackwardChunked16;
  SCOPED_TRACE(c.name() + (chunked16 ? " [chunked16]"
                                      : (mode == cuda::kBackwardToken       ? " [token]"
                                         : mode == cuda::kBackwardChunked32 ? " [chunked32]"
                                         : mode == cuda::kBackwardSplit     ? " [split]"
                                                                            : "")));
  const Inputs x = make_inputs(c);
  Grads got, ref;
  Status s;
  {
    ModeScope m(mode);
    s = run_cuda(c, x, &got, api);
  }
  if (api && s.code == StatusCode::kNotSupported) GTEST_SKIP() << "public CUDA backward not wired: " << s.message;
  ASSERT_TRUE(s.ok()) << s.message;
  s = run_reference(c, x, &ref);
  ASSERT_TRUE(s.ok()) << s.message;
  const double tol = tolerance_for(c.dt);
  const int di = c.dt == DType::kFloat16 ? 0 : (c.dt == DType::kBFloat16 ? 1 : 2);
  static Worst16Chunked w16;
  const bool loose = chunked16 && c.dt != DType::kFloat32;
  const bool split = mode == cuda::kBackwardSplit && c.dt != DType::kFloat32;
  for (int i = 0; i < 8; ++i) {
    if (!got.at(i)->present()) continue;
    const double e = rel_err(*got.at(i), *ref.at(i));
    EXPECT_LE(e, loose ? chunked16_bound(i, tol) : (split ? split_bound(i, tol) : tol)) << kGradNames[i];
    if (loose) w16.err[di][i] = std::max(w16.err[di][i], e);
    else if (!split || split_bound(i, tol) == tol) worst().err[di][i] = std::max(worst().err[di][i], e);
  }
}

const DType kDtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};

std::vector<Case> option_cases(Family fam) {
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
  { Case c = base; c.h0 = true; c.dht = true; v.push_back(c); }
  { Case c = base; c.h0 = true; c.dht = true; c.v_first = true; v.push_back(c); }
  { Case c = base; c.dht = true; v.push_back(c); }
  { Case c = base; c.H = 1; c.HV = 3; c.h0 = true; v.push_back(c); }  // GVA G = 3
  { Case c = base; c.gate = Gate::kVeryNegative; c.dht = true; v.push_back(c); }
  { Case c = base; c.B = 2; c.T = 65; c.h0 = true; c.dht = true; v.push_back(c); }
  { Case c = base; c.all_outputs = false; c.h0 = true; v.push_back(c); }
  if (fam == Family::kKDA) {
    { Case c = base; c.gate = Gate::kLowerBound; v.push_back(c); }
    { Case c = base; c.gate = Gate::kLowerBound; c.safe_gate = true; v.push_back(c); }
    { Case c = base; c.gate = Gate::kLowerBoundNoAlog; c.safe_gate = true; v.push_back(c); }
    { Case c = base; c.gate = Gate::kLowerBoundNoAlog; c.dt_bias = false; v.push_back(c); }
    { Case c = base; c.gate = Gate::kClamped; c.safe_gate = true; v.push_back(c); }
  }
  return v;
}

TEST(CudaBackward, KdaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kKDA)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaBackward, GdnSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kGDN)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaBackward, SmallOddLengths) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (int64_t T : {1, 63, 65, 300}) {
      Case c;
      c.fam = fam;
      c.T = T;
      c.h0 = true;
      c.dht = true;
      c.dt = DType::kFloat32;
      check_case(c);
      c.dt = DType::kBFloat16;
      check_case(c);
    }
}

TEST(CudaBackward, SmallVarlen) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.cu = {0, 1, 64, 64, 129, 130, 300};  // lengths 1, 63, 0, 65, 1, 170
      c.T = 300;
      c.h0 = true;
      c.dht = true;
      c.gate = Gate::kSoftplus;
      c.H = 1;
      c.HV = 2;
      check_case(c);
    }
}

TEST(CudaBackward, HeadSizes) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (int64_t K : {64, 128, 256})
      for (int64_t V : {64, 128, 256}) {
        Case c;
        c.fam = fam;
        c.K = K;
        c.V = V;
        c.T = 100;
        c.H = 1;
        c.HV = 2;
        c.h0 = true;
        c.dht = true;
        c.dt = (K + V) % 3 == 0 ? DType::kFloat32 : DType::kBFloat16;
        check_case(c);
      }
}

TEST(CudaBackward, GvaAndSplits) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN}) {
    Case c;
    c.fam = fam;
    c.B = 2;
    c.T = 200;
    c.H = 2;
    c.HV = 4;
    c.K = 128;
    c.V = 256;  // several V tiles per split: the accumulate path
    c.h0 = true;
    c.dht = true;
    c.gate = Gate::kSoftplus;
    c.beta_sigmoid = true;
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      c.dt = dt;
      check_case(c);
    }
  }
}

// Bitwise identical gradients from two calls, for every path and the default on each dtype.
TEST(CudaBackward, SmallDeterministic) {
  SKIP_WITHOUT_GPU();
  struct Run {
    DType dt;
    int mode;
  };
  const Run runs[] = {{DType::kBFloat16, cuda::kBackwardFromEnv}, {DType::kFloat16, cuda::kBackwardFromEnv},
                      {DType::kFloat32, cuda::kBackwardFromEnv}, {DType::kBFloat16, cuda::kBackwardChunked16},
                      {DType::kBFloat16, cuda::kBackwardChunked32}, {DType::kBFloat16, cuda::kBackwardToken}};
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (const Run& r : runs) {
      Case c;
      c.fam = fam;
      c.dt = r.dt;
      c.B = 2;
      c.T = 150;
      c.H = 1;
      c.HV = 2;
      c.K = 64;
      c.V = 128;
      c.h0 = true;
      c.dht = true;
      c.gate = Gate::kSoftplus;
      SCOPED_TRACE(c.name() + " mode " + std::to_string(r.mode));
      const Inputs x = make_inputs(c);
      Grads a, b;
      ModeScope m(r.mode);
      ASSERT_TRUE(run_cuda(c, x, &a).ok());
      ASSERT_TRUE(run_cuda(c, x, &b).ok());
      for (int i = 0; i < 8; ++i) {
        if (!a.at(i)->present()) continue;
        EXPECT_EQ(0, std::memcmp(a.at(i)->bytes.data(), b.at(i)->bytes.data(), a.at(i)->bytes.size()))
            << kGradNames[i] << " differs between runs";
      }
    }
}

TEST(CudaBackward, SmallLongOdd) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : kDtypes) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.T = 1500;
      c.H = 1;
      c.HV = 2;
      c.dht = true;
      c.gate = Gate::kSoftplus;  // strong decays: dh0 would be e^-hundreds (below float16/32)
      c.beta_sigmoid = true;
      check_case(c);
      c.gate = Gate::kLogsigmoid;
      c.h0 = true;
      c.beta_sigmoid = false;
      check_case(c);
    }
}

// The varlen layout (15 sequences, 8192 tokens) at a small head count.
TEST(CudaBackward, VarlenLong) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN}) {
    Case c;
    c.fam = fam;
    c.dt = DType::kBFloat16;
    c.cu = {0, 494, 1004, 1561, 1908, 2240, 2849, 3116, 4096, 4986, 5626, 6090, 6718, 7244, 7870, 8192};
    c.T = 8192;
    c.H = 1;
    c.HV = 1;
    c.h0 = true;
    c.dht = true;
    c.v_first = fam == Family::kGDN;
    c.gate = fam == Family::kKDA ? Gate::kLowerBound : Gate::kSoftplus;
    c.safe_gate = fam == Family::kKDA;
    c.beta_sigmoid = true;
    check_case(c);
  }
}

// The chunked backward against the token replay (an independent algorithm on the same GPU).
TEST(CudaBackward, SmallChunkedMatchesTokenReplay) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : kDtypes) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.B = 2;
      c.T = 150;
      c.H = 1;
      c.HV = 2;
      c.K = 64;
      c.V = 128;
      c.h0 = true;
      c.dht = true;
      c.gate = Gate::kSoftplus;
      SCOPED_TRACE(c.name());
      const Inputs x = make_inputs(c);
      Grads a, b, b16, b32;
      Status s1, s2, s3, s4;
      {
        ModeScope m(cuda::kBackwardToken);
        s1 = run_cuda(c, x, &a);
      }
      {
        ModeScope m(cuda::kBackwardChunked);
        s2 = run_cuda(c, x, &b);
      }
      {
        ModeScope m(cuda::kBackwardChunked16);
        s3 = run_cuda(c, x, &b16);
      }
      {
        ModeScope m(cuda::kBackwardChunked32);
        s4 = run_cuda(c, x, &b32);
      }
      ASSERT_TRUE(s1.ok()) << s1.message;
      ASSERT_TRUE(s2.ok()) << s2.message;
      ASSERT_TRUE(s3.ok()) << s3.message;
      ASSERT_TRUE(s4.ok()) << s4.message;
      for (int i = 0; i < 8; ++i) {
        if (!a.at(i)->present()) continue;
        const double tol = tolerance_for(dt);
        EXPECT_LE(rel_err(*b.at(i), *a.at(i)), tol) << kGradNames[i] << " (chunked)";
        EXPECT_LE(rel_err(*b32.at(i), *a.at(i)), tol) << kGradNames[i] << " (chunked32)";
        EXPECT_LE(rel_err(*b16.at(i), *a.at(i)), dt == DType::kFloat32 ? tol : chunked16_bound(i, tol))
            << kGradNames[i] << " (chunked16)";
      }
    }
}

// The 16-bit cases of the chunked16 and split tests: every option, odd lengths with both states,
// and the 15-sequence varlen layout (lower-bound gate for KDA).
std::vector<Case> sixteen_bit_cases(Family fam, DType dt) {
  std::vector<Case> v = option_cases(fam);
  for (Case& c : v) c.dt = dt;
  for (int64_t T : {1, 63, 65, 1500}) {
    Case c;
    c.fam = fam;
    c.dt = dt;
    c.T = T;
    c.h0 = true;
    c.dht = true;
    v.push_back(c);
  }
  Case c;
  c.fam = fam;
  c.dt = dt;
  c.cu = {0, 494, 1004, 1561, 1908, 2240, 2849, 3116, 4096, 4986, 5626, 6090, 6718, 7244, 7870, 8192};
  c.T = 8192;
  c.H = 1;
  c.HV = 1;
  c.h0 = true;
  c.dht = true;
  c.beta_sigmoid = true;
  if (fam == Family::kKDA) c.gate = Gate::kLowerBound;
  v.push_back(c);
  return v;
}

// The chunked form computed in the 16-bit input type (opt-in: LINATTN_CUDA_BWD=chunked16).
TEST(CudaBackward, ChunkedSixteenBit) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (const Case& c : sixteen_bit_cases(fam, dt)) check_case(c, false, cuda::kBackwardChunked16);
}

// The split form (the default for 16-bit inputs without A_log / dt_bias), forced on in-kernel
// gates too.
TEST(CudaBackward, SplitSixteenBit) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (const Case& c : sixteen_bit_cases(fam, dt)) check_case(c, false, cuda::kBackwardSplit);
}

// The default backward on 16-bit inputs (chunked, with hi + lo halves) and the float32-compute
// form (chunked32) meet SPEC's 1e-2 on every gradient where chunked16 misses it: dβ at T = 1 with
// an initial state and dht (1.6e-2), dA_log / ddt_bias on the 15-sequence varlen layout with the
// lower-bound gate, A_log, dt_bias and sigmoid β (1.8e-2 / 8.6e-2).
TEST(CudaBackward, SixteenBitDefaultMeetsBar) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.T = 1;
      c.h0 = true;
      c.dht = true;
      check_case(c);
      check_case(c, false, cuda::kBackwardChunked32);
      c.gate = Gate::kSoftplus;
      c.beta_sigmoid = true;
      check_case(c);
      check_case(c, false, cuda::kBackwardChunked32);
      Case v;
      v.fam = fam;
      v.dt = dt;
      v.cu = {0, 494, 1004, 1561, 1908, 2240, 2849, 3116, 4096, 4986, 5626, 6090, 6718, 7244, 7870, 8192};
      v.T = 8192;
      v.H = 1;
      v.HV = 1;
      v.h0 = true;
      v.dht = true;
      v.beta_sigmoid = true;
      v.gate = fam == Family::kKDA ? Gate::kLowerBound : Gate::kSoftplus;
      check_case(v);
      check_case(v, false, cuda::kBackwardChunked32);
    }
}

// An unknown LINATTN_CUDA_BWD is an error naming the accepted values, and nothing is written;
// the accepted values select their paths.
TEST(CudaBackward, SmallUnknownModeEnv) {
  SKIP_WITHOUT_GPU();
  const char* prev = std::getenv("LINATTN_CUDA_BWD");
  const std::string saved = prev ? prev : "";
  Case c;
  c.T = 70;
  c.h0 = true;
  c.dht = true;
  c.gate = Gate::kSoftplus;
  const Inputs x = make_inputs(c);
  std::vector<DBuf> keep;
  Grads g = make_grads(c, x, false);
  BackwardInputs in = in_views(x, true, keep);
  BackwardOutputs out = out_views(g, true, keep);
  detail::Problem p;
  ASSERT_TRUE(detail::resolve_backward(c.fam, in, out, make_options(c), &p).ok());
  auto bytes_for = [&](const char* env) {
    if (env) setenv("LINATTN_CUDA_BWD", env, 1);
    else unsetenv("LINATTN_CUDA_BWD");
    return cuda::backward_kda_gdn_workspace_bytes(p);
  };
  const std::size_t def = bytes_for(nullptr);
  std::size_t b16 = 0, btok = 0;
  {
    ModeScope m(cuda::kBackwardChunked16);
    b16 = bytes_for(nullptr);
  }
  {
    ModeScope m(cuda::kBackwardToken);
    btok = bytes_for(nullptr);
    EXPECT_EQ(bytes_for("chunked16"), btok);  // an explicit mode wins over the variable
  }
  EXPECT_GT(def, 0u);
  EXPECT_LT(b16, def);
  EXPECT_EQ(bytes_for("chunked"), def);
  EXPECT_EQ(bytes_for(""), def);  // empty: as if unset
  EXPECT_EQ(bytes_for("chunked16"), b16);
  EXPECT_EQ(bytes_for("token"), btok);
  std::size_t b32 = 0;
  {
    ModeScope m(cuda::kBackwardChunked32);
    b32 = bytes_for(nullptr);
  }
  EXPECT_EQ(b32, def);  // an in-kernel gate with A_log: the default computes in float32
  EXPECT_EQ(bytes_for("chunked32"), b32);
  const std::size_t bsplit = bytes_for("split");
  EXPECT_LT(b16, bsplit);   // the low halves
  EXPECT_LT(bsplit, b32);   // no float32 intermediates or input copies
  EXPECT_EQ(bytes_for("chunked64"), 0u);
  DBuf ws(b32);
  ASSERT_NE(ws.p, nullptr);
  Status s = cuda::backward_kda_gdn(p, in, out, Workspace{ws.p, b32}, nullptr);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument);
  EXPECT_NE(s.message.find("chunked64"), std::string::npos) << s.message;
  for (const char* name : {"chunked", "split", "chunked16", "chunked32", "token"})
    EXPECT_NE(s.message.find(name), std::string::npos) << s.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Grads after = make_grads(c, x, false);  // poisoned, like g before the call
  TensorView* dv[8] = {&out.dq, &out.dk, &out.dv, &out.dg, &out.dbeta, &out.dA_log, &out.ddt_bias, &out.dh0};
  for (int i = 0; i < 8; ++i) {
    if (!g.at(i)->present()) continue;
    to_host(*dv[i], *after.at(i));
    EXPECT_EQ(0, std::memcmp(after.at(i)->bytes.data(), g.at(i)->bytes.data(), g.at(i)->bytes.size()))
        << kGradNames[i] << " was written";
  }
  if (prev) setenv("LINATTN_CUDA_BWD", saved.c_str(), 1);
  else unsetenv("LINATTN_CUDA_BWD");
}

// ---- disable_recompute: a forward that fills a saved buffer, a backward that reads it.
struct SavedRun {
  int bwd_mode = cuda::kBackwardFromEnv;  // the backward's mode (the forward runs the default)
  bool zero_body = false;                 // overwrite everything after the header with zeros
  std::optional<double> bwd_scale;        // a backward for another problem (another scale)
};

// Public API: forward with out.saved (o and the final state come back in *o, *ht), then the
// backward with in.saved. Returns the backward's status.
Status run_saved(const Case& c, const Inputs& x, const SavedRun& how, Grads* g, HostTensor* o, HostTensor* ht) {
  std::vector<DBuf> keep;
  keep.reserve(32);
  *g = make_grads(c, x, false);
  BackwardInputs in = in_views(x, true, keep);
  BackwardOutputs out = out_views(*g, true, keep);
  Options opt = make_options(c);
  opt.disable_recompute = true;
  std::size_t nsaved = 0, nws = 0;
  Status s = saved_bytes(c.fam, in.fwd, opt, &nsaved);
  if (!s.ok()) return s;
  if (nsaved == 0) return {StatusCode::kBackendError, "saved_bytes is 0 on CUDA"};
  DBuf saved(nsaved);
  const Device dev{DeviceType::kCUDA, 0};
  const TensorView sv = make_view(saved.p, DType::kUInt8, {static_cast<int64_t>(nsaved)}, dev);
  cudaMemset(saved.p, 0xff, nsaved);
  *o = x.v;
  o->poison();
  *ht = x.h0.present() ? x.h0 : (c.v_first ? HostTensor(DType::kFloat32, {x.N, c.HV, c.V, c.K})
                                            : HostTensor(DType::kFloat32, {x.N, c.HV, c.K, c.V}));
  ht->poison();
  ForwardOutputs fo;
  fo.o = to_dev(*o, keep);
  fo.final_state = to_dev(*ht, keep);
  fo.saved = sv;
  if (!(s = forward_workspace_size(c.fam, in.fwd, opt, &nws)).ok()) return s;
  {
    DBuf ws(nws);
    if (!(s = forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, nws}, nullptr)).ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "forward failed"};
  }
  to_host(fo.o, *o);
  to_host(fo.final_state, *ht);
  if (how.zero_body) cudaMemset(static_cast<unsigned char*>(saved.p) + 256, 0, nsaved - 256);
  in.saved = sv;
  Options bopt = make_options(c);
  if (how.bwd_scale) bopt.scale = *how.bwd_scale;
  ModeScope m(how.bwd_mode);
  if (!(s = backward_workspace_size(c.fam, in, bopt, &nws)).ok()) return s;
  DBuf ws(nws);
  s = backward(c.fam, in, out, bopt, Workspace{ws.p, nws}, nullptr);
  if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "backward failed"};
  TensorView* dv[8] = {&out.dq, &out.dk, &out.dv, &out.dg, &out.dbeta, &out.dA_log, &out.ddt_bias, &out.dh0};
  for (int i = 0; i < 8; ++i) to_host(*dv[i], *g->at(i));
  return s;
}

Status run_reference_forward(const Case& c, const Inputs& x, HostTensor* o, HostTensor* ht) {
  std::vector<DBuf> keep;
  Inputs w = x;
  w.q = x.q.as(DType::kFloat64);
  w.k = x.k.as(DType::kFloat64);
  w.v = x.v.as(DType::kFloat64);
  w.beta = x.beta.as(DType::kFloat64);
  BackwardInputs in = in_views(w, false, keep);
  *o = w.v;
  *ht = x.h0.present() ? x.h0 : (c.v_first ? HostTensor(DType::kFloat32, {x.N, c.HV, c.V, c.K})
                                            : HostTensor(DType::kFloat32, {x.N, c.HV, c.K, c.V}));
  ForwardOutputs fo;
  fo.o = o->view;
  fo.final_state = ht->view;
  return reference_forward(c.fam, in.fwd, fo, make_options(c));
}

std::vector<Case> saved_cases() {
  std::vector<Case> v;
  Case a;  // KDA bf16: the split form
  a.B = 2;
  a.T = 150;
  a.h0 = true;
  a.dht = true;
  v.push_back(a);
  Case b = a;  // GDN fp16 varlen (an empty sequence), GVA: split
  b.fam = Family::kGDN;
  b.dt = DType::kFloat16;
  b.B = 1;
  b.T = 200;
  b.H = 1;
  b.HV = 2;
  b.cu = {0, 70, 70, 200};
  v.push_back(b);
  Case c = a;  // KDA bf16, in-kernel gate with A_log: float32 compute (16-bit o from float32)
  c.gate = Gate::kSoftplus;
  c.beta_sigmoid = true;
  v.push_back(c);
  Case d = a;  // KDA float32, state_v_first, K != V
  d.dt = DType::kFloat32;
  d.K = 128;
  d.v_first = true;
  v.push_back(d);
  Case e;  // GDN bf16 at K = V = 256: float32 compute (split does not fit)
  e.fam = Family::kGDN;
  e.T = 100;
  e.H = 1;
  e.HV = 1;
  e.K = 256;
  e.V = 256;
  e.dht = true;
  v.push_back(e);
  return v;
}

// disable_recompute: the forward's o and final state meet SPEC against float64, and the backward
// that reads the saved buffer gives bitwise the gradients of the recomputing backward.
TEST(CudaBackward, SmallSavedMatchesRecompute) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : saved_cases()) {
    SCOPED_TRACE(c.name());
    const Inputs x = make_inputs(c);
    Grads rec, sav;
    HostTensor o, ht, o_ref, ht_ref;
    Status s = run_cuda(c, x, &rec, /*api=*/true);
    ASSERT_TRUE(s.ok()) << s.message;
    s = run_saved(c, x, SavedRun{}, &sav, &o, &ht);
    ASSERT_TRUE(s.ok()) << s.message;
    for (int i = 0; i < 8; ++i) {
      if (!rec.at(i)->present()) continue;
      EXPECT_EQ(0, std::memcmp(rec.at(i)->bytes.data(), sav.at(i)->bytes.data(), rec.at(i)->bytes.size()))
          << kGradNames[i] << " differs from the recomputing backward";
    }
    ASSERT_TRUE(run_reference_forward(c, x, &o_ref, &ht_ref).ok());
    const double tol = tolerance_for(c.dt);
    EXPECT_LE(rel_err(o, o_ref), tol) << "o";
    EXPECT_LE(rel_err(ht, ht_ref), tol) << "final_state";
  }
}

// The backward reads the saved buffer (zeroing its body changes the gradients), and refuses one
// written for another problem or another backward form, writing nothing.
TEST(CudaBackward, SmallSavedIsReadAndChecked) {
  SKIP_WITHOUT_GPU();
  const Case c = saved_cases()[0];
  const Inputs x = make_inputs(c);
  Grads rec, g;
  HostTensor o, ht;
  ASSERT_TRUE(run_cuda(c, x, &rec, /*api=*/true).ok());
  SavedRun zero;
  zero.zero_body = true;
  Status s = run_saved(c, x, zero, &g, &o, &ht);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_NE(0, std::memcmp(rec.dq.bytes.data(), g.dq.bytes.data(), rec.dq.bytes.size()));
  Grads poisoned = make_grads(c, x, false);
  auto untouched = [&](Grads& got) {
    for (int i = 0; i < 8; ++i) {
      if (!poisoned.at(i)->present()) continue;
      EXPECT_EQ(0, std::memcmp(got.at(i)->bytes.data(), poisoned.at(i)->bytes.data(), poisoned.at(i)->bytes.size()))
          << kGradNames[i] << " was written";
    }
  };
  SavedRun other;
  other.bwd_scale = 0.25;
  s = run_saved(c, x, other, &g, &o, &ht);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
  EXPECT_NE(s.message.find("not written by a CUDA forward of this problem"), std::string::npos) << s.message;
  untouched(g);
  SavedRun mode;
  mode.bwd_mode = cuda::kBackwardChunked32;
  s = run_saved(c, x, mode, &g, &o, &ht);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
  EXPECT_NE(s.message.find("backward form"), std::string::npos) << s.message;
  untouched(g);
}

// Rules checked before any device work (these run without a GPU too): the views below point at
// host memory marked as CUDA, which no kernel ever reads because each call is refused first.
struct HostAsCuda {
  Case c;
  Inputs x = make_inputs(c);
  Grads g = make_grads(c, x, false);
  std::vector<DBuf> keep;
  BackwardInputs in = in_views(x, false, keep);
  BackwardOutputs out = out_views(g, false, keep);
  HostAsCuda() {
    for (TensorView* t : {&in.fwd.q, &in.fwd.k, &in.fwd.v, &in.fwd.g, &in.fwd.beta, &in.fwd.A_log, &in.fwd.dt_bias,
                          &in.d_o, &out.dq, &out.dk, &out.dv, &out.dg, &out.dbeta, &out.ddt_bias})
      t->device = Device{DeviceType::kCUDA, 0};
  }
  void expect_unwritten() {
    Grads fresh = make_grads(c, x, false);
    for (int i = 0; i < 8; ++i) {
      if (!fresh.at(i)->present()) continue;
      EXPECT_EQ(0, std::memcmp(g.at(i)->bytes.data(), fresh.at(i)->bytes.data(), fresh.at(i)->bytes.size()))
          << kGradNames[i] << " was written";
    }
  }
};

// A tensor that does not start 16-byte aligned is refused (kNotSupported naming it) before any
// kernel: the kernels move 16-byte pieces.
TEST(CudaBackward, MisalignedTensorsRefused) {
  for (int which = 0; which < 3; ++which) {
    HostAsCuda h;
    TensorView* t = which == 0 ? &h.in.fwd.q : (which == 1 ? &h.in.d_o : &h.out.dk);
    const char* name = which == 0 ? "q" : (which == 1 ? "d_o" : "dk");
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(t->data) % 16, 0u);  // host buffers are aligned
    detail::Problem p;
    ASSERT_TRUE(detail::resolve_backward(h.c.fam, h.in, h.out, make_options(h.c), &p).ok());
    t->data = static_cast<unsigned char*>(t->data) + 2;  // one bf16 element in
    Status s = cuda::backward_kda_gdn(p, h.in, h.out, Workspace{}, nullptr);
    EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
    EXPECT_NE(s.message.find(std::string(name) + " starts at a misaligned address"), std::string::npos) << s.message;
    h.expect_unwritten();
  }
  HostAsCuda h;
  HostTensor o = h.x.v;
  ForwardOutputs fo;
  fo.o = o.view;
  fo.o.device = Device{DeviceType::kCUDA, 0};
  fo.o.data = o.bytes.data() + 2;
  detail::Problem p;
  ASSERT_TRUE(detail::resolve_forward(h.c.fam, h.in.fwd, fo, make_options(h.c), &p).ok());
  Status s = cuda::forward(p, h.in.fwd, fo, Workspace{}, nullptr);
  EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
  EXPECT_NE(s.message.find("o starts at a misaligned address"), std::string::npos) << s.message;
}

// A saved buffer that is misaligned or smaller than its header is refused before any device
// work, nothing written; a forward's saved buffer smaller than saved_bytes likewise.
TEST(CudaBackward, SavedBufferShapeRefused) {
  alignas(256) static unsigned char buf[1024];
  const Device dev{DeviceType::kCUDA, 0};
  char big = 0;
  const Workspace ws{&big, ~std::size_t{0}};  // never touched: the calls are refused first
  {
    HostAsCuda h;
    h.in.saved = make_view(buf + 16, DType::kUInt8, {512}, dev);
    detail::Problem p;
    ASSERT_TRUE(detail::resolve_backward(h.c.fam, h.in, h.out, make_options(h.c), &p).ok());
    Status s = cuda::backward_kda_gdn(p, h.in, h.out, ws, nullptr);
    EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
    EXPECT_NE(s.message.find("256-byte aligned"), std::string::npos) << s.message;
    h.in.saved = make_view(buf, DType::kUInt8, {100}, dev);
    s = cuda::backward_kda_gdn(p, h.in, h.out, ws, nullptr);
    EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
    EXPECT_NE(s.message.find("saved has 100 bytes"), std::string::npos) << s.message;
    h.expect_unwritten();
  }
  HostAsCuda h;
  HostTensor o = h.x.v;
  ForwardOutputs fo;
  fo.o = o.view;
  fo.o.device = dev;
  fo.saved = make_view(buf, DType::kUInt8, {1024}, dev);
  detail::Problem p;
  ASSERT_TRUE(detail::resolve_forward(h.c.fam, h.in.fwd, fo, make_options(h.c), &p).ok());
  EXPECT_GT(cuda::saved_bytes(p), 1024u);
  Status s = cuda::forward(p, h.in.fwd, fo, ws, nullptr);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
  EXPECT_NE(s.message.find("saved has 1024 bytes"), std::string::npos) << s.message;
}

TEST(CudaBackward, SmallPublicApi) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.T = 70;
  c.h0 = true;
  c.dht = true;
  check_case(c, /*api=*/true);
}

TEST(CudaBackward, SmallUnsupported) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.K = 32;
  const Inputs x = make_inputs(c);
  Grads g;
  Status s = run_cuda(c, x, &g);
  EXPECT_EQ(s.code, StatusCode::kNotSupported);
}

// Timing at issue 5's reference shape (KDA, B=2, T=8192, H=32, K=V=128, bf16, in-kernel softplus
// gate); FLA's fwd+bwd there is 9.99 ms on H200. LINATTN_BENCH_DTYPE=f32|f16 for the other dtypes,
// LINATTN_BENCH_GATE=logsigmoid for the suite's gate (g given), LINATTN_BENCH_FAMILY=gdn for GDN,
// LINATTN_BENCH_ONLY=<mode> to time one path besides the default. Prints the backward time of
// each path, the forward, and the default path's workspace and peak (no reference check here).
TEST(CudaBackwardBench, KdaReferenceShape) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.fam = Family::kKDA;
  c.dt = DType::kBFloat16;
  if (const char* e = std::getenv("LINATTN_BENCH_DTYPE")) {  // f32 / f16: the same shape in that dtype
    if (std::string(e) == "f32") c.dt = DType::kFloat32;
    if (std::string(e) == "f16") c.dt = DType::kFloat16;
  }
  c.B = 2;
  c.T = 8192;
  c.H = 32;
  c.HV = 32;
  c.K = 128;
  c.V = 128;
  c.gate = Gate::kSoftplus;
  c.beta_sigmoid = true;
  if (const char* e = std::getenv("LINATTN_BENCH_FAMILY")) {  // gdn: the same shape, GDN (scalar gate)
    if (std::string(e) == "gdn") c.fam = Family::kGDN;
  }
  if (const char* e = std::getenv("LINATTN_BENCH_GATE")) {  // logsigmoid: the suite's KDA gate (g given)
    if (std::string(e) == "logsigmoid") {
      c.gate = Gate::kLogsigmoid;
      c.beta_sigmoid = false;
    }
  }
  const Inputs x = make_inputs(c);
  Grads g;
  double ms = 0, ms16 = 0, ms32 = 0, mssplit = 0, token_ms = 0;
  // LINATTN_BENCH_ONLY=<mode> times that mode alone besides the default (for profilers)
  const char* only = std::getenv("LINATTN_BENCH_ONLY");
  auto timed = [&](int mode, const char* name, double* out) {
    if (only && std::string(only) != name) return Status{};
    ModeScope m(mode);
    return run_cuda(c, x, &g, false, out);
  };
  Status s = timed(cuda::kBackwardToken, "token", &token_ms);
  ASSERT_TRUE(s.ok()) << s.message;
  s = timed(cuda::kBackwardChunked16, "chunked16", &ms16);
  ASSERT_TRUE(s.ok()) << s.message;
  s = timed(cuda::kBackwardChunked32, "chunked32", &ms32);
  ASSERT_TRUE(s.ok()) << s.message;
  s = timed(cuda::kBackwardSplit, "split", &mssplit);
  ASSERT_TRUE(s.ok()) << s.message;
  {
    ModeScope m(cuda::kBackwardChunked);  // the default, last: g holds its gradients
    s = run_cuda(c, x, &g, false, &ms);
  }
  ASSERT_TRUE(s.ok()) << s.message;
  const char* dn = dtype_name(c.dt);
  std::printf("[bench] %s B2 T8192 H32 K128 V128 %s backward: default (chunked) %.3f ms, split %.3f ms, "
              "chunked16 %.3f ms, chunked32 %.3f ms, token replay %.3f ms\n", family_name(c.fam), dn, ms, mssplit, ms16, ms32, token_ms);
  // finite gradients
  for (int i = 0; i < 3; ++i) {
    const HostTensor& t = *g.at(i);
    for (int64_t j = 0; j < t.numel(); j += 997) ASSERT_TRUE(std::isfinite(t.get(j))) << kGradNames[i];
  }
  // the forward at the same shape, through the public API
  std::vector<DBuf> keep;
  BackwardInputs in = in_views(x, true, keep);
  HostTensor o = x.v;
  ForwardOutputs fo;
  fo.o = to_dev(o, keep);
  const Options opt = make_options(c);
  std::size_t bytes = 0;
  double fwd_ms = -1;
  if (forward_workspace_size(c.fam, in.fwd, opt, &bytes).ok()) {
    DBuf ws(bytes);
    if (forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, bytes}, nullptr).ok()) {
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      cudaEventRecord(a);
      for (int i = 0; i < 5; ++i) forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, bytes}, nullptr);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      fwd_ms = t / 5;
    }
  }
  std::printf("[bench] %s B2 T8192 H32 K128 V128 %s: default backward %.3f ms, forward %.3f ms, fwd+bwd %.3f ms "
              "(FLA's KDA fwd+bwd, bf16, on H200: 9.99 ms)\n", family_name(c.fam), dn, ms, fwd_ms, ms + fwd_ms);
  {  // backward workspace and the peak: inputs + gradients + workspace
    detail::Problem p;
    Grads g2 = make_grads(c, x, false);
    std::vector<DBuf> keep2;
    BackwardOutputs bo = out_views(g2, false, keep2);
    BackwardInputs bi = in_views(x, false, keep2);
    if (detail::resolve_backward(c.fam, bi, bo, opt, &p).ok()) {
      auto ws_of = [&](int mode) {
        ModeScope m(mode);
        return double(cuda::backward_kda_gdn_workspace_bytes(p));
      };
      const double wsb = ws_of(cuda::kBackwardChunked);
      std::printf("[bench] backward workspace GiB: split %.3f, chunked16 %.3f, chunked32 %.3f, token replay %.3f\n",
                  ws_of(cuda::kBackwardSplit) / (1 << 30), ws_of(cuda::kBackwardChunked16) / (1 << 30),
                  ws_of(cuda::kBackwardChunked32) / (1 << 30), ws_of(cuda::kBackwardToken) / (1 << 30));
      double io = 0;
      for (const HostTensor* h : {&x.q, &x.k, &x.v, &x.g, &x.beta, &x.A_log, &x.dt_bias, &x.d_o})
        if (h->present()) io += double(h->bytes.size());
      for (int i = 0; i < 8; ++i)
        if (g2.at(i)->present()) io += double(g2.at(i)->bytes.size());
      std::printf("[bench] default backward workspace %.3f GiB, inputs+gradients %.3f GiB, peak %.3f GiB "
                  "(bar 5.55 GiB)\n", wsb / (1 << 30), io / (1 << 30), (wsb + io) / (1 << 30));
    }
  }
}

}  // namespace
}  // namespace linattn::test
