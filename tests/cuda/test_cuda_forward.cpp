// GPU tests of the CUDA forward (KDA, GDN) against the float64 reference (linattn::reference_forward).
// Skips itself when no GPU is present. Tests whose names contain "Small" use small shapes, for
// compute-sanitizer (memcheck, racecheck).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace linattn::test {
namespace {

#define SKIP_WITHOUT_GPU()                                       \
  do {                                                           \
    if (!linattn::cuda_available()) GTEST_SKIP() << "no GPU";    \
  } while (0)

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

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

// Device copy of a host tensor; returns the device view.
TensorView upload(const HostTensor& h, std::vector<DevBuf>& keep) {
  keep.emplace_back(h.bytes.size());
  DevBuf& d = keep.back();
  cudaMemcpy(d.p, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice);
  TensorView v = h.view;
  v.data = d.p;
  v.device = Device{DeviceType::kCUDA, 0};
  return v;
}

void download(const TensorView& dev, HostTensor& h) {
  cudaMemcpy(h.bytes.data(), dev.data, h.bytes.size(), cudaMemcpyDeviceToHost);
}

enum class GateMode {
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
  bool cu64 = false;         // cu_seqlens as int64 (torch's default) instead of int32
  GateMode gate = GateMode::kLogsigmoid;
  bool dt_bias = true;
  bool l2norm = true;
  bool beta_sigmoid = false;
  bool neg_eigval = false;
  bool h0 = false, final_state = false, inter = false;
  bool v_first = false;
  bool safe_gate = false;
  float lower_bound = -5.f;

  std::string name() const {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%s %s B%lld T%lld H%lld HV%lld K%lld V%lld N%zu gate%d l2%d bsig%d neg%d h0%d ht%d h%d vf%d safe%d",
                  family_name(fam), dtype_name(dt), (long long)B, (long long)T, (long long)H, (long long)HV,
                  (long long)K, (long long)V, cu.empty() ? size_t(0) : cu.size() - 1, int(gate), l2norm,
                  beta_sigmoid, neg_eigval, h0, final_state, inter, v_first, safe_gate);
    return buf;
  }
};

struct Result {
  double err_o = 0, err_ht = 0, err_h = 0;
  HostTensor o, ht, h;
};

struct Inputs {
  HostTensor q, k, v, g, beta, A_log, dt_bias, h0, cu;
  int64_t N = 0, NT = 0;
};

Inputs make_inputs(const Case& c) {
  Inputs x;
  const int64_t B = c.B, T = c.T, H = c.H, HV = c.HV, K = c.K, V = c.V;
  x.q = HostTensor(c.dt, {B, T, H, K});
  x.k = HostTensor(c.dt, {B, T, H, K});
  x.v = HostTensor(c.dt, {B, T, HV, V});
  fill_normal(x.q);
  // without the in-kernel l2norm keep ||k|| ~ 1 so the delta rule stays contractive
  fill_normal(x.k, 0.0, c.l2norm ? 1.0 : 1.0 / std::sqrt(double(K)));
  fill_normal(x.v);
  const bool vec = c.fam == Family::kKDA;
  x.g = vec ? HostTensor(DType::kFloat32, {B, T, HV, K}) : HostTensor(DType::kFloat32, {B, T, HV});
  switch (c.gate) {
    case GateMode::kLogsigmoid: fill_logsigmoid_gate(x.g, 16.0); break;
    case GateMode::kClamped: fill_uniform(x.g, c.lower_bound, -1e-4); break;
    case GateMode::kVeryNegative: fill_logsigmoid_gate(x.g, 1.0 / 8.0); break;
    default: fill_normal(x.g); break;
  }
  if (c.gate == GateMode::kSoftplus || c.gate == GateMode::kLowerBound) {
    x.A_log = HostTensor(DType::kFloat32, {HV});
    fill_uniform(x.A_log, 0.0, 2.7);
  }
  if ((c.gate == GateMode::kSoftplus || c.gate == GateMode::kLowerBound || c.gate == GateMode::kLowerBoundNoAlog) &&
      c.dt_bias) {
    x.dt_bias = vec ? HostTensor(DType::kFloat32, {HV * K}) : HostTensor(DType::kFloat32, {HV});
    fill_normal(x.dt_bias);
  }
  x.beta = HostTensor(c.dt, {B, T, HV});
  if (c.beta_sigmoid) fill_normal(x.beta);
  else fill_uniform(x.beta, 0.05, 1.0);
  x.N = c.cu.empty() ? B : int64_t(c.cu.size()) - 1;
  if (!c.cu.empty()) {
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
    x.h0 = c.v_first ? HostTensor(DType::kFloat32, {x.N, HV, V, K}) : HostTensor(DType::kFloat32, {x.N, HV, K, V});
    fill_normal(x.h0, 0.0, 0.5);
  }
  return x;
}

Options make_options(const Case& c) {
  Options o;
  o.use_qk_l2norm_in_kernel = c.l2norm;
  o.use_beta_sigmoid_in_kernel = c.beta_sigmoid;
  o.allow_neg_eigval = c.neg_eigval;
  o.state_v_first = c.v_first;
  if (c.gate == GateMode::kSoftplus || c.gate == GateMode::kLowerBound || c.gate == GateMode::kLowerBoundNoAlog) {
    o.use_gate_in_kernel = true;
  }
  if (c.gate == GateMode::kLowerBound || c.gate == GateMode::kLowerBoundNoAlog) o.lower_bound = c.lower_bound;
  if (c.safe_gate) {
    o.safe_gate = true;
    o.lower_bound = c.lower_bound;
  }
  return o;
}

ForwardInputs views(const Inputs& x, bool dev, std::vector<DevBuf>& keep, const HostTensor* f64[5]) {
  ForwardInputs in;
  auto put = [&](const HostTensor& h) -> TensorView {
    if (!h.present()) return TensorView{};
    return dev ? upload(h, keep) : h.view;
  };
  in.q = f64 ? f64[0]->view : put(x.q);
  in.k = f64 ? f64[1]->view : put(x.k);
  in.v = f64 ? f64[2]->view : put(x.v);
  in.beta = f64 ? f64[3]->view : put(x.beta);
  in.g = put(x.g);
  in.A_log = put(x.A_log);
  in.dt_bias = put(x.dt_bias);
  in.initial_state = put(x.h0);
  if (x.cu.present()) {
    in.cu_seqlens = put(x.cu);
    if (dev) in.cu_seqlens_host = x.cu.view;
  }
  return in;
}

// Runs the CUDA forward; outputs copied back to host tensors. graph: the call is captured into a
// CUDA graph (global capture mode, as frameworks capture) on a fresh stream and the graph launched.
Status run_cuda(const Case& c, const Inputs& x, Result* r, cudaStream_t stream = nullptr, bool graph = false) {
  std::vector<DevBuf> keep;
  keep.reserve(32);
  ForwardInputs in = views(x, true, keep, nullptr);
  const Options opt = make_options(c);
  r->o = HostTensor(c.dt, {c.B, c.T, c.HV, c.V});
  r->o.poison();
  ForwardOutputs out;
  out.o = upload(r->o, keep);
  const int64_t b_h = c.cu.empty() ? c.B : 1;
  const int64_t nt_h = c.cu.empty() ? x.NT : x.NT;
  if (c.final_state) {
    r->ht = c.v_first ? HostTensor(DType::kFloat32, {x.N, c.HV, c.V, c.K})
                      : HostTensor(DType::kFloat32, {x.N, c.HV, c.K, c.V});
    r->ht.poison();
    out.final_state = upload(r->ht, keep);
  }
  if (c.inter) {
    r->h = c.v_first ? HostTensor(DType::kFloat32, {b_h, nt_h, c.HV, c.V, c.K})
                     : HostTensor(DType::kFloat32, {b_h, nt_h, c.HV, c.K, c.V});
    r->h.poison();
    out.h = upload(r->h, keep);
  }
  std::size_t ws_bytes = 0;
  Status s = forward_workspace_size(c.fam, in, opt, &ws_bytes);
  if (!s.ok()) return s;
  DevBuf ws(ws_bytes);
  if (graph) {
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
      return {StatusCode::kBackendError, "stream create failed"};
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess)
      return {StatusCode::kBackendError, "begin capture failed"};
    s = forward(c.fam, in, out, opt, Workspace{ws.p, ws_bytes}, stream);
    const cudaError_t ce = cudaStreamEndCapture(stream, &g);
    if (s.ok() && ce != cudaSuccess) s = {StatusCode::kBackendError, std::string("capture: ") + cudaGetErrorString(ce)};
    if (s.ok() && cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) s = {StatusCode::kBackendError, "instantiate failed"};
    if (s.ok() && cudaGraphLaunch(ge, stream) != cudaSuccess) s = {StatusCode::kBackendError, "graph launch failed"};
    if (s.ok() && cudaStreamSynchronize(stream) != cudaSuccess) s = {StatusCode::kBackendError, "sync failed"};
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    cudaStreamDestroy(stream);
    if (!s.ok()) return s;
  } else {
    s = forward(c.fam, in, out, opt, Workspace{ws.p, ws_bytes}, stream);
    if (!s.ok()) return s;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
  }
  download(out.o, r->o);
  if (c.final_state) download(out.final_state, r->ht);
  if (c.inter) download(out.h, r->h);
  return Status::Ok();
}

// float64 reference on the same (already rounded) input values.
Status run_reference(const Case& c, const Inputs& x, Result* r) {
  std::vector<DevBuf> keep;
  HostTensor q = x.q.as(DType::kFloat64), k = x.k.as(DType::kFloat64), v = x.v.as(DType::kFloat64),
             beta = x.beta.as(DType::kFloat64);
  const HostTensor* f64[5] = {&q, &k, &v, &beta, nullptr};
  ForwardInputs in = views(x, false, keep, f64);
  const Options opt = make_options(c);
  r->o = HostTensor(DType::kFloat64, {c.B, c.T, c.HV, c.V});
  ForwardOutputs out;
  out.o = r->o.view;
  if (c.final_state) {
    r->ht = c.v_first ? HostTensor(DType::kFloat64, {x.N, c.HV, c.V, c.K})
                      : HostTensor(DType::kFloat64, {x.N, c.HV, c.K, c.V});
    out.final_state = r->ht.view;
  }
  if (c.inter) {
    const int64_t b_h = c.cu.empty() ? c.B : 1;
    r->h = c.v_first ? HostTensor(DType::kFloat64, {b_h, x.NT, c.HV, c.V, c.K})
                     : HostTensor(DType::kFloat64, {b_h, x.NT, c.HV, c.K, c.V});
    out.h = r->h.view;
  }
  return reference_forward(c.fam, in, out, opt);
}

struct Worst {
  double err[3] = {0, 0, 0};  // fp16, bf16, fp32
  ~Worst() {
    std::printf("[worst rel err] fp16 %.3e  bf16 %.3e  fp32 %.3e\n", err[0], err[1], err[2]);
  }
};
Worst& worst() {
  static Worst w;
  return w;
}

void check_case(const Case& c) {
  SCOPED_TRACE(c.name());
  const Inputs x = make_inputs(c);
  Result got, ref;
  Status s = run_cuda(c, x, &got);
  ASSERT_TRUE(s.ok()) << s.message;
  s = run_reference(c, x, &ref);
  ASSERT_TRUE(s.ok()) << s.message;
  const double tol = tolerance_for(c.dt);
  const int di = c.dt == DType::kFloat16 ? 0 : (c.dt == DType::kBFloat16 ? 1 : 2);
  const double eo = rel_err(got.o, ref.o);
  EXPECT_LE(eo, tol) << "o";
  worst().err[di] = std::max(worst().err[di], eo);
  if (c.final_state) {
    const double e = rel_err(got.ht, ref.ht);
    EXPECT_LE(e, tol) << "final_state";
    worst().err[di] = std::max(worst().err[di], e);
  }
  if (c.inter) {
    const double e = rel_err(got.h, ref.h);
    EXPECT_LE(e, tol) << "h";
    worst().err[di] = std::max(worst().err[di], e);
  }
}

const DType kDtypes[] = {DType::kBFloat16, DType::kFloat16, DType::kFloat32};

// ------------------------------------------------------------------ option coverage (small)
std::vector<Case> option_cases(Family fam) {
  std::vector<Case> v;
  Case base;
  base.fam = fam;
  base.T = 130;
  base.H = 2;
  base.HV = 2;
  v.push_back(base);
  { Case c = base; c.l2norm = false; v.push_back(c); }
  { Case c = base; c.beta_sigmoid = true; v.push_back(c); }
  { Case c = base; c.beta_sigmoid = true; c.neg_eigval = true; v.push_back(c); }
  { Case c = base; c.gate = GateMode::kSoftplus; v.push_back(c); }
  { Case c = base; c.gate = GateMode::kSoftplus; c.dt_bias = false; v.push_back(c); }
  { Case c = base; c.h0 = true; c.final_state = true; c.inter = true; v.push_back(c); }
  { Case c = base; c.h0 = true; c.final_state = true; c.inter = true; c.v_first = true; v.push_back(c); }
  { Case c = base; c.H = 1; c.HV = 3; c.final_state = true; v.push_back(c); }  // GVA G = 3
  { Case c = base; c.gate = GateMode::kVeryNegative; c.final_state = true; v.push_back(c); }
  { Case c = base; c.B = 2; c.T = 65; c.h0 = true; c.final_state = true; c.inter = true; v.push_back(c); }
  if (fam == Family::kKDA) {
    { Case c = base; c.gate = GateMode::kLowerBound; v.push_back(c); }
    { Case c = base; c.gate = GateMode::kLowerBound; c.safe_gate = true; c.final_state = true; v.push_back(c); }
    { Case c = base; c.gate = GateMode::kLowerBoundNoAlog; c.safe_gate = true; v.push_back(c); }
    { Case c = base; c.gate = GateMode::kLowerBoundNoAlog; c.dt_bias = false; v.push_back(c); }
    { Case c = base; c.gate = GateMode::kClamped; c.safe_gate = true; c.final_state = true; v.push_back(c); }
    { Case c = base; c.gate = GateMode::kClamped; c.safe_gate = true; c.lower_bound = -1.f; v.push_back(c); }
  }
  return v;
}

TEST(CudaForward, KdaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kKDA)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaForward, GdnSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kGDN)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaForward, SmallOddLengths) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : kDtypes)
      for (int64_t T : {1, 63, 65}) {
        Case c;
        c.fam = fam;
        c.dt = dt;
        c.T = T;
        c.h0 = true;
        c.final_state = true;
        c.inter = true;
        check_case(c);
      }
}

TEST(CudaForward, SmallVarlen) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : kDtypes) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.cu = {0, 1, 1, 70, 133, 197};  // includes an empty sequence
      c.T = 197;
      c.h0 = true;
      c.final_state = true;
      c.inter = true;
      check_case(c);
    }
}

TEST(CudaForward, HeadSizes) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : kDtypes)
      for (int64_t K : {64, 128, 256})
        for (int64_t V : {64, 128, 256}) {
          if (dt != DType::kBFloat16 && K != V && !(K == 256 && V == 64) && !(K == 64 && V == 256)) continue;
          Case c;
          c.fam = fam;
          c.dt = dt;
          c.K = K;
          c.V = V;
          c.T = 200;
          c.H = 1;
          c.HV = 2;
          c.h0 = true;
          c.final_state = true;
          c.inter = true;
          c.v_first = (K == 256);
          check_case(c);
        }
}

TEST(CudaForward, LongSequences) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : kDtypes) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.T = 1500;
      c.H = 2;
      c.HV = 4;
      c.K = 128;
      c.V = 128;
      c.gate = fam == Family::kKDA ? GateMode::kLowerBound : GateMode::kSoftplus;
      c.safe_gate = fam == Family::kKDA;
      c.final_state = true;
      check_case(c);
    }
}

TEST(CudaForward, VarlenLayout) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.cu = {0, 494, 1004, 1561, 1908, 2240, 2849, 3116, 4096, 4986, 5626, 6090, 6718, 7244, 7870, 8192};
      c.T = 8192;
      c.cu64 = dt == DType::kFloat32;  // the device-built chunk map reads int32 and int64 offsets
      c.H = 4;
      c.HV = 4;
      c.K = 128;
      c.V = 128;
      c.h0 = true;
      c.final_state = true;
      c.inter = true;
      check_case(c);
    }
}

TEST(CudaForward, ManyShortSequences) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 gen(7);
  std::vector<int64_t> cu = {0};
  for (int i = 0; i < 2000; ++i) cu.push_back(cu.back() + 1 + int64_t(gen() % 90));
  for (Family fam : {Family::kKDA, Family::kGDN}) {
    Case c;
    c.fam = fam;
    c.dt = DType::kBFloat16;
    c.cu = cu;
    c.T = cu.back();
    c.H = 2;
    c.HV = 2;
    c.h0 = true;
    c.final_state = true;
    c.inter = true;
    check_case(c);
  }
}

TEST(CudaForward, SmallDeterministic) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN}) {
    Case c;
    c.fam = fam;
    c.cu = {0, 100, 300, 301, 520};
    c.T = 520;
    c.final_state = true;
    c.inter = true;
    const Inputs x = make_inputs(c);
    Result a, b;
    ASSERT_TRUE(run_cuda(c, x, &a).ok());
    ASSERT_TRUE(run_cuda(c, x, &b).ok());
    EXPECT_EQ(a.o.bytes, b.o.bytes);
    EXPECT_EQ(a.ht.bytes, b.ht.bytes);
    EXPECT_EQ(a.h.bytes, b.h.bytes);
  }
}

// Graph capture: no host sync or allocation inside the call (the chunk maps are built on the
// device), and the captured graph gives the eager result bit for bit.
TEST(CudaForward, SmallGraphCapture) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      Case c;
      c.fam = fam;
      c.dt = dt;
      c.cu = {0, 100, 300, 301, 520};
      c.T = 520;
      c.H = 1;
      c.HV = 2;
      c.h0 = true;
      c.final_state = true;
      const Inputs x = make_inputs(c);
      Result a, b;
      ASSERT_TRUE(run_cuda(c, x, &a).ok());
      const Status s = run_cuda(c, x, &b, nullptr, /*graph=*/true);
      ASSERT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(a.o.bytes, b.o.bytes) << family_name(fam) << " " << dtype_name(dt);
      EXPECT_EQ(a.ht.bytes, b.ht.bytes) << family_name(fam) << " " << dtype_name(dt);
    }
}

// cu_seqlens on the device is read without a sync; the host copy sizes the call. A device copy
// that disagrees (here: lengths that would need more chunks than the host's, and a decreasing
// entry) must not make any kernel leave its buffers (memcheck runs the Small tests).
TEST(CudaForward, SmallVarlenMismatchedCopies) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN}) {
    Case c;
    c.fam = fam;
    c.cu = {0, 100, 200};
    c.T = 200;
    c.final_state = true;
    const Inputs x = make_inputs(c);
    for (const std::vector<int32_t>& dev_cu : {std::vector<int32_t>{0, 130, 260}, std::vector<int32_t>{0, 150, 20}}) {
      std::vector<DevBuf> keep;
      ForwardInputs in = views(x, true, keep, nullptr);
      DevBuf dcu(dev_cu.size() * sizeof(int32_t));
      ASSERT_EQ(cudaMemcpy(dcu.p, dev_cu.data(), dcu.n, cudaMemcpyHostToDevice), cudaSuccess);
      in.cu_seqlens.data = dcu.p;
      HostTensor o(c.dt, {c.B, c.T, c.HV, c.V});
      HostTensor ht(DType::kFloat32, {x.N, c.HV, c.K, c.V});
      ForwardOutputs out;
      out.o = upload(o, keep);
      out.final_state = upload(ht, keep);
      std::size_t ws_bytes = 0;
      ASSERT_TRUE(forward_workspace_size(c.fam, in, make_options(c), &ws_bytes).ok());
      DevBuf ws(ws_bytes);
      const Status s = forward(c.fam, in, out, make_options(c), Workspace{ws.p, ws_bytes}, nullptr);
      EXPECT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
}

TEST(CudaForward, SmallUnsupported) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.K = 96;
  const Inputs x = make_inputs(c);
  Result r;
  Status s = run_cuda(c, x, &r);
  EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
  Case c2;
  c2.V = 32;
  s = run_cuda(c2, make_inputs(c2), &r);
  EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
  // GLA forward and every backward are not implemented on CUDA yet
  std::vector<DevBuf> keep;
  HostTensor q(DType::kBFloat16, {1, 64, 1, 64}), g(DType::kFloat32, {1, 64, 1, 64});
  fill_normal(q);
  fill_logsigmoid_gate(g);
  ForwardInputs in;
  in.q = upload(q, keep);
  in.k = upload(q, keep);
  in.v = upload(q, keep);
  in.g = upload(g, keep);
  HostTensor o = q;
  ForwardOutputs out;
  out.o = upload(o, keep);
  s = forward(Family::kGLA, in, out, Options{}, Workspace{}, nullptr);
  EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
}

}  // namespace
}  // namespace linattn::test
