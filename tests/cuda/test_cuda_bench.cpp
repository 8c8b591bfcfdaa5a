// Forward benchmark at the reference shape (B=2, T=8192, H=32, K=V=128, bf16): KDA with and
// without safe_gate, GDN with H=16, HV=32. Disabled by default; run with
//   linattn_cuda_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Forward*'
// CUDA events, warm-up, median of many, input sets rotated to defeat L2.
// Settings match bench/fla_forward_times.py.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <memory>
#include <vector>

#include "test_util.hpp"

namespace linattn::test {
namespace {

struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t n) { cudaMalloc(&p, n); }
  ~Dev() { cudaFree(p); }
};

TensorView dev_view(void* p, DType dt, std::initializer_list<int64_t> shape) {
  TensorView v = make_view(p, dt, shape, Device{DeviceType::kCUDA, 0});
  return v;
}

// Fills a device buffer with random values of dtype (via a host tensor). The host tensors are drawn
// once per (slot, dtype, size, mode) and reused for every rotated input set and configuration (the
// rotation is there to defeat L2 by address, and drawing ~1G host randoms per run took minutes).
void fill_dev(void* p, DType dt, int64_t n, int mode, int slot) {
  static std::map<std::tuple<int, int, int64_t, int>, std::unique_ptr<HostTensor>> cache;
  auto& h = cache[std::make_tuple(slot, static_cast<int>(dt), n, mode)];
  if (!h) {
    h.reset(new HostTensor(dt, {n}));
    if (mode == 0) fill_normal(*h);
    else if (mode == 1) fill_uniform(*h, 0.05, 1.0);
    else fill_logsigmoid_gate(*h);
  }
  cudaMemcpy(p, h->bytes.data(), h->bytes.size(), cudaMemcpyHostToDevice);
}

// KDA gate parameters: realistic = the FLA / Kimi Linear layer initialisation (A = exp(A_log) ~ U(1, 16),
// dt_bias = softplus^-1(dt), dt ~ logU(1e-3, 0.1)); steep = A_log ~ U(0, 2.7), dt_bias ~ N(0, 1)
// (per-token gates down to about -15: most 16-token diagonal blocks take the exact per-element path).
double bench_one(Family fam, int64_t H, int64_t HV, bool safe, bool steep) {
  // LINATTN_BENCH_B / LINATTN_BENCH_T: other batch sizes and lengths (default the reference 2 x 8192)
  const char* eb = std::getenv("LINATTN_BENCH_B");
  const char* et = std::getenv("LINATTN_BENCH_T");
  const int64_t B = eb ? std::atoll(eb) : 2, T = et ? std::atoll(et) : 8192, K = 128, V = 128;
  const int rot = 4;
  const DType bf = DType::kBFloat16;
  const bool kda = fam == Family::kKDA;
  std::vector<std::unique_ptr<Dev>> bufs;
  std::vector<ForwardInputs> ins(rot);
  auto alloc = [&](std::size_t n) { bufs.emplace_back(new Dev(n)); return bufs.back()->p; };
  void* A_log = alloc(HV * 4);
  void* dtb = alloc(HV * K * 4);
  {
    HostTensor a(DType::kFloat32, {HV});
    HostTensor db(DType::kFloat32, {HV * K});
    if (steep) {
      fill_uniform(a, 0.0, 2.7);
      fill_normal(db);
    } else {
      fill_uniform(a, 1.0, 16.0);
      for (int64_t i = 0; i < HV; ++i) a.set(i, std::log(a.get(i)));
      fill_uniform(db, std::log(1e-3), std::log(0.1));
      for (int64_t i = 0; i < HV * K; ++i) db.set(i, std::log(std::expm1(std::exp(db.get(i)))));
    }
    cudaMemcpy(A_log, a.bytes.data(), a.bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dtb, db.bytes.data(), db.bytes.size(), cudaMemcpyHostToDevice);
  }
  for (int r = 0; r < rot; ++r) {
    ForwardInputs& in = ins[r];
    void* q = alloc(B * T * H * K * 2);
    void* k = alloc(B * T * H * K * 2);
    void* v = alloc(B * T * HV * V * 2);
    const int64_t gn = kda ? B * T * HV * K : B * T * HV;
    void* g = alloc(gn * 4);
    void* beta = alloc(B * T * HV * 2);
    fill_dev(q, bf, B * T * H * K, 0, 0);
    fill_dev(k, bf, B * T * H * K, 0, 1);
    fill_dev(v, bf, B * T * HV * V, 0, 2);
    fill_dev(g, DType::kFloat32, gn, kda ? 0 : 2, 3);
    fill_dev(beta, bf, B * T * HV, 1, 4);
    in.q = dev_view(q, bf, {B, T, H, K});
    in.k = dev_view(k, bf, {B, T, H, K});
    in.v = dev_view(v, bf, {B, T, HV, V});
    in.g = kda ? dev_view(g, DType::kFloat32, {B, T, HV, K}) : dev_view(g, DType::kFloat32, {B, T, HV});
    in.beta = dev_view(beta, bf, {B, T, HV});
    if (kda) {
      in.A_log = dev_view(A_log, DType::kFloat32, {HV});
      in.dt_bias = dev_view(dtb, DType::kFloat32, {HV * K});
    }
  }
  Options opt;
  opt.use_qk_l2norm_in_kernel = true;
  if (kda) {
    opt.use_gate_in_kernel = true;
    if (safe) {
      opt.safe_gate = true;
      opt.lower_bound = -5.f;
    }
  }
  ForwardOutputs out;
  void* o = alloc(B * T * HV * V * 2);
  void* ht = alloc(B * HV * K * V * 4);
  out.o = dev_view(o, bf, {B, T, HV, V});
  out.final_state = dev_view(ht, DType::kFloat32, {B, HV, K, V});
  std::size_t wsb = 0;
  Status s = forward_workspace_size(fam, ins[0], opt, &wsb);
  EXPECT_TRUE(s.ok()) << s.message;
  void* ws = alloc(wsb);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 5; ++i) {
    s = forward(fam, ins[i % rot], out, opt, Workspace{ws, wsb}, nullptr);
    EXPECT_TRUE(s.ok()) << s.message;
  }
  cudaDeviceSynchronize();
  std::vector<float> ts;
  for (int i = 0; i < 40; ++i) {
    cudaEventRecord(e0);
    forward(fam, ins[i % rot], out, opt, Workspace{ws, wsb}, nullptr);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    ts.push_back(ms);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  std::sort(ts.begin(), ts.end());
  std::printf("linattn %-14s B=%lld T=%lld %.3f ms  (min %.3f)  workspace %.0f MiB\n",
              kda ? (safe ? "kda_safe_gate" : (steep ? "kda_steep" : "kda")) : "gdn", static_cast<long long>(B),
              static_cast<long long>(T), ts[ts.size() / 2], ts[0], wsb / 1048576.0);
  std::fflush(stdout);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ts[ts.size() / 2];
}

// LINATTN_BENCH_ONLY=name[,name...] (kda, kda_steep, kda_safe_gate, gdn) runs a subset (profiling).
bool selected(const char* name) {
  const char* only = std::getenv("LINATTN_BENCH_ONLY");
  if (!only || !*only) return true;
  const std::size_t n = std::strlen(name);
  for (const char* s = only; *s;) {
    const char* e = std::strchr(s, ',');
    const std::size_t len = e ? static_cast<std::size_t>(e - s) : std::strlen(s);
    if (len == n && std::strncmp(s, name, n) == 0) return true;
    if (!e) break;
    s = e + 1;
  }
  return false;
}

TEST(CudaBench, DISABLED_Forward) {
  if (!linattn::cuda_available()) GTEST_SKIP() << "no GPU";
  if (selected("kda")) bench_one(Family::kKDA, 32, 32, false, false);
  if (selected("kda_steep")) bench_one(Family::kKDA, 32, 32, false, true);
  if (selected("kda_safe_gate")) bench_one(Family::kKDA, 32, 32, true, true);
  if (selected("gdn")) bench_one(Family::kGDN, 16, 32, false, false);
}

}  // namespace
}  // namespace linattn::test
