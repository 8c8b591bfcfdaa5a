// GPU tests of bad inputs and hard gate values on the CUDA backend (issue 19). Skips itself
// without a GPU. Every test name contains "Small": scripts/gpu_sanitize.sh runs them under
// compute-sanitizer (memcheck, racecheck, synccheck, initcheck), so a bad input that made a kernel
// leave its buffers would be reported even when the call itself looks fine.
//   - refused before any device work, every output left as it was (bytewise): a misaligned tensor,
//     an output aliasing an input, a short / null / misaligned workspace, a workspace overlapping
//     an input, a workspace on another device, a scale outside float32's range;
//   - a device cu_seqlens that disagrees with its host copy: not read by the chunked path, the
//     outputs and gradients bitwise those of the consistent call (forward and backward);
//   - gates of -inf (a full forget), huge finite negative gates and an overflowing exp(A_log):
//     finite outputs and gradients within SPEC of the float64 reference.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace linattn::test {
namespace {

#define SKIP_WITHOUT_GPU()                                    \
  do {                                                        \
    if (!linattn::cuda_available()) GTEST_SKIP() << "no GPU"; \
  } while (0)

constexpr Device kGpu{DeviceType::kCUDA, 0};
constexpr unsigned char kSentinel = 0x5A;

struct DevBuf {
  void* p = nullptr;
  std::size_t n = 0;
  explicit DevBuf(std::size_t bytes) : n(bytes) {
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) p = nullptr;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  unsigned char* bytes() const { return static_cast<unsigned char*>(p); }
};

std::vector<unsigned char> read_back(const void* p, std::size_t n) {
  std::vector<unsigned char> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

bool all_sentinel(const void* p, std::size_t n) {
  for (unsigned char b : read_back(p, n))
    if (b != kSentinel) return false;
  return true;
}

// One KDA or GDN problem: host tensors, device copies, outputs filled with the sentinel byte.
struct Problem {
  Family fam;
  DType dt;
  int64_t B = 1, T = 130, H = 2, HV = 2, K = 64, V = 64;
  Options opt;
  HostTensor q, k, v, g, beta, A_log, h0, d_o, dht, cu;
  std::vector<std::unique_ptr<DevBuf>> keep;
  ForwardInputs fin;   // device views
  ForwardOutputs fout;
  BackwardInputs bin;
  BackwardOutputs bout;
  std::vector<std::pair<const char*, TensorView>> outputs;

  Problem(Family f, DType d, std::vector<int64_t> cu_offsets = {}) : fam(f), dt(d) {
    if (!cu_offsets.empty()) {
      B = 1;
      T = cu_offsets.back();
    }
    const int64_t N = cu_offsets.empty() ? B : static_cast<int64_t>(cu_offsets.size()) - 1;
    opt.use_qk_l2norm_in_kernel = true;
    q = HostTensor(dt, {B, T, H, K});
    k = HostTensor(dt, {B, T, H, K});
    v = HostTensor(dt, {B, T, HV, V});
    fill_normal(q);
    fill_normal(k);
    fill_normal(v);
    g = f == Family::kKDA ? HostTensor(DType::kFloat32, {B, T, HV, K}) : HostTensor(DType::kFloat32, {B, T, HV});
    fill_logsigmoid_gate(g);
    beta = HostTensor(dt, {B, T, HV});
    fill_uniform(beta, 0.05, 1.0);
    h0 = HostTensor(DType::kFloat32, {N, HV, K, V});
    fill_normal(h0, 0.0, 0.5);
    d_o = HostTensor(dt, {B, T, HV, V});
    fill_normal(d_o);
    dht = HostTensor(DType::kFloat32, {N, HV, K, V});
    fill_normal(dht, 0.0, 0.5);
    if (!cu_offsets.empty()) {
      cu = HostTensor(DType::kInt32, {N + 1});
      for (int64_t i = 0; i <= N; ++i) static_cast<int32_t*>(cu.view.data)[i] = static_cast<int32_t>(cu_offsets[i]);
    }
  }

  TensorView upload(const HostTensor& h) {
    keep.push_back(std::make_unique<DevBuf>(h.bytes.size()));
    cudaMemcpy(keep.back()->p, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice);
    TensorView t = h.view;
    t.data = keep.back()->p;
    t.device = kGpu;
    return t;
  }
  TensorView output_like(const char* name, const HostTensor& h) {
    keep.push_back(std::make_unique<DevBuf>(h.bytes.size()));
    cudaMemset(keep.back()->p, kSentinel, h.bytes.size());
    TensorView t = h.view;
    t.data = keep.back()->p;
    t.device = kGpu;
    outputs.emplace_back(name, t);
    return t;
  }
  // Device views of everything (after the host values are final).
  void build() {
    fin.q = upload(q);
    fin.k = upload(k);
    fin.v = upload(v);
    fin.g = upload(g);
    fin.beta = upload(beta);
    if (A_log.present()) fin.A_log = upload(A_log);
    fin.initial_state = upload(h0);
    if (cu.present()) {
      fin.cu_seqlens = upload(cu);
      fin.cu_seqlens_host = cu.view;
    }
    fout.o = output_like("o", v);
    fout.final_state = output_like("final_state", h0);
    bin.fwd = fin;
    bin.d_o = upload(d_o);
    bin.dht = upload(dht);
    bout.dq = output_like("dq", q);
    bout.dk = output_like("dk", k);
    bout.dv = output_like("dv", v);
    bout.dg = output_like("dg", g);
    bout.dbeta = output_like("dbeta", beta);
    bout.dh0 = output_like("dh0", h0);
    if (A_log.present()) bout.dA_log = output_like("dA_log", A_log);
  }
  std::size_t fwd_ws() {
    std::size_t n = 0;
    const Status s = forward_workspace_size(fam, fin, opt, &n);
    EXPECT_TRUE(s.ok()) << s.message;
    return n;
  }
  std::size_t bwd_ws() {
    std::size_t n = 0;
    const Status s = backward_workspace_size(fam, bin, opt, &n);
    EXPECT_TRUE(s.ok()) << s.message;
    return n;
  }
  Status forward(Workspace ws) {
    const Status s = linattn::forward(fam, fin, fout, opt, ws, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return s;
  }
  Status backward(Workspace ws) {
    bin.fwd = fin;
    const Status s = linattn::backward(fam, bin, bout, opt, ws, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return s;
  }
  void expect_outputs_untouched(const char* what) {
    for (const auto& [name, t] : outputs) {
      EXPECT_TRUE(all_sentinel(t.data, static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype)))
          << what << " wrote " << name << " although it failed";
    }
  }
};

void expect_refused(const Status& s, StatusCode code, const std::string& needle, const char* what) {
  EXPECT_EQ(static_cast<int>(s.code), static_cast<int>(code)) << what << ": \"" << s.message << "\"";
  EXPECT_NE(s.message.find(needle), std::string::npos) << what << ": \"" << s.message << "\" lacks \"" << needle << "\"";
}

const Family kFamilies[] = {Family::kKDA, Family::kGDN};

TEST(CudaBadInput, SmallMisalignedTensors) {
  SKIP_WITHOUT_GPU();
  for (Family f : kFamilies) {
    Problem p(f, DType::kBFloat16);
    p.build();
    DevBuf ws(p.fwd_ws());
    DevBuf shifted(p.q.bytes.size() + 64);
    // 2 bytes in: element-aligned for bf16, not 16-byte aligned (the CUDA kernels' rule)
    cudaMemcpy(shifted.bytes() + 2, p.q.bytes.data(), p.q.bytes.size(), cudaMemcpyHostToDevice);
    const TensorView q = p.fin.q;
    p.fin.q.data = shifted.bytes() + 2;
    expect_refused(p.forward({ws.p, ws.n}), StatusCode::kNotSupported, "16-byte aligned", "forward, q at +2 bytes");
    p.expect_outputs_untouched("forward");
    // 1 byte in: not even element-aligned (shared validation)
    p.fin.q.data = shifted.bytes() + 1;
    expect_refused(p.forward({ws.p, ws.n}), StatusCode::kInvalidArgument, "multiple of its element size", "forward, q at +1 byte");
    p.expect_outputs_untouched("forward");
    p.fin.q = q;
    DevBuf bws(p.bwd_ws());
    p.bin.d_o.data = shifted.bytes() + 2;
    expect_refused(p.backward({bws.p, bws.n}), StatusCode::kNotSupported, "16-byte aligned", "backward, d_o at +2 bytes");
    p.expect_outputs_untouched("backward");
  }
}

TEST(CudaBadInput, SmallOutputAliasingAnInput) {
  SKIP_WITHOUT_GPU();
  for (Family f : kFamilies) {
    Problem p(f, DType::kFloat32);
    p.build();
    DevBuf ws(p.fwd_ws());
    const TensorView o = p.fout.o;
    p.fout.o.data = p.fin.v.data;  // in place: o over v
    const std::vector<unsigned char> v_before = read_back(p.fin.v.data, p.v.bytes.size());
    expect_refused(p.forward({ws.p, ws.n}), StatusCode::kInvalidArgument, "o overlaps the input v", "forward");
    EXPECT_EQ(read_back(p.fin.v.data, p.v.bytes.size()), v_before) << "v was modified";
    p.fout.o = o;
    p.expect_outputs_untouched("forward");
    DevBuf bws(p.bwd_ws());
    p.bout.dq.data = p.fin.k.data;
    expect_refused(p.backward({bws.p, bws.n}), StatusCode::kInvalidArgument, "dq overlaps the input k", "backward");
  }
}

TEST(CudaBadInput, SmallWorkspaceShortNullMisalignedOrForeign) {
  SKIP_WITHOUT_GPU();
  for (Family f : kFamilies) {
    Problem p(f, DType::kBFloat16);
    p.build();
    const std::size_t need = p.fwd_ws();
    ASSERT_GT(need, 0u);
    DevBuf ws(need + 64);
    expect_refused(p.forward({ws.p, need - 1}), StatusCode::kWorkspaceTooSmall, "workspace", "forward, short workspace");
    p.expect_outputs_untouched("forward");
    expect_refused(p.forward({nullptr, need}), StatusCode::kInvalidArgument, "workspace data pointer is null", "forward, null workspace");
    expect_refused(p.forward({ws.bytes() + 8, need}), StatusCode::kNotSupported, "16-byte aligned workspace", "forward, misaligned workspace");
    std::vector<unsigned char> host(need);
    expect_refused(p.forward(Workspace{host.data(), need, Device{}}), StatusCode::kInvalidArgument,
                   "workspace is on a different device", "forward, host workspace for CUDA tensors");
    p.expect_outputs_untouched("forward");
    const std::size_t bneed = p.bwd_ws();
    DevBuf bws(bneed + 64);
    expect_refused(p.backward({bws.p, bneed - 1}), StatusCode::kWorkspaceTooSmall, "workspace", "backward, short workspace");
    p.expect_outputs_untouched("backward");
    // and the exact sizes work
    EXPECT_TRUE(p.forward({ws.p, need}).ok());
    EXPECT_TRUE(p.backward({bws.p, bneed}).ok());
  }
}

TEST(CudaBadInput, SmallWorkspaceOverlappingAnInputOrOutput) {
  SKIP_WITHOUT_GPU();
  for (Family f : kFamilies) {
    Problem p(f, DType::kBFloat16);
    p.build();
    const std::size_t need = p.fwd_ws();
    // q inside a large allocation whose tail is the workspace, starting 16 bytes into q
    DevBuf big(p.q.bytes.size() + need + 64);
    cudaMemset(big.p, kSentinel, big.n);  // every byte defined: the comparison below reads them all
    cudaMemcpy(big.p, p.q.bytes.data(), p.q.bytes.size(), cudaMemcpyHostToDevice);
    const TensorView q = p.fin.q;
    p.fin.q.data = big.p;
    const std::vector<unsigned char> before = read_back(big.p, big.n);
    expect_refused(p.forward({big.bytes() + 16, need}), StatusCode::kInvalidArgument, "workspace overlaps q", "forward");
    EXPECT_EQ(read_back(big.p, big.n), before) << "q's allocation was modified";
    p.expect_outputs_untouched("forward");
    p.fin.q = q;
    // the workspace starting at the output o (its range may also cover allocations made after o:
    // the message names the first tensor it overlaps)
    expect_refused(p.forward({p.fout.o.data, need}), StatusCode::kInvalidArgument, "workspace overlaps", "forward");
    p.expect_outputs_untouched("forward");
    // backward: the workspace over d_o
    const std::size_t bneed = p.bwd_ws();
    DevBuf big2(p.d_o.bytes.size() + bneed + 64);
    cudaMemcpy(big2.p, p.d_o.bytes.data(), p.d_o.bytes.size(), cudaMemcpyHostToDevice);
    p.bin.d_o.data = big2.p;
    expect_refused(p.backward({big2.bytes() + 256, bneed}), StatusCode::kInvalidArgument, "workspace overlaps d_o", "backward");
    p.expect_outputs_untouched("backward");
  }
}

TEST(CudaBadInput, SmallScaleOutsideFloat32) {
  SKIP_WITHOUT_GPU();
  Problem p(Family::kKDA, DType::kFloat32);
  p.build();
  DevBuf ws(p.fwd_ws());
  p.opt.scale = 1e39;
  expect_refused(p.forward({ws.p, ws.n}), StatusCode::kInvalidArgument, "scale", "forward, scale 1e39");
  p.expect_outputs_untouched("forward");
}

// On CUDA the host copy of cu_seqlens defines the sequences (chunk_map.hpp): the chunked forward
// and backward do not read the device copy, which cannot be checked without a sync. A device copy
// that disagrees (another split, more chunks, a decreasing or negative entry, an end past T) must
// give bitwise the outputs and gradients of the call whose device copy equals the host copy (no
// atomics: the kernels are bitwise reproducible). The outputs are refilled with the sentinel and
// the workspaces allocated afresh before each call; initcheck and memcheck (gpu_sanitize.sh) watch
// for reads of unwritten or foreign memory.
TEST(CudaBadInput, SmallDeviceCuSeqlensDisagreesWithHostCopy) {
  SKIP_WITHOUT_GPU();
  for (Family f : kFamilies) {
    SCOPED_TRACE(family_name(f));
    Problem p(f, DType::kBFloat16, {0, 100, 200});
    p.build();
    // forward then backward, each on a fresh (never written: initcheck's view) workspace; every
    // output's bytes
    auto run = [&](const std::string& what) {
      std::vector<std::vector<unsigned char>> got;
      DevBuf ws(p.fwd_ws());
      DevBuf bws(p.bwd_ws());
      for (const auto& [name, t] : p.outputs)
        EXPECT_EQ(cudaMemset(t.data, kSentinel, static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype)), cudaSuccess);
      Status s = p.forward({ws.p, ws.n});
      EXPECT_TRUE(s.ok()) << what << ", forward: " << s.message;
      s = p.backward({bws.p, bws.n});
      EXPECT_TRUE(s.ok()) << what << ", backward: " << s.message;
      EXPECT_EQ(cudaGetLastError(), cudaSuccess) << what;
      for (const auto& [name, t] : p.outputs)
        got.push_back(read_back(t.data, static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype)));
      return got;
    };
    const std::vector<std::vector<unsigned char>> want = run("device copy equal to the host copy");
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_FALSE(all_sentinel(p.outputs[i].second.data, want[i].size())) << p.outputs[i].first << " not written";
    }
    for (const std::vector<int32_t>& dev_cu :
         {std::vector<int32_t>{0, 64, 200}, std::vector<int32_t>{0, 130, 260}, std::vector<int32_t>{0, 150, 20},
          std::vector<int32_t>{0, -64, 200}, std::vector<int32_t>{0, 100, 1 << 30}}) {
      const std::string what = "device cu_seqlens {" + std::to_string(dev_cu[0]) + ", " + std::to_string(dev_cu[1]) +
                               ", " + std::to_string(dev_cu[2]) + "}, host {0, 100, 200}";
      ASSERT_EQ(cudaMemcpy(p.fin.cu_seqlens.data, dev_cu.data(), dev_cu.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      const std::vector<std::vector<unsigned char>> got = run(what);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(got[i] == want[i]) << what << ": " << p.outputs[i].first << " differs from the consistent call's";
    }
  }
}

// ---------------------------------------------------------------- gate semantics on CUDA
HostTensor to_f64(const HostTensor& t) { return t.present() ? t.as(DType::kFloat64) : HostTensor(); }

HostTensor from_device(const TensorView& t) {
  HostTensor h(t.dtype, {t.numel()});
  EXPECT_EQ(cudaMemcpy(h.bytes.data(), t.data, h.bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

HostTensor flat(const HostTensor& t) {
  HostTensor h = t;
  h.view.ndim = 1;
  h.view.shape[0] = t.numel();
  h.view.strides[0] = 1;
  return h;
}

// CUDA forward + backward against the float64 reference; every output finite and within SPEC.
void check_against_reference(Problem& p, const std::string& ctx) {
  SCOPED_TRACE(ctx);
  p.build();
  DevBuf ws(p.fwd_ws());
  Status s = p.forward({ws.p, ws.n});
  ASSERT_TRUE(s.ok()) << s.message;
  DevBuf bws(p.bwd_ws());
  s = p.backward({bws.p, bws.n});
  ASSERT_TRUE(s.ok()) << s.message;
  // reference
  // the reference in float64 throughout (its gradients take their inputs' dtypes)
  HostTensor q = to_f64(p.q), k = to_f64(p.k), v = to_f64(p.v), beta = to_f64(p.beta), d_o = to_f64(p.d_o);
  HostTensor g64 = p.g.as(DType::kFloat64), h064 = to_f64(p.h0);
  HostTensor a64 = p.A_log.present() ? p.A_log.as(DType::kFloat64) : HostTensor();
  ForwardInputs in;
  in.q = q.view; in.k = k.view; in.v = v.view; in.beta = beta.view; in.g = g64.view;
  in.A_log = a64.view; in.initial_state = h064.view; in.cu_seqlens = p.cu.view;
  HostTensor ro(DType::kFloat64, {p.B, p.T, p.HV, p.V}), rfs = to_f64(p.h0);
  ForwardOutputs out;
  out.o = ro.view;
  out.final_state = rfs.view;
  ASSERT_TRUE(reference_forward(p.fam, in, out, p.opt).ok());
  BackwardInputs bi;
  bi.fwd = in;
  bi.d_o = d_o.view;
  HostTensor dht64 = to_f64(p.dht);
  bi.dht = dht64.view;
  HostTensor rdq = to_f64(p.q), rdk = to_f64(p.k), rdv = to_f64(p.v), rdg = p.g.as(DType::kFloat64),
             rdb = to_f64(p.beta), rdh0 = to_f64(p.h0), rda = p.A_log.present() ? p.A_log.as(DType::kFloat64) : HostTensor();
  BackwardOutputs bo;
  bo.dq = rdq.view; bo.dk = rdk.view; bo.dv = rdv.view; bo.dg = rdg.view; bo.dbeta = rdb.view; bo.dh0 = rdh0.view;
  bo.dA_log = rda.view;
  s = reference_backward(p.fam, bi, bo, p.opt);
  ASSERT_TRUE(s.ok()) << s.message;
  const double tol = tolerance_for(p.dt);
  auto cmp = [&](const char* name, const TensorView& dev, const HostTensor& ref) {
    const HostTensor got = from_device(dev);
    const double e = rel_err(got, flat(ref));
    EXPECT_LE(e, tol) << name << " rel_err " << e;
  };
  cmp("o", p.fout.o, ro);
  cmp("final_state", p.fout.final_state, rfs);
  cmp("dq", p.bout.dq, rdq);
  cmp("dk", p.bout.dk, rdk);
  cmp("dv", p.bout.dv, rdv);
  cmp("dg", p.bout.dg, rdg);
  cmp("dbeta", p.bout.dbeta, rdb);
  cmp("dh0", p.bout.dh0, rdh0);
  if (p.A_log.present()) cmp("dA_log", p.bout.dA_log, rda);
}

void set_gate(Problem& p, int64_t t, double x) {
  const int64_t w = p.HV * (p.fam == Family::kKDA ? p.K : 1);
  for (int64_t i = 0; i < w; ++i) p.g.set(t * w + i, x);
}

TEST(CudaGateSemantics, SmallNegativeInfinityIsAFullForget) {
  SKIP_WITHOUT_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  for (Family f : kFamilies) {
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      for (const std::vector<int64_t>& ts : {std::vector<int64_t>{0}, std::vector<int64_t>{5, 63, 64, 100},
                                            std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}}) {
        Problem p(f, dt);
        for (int64_t t : ts) set_gate(p, t, -inf);
        check_against_reference(p, std::string(family_name(f)) + " " + dtype_name(dt) + " -inf gates");
      }
    }
  }
}

// safe_gate promises g in [L, 0); a -inf gate breaks the promise, and the floor still makes it a
// full forget (the block holding it takes the exact path).
TEST(CudaGateSemantics, SmallSafeGateWithNegativeInfinity) {
  SKIP_WITHOUT_GPU();
  Problem p(Family::kKDA, DType::kBFloat16);
  p.opt.safe_gate = true;
  p.opt.lower_bound = -5.0f;
  fill_uniform(p.g, -5.0, -1e-3);
  for (int64_t t : {0, 17, 64, 100}) set_gate(p, t, -std::numeric_limits<double>::infinity());
  check_against_reference(p, "KDA safe_gate, L = -5, -inf gates");
}

TEST(CudaGateSemantics, SmallHugeFiniteNegativeGates) {
  SKIP_WITHOUT_GPU();
  for (Family f : kFamilies) {
    for (double x : {-120.0, -1e5, -1e30, -3.0e38}) {
      Problem p(f, DType::kBFloat16);
      for (int64_t t : {3, 40, 64, 65, 120}) set_gate(p, t, x);
      check_against_reference(p, std::string(family_name(f)) + " gates " + std::to_string(x));
    }
  }
}

TEST(CudaGateSemantics, SmallInKernelGateALogOverflow) {
  SKIP_WITHOUT_GPU();
  for (Family f : kFamilies) {
    for (double a : {100.0, 1e4}) {
      Problem p(f, DType::kBFloat16);
      p.opt.use_gate_in_kernel = true;
      fill_normal(p.g);
      p.A_log = HostTensor(DType::kFloat32, {p.HV});
      p.A_log.set(0, a);
      p.A_log.set(1, 0.5);
      set_gate(p, 7, -std::numeric_limits<double>::infinity());  // softplus(-inf) = 0: no decay
      check_against_reference(p, std::string(family_name(f)) + " A_log[0] = " + std::to_string(a));
    }
  }
}

}  // namespace
}  // namespace linattn::test
