// linattn_cuda_stage_bench: timings of the CUDA kernels at the reference shape, for development
// (profilers, the per-stage split of the backward). The side-by-side suite against FLA is
// bench/run_benchmarks.py; this binary times linattn alone, from C++, with no Python in the way.
//
//   linattn_cuda_stage_bench forward  [--B 2] [--T 8192] [--H n] [--only kda,kda_steep,kda_safe_gate,gdn,gla,simple_gla,simple_gla_gamma] [--stages]
//       bf16, K = V = 128: KDA H = HV = 32 (in-kernel gate with FLA's initialisation; "steep":
//       A_log ~ U(0, 2.7), dt_bias ~ N(0, 1); safe_gate with L = -5) and GDN H = 16, HV = 32.
//       CUDA events, 5 warm-ups, the median of 40 calls, 4 input sets rotated to defeat L2.
//       Settings match bench/fla_forward_times.py. --stages: per-stage times of one more call
//       (host/forward_stages.hpp names them; "[fwd profile]" lines).
//   linattn_cuda_stage_bench backward [--family kda|gdn|gla|simple_gla] [--dtype bf16|fp16|fp32]
//       [--gate softplus|softplus_fla|logsigmoid] [--only auto|split|fast16|float32|token] [--stages]
//       [--B 2] [--T 8192] [--H 32] [--HV 32] [--K 128] [--V 128]
//       The backward of every form (Options::backward_precision, and the token replay, the tests'
//       oracle) or of --only's alone besides the default (auto), then the forward, the workspace of
//       each form and the default's peak. Gate softplus: the in-kernel softplus gate with A_log,
//       dt_bias and sigmoid beta (the default computes in float32 there), with the tests' steep
//       parameters (A_log ~ U(0, 2.7), dt_bias ~ N(0, 1)) or, softplus_fla, FLA's / Kimi Linear's
//       initialisation (BENCHMARKS' in-kernel rows; forward's "kda"); logsigmoid: the test
//       suite's gate (g = logsigmoid(randn) / 16 given; the default is the split form).
//       --stages: per-stage times of one more call of each timed chunked form ("[bwd profile]").
//
// Needs a GPU; exits 0 after printing "no GPU" without one.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/problem.hpp"
#include "cuda/common/chunk_bwd.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/host/forward_stages.hpp"
#include "cuda/host/stage_timer.hpp"

namespace linattn::bench {
namespace {

using namespace linattn::test;

// ------------------------------------------------------------------ command line

struct Args {
  std::map<std::string, std::string> kv;
  bool has(const char* k) const { return kv.count(k) != 0; }
  std::string str(const char* k, const char* def) const { return has(k) ? kv.at(k) : def; }
  int64_t num(const char* k, int64_t def) const { return has(k) ? std::atoll(kv.at(k).c_str()) : def; }
};

bool parse(int argc, char** argv, Args* a) {
  for (int i = 2; i < argc; ++i) {
    if (std::strncmp(argv[i], "--", 2) != 0) return false;
    const std::string k = argv[i] + 2;
    if (k == "stages") {
      a->kv[k] = "1";
    } else {
      if (i + 1 >= argc) return false;
      a->kv[k] = argv[++i];
    }
  }
  return true;
}

// Whether `name` is in the comma-separated list (an empty list selects everything).
bool selected(const std::string& list, const char* name) {
  if (list.empty()) return true;
  std::size_t s = 0;
  while (s <= list.size()) {
    const std::size_t e = std::min(list.find(',', s), list.size());
    if (list.compare(s, e - s, name) == 0) return true;
    s = e + 1;
  }
  return false;
}

// ------------------------------------------------------------------ forward

struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t n) { cudaMalloc(&p, n); }
  ~Dev() { cudaFree(p); }
};

TensorView dev_view(void* p, DType dt, std::initializer_list<int64_t> shape) {
  return make_view(p, dt, shape, Device{DeviceType::kCUDA, 0});
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
// gamma_only (simple GLA): g_gamma without g, as the Python bench's simple_gla_gamma row.
int forward_one(Family fam, int64_t B, int64_t T, int64_t H, int64_t HV, bool safe, bool steep, bool stages,
                bool gamma_only = false) {
  const int64_t K = 128, V = 128;
  const int rot = 4;
  const DType bf = DType::kBFloat16;
  const bool kda = fam == Family::kKDA;
  const bool vec = kda || fam == Family::kGLA;        // per-channel gate
  const bool delta = kda || fam == Family::kGDN;      // beta, l2norm (the delta-rule layers')
  std::vector<std::unique_ptr<Dev>> bufs;
  std::vector<ForwardInputs> ins(rot);
  auto alloc = [&](std::size_t n) {
    bufs.emplace_back(new Dev(n));
    return bufs.back()->p;
  };
  void* A_log = alloc(HV * 4);
  void* dtb = alloc(HV * K * 4);
  void* g_gamma = alloc(HV * 4);  // simple GLA: FLA's per-head decays log(1 - 2^(-5 - h / 4))
  {
    HostTensor gg(DType::kFloat32, {HV});
    for (int64_t i = 0; i < HV; ++i) gg.set(i, std::log1p(-std::exp2(-5.0 - double(i % 32) / 4.0)));
    cudaMemcpy(g_gamma, gg.bytes.data(), gg.bytes.size(), cudaMemcpyHostToDevice);
  }
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
    const int64_t gn = vec ? B * T * HV * K : B * T * HV;
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
    if (!gamma_only) in.g = vec ? dev_view(g, DType::kFloat32, {B, T, HV, K}) : dev_view(g, DType::kFloat32, {B, T, HV});
    if (delta) in.beta = dev_view(beta, bf, {B, T, HV});
    if (fam == Family::kSimpleGLA) in.g_gamma = dev_view(g_gamma, DType::kFloat32, {HV});
    if (kda) {
      in.A_log = dev_view(A_log, DType::kFloat32, {HV});
      in.dt_bias = dev_view(dtb, DType::kFloat32, {HV * K});
    }
  }
  Options opt;
  opt.use_qk_l2norm_in_kernel = delta;
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
  if (!s.ok()) {
    std::fprintf(stderr, "forward_workspace_size: %s\n", s.message.c_str());
    return 1;
  }
  void* ws = alloc(wsb);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 5; ++i) {
    s = forward(fam, ins[i % rot], out, opt, Workspace{ws, wsb}, nullptr);
    if (!s.ok()) {
      std::fprintf(stderr, "forward: %s\n", s.message.c_str());
      return 1;
    }
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
  const char* name = kda ? (safe ? "kda_safe_gate" : (steep ? "kda_steep" : "kda"))
                         : (fam == Family::kGDN ? "gdn" : (vec ? "gla" : (gamma_only ? "simple_gla_gamma" : "simple_gla")));
  const cudaError_t err = cudaGetLastError();
  std::sort(ts.begin(), ts.end());
  std::printf("linattn %-14s B=%lld T=%lld H=%lld HV=%lld %.3f ms  (min %.3f)  workspace %.0f MiB\n", name,
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
              static_cast<long long>(HV), ts[ts.size() / 2], ts[0], wsb / 1048576.0);
  if (stages && err == cudaSuccess) {  // one more call of the same path through the backend, marking its stages
    detail::Problem p;
    s = detail::resolve_forward(fam, ins[0], out, opt, &p);
    cuda::StageTimer timer;
    if (s.ok()) s = cuda::forward(p, ins[0], out, Workspace{ws, wsb}, nullptr, &timer);
    if (!s.ok()) {
      std::fprintf(stderr, "forward (stages): %s\n", s.message.c_str());
      return 1;
    }
    timer.print(stdout, (std::string("[fwd profile] ") + name).c_str());
  }
  std::fflush(stdout);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

int run_forward(const Args& a) {
  const int64_t B = a.num("B", 2), T = a.num("T", 8192);
  // --H n: every family at H = HV = n (GDN without GVA); default: 32, GDN H = 16 with HV = 32
  const int64_t H = a.num("H", 32), gdn_h = a.has("H") ? H : 16;
  const std::string only = a.str("only", "");
  const bool st = a.has("stages");
  int rc = 0;
  if (selected(only, "kda")) rc |= forward_one(Family::kKDA, B, T, H, H, false, false, st);
  if (selected(only, "kda_steep")) rc |= forward_one(Family::kKDA, B, T, H, H, false, true, st);
  if (selected(only, "kda_safe_gate")) rc |= forward_one(Family::kKDA, B, T, H, H, true, true, st);
  if (selected(only, "gdn")) rc |= forward_one(Family::kGDN, B, T, gdn_h, H, false, false, st);
  // GLA / simple GLA (g and g_gamma) at H = HV: only when named in --only
  if (!only.empty() && selected(only, "gla")) rc |= forward_one(Family::kGLA, B, T, H, H, false, false, st);
  if (!only.empty() && selected(only, "simple_gla")) rc |= forward_one(Family::kSimpleGLA, B, T, H, H, false, false, st);
  if (!only.empty() && selected(only, "simple_gla_gamma"))
    rc |= forward_one(Family::kSimpleGLA, B, T, H, H, false, false, st, /*gamma_only=*/true);
  return rc;
}

// ------------------------------------------------------------------ backward

// One backward on `path` through cuda::backward_kda_gdn (the token replay is not public): a first
// call, then the mean of 3 timed calls in *ms; with a timer, one more call marking its stages.
Status timed_backward(const Case& c, const Inputs& x, BwdPath path, Grads* g, double* ms,
                      cuda::StageTimer* timer = nullptr) {
  std::vector<DevBuf> keep;
  keep.reserve(32);
  *g = make_grads(c, x, false);
  BackwardInputs in = backward_views(x, true, keep);
  BackwardOutputs out = grad_views(*g, true, keep);
  detail::Problem p;
  Status s = detail::resolve_backward(c.fam, in, out, with_path(make_options(c), path), &p);
  if (!s.ok()) return s;
  p.token_replay = path == BwdPath::kTokenReplay;
  const std::size_t bytes = cuda::backward_kda_gdn_workspace_bytes(p);
  if (bytes == 0) return Status::Unsupported("backward_kda_gdn: unsupported");
  DevBuf ws(bytes);
  if (!ws.p) return {StatusCode::kBackendError, "workspace allocation failed"};
  const Workspace w{ws.p, bytes};
  if (!(s = cuda::backward_kda_gdn(p, in, out, w, nullptr)).ok()) return s;
  if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const int iters = 3;
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) cuda::backward_kda_gdn(p, in, out, w, nullptr);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float t = 0;
  cudaEventElapsedTime(&t, a, b);
  *ms = t / iters;
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (timer) {
    timer->clear();
    cuda::backward_kda_gdn(p, in, out, w, nullptr, timer);
  }
  if (cudaDeviceSynchronize() != cudaSuccess || cudaGetLastError() != cudaSuccess)
    return {StatusCode::kBackendError, "CUDA error"};
  download_grads(out, *g);
  return Status::Ok();
}

int run_backward(const Args& a) {
  const std::string fam = a.str("family", "kda");
  Case c;
  c.fam = fam == "gdn" ? Family::kGDN : (fam == "gla" ? Family::kGLA : (fam == "simple_gla" ? Family::kSimpleGLA : Family::kKDA));
  if (!c.delta()) c = no_delta_case(c.fam);  // no beta, no in-kernel gate, no l2norm
  c.g_gamma = c.fam == Family::kSimpleGLA;
  const std::string dts = a.str("dtype", "bf16");
  c.dt = dts == "fp32" ? DType::kFloat32 : (dts == "fp16" ? DType::kFloat16 : DType::kBFloat16);
  c.B = a.num("B", 2);
  c.T = a.num("T", 8192);
  c.H = a.num("H", 32);
  c.HV = a.num("HV", c.H);
  c.K = a.num("K", 128);
  c.V = a.num("V", 128);
  const std::string gate = a.str("gate", "softplus");
  if (gate == "logsigmoid" || !c.delta()) {  // the test suite's gate (g given)
    c.gate = Gate::kLogsigmoid;
  } else {  // the in-kernel softplus gate with A_log, dt_bias and sigmoid beta
    c.gate = Gate::kSoftplus;
    c.beta_sigmoid = true;
  }
  const std::string only = a.str("only", "");
  const bool stages = a.has("stages");
  Inputs x = make_inputs(c, /*backward=*/true);
  if (gate == "softplus_fla" && c.gate == Gate::kSoftplus) {  // FLA's / Kimi Linear's initialisation (forward_one's)
    fill_uniform(x.A_log, 1.0, 16.0);
    for (int64_t i = 0; i < x.A_log.numel(); ++i) x.A_log.set(i, std::log(x.A_log.get(i)));
    fill_uniform(x.dt_bias, std::log(1e-3), std::log(0.1));
    for (int64_t i = 0; i < x.dt_bias.numel(); ++i) x.dt_bias.set(i, std::log(std::expm1(std::exp(x.dt_bias.get(i)))));
  }
  char shape[160];
  std::snprintf(shape, sizeof shape, "%s B%lld T%lld H%lld HV%lld K%lld V%lld %s", family_name(c.fam),
                (long long)c.B, (long long)c.T, (long long)c.H, (long long)c.HV, (long long)c.K, (long long)c.V,
                dtype_name(c.dt));

  // every form, or --only's, then the default (auto) last: g holds its gradients
  const BwdPath paths[] = {BwdPath::kTokenReplay, BwdPath::kFast16, BwdPath::kFloat32, BwdPath::kSplit};
  const char* keys[] = {"token", "fast16", "float32", "split"};
  double ms[5] = {-1, -1, -1, -1, -1};
  Grads g;
  cuda::StageTimer timer;
  for (int i = 0; i < 4; ++i) {
    if (!only.empty() && only != keys[i]) continue;
    if (!c.delta() && paths[i] == BwdPath::kTokenReplay) continue;  // the token replay is the delta rule's
    const bool staged = stages && paths[i] != BwdPath::kTokenReplay;
    const Status s = timed_backward(c, x, paths[i], &g, &ms[i], staged ? &timer : nullptr);
    if (!s.ok()) {
      std::fprintf(stderr, "%s backward: %s\n", path_name(paths[i]), s.message.c_str());
      return 1;
    }
    if (staged) timer.print(stdout, (std::string("[bwd profile] ") + keys[i]).c_str());
  }
  Status s = timed_backward(c, x, BwdPath::kAuto, &g, &ms[4], stages ? &timer : nullptr);
  if (!s.ok()) {
    std::fprintf(stderr, "auto backward: %s\n", s.message.c_str());
    return 1;
  }
  if (stages) timer.print(stdout, "[bwd profile] auto");
  std::printf("[bench] %s backward ms: auto %.3f, split %.3f, fast16 %.3f, float32 %.3f, token replay %.3f "
              "(-1: not run)\n",
              shape, ms[4], ms[3], ms[1], ms[2], ms[0]);
  for (int i = 0; i < 3; ++i) {  // finite gradients
    const HostTensor& t = *g.at(i);
    for (int64_t j = 0; j < t.numel(); j += 997)
      if (!std::isfinite(t.get(j))) {
        std::fprintf(stderr, "%s is not finite at %lld\n", kGradNames[i], (long long)j);
        return 1;
      }
  }

  // the forward at the same shape, through the public API
  std::vector<DevBuf> keep;
  const BackwardInputs in = backward_views(x, true, keep);
  HostTensor o = x.v;
  ForwardOutputs fo;
  fo.o = upload(o, keep);
  const Options opt = make_options(c);
  std::size_t bytes = 0;
  double fwd_ms = -1;
  if (forward_workspace_size(c.fam, in.fwd, opt, &bytes).ok()) {
    DevBuf ws(bytes);
    if (forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, bytes}, nullptr).ok()) {
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0);
      for (int i = 0; i < 5; ++i) forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, bytes}, nullptr);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      fwd_ms = t / 5;
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
  }
  std::printf("[bench] %s: auto backward %.3f ms, forward %.3f ms, fwd+bwd %.3f ms\n", shape, ms[4], fwd_ms,
              ms[4] + fwd_ms);

  // workspace of each form and the default's peak: inputs + gradients + workspace
  Grads g2 = make_grads(c, x, false);
  std::vector<DevBuf> keep2;
  const BackwardOutputs bo = grad_views(g2, false, keep2);
  const BackwardInputs bi = backward_views(x, false, keep2);
  auto ws_of = [&](BwdPath m) {
    detail::Problem p;
    if (!detail::resolve_backward(c.fam, bi, bo, with_path(opt, m), &p).ok()) return -1.0;
    p.token_replay = m == BwdPath::kTokenReplay;
    return double(cuda::backward_kda_gdn_workspace_bytes(p));
  };
  const double gib = double(1 << 30), wsb = ws_of(BwdPath::kAuto);
  std::printf("[bench] backward workspace GiB: auto %.3f, split %.3f, fast16 %.3f, float32 %.3f, token replay %.3f\n",
              wsb / gib, ws_of(BwdPath::kSplit) / gib, ws_of(BwdPath::kFast16) / gib,
              ws_of(BwdPath::kFloat32) / gib, ws_of(BwdPath::kTokenReplay) / gib);
  double io = 0;
  for (const HostTensor* h : {&x.q, &x.k, &x.v, &x.g, &x.beta, &x.A_log, &x.dt_bias, &x.d_o})
    if (h->present()) io += double(h->bytes.size());
  for (int i = 0; i < kNumGrads; ++i)
    if (g2.at(i)->present()) io += double(g2.at(i)->bytes.size());
  std::printf("[bench] auto backward workspace %.3f GiB, inputs+gradients %.3f GiB, peak %.3f GiB\n", wsb / gib,
              io / gib, (wsb + io) / gib);
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: linattn_cuda_stage_bench forward [--B n] [--T n] [--H n] [--only kda,kda_steep,kda_safe_gate,gdn,gla,simple_gla,simple_gla_gamma] [--stages]\n"
               "       linattn_cuda_stage_bench backward [--family kda|gdn|gla|simple_gla] [--dtype bf16|fp16|fp32]\n"
               "           [--gate softplus|softplus_fla|logsigmoid] [--only auto|split|fast16|float32|token] [--stages]\n"
               "           [--B n] [--T n] [--H n] [--HV n] [--K n] [--V n]\n");
  return 2;
}

}  // namespace
}  // namespace linattn::bench

int main(int argc, char** argv) {
  using namespace linattn::bench;
  Args a;
  if (argc < 2 || !parse(argc, argv, &a)) return usage();
  const std::string cmd = argv[1];
  if (cmd != "forward" && cmd != "backward") return usage();
  if (!linattn::cuda_available()) {
    std::printf("no GPU\n");
    return 0;
  }
  return cmd == "forward" ? run_forward(a) : run_backward(a);
}
