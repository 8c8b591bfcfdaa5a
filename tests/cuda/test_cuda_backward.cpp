// GPU tests of the CUDA backward (KDA, GDN; GLA and simple GLA: the same kernels without the delta
// rule; src/cuda/common/chunk_bwd.*) against the
// float64 reference (linattn::reference_backward). Skips itself without a GPU. Tests named
// *Small* use small shapes, for compute-sanitizer. The backward is called through
// cuda::backward_kda_gdn directly (so that a test can also pick the token replay, the oracle of the
// chunked form); some tests go through linattn::backward. Each test picks the backward's form with
// Options::backward_precision (BwdPath, cuda_test_util.hpp). Cases, inputs and reference runs:
// cuda_test_util.hpp. Benchmarks: bench/cuda_stage_bench.cpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/backend.hpp"
#include "common/problem.hpp"
#include "cuda/common/chunk_bwd.hpp"
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/cuda_test_util.hpp"

namespace linattn::test {
namespace {

// Every gradient `a` holds, bitwise equal to `b`'s ("<name> <what>" on a difference): the
// run-to-run, saved-vs-recompute and nothing-written checks.
void expect_same_bits(Grads& a, Grads& b, const char* what) {
  for (int i = 0; i < kNumGrads; ++i) {
    if (!a.at(i)->present()) continue;
    const auto &x = a.at(i)->bytes, &y = b.at(i)->bytes;
    ASSERT_EQ(x.size(), y.size()) << kGradNames[i] << ": sizes differ";
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size())) << kGradNames[i] << " " << what;
  }
}

// Runs the CUDA backward on `path` (cuda::backward_kda_gdn, or the public API when `api`; the token
// replay is not public: api needs another path).
Status run_cuda(const Case& c, const Inputs& x, Grads* g, bool api = false, BwdPath path = BwdPath::kAuto,
                bool separate_chains = false) {
  std::vector<DevBuf> keep;
  keep.reserve(32);
  *g = make_grads(c, x, false);
  BackwardInputs in = backward_views(x, true, keep);
  BackwardOutputs out = grad_views(*g, true, keep);
  const Options opt = with_path(make_options(c), path);
  Status s;
  if (api) {
    if (path == BwdPath::kTokenReplay) return Status::Invalid("the token replay has no public entry point");
    std::size_t bytes = 0;
    s = backward_workspace_size(c.fam, in, opt, &bytes);
    if (!s.ok()) return s;
    DevBuf ws(bytes);
    s = backward(c.fam, in, out, opt, Workspace{ws.p, bytes}, nullptr);
    if (!s.ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
  } else {
    detail::Problem p;
    s = detail::resolve_backward(c.fam, in, out, opt, &p);
    if (!s.ok()) return s;
    p.token_replay = path == BwdPath::kTokenReplay;
    p.separate_chains = separate_chains;
    const std::size_t bytes = cuda::backward_kda_gdn_workspace_bytes(p);
    if (bytes == 0) return Status::Unsupported("backward_kda_gdn: unsupported");
    DevBuf ws(bytes);
    if (!ws.p) return {StatusCode::kBackendError, "workspace allocation failed"};
    s = cuda::backward_kda_gdn(p, in, out, Workspace{ws.p, bytes}, nullptr);
    if (!s.ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
  }
  if (cudaGetLastError() != cudaSuccess) return {StatusCode::kBackendError, "CUDA error"};
  download_grads(out, *g);
  return Status::Ok();
}

struct Worst {
  double err[3][kNumGrads] = {};  // [fp16, bf16, fp32][gradient]
  ~Worst() {
    const char* dn[3] = {"fp16", "bf16", "fp32"};
    for (int d = 0; d < 3; ++d) {
      std::printf("[worst rel err %s]", dn[d]);
      for (int i = 0; i < kNumGrads; ++i) std::printf(" %s %.2e", kGradNames[i], err[d][i]);
      std::printf("\n");
    }
  }
};
Worst& worst() {
  static Worst w;
  return w;
}

// The chunked backward computed in the 16-bit input type (BackwardPrecision::kFast16, opt-in). dq, dk, dv and dh0 meet SPEC's 1e-2. dβ and dg (per token) are held to 5e-2
// (measured worst 1.6e-2); dA_log and ddt_bias (one sum over all tokens, ill-conditioned in the
// 16-bit intermediates: measured 1.8e-2 and 8.6e-2, up to 0.2 in an emulation) only to 0.5, which
// still catches a wrong sign, scale or term. Why: chunk_bwd.cu and docs/chunked_backward.md.
double chunked16_bound(int i, double tol) {
  if (i == 3 || i == 4) return 5e-2;   // dg, dbeta
  if (i == 5 || i == 6) return 0.5;    // dA_log, ddt_bias
  return tol;
}
// The split form (hi + lo halves, BackwardPrecision::kSplit) meets SPEC on every per-token gradient and
// dh0; dA_log and ddt_bias (per-head sums over all tokens) only to 0.5, as above (measured 0.2):
// the default runs float32 when they are asked for.
double split_bound(int i, double tol) { return (i == 5 || i == 6) ? 0.5 : tol; }

struct Worst16Chunked {
  double err[2][kNumGrads] = {};  // [fp16, bf16][gradient]
  ~Worst16Chunked() {
    const char* dn[2] = {"fp16", "bf16"};
    for (int d = 0; d < 2; ++d) {
      bool any = false;
      for (double e : err[d]) any |= e > 0;
      if (!any) continue;
      std::printf("[worst rel err %s, fast16]", dn[d]);
      for (int i = 0; i < kNumGrads; ++i) std::printf(" %s %.2e", kGradNames[i], err[d][i]);
      std::printf("\n");
    }
  }
};

// `path`: the backward's form (the default: BackwardPrecision::kAuto) or the token replay. `most`
// (kNumGrads values), when given, keeps the largest error of each gradient.
void check_case(const Case& c, bool api = false, BwdPath path = BwdPath::kAuto, double* most = nullptr) {
  const bool chunked16 = path == BwdPath::kFast16;
  SCOPED_TRACE(c.name() + (path == BwdPath::kAuto ? std::string() : std::string(" [") + path_name(path) + "]"));
  const Inputs x = make_inputs(c, /*backward=*/true);
  Grads got, ref;
  Status s = run_cuda(c, x, &got, api, path);
  if (api && s.code == StatusCode::kNotSupported) GTEST_SKIP() << "public CUDA backward not wired: " << s.message;
  ASSERT_TRUE(s.ok()) << s.message;
  s = run_reference_backward(c, x, &ref);
  ASSERT_TRUE(s.ok()) << s.message;
  const double tol = tolerance_for(c.dt);
  const int di = dtype_index(c.dt);
  static Worst16Chunked w16;
  // the looser bounds are for the delta rule's 16-bit forms; GLA / simple GLA meet SPEC in any form
  // but dg_gamma under fast16: one sum over every token of a head, like dA_log (measured 9.6e-3 and
  // 1.03e-2 in bf16 on an H200, by the draw), which is why kAuto computes it in float32
  const bool loose = chunked16 && c.dt != DType::kFloat32 && c.delta();
  const bool split = path == BwdPath::kSplit && c.dt != DType::kFloat32 && c.delta();
  const bool gamma16 = chunked16 && c.dt != DType::kFloat32 && !c.delta();
  for (int i = 0; i < kNumGrads; ++i) {
    if (!got.at(i)->present()) continue;
    const double e = rel_err(*got.at(i), *ref.at(i));
    const double bound = gamma16 && i == 8 ? 5e-2 : (loose ? chunked16_bound(i, tol) : (split ? split_bound(i, tol) : tol));
    EXPECT_LE(e, bound) << kGradNames[i];
    if (most) most[i] = std::max(most[i], e);
    if (loose) w16.err[di][i] = std::max(w16.err[di][i], e);
    else if (!split || split_bound(i, tol) == tol) worst().err[di][i] = std::max(worst().err[di][i], e);
  }
}

// Two calls of `path` on the same inputs give bitwise the same gradients.
void expect_repeatable(const Case& c, BwdPath path) {
  SCOPED_TRACE(c.name() + " path " + path_name(path));
  const Inputs x = make_inputs(c, /*backward=*/true);
  Grads a, b;
  ASSERT_TRUE(run_cuda(c, x, &a, false, path).ok());
  ASSERT_TRUE(run_cuda(c, x, &b, false, path).ok());
  expect_same_bits(a, b, "differs between runs");
}

TEST(CudaBackward, KdaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kKDA, Pass::kBackward)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaBackward, GdnSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kGDN, Pass::kBackward)) {
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

// One sequence's inputs never reach another's gradients (the forward's
// SmallNeighbourSequencesIsolated, for the backward): the middle of three sequences gets q, k, v
// and dO = inf and a NaN gate / β; the first and the last keep bitwise the clean run's per-token
// gradients and dh0 (the per-head ones, dA_log / ddt_bias / dg_gamma, sum over every token and are
// not compared). Every family, bf16 and float32, K = V = 128, the public entry point.
TEST(CudaBackward, SmallNeighbourSequencesIsolated) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA})
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      Case c = isolation_case(fam, dt);
      c.h0 = true;
      SCOPED_TRACE(c.name());
      const Inputs x = make_inputs(c, /*backward=*/true);
      Grads a, b;
      Status s = run_cuda(c, x, &a, /*api=*/true);
      ASSERT_TRUE(s.ok()) << s.message;
      s = run_cuda(c, poison_middle_sequence(c, x), &b, /*api=*/true);
      ASSERT_TRUE(s.ok()) << s.message;
      for (int i : {0, 1, 2, 3, 4}) expect_tokens_unchanged(*a.at(i), *b.at(i), c, kGradNames[i]);  // dq dk dv dg dbeta
      expect_neighbour_states_unchanged(a.dh0, b.dh0, "dh0 of sequence");
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
    BwdPath path;
  };
  const Run runs[] = {{DType::kBFloat16, BwdPath::kAuto},    {DType::kFloat16, BwdPath::kAuto},
                      {DType::kFloat32, BwdPath::kAuto},     {DType::kBFloat16, BwdPath::kFast16},
                      {DType::kBFloat16, BwdPath::kFloat32}, {DType::kBFloat16, BwdPath::kTokenReplay}};
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
      expect_repeatable(c, r.path);
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
      const Inputs x = make_inputs(c, /*backward=*/true);
      Grads a, b, b16, b32;
      const Status s1 = run_cuda(c, x, &a, false, BwdPath::kTokenReplay);
      const Status s2 = run_cuda(c, x, &b, false, BwdPath::kAuto);
      const Status s3 = run_cuda(c, x, &b16, false, BwdPath::kFast16);
      const Status s4 = run_cuda(c, x, &b32, false, BwdPath::kFloat32);
      ASSERT_TRUE(s1.ok()) << s1.message;
      ASSERT_TRUE(s2.ok()) << s2.message;
      ASSERT_TRUE(s3.ok()) << s3.message;
      ASSERT_TRUE(s4.ok()) << s4.message;
      for (int i = 0; i < kNumGrads; ++i) {
        if (!a.at(i)->present()) continue;
        const double tol = tolerance_for(dt);
        EXPECT_LE(rel_err(*b.at(i), *a.at(i)), tol) << kGradNames[i] << " (auto)";
        EXPECT_LE(rel_err(*b32.at(i), *a.at(i)), tol) << kGradNames[i] << " (float32)";
        EXPECT_LE(rel_err(*b16.at(i), *a.at(i)), dt == DType::kFloat32 ? tol : chunked16_bound(i, tol))
            << kGradNames[i] << " (fast16)";
      }
    }
}

// The 16-bit cases of the chunked16 and split tests: every option, odd lengths with both states,
// and the 15-sequence varlen layout (lower-bound gate for KDA).
std::vector<Case> sixteen_bit_cases(Family fam, DType dt) {
  std::vector<Case> v = option_cases(fam, Pass::kBackward);
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

// The chunked form computed in the 16-bit input type (opt-in: BackwardPrecision::kFast16).
TEST(CudaBackward, ChunkedSixteenBit) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (const Case& c : sixteen_bit_cases(fam, dt)) check_case(c, false, BwdPath::kFast16);
}

// The split form (the default for 16-bit inputs without A_log / dt_bias), forced on in-kernel
// gates too.
TEST(CudaBackward, SplitSixteenBit) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN})
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (const Case& c : sixteen_bit_cases(fam, dt)) check_case(c, false, BwdPath::kSplit);
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
      check_case(c, false, BwdPath::kFloat32);
      c.gate = Gate::kSoftplus;
      c.beta_sigmoid = true;
      check_case(c);
      check_case(c, false, BwdPath::kFloat32);
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
      check_case(v, false, BwdPath::kFloat32);
    }
}

// ------------------------------------------------------------------ the Hopper pass 1
// Pass 1 on wgmma (src/cuda/sm90/chunk_dh_wgmma.cuh) runs at K = 128 and V a multiple of 64, in
// the 16-bit forms (split, fast16, GLA and simple GLA's default) and in the float32 form on
// bfloat16 inputs (on an sm_90a build and a CC 9.0 GPU; elsewhere, and for float16 inputs in
// float32, these cases take dh_kernel and still check it). Every option of every family in each
// form, V = 128 and 256, odd lengths, a varlen layout with empty sequences and a partial last
// chunk, bitwise repeatability, and the gate-parameter gradients of the 15-sequence layout.
TEST(CudaBackward, SmallHopperPass1EveryOption) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA}) {
    const bool delta = fam == Family::kKDA || fam == Family::kGDN;
    const std::vector<Case> cases = hopper_cases(fam, Pass::kBackward);
    const std::vector<BwdPath> paths = delta ? std::vector<BwdPath>{BwdPath::kSplit, BwdPath::kFast16, BwdPath::kFloat32}
                                             : std::vector<BwdPath>{BwdPath::kAuto, BwdPath::kFloat32};
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (Case c : cases) {
        c.dt = dt;
        for (BwdPath path : paths) check_case(c, false, path);
      }
    Case c = cases.front();
    c.T = 1000;
    c.h0 = true;
    c.dht = true;
    for (BwdPath path : paths) expect_repeatable(c, path);
    if (delta) {  // dA_log / ddt_bias (sums over every token) in the default form, bf16, K = 128
      Case v;
      v.fam = fam;
      v.K = v.V = 128;
      v.cu = {0, 494, 1004, 1561, 1908, 2240, 2849, 3116, 4096, 4986, 5626, 6090, 6718, 7244, 7870, 8192};
      v.T = 8192;
      v.H = v.HV = 1;
      v.h0 = v.dht = v.beta_sigmoid = true;
      v.gate = fam == Family::kKDA ? Gate::kLowerBound : Gate::kSoftplus;
      check_case(v);
    }
  }
}

// The gate-parameter gradients (dA_log, ddt_bias: one sum over every token of a head, with heavy
// cancellation on some draws) in the default form over 20 random draws per option combination
// (issue #15's bar): KDA with the lower-bound gate (with and without safe_gate) and the softplus
// gate, GDN with the softplus gate; bf16 and fp16; K = V = 128 (on Hopper the float32 form's prep
// is intra_chunk_vector_gate.cuh's WIDE form for bf16), a varlen layout with an empty sequence and
// a partial last chunk. Every gradient within SPEC on every draw; the worst of each printed.
TEST(CudaBackward, GateParameterGradientsOverDraws) {
  SKIP_WITHOUT_GPU();
  struct Combo {
    Family fam;
    Gate gate;
    bool safe;
  };
  const Combo combos[] = {{Family::kKDA, Gate::kLowerBound, false},
                          {Family::kKDA, Gate::kLowerBound, true},
                          {Family::kKDA, Gate::kSoftplus, false},
                          {Family::kGDN, Gate::kSoftplus, false}};
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (const Combo& cb : combos) {
      Case c;
      c.fam = cb.fam;
      c.dt = dt;
      c.K = c.V = 128;
      c.cu = {0, 300, 300, 1111, 1500, 2047};
      c.T = 2047;
      c.H = c.HV = 2;
      c.gate = cb.gate;
      c.safe_gate = cb.safe;
      c.beta_sigmoid = true;
      c.h0 = c.dht = true;
      double most[kNumGrads] = {};
      for (int draw = 0; draw < 20; ++draw) {
        SCOPED_TRACE("draw " + std::to_string(draw));
        c.draw = draw;
        check_case(c, false, BwdPath::kAuto, most);
      }
      std::printf("[20 draws] %s %s gate%d safe%d worst:", family_name(cb.fam), dtype_name(dt), int(cb.gate), int(cb.safe));
      for (int i = 0; i < kNumGrads; ++i)
        if (most[i] > 0) std::printf(" %s %.2e", kGradNames[i], most[i]);
      std::printf("\n");
    }
}

// Options::backward_precision selects the backward's form (seen in the workspace sizes: the
// default computes in float32 here, an in-kernel gate with A_log), and so does the saved buffer's
// size; a value outside the enum (the C ABI and the bindings pass integers) is refused by
// validation, naming the accepted values, and nothing is written. No GPU needed (host tensors:
// sizes and validation only).
TEST(CudaBackward, BackwardPrecisionSelectsForm) {
  Case c;
  c.T = 70;
  c.h0 = true;
  c.dht = true;
  c.gate = Gate::kSoftplus;
  const Inputs x = make_inputs(c, /*backward=*/true);
  std::vector<DevBuf> keep;
  Grads g = make_grads(c, x, false);
  const BackwardInputs in = backward_views(x, false, keep);
  const BackwardOutputs out = grad_views(g, false, keep);
  auto problem = [&](BwdPath m) {
    detail::Problem p;
    EXPECT_TRUE(detail::resolve_backward(c.fam, in, out, with_path(make_options(c), m), &p).ok());
    p.token_replay = m == BwdPath::kTokenReplay;
    return p;
  };
  auto bytes_for = [&](BwdPath m) { return cuda::backward_kda_gdn_workspace_bytes(problem(m)); };
  const std::size_t def = bytes_for(BwdPath::kAuto), b16 = bytes_for(BwdPath::kFast16),
                    bsplit = bytes_for(BwdPath::kSplit), b32 = bytes_for(BwdPath::kFloat32),
                    btok = bytes_for(BwdPath::kTokenReplay);
  EXPECT_GT(def, 0u);
  EXPECT_GT(btok, 0u);
  EXPECT_EQ(b32, def);     // an in-kernel gate with A_log: the default computes in float32
  EXPECT_LT(b16, bsplit);  // the low halves
  EXPECT_LT(bsplit, b32);  // no float32 intermediates or input copies
  const std::size_t saved16 = cuda::saved_kda_gdn_bytes(problem(BwdPath::kFast16));
  const std::size_t saved32 = cuda::saved_kda_gdn_bytes(problem(BwdPath::kFloat32));
  EXPECT_GT(saved16, 0u);
  EXPECT_LT(saved16, saved32);  // the saved buffer is in the compute type
  EXPECT_EQ(cuda::saved_kda_gdn_bytes(problem(BwdPath::kAuto)), saved32);

  Options bad = make_options(c);
  bad.backward_precision = static_cast<BackwardPrecision>(7);
  std::size_t n = 0;
  Status s = backward_workspace_size(c.fam, in, bad, &n);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
  s = backward(c.fam, in, out, bad, Workspace{}, nullptr);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
  EXPECT_NE(s.message.find("backward_precision"), std::string::npos) << s.message;
  for (const char* name : {"auto", "split", "fast16", "float32"})
    EXPECT_NE(s.message.find(name), std::string::npos) << s.message;
  Grads fresh = make_grads(c, x, false);
  expect_same_bits(g, fresh, "was written");
  EXPECT_STREQ(backward_precision_name(BackwardPrecision::kFast16), "fast16");
}

// o and the final state of case c's inputs x within SPEC of the float64 reference forward.
void expect_forward_meets_reference(const Case& c, const Inputs& x, const HostTensor& o, const HostTensor& ht,
                                    const char* what) {
  Case cf = c;
  cf.final_state = true;
  FwdResult ref;
  ASSERT_TRUE(run_reference_forward(cf, x, &ref).ok());
  const double tol = tolerance_for(c.dt);
  EXPECT_LE(rel_err(o, ref.o), tol) << "o, " << what;
  EXPECT_LE(rel_err(ht, ref.ht), tol) << "final_state, " << what;
}

// ---- disable_recompute: a forward that fills a saved buffer, a backward that reads it.
struct SavedRun {
  BwdPath bwd_path = BwdPath::kAuto;  // the backward's form
  BwdPath fwd_path = BwdPath::kAuto;  // the forward's (the form its saved buffer is written for)
  bool zero_body = false;             // overwrite everything after the header with zeros
  std::optional<double> bwd_scale;    // a backward for another problem (another scale)
  bool chunk_local = false;           // Options::keep_chunk_local instead of disable_recompute
  std::optional<bool> bwd_chunk_local;  // the backward's keep_chunk_local (default: the forward's)
  bool zero_header = false;           // overwrite the header with zeros
  bool as_filled = false;             // BackwardInputs::saved_as_filled (the header is not read)
};

// Public API: forward with out.saved (o and the final state come back in *o, *ht), then the
// backward with in.saved. Returns the backward's status.
Status run_saved(const Case& c, const Inputs& x, const SavedRun& how, Grads* g, HostTensor* o, HostTensor* ht) {
  std::vector<DevBuf> keep;
  keep.reserve(32);
  *g = make_grads(c, x, false);
  BackwardInputs in = backward_views(x, true, keep);
  BackwardOutputs out = grad_views(*g, true, keep);
  Options opt = with_path(make_options(c), how.fwd_path);
  if (how.chunk_local) opt.keep_chunk_local = true;
  else opt.disable_recompute = true;
  std::size_t nsaved = 0, nws = 0;
  Status s = saved_bytes(c.fam, in.fwd, opt, &nsaved);
  if (!s.ok()) return s;
  if (nsaved == 0) return {StatusCode::kBackendError, "saved_bytes is 0 on CUDA"};
  DevBuf saved(nsaved);
  const Device dev{DeviceType::kCUDA, 0};
  const TensorView sv = make_view(saved.p, DType::kUInt8, {static_cast<int64_t>(nsaved)}, dev);
  cudaMemset(saved.p, 0xff, nsaved);
  *o = x.v;
  o->poison();
  *ht = state_tensor(c, x.N);
  ht->poison();
  ForwardOutputs fo;
  fo.o = upload(*o, keep);
  fo.final_state = upload(*ht, keep);
  fo.saved = sv;
  if (!(s = forward_workspace_size(c.fam, in.fwd, opt, &nws)).ok()) return s;
  {
    DevBuf ws(nws);
    if (!(s = forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, nws}, nullptr)).ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "forward failed"};
  }
  download(fo.o, *o);
  download(fo.final_state, *ht);
  if (how.zero_body) cudaMemset(static_cast<unsigned char*>(saved.p) + 256, 0, nsaved - 256);
  if (how.zero_header) cudaMemset(saved.p, 0, 256);
  in.saved = sv;
  in.saved_as_filled = how.as_filled;
  Options bopt = with_path(make_options(c), how.bwd_path);
  if (how.bwd_scale) bopt.scale = *how.bwd_scale;
  bopt.keep_chunk_local = how.bwd_chunk_local.value_or(how.chunk_local);
  if (!(s = backward_workspace_size(c.fam, in, bopt, &nws)).ok()) return s;
  DevBuf ws(nws);
  s = backward(c.fam, in, out, bopt, Workspace{ws.p, nws}, nullptr);
  if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "backward failed"};
  download_grads(out, *g);
  return s;
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
  // K = V = 128 in 16 bits: on an sm_90a build and device the saving forward's O comes from the
  // recompute's own wgmma pass (kSaved), elsewhere from the output kernel
  Case f = a;  // KDA bf16 split, varlen with an empty and a one-token sequence, h0, dht
  f.B = 1;
  f.T = 200;
  f.K = 128;
  f.V = 128;
  f.cu = {0, 1, 1, 130, 200};
  v.push_back(f);
  Case g = b;  // GDN fp16 GVA split at K = V = 128, V = 2 tiles of 64
  g.K = 128;
  g.V = 128;
  v.push_back(g);
  return v;
}

// disable_recompute: the forward's o and final state meet SPEC against float64, and the backward
// that reads the saved buffer gives bitwise the gradients of the recomputing backward.
TEST(CudaBackward, SmallSavedMatchesRecompute) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : saved_cases()) {
    SCOPED_TRACE(c.name());
    const Inputs x = make_inputs(c, /*backward=*/true);
    Grads rec, sav;
    HostTensor o, ht;
    Status s = run_cuda(c, x, &rec, /*api=*/true);
    ASSERT_TRUE(s.ok()) << s.message;
    s = run_saved(c, x, SavedRun{}, &sav, &o, &ht);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_same_bits(rec, sav, "differs from the recomputing backward");
    Case cf = c;  // the reference forward with its final state
    cf.final_state = true;
    FwdResult ref;
    ASSERT_TRUE(run_reference_forward(cf, x, &ref).ok());
    const double tol = tolerance_for(c.dt);
    EXPECT_LE(rel_err(o, ref.o), tol) << "o";
    EXPECT_LE(rel_err(ht, ref.ht), tol) << "final_state";
  }
}

// disable_recompute sizes the forward's workspace for the forward that fills `saved` alone: where
// the Hopper kernels run, at K = V = 128 in 16 bits a few KiB (O from the recompute's own pass, no copy of
// the chunk states), well under the plain forward's; a workspace one byte short is refused with
// nothing written (o, the final state and saved keep their bytes).
TEST(CudaBackward, SmallSavedForwardWorkspace) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : saved_cases()) {
    SCOPED_TRACE(c.name());
    const Inputs x = make_inputs(c, /*backward=*/true);
    std::vector<DevBuf> keep;
    keep.reserve(32);
    const BackwardInputs in = backward_views(x, true, keep);
    Options opt = make_options(c);
    std::size_t plain = 0, nws = 0, nsaved = 0;
    ASSERT_TRUE(forward_workspace_size(c.fam, in.fwd, opt, &plain).ok());
    opt.disable_recompute = true;
    ASSERT_TRUE(forward_workspace_size(c.fam, in.fwd, opt, &nws).ok());
    ASSERT_TRUE(saved_bytes(c.fam, in.fwd, opt, &nsaved).ok());
    ASSERT_GT(nws, 0u);
    ASSERT_GT(nsaved, 0u);
    // the Hopper kernels run (not the compute capability: an sm_80 build on an H100 runs the portable path)
    if (cuda::kern::recurrence_wgmma_supported(1, 128, 128) && c.K == 128 && c.V == 128 &&
        c.dt != DType::kFloat32) {
      EXPECT_LT(nws * 8, plain) << "saving forward's workspace " << nws << " bytes, plain forward's " << plain;
    }
    DevBuf saved(nsaved), ws(nws);
    cudaMemset(saved.p, 0xa5, nsaved);
    HostTensor o = x.v, ht = state_tensor(c, x.N);
    o.poison();
    ht.poison();
    ForwardOutputs fo;
    fo.o = upload(o, keep);
    fo.final_state = upload(ht, keep);
    fo.saved = make_view(saved.p, DType::kUInt8, {static_cast<int64_t>(nsaved)}, Device{DeviceType::kCUDA, 0});
    const Status s = forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, nws - 1}, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(s.code, StatusCode::kWorkspaceTooSmall) << s.message;
    HostTensor o2 = o, ht2 = ht;
    download(fo.o, o2);
    download(fo.final_state, ht2);
    EXPECT_EQ(o2.bytes, o.bytes) << "o was written";
    EXPECT_EQ(ht2.bytes, ht.bytes) << "the final state was written";
    std::vector<unsigned char> back(nsaved);
    ASSERT_EQ(cudaMemcpy(back.data(), saved.p, nsaved, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0xa5; })) << "saved was written";
  }
}

// The backward reads the saved buffer (zeroing its body changes the gradients), and refuses one
// written for another problem or another backward form, writing nothing.
TEST(CudaBackward, SmallSavedIsReadAndChecked) {
  SKIP_WITHOUT_GPU();
  const Case c = saved_cases()[0];
  const Inputs x = make_inputs(c, /*backward=*/true);
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
    expect_same_bits(poisoned, got, "was written");
  };
  SavedRun other;
  other.bwd_scale = 0.25;
  s = run_saved(c, x, other, &g, &o, &ht);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
  EXPECT_NE(s.message.find("not written by a CUDA forward of this problem"), std::string::npos) << s.message;
  untouched(g);
  SavedRun mode;
  mode.bwd_path = BwdPath::kFloat32;
  s = run_saved(c, x, mode, &g, &o, &ht);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
  EXPECT_NE(s.message.find("backward form"), std::string::npos) << s.message;
  untouched(g);
}

// BackwardInputs::saved_as_filled (the autograd path's own buffer): the header is not read back
// (no stream sync), so a zeroed header passes and the gradients are bitwise the checked run's;
// without the flag the same buffer is refused with nothing written. The size is still checked.
TEST(CudaBackward, SmallSavedAsFilledSkipsTheHeaderRead) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : {saved_cases()[0], saved_cases()[1]}) {
    const Inputs x = make_inputs(c, /*backward=*/true);
    Grads checked, trusted, refused;
    HostTensor o, ht;
    ASSERT_TRUE(run_saved(c, x, SavedRun{}, &checked, &o, &ht).ok());
    SavedRun t;
    t.zero_header = true;
    t.as_filled = true;
    Status s = run_saved(c, x, t, &trusted, &o, &ht);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_same_bits(checked, trusted, "differs with saved_as_filled");
    SavedRun r;
    r.zero_header = true;
    s = run_saved(c, x, r, &refused, &o, &ht);
    EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
    Grads poisoned = make_grads(c, x, false);
    expect_same_bits(poisoned, refused, "was written");
  }
}

// Without the delta rule on Hopper (16-bit, K = 128) the state recompute and pass 1 run in one
// kernel, their chains interleaved in each CTA (bwd_chains_apply): every gradient bitwise that of
// the two kernels run apart (Problem::separate_chains); the suite's other GLA / simple GLA tests
// check the one kernel against float64 where it applies.
TEST(CudaBackward, NoDeltaChainsInOneKernelMatchTwo) {
  SKIP_WITHOUT_GPU();
  std::vector<Case> cases;
  { Case c = no_delta_case(Family::kGLA); c.K = 128; c.V = 128; c.B = 2; c.T = 150; c.h0 = true; c.dht = true;
    cases.push_back(c); }
  { Case c = no_delta_case(Family::kGLA); c.K = 128; c.V = 128; c.T = 300; c.cu = {0, 1, 1, 130, 300}; c.h0 = true;
    c.dht = true; cases.push_back(c); }
  { Case c = no_delta_case(Family::kGLA); c.dt = DType::kFloat16; c.K = 128; c.V = 128; c.H = 1; c.HV = 2; c.T = 97;
    c.v_first = true; c.dht = true; cases.push_back(c); }
  { Case c = no_delta_case(Family::kSimpleGLA); c.K = 128; c.V = 128; c.T = 200; c.h0 = true; cases.push_back(c); }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name());
    const Inputs x = make_inputs(c, /*backward=*/true);
    Grads one, two;
    ASSERT_TRUE(run_cuda(c, x, &one).ok());
    ASSERT_TRUE(run_cuda(c, x, &two, false, BwdPath::kAuto, /*separate_chains=*/true).ok());
    expect_same_bits(one, two, "differs between one kernel and two");
  }
}

// Rules checked before any device work (these run without a GPU too): the views below point at
// host memory marked as CUDA, which no kernel ever reads because each call is refused first.
struct HostAsCuda {
  Case c;
  Inputs x = make_inputs(c, /*backward=*/true);
  Grads g = make_grads(c, x, false);
  std::vector<DevBuf> keep;
  BackwardInputs in = backward_views(x, false, keep);
  BackwardOutputs out = grad_views(g, false, keep);
  HostAsCuda() {
    for (TensorView* t : {&in.fwd.q, &in.fwd.k, &in.fwd.v, &in.fwd.g, &in.fwd.beta, &in.fwd.A_log, &in.fwd.dt_bias,
                          &in.d_o, &out.dq, &out.dk, &out.dv, &out.dg, &out.dbeta, &out.ddt_bias})
      t->device = Device{DeviceType::kCUDA, 0};
  }
  void expect_unwritten() {
    Grads fresh = make_grads(c, x, false);
    expect_same_bits(fresh, g, "was written");
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
  const Inputs x = make_inputs(c, /*backward=*/true);
  Grads g;
  Status s = run_cuda(c, x, &g);
  EXPECT_EQ(s.code, StatusCode::kNotSupported);
  // GLA / simple GLA: the head sizes of the other families; the token replay (a test oracle of the
  // delta rule) is refused rather than run on a recurrence it does not compute
  for (Family fam : {Family::kGLA, Family::kSimpleGLA}) {
    Case c2 = no_delta_case(fam);
    c2.V = 32;
    s = run_cuda(c2, make_inputs(c2, /*backward=*/true), &g);
    EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
    Case c3 = no_delta_case(fam);
    s = run_cuda(c3, make_inputs(c3, /*backward=*/true), &g, false, BwdPath::kTokenReplay);
    EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
  }
}

// ------------------------------------------------------------------ GLA and simple GLA
// The delta-rule backward with the delta rule dropped (chunk_bwd.cuh): dv = dN, no M⁻¹, dM, dX or
// dβ; every gradient against float64, with simple GLA's gate modes (g alone, g_gamma alone, both:
// dg and dg_gamma).

TEST(CudaBackward, GlaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : no_delta_cases(Family::kGLA, Pass::kBackward)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaBackward, SimpleGlaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : no_delta_cases(Family::kSimpleGLA, Pass::kBackward)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaBackward, NoDeltaSmallOddLengthsAndVarlen) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : kDtypes) {
      for (int64_t T : {1, 63, 65, 300}) {
        Case c = no_delta_case(fam);
        c.dt = dt;
        c.T = T;
        c.g_gamma = fam == Family::kSimpleGLA;
        c.h0 = true;
        c.dht = true;
        check_case(c);
      }
      Case c = no_delta_varlen_case(fam, dt);
      c.cu64 = dt == DType::kFloat32;
      c.has_g = fam == Family::kGLA || dt != DType::kFloat16;  // fp16: simple GLA on g_gamma alone
      check_case(c);
    }
}

// Every backward_precision value (no split form without the delta rule: split and auto compute in
// the 16-bit type), each within SPEC, and bitwise reproducible.
TEST(CudaBackward, NoDeltaSmallPathsAndDeterminism) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (BwdPath path : {BwdPath::kAuto, BwdPath::kSplit, BwdPath::kFast16, BwdPath::kFloat32}) {
        Case c = no_delta_case(fam);
        c.dt = dt;
        c.B = 2;
        c.T = 150;
        c.H = 1;
        c.HV = 2;
        c.V = 128;
        c.g_gamma = fam == Family::kSimpleGLA;
        c.h0 = true;
        c.dht = true;
        // fast16 is held to SPEC here (check_case: no delta-rule cancellation to loosen it for)
        check_case(c, false, path);
        expect_repeatable(c, path);
      }
}

TEST(CudaBackward, NoDeltaHeadSizes) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (int64_t K : {64, 128, 256})
      for (int64_t V : {64, 128, 256}) {
        Case c = no_delta_case(fam);
        c.K = K;
        c.V = V;
        c.T = 100;
        c.H = 1;
        c.HV = 2;
        c.g_gamma = fam == Family::kSimpleGLA;
        c.h0 = true;
        c.dht = true;
        for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
          c.dt = dt;
          check_case(c);
        }
      }
}

// The Hopper kernels' no-delta paths (K = 128: the recompute reading the v rows, pass 1 writing
// dv's rows) on the varlen layout with its empty and one-token sequences, small enough for the
// sanitizers (the other small no-delta cases have K = 64, which the Hopper kernels do not take).
TEST(CudaBackward, NoDeltaSmallHopperVarlen) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
      Case c = no_delta_varlen_case(fam, dt);
      c.K = 128;
      c.V = 128;
      check_case(c);
    }
}

TEST(CudaBackward, NoDeltaLong) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : kDtypes) {
      Case c = no_delta_case(fam);
      c.dt = dt;
      c.T = 1500;
      c.H = 2;
      c.HV = 4;
      c.K = 128;
      c.V = 128;
      c.g_gamma = fam == Family::kSimpleGLA;
      c.h0 = true;
      c.dht = true;
      check_case(c);
    }
  Case c = no_delta_case(Family::kGLA);  // the varlen layout
  c.cu = {0, 494, 1004, 1561, 1908, 2240, 2849, 3116, 4096, 4986, 5626, 6090, 6718, 7244, 7870, 8192};
  c.T = 8192;
  c.H = 1;
  c.HV = 1;
  c.h0 = true;
  c.dht = true;
  check_case(c);
  c.fam = Family::kSimpleGLA;
  c.g_gamma = true;
  check_case(c);
}

// The CUDA backward of case c on the given inputs (their gates edited by the caller): every gradient
// within SPEC of the float64 reference's.
void expect_grads_meet_reference(const Case& c, const Inputs& x) {
  Grads got, ref;
  Status s = run_cuda(c, x, &got);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_TRUE(run_reference_backward(c, x, &ref).ok());
  for (int i = 0; i < kNumGrads; ++i) {
    if (!got.at(i)->present()) continue;
    EXPECT_LE(rel_err(*got.at(i), *ref.at(i)), tolerance_for(c.dt)) << kGradNames[i];
  }
}

// g = -inf (a full forget) at some tokens: finite gradients equal to the reference's (SPEC).
TEST(CudaBackward, NoDeltaSmallNegativeInfinityGates) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      Case c = no_delta_case(fam);
      c.dt = dt;
      c.T = 150;
      c.g_gamma = fam == Family::kSimpleGLA;
      c.h0 = true;
      c.dht = true;
      SCOPED_TRACE(c.name() + " -inf gates");
      Inputs x = make_inputs(c, /*backward=*/true);
      const int64_t w = c.HV * (fam == Family::kGLA ? c.K : 1);
      for (int64_t t : {0, 5, 63, 64, 100})
        for (int64_t i = 0; i < w; ++i) x.g.set(t * w + i, -std::numeric_limits<double>::infinity());
      expect_grads_meet_reference(c, x);
    }
}

// GLA on the Hopper vector-gate pass 2 (K = V = 128, bf16) where a 16-token block's gate sum passes
// the bound of its tensor-core diagonal product (pass2_vector_wgmma.cuh, kWide): -inf (floored) gates
// at some tokens, and steep gates (-2 .. -6 a token) on a third of the channels, so that wide and
// narrow blocks meet in one warp; every gradient within SPEC of the reference.
TEST(CudaBackward, GlaSmallHopperSteepGates) {
  SKIP_WITHOUT_GPU();
  Case c = no_delta_case(Family::kGLA);
  c.dt = DType::kBFloat16;
  c.T = 150;
  c.H = 1;
  c.HV = 2;
  c.K = 128;
  c.V = 128;
  c.h0 = true;
  c.dht = true;
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(c.name() + (variant == 0 ? " -inf gates" : " steep gates"));
    Inputs x = make_inputs(c, /*backward=*/true);
    const int64_t w = c.HV * c.K;
    if (variant == 0) {
      for (int64_t t : {0, 5, 63, 64, 100, 149})
        for (int64_t i = 0; i < w; ++i) x.g.set(t * w + i, -std::numeric_limits<double>::infinity());
    } else {
      for (int64_t t = 0; t < c.T; ++t)
        for (int64_t i = 0; i < w; ++i)
          if ((i % c.K) % 3 == 0) x.g.set(t * w + i, -2.0 - 4.0 * static_cast<double>((7 * t + i) % 11) / 10.0);
    }
    expect_grads_meet_reference(c, x);
  }
  expect_repeatable(c, BwdPath::kAuto);  // the case's own gates: bitwise run to run
}

// disable_recompute for the families without the delta rule: bitwise the recomputing backward's
// gradients, o and the final state within SPEC.
TEST(CudaBackward, NoDeltaSmallSaved) {
  SKIP_WITHOUT_GPU();
  std::vector<Case> cases;
  { Case c = no_delta_case(Family::kGLA); c.B = 2; c.T = 150; c.h0 = true; c.dht = true; cases.push_back(c); }
  { Case c = no_delta_case(Family::kGLA); c.dt = DType::kFloat32; c.K = 128; c.v_first = true; c.dht = true; cases.push_back(c); }
  { Case c = no_delta_case(Family::kSimpleGLA); c.dt = DType::kFloat16; c.g_gamma = true; c.T = 200; c.H = 1; c.HV = 2;
    c.cu = {0, 70, 70, 200}; c.h0 = true; c.dht = true; cases.push_back(c); }
  // K = V = 128 in 16 bits: O in the recompute's pass on Hopper (kSaved)
  { Case c = no_delta_case(Family::kGLA); c.K = 128; c.V = 128; c.T = 200; c.cu = {0, 1, 1, 130, 200}; c.h0 = true;
    c.dht = true; cases.push_back(c); }
  { Case c = no_delta_case(Family::kSimpleGLA); c.K = 128; c.V = 128; c.B = 2; c.T = 150; c.v_first = true; c.h0 = true;
    c.dht = true; cases.push_back(c); }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name());
    const Inputs x = make_inputs(c, /*backward=*/true);
    Grads rec, sav;
    HostTensor o, ht;
    Status s = run_cuda(c, x, &rec, /*api=*/true);
    ASSERT_TRUE(s.ok()) << s.message;
    s = run_saved(c, x, SavedRun{}, &sav, &o, &ht);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_same_bits(rec, sav, "differs from the recomputing backward");
    expect_forward_meets_reference(c, x, o, ht, "saving forward");
  }
}

// The public API's plain forward: o and the final state of case c.
Status plain_forward(const Case& c, const Inputs& x, HostTensor* o, HostTensor* ht) {
  std::vector<DevBuf> keep;
  keep.reserve(16);
  const ForwardInputs in = forward_views(x, true, keep);
  *o = x.v;
  o->poison();
  *ht = state_tensor(c, x.N);
  ht->poison();
  ForwardOutputs fo;
  fo.o = upload(*o, keep);
  fo.final_state = upload(*ht, keep);
  const Options opt = make_options(c);
  std::size_t nws = 0;
  Status s = forward_workspace_size(c.fam, in, opt, &nws);
  if (!s.ok()) return s;
  DevBuf ws(nws);
  if (!(s = forward(c.fam, in, fo, opt, Workspace{ws.p, nws}, nullptr)).ok()) return s;
  if (cudaDeviceSynchronize() != cudaSuccess) return {StatusCode::kBackendError, "forward failed"};
  download(fo.o, *o);
  download(fo.final_state, *ht);
  return Status::Ok();
}

// keep_chunk_local (GLA, simple GLA): the forward keeps chunk_prep's outputs and the chunk-start
// states in `saved` and the backward reads them instead of running chunk_prep and the state
// recompute: every gradient bitwise the recomputing backward's, the workspaces smaller (the
// backward's by at least its front half); not together with h. GLA's o and final state are
// bitwise the plain forward's; simple GLA's come from the backward's Qg / KgT instead of the plain
// forward's raw rows, so they are held to the float64 reference (and to run-to-run bitwise
// equality). A buffer it wrote is refused by a backward without the option. Where it does not
// apply (another device than sm_90, K != 128, float32 inputs or compute) saved_bytes is 0 and a
// saved buffer is refused with nothing written.
TEST(CudaBackward, NoDeltaSmallKeepChunkLocal) {
  SKIP_WITHOUT_GPU();
  // path: the backward form both passes run (g_gamma under auto computes in float32: not kept;
  // Python's choice where g_gamma takes no gradient is split, the 16-bit type without the delta rule)
  struct KeepCase {
    Case c;
    BwdPath path = BwdPath::kAuto;
  };
  std::vector<KeepCase> cases;
  { Case c = no_delta_case(Family::kGLA); c.K = 128; c.V = 128; c.B = 2; c.T = 150; c.h0 = true; c.dht = true;
    cases.push_back({c}); }
  { Case c = no_delta_case(Family::kGLA); c.K = 128; c.V = 128; c.T = 200; c.cu = {0, 1, 1, 130, 200}; c.h0 = true;
    c.dht = true; cases.push_back({c}); }
  { Case c = no_delta_case(Family::kGLA); c.dt = DType::kFloat16; c.K = 128; c.V = 128; c.H = 1; c.HV = 2; c.T = 97;
    c.v_first = true; c.dht = true; cases.push_back({c}); }
  { Case c = no_delta_case(Family::kSimpleGLA); c.K = 128; c.V = 128; c.B = 2; c.T = 150; c.h0 = true; c.dht = true;
    cases.push_back({c}); }
  { Case c = no_delta_case(Family::kSimpleGLA); c.K = 128; c.V = 128; c.T = 200; c.cu = {0, 1, 1, 130, 200};
    c.H = 1; c.HV = 2; c.g_gamma = true; c.h0 = true; c.dht = true; cases.push_back({c, BwdPath::kSplit}); }
  { Case c = no_delta_case(Family::kSimpleGLA); c.dt = DType::kFloat16; c.K = 128; c.V = 128; c.T = 97;
    c.has_g = false; c.g_gamma = true; c.v_first = true; c.dht = true; cases.push_back({c, BwdPath::kSplit}); }
  { Case c = no_delta_case(Family::kSimpleGLA); c.K = 128; c.V = 128; c.T = 70; c.g_gamma = true;  // auto: float32
    cases.push_back({c}); }
  { Case c = no_delta_case(Family::kGLA); c.T = 70; c.h0 = true; cases.push_back({c}); }  // K = 64: not kept
  { Case c = no_delta_case(Family::kGLA); c.dt = DType::kFloat32; c.K = 128; c.V = 128; c.T = 70;  // float32: not kept
    cases.push_back({c}); }
  for (const KeepCase& kc : cases) {
    const Case& c = kc.c;
    SCOPED_TRACE(c.name() + " [" + path_name(kc.path) + "]");
    const Inputs x = make_inputs(c, /*backward=*/true);
    std::vector<DevBuf> keep;
    keep.reserve(32);
    const BackwardInputs in = backward_views(x, true, keep);
    const Options plain_opt = with_path(make_options(c), kc.path);
    Options opt = plain_opt;
    opt.keep_chunk_local = true;
    std::size_t nsaved = 0, nws_keep = 0, nws_plain = 0;
    ASSERT_TRUE(saved_bytes(c.fam, in.fwd, opt, &nsaved).ok());
    ASSERT_TRUE(forward_workspace_size(c.fam, in.fwd, opt, &nws_keep).ok());
    ASSERT_TRUE(forward_workspace_size(c.fam, in.fwd, plain_opt, &nws_plain).ok());
    const bool f32_gamma = c.g_gamma && kc.path == BwdPath::kAuto;
    const bool applies = cuda::kern::recurrence_wgmma_supported(1, 128, 128) && c.K == 128 &&
                         c.V == 128 && c.dt != DType::kFloat32 && !f32_gamma;
    EXPECT_EQ(nsaved > 0, applies) << nsaved << " bytes";
    if (nsaved == 0) {  // a saved buffer is refused, nothing written
      EXPECT_EQ(nws_keep, nws_plain);
      DevBuf saved(4096), ws(nws_plain);
      HostTensor o = x.v;
      o.poison();
      ForwardOutputs fo;
      fo.o = upload(o, keep);
      fo.saved = make_view(saved.p, DType::kUInt8, {4096}, Device{DeviceType::kCUDA, 0});
      const Status s = forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, nws_plain}, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
      HostTensor o2 = o;
      download(fo.o, o2);
      EXPECT_EQ(o2.bytes, o.bytes) << "o was written";
      continue;
    }
    EXPECT_LT(nws_keep, nws_plain);
    {  // the backward's workspace: no front half at all (the states are the saved buffer's too)
      BackwardInputs bin = in;
      DevBuf one(256);
      bin.saved = make_view(one.p, DType::kUInt8, {256}, Device{DeviceType::kCUDA, 0});
      std::size_t bws_keep = 0, bws_plain = 0;
      ASSERT_TRUE(backward_workspace_size(c.fam, bin, opt, &bws_keep).ok());
      ASSERT_TRUE(backward_workspace_size(c.fam, in, plain_opt, &bws_plain).ok());
      // without GVA (no dq, dk partials, which in the plain plan take the dead front half's place)
      const int64_t nb = (c.cu.empty() && c.H == c.HV ? c.B * ((c.T + 63) / 64) : 0) * c.HV;
      if (nb > 0) {  // at least the states' bytes fewer (and Qg, KgT, Aqk, gexp: more than draw's own rows)
        const std::size_t states = static_cast<std::size_t>(nb) * 128 * 128 * (c.v_first ? 4 : 2);
        EXPECT_LE(bws_keep + states, bws_plain) << bws_keep << " vs " << bws_plain;
      } else {
        EXPECT_LT(bws_keep, bws_plain);
      }
    }
    {  // not with h (return_intermediate_states): the states go where h would; refused, nothing written
      Case ci = c;
      ci.inter = true;
      FwdResult r = forward_outputs(ci, x, c.dt, DType::kFloat32);  // o and h poisoned
      DevBuf saved(nsaved), ws(nws_keep);
      cudaMemset(saved.p, 0xa5, nsaved);
      ForwardOutputs fo;
      fo.o = upload(r.o, keep);
      fo.h = upload(r.h, keep);
      fo.saved = make_view(saved.p, DType::kUInt8, {static_cast<int64_t>(nsaved)}, Device{DeviceType::kCUDA, 0});
      const Status s = forward(c.fam, in.fwd, fo, opt, Workspace{ws.p, nws_keep}, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
      EXPECT_NE(s.message.find("return_intermediate_states"), std::string::npos) << s.message;
      HostTensor o2 = r.o, h2 = r.h;
      download(fo.o, o2);
      download(fo.h, h2);
      EXPECT_EQ(o2.bytes, r.o.bytes) << "o was written";
      EXPECT_EQ(h2.bytes, r.h.bytes) << "h was written";
      std::vector<unsigned char> back(nsaved);
      ASSERT_EQ(cudaMemcpy(back.data(), saved.p, nsaved, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](unsigned char b) { return b == 0xa5; })) << "saved was written";
    }
    HostTensor o_plain, ht_plain, o, ht;
    ASSERT_TRUE(plain_forward(c, x, &o_plain, &ht_plain).ok());
    Grads rec, kept;
    Status s = run_cuda(c, x, &rec, /*api=*/true, kc.path);
    ASSERT_TRUE(s.ok()) << s.message;
    SavedRun how;
    how.chunk_local = true;
    how.fwd_path = how.bwd_path = kc.path;
    s = run_saved(c, x, how, &kept, &o, &ht);
    ASSERT_TRUE(s.ok()) << s.message;
    if (c.fam == Family::kGLA) {
      EXPECT_EQ(o.bytes, o_plain.bytes) << "o differs from the plain forward's";
      EXPECT_EQ(ht.bytes, ht_plain.bytes) << "the final state differs from the plain forward's";
    } else {  // simple GLA: from Qg / KgT, not the raw rows: against float64, as the plain forward is
      expect_forward_meets_reference(c, x, o, ht, "keeping forward");
      expect_forward_meets_reference(c, x, o_plain, ht_plain, "plain forward");
      EXPECT_NE(o.bytes, o_plain.bytes) << "o is the raw-row forward's: was the chunk-local form run?";
    }
    expect_same_bits(rec, kept, "differs from the recomputing backward");
    {  // as Python's autograd path calls it: saved_as_filled (the header is not read back)
      SavedRun filled = how;
      filled.as_filled = true;
      Grads g2;
      HostTensor o2, ht2;
      ASSERT_TRUE(run_saved(c, x, filled, &g2, &o2, &ht2).ok());
      expect_same_bits(rec, g2, "differs with saved_as_filled");
      EXPECT_EQ(o2.bytes, o.bytes) << "o differs between runs";
      EXPECT_EQ(ht2.bytes, ht.bytes) << "the final state differs between runs";
    }
    // a backward without keep_chunk_local refuses the buffer, writing nothing
    Grads other;
    how.bwd_chunk_local = false;
    s = run_saved(c, x, how, &other, &o, &ht);
    EXPECT_EQ(s.code, StatusCode::kInvalidArgument) << s.message;
    EXPECT_NE(s.message.find("keep_chunk_local"), std::string::npos) << s.message;
    const Grads fresh = make_grads(c, x, false);
    for (int i = 0; i < kNumGrads; ++i) {
      if (!other.at(i)->present()) continue;
      EXPECT_EQ(other.at(i)->bytes, const_cast<Grads&>(fresh).at(i)->bytes) << kGradNames[i] << " was written";
    }
  }
  // not together with disable_recompute
  const Case c = cases[0].c;
  const Inputs x = make_inputs(c, /*backward=*/true);
  std::vector<DevBuf> keep;
  const BackwardInputs in = backward_views(x, true, keep);
  Options opt = make_options(c);
  opt.keep_chunk_local = true;
  opt.disable_recompute = true;
  std::size_t n = 0;
  const Status s = forward_workspace_size(c.fam, in.fwd, opt, &n);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument);
  EXPECT_NE(s.message.find("exclusive"), std::string::npos) << s.message;
}

// The CUDA backward's workspace query for a case's problem (host tensors: sizes only, no GPU);
// has_saved: as if a forward had filled a saved buffer (its front half the caller's).
std::size_t backward_workspace_of(const Case& cs, bool has_saved) {
  const Inputs x = make_inputs(cs, /*backward=*/true);
  std::vector<DevBuf> keep;
  Grads g = make_grads(cs, x, false);
  const BackwardInputs in = backward_views(x, false, keep);
  const BackwardOutputs out = grad_views(g, false, keep);
  detail::Problem p;
  EXPECT_TRUE(detail::resolve_backward(cs.fam, in, out, make_options(cs), &p).ok());
  p.has_saved = has_saved;
  return cuda::backward_kda_gdn_workspace_bytes(p);
}

// The backward's workspace holds only the partials a finish kernel reads: without the l2norm
// backward and the GVA sum pass 2 writes dq and dk itself (no pq, pk), with the identity gate
// transform dg itself (no pg); pq, pk are bfloat16 for bfloat16 inputs, in the 16-bit and the
// float32 form alike, float32 for the others (PartialQK). Seen in the sizes where the front half
// is the caller's (a saved buffer: otherwise the partials take the dead front region's place,
// which the bfloat16 ones fit). GLA at K = V = 64 in bf16 and fp16, KDA with A_log (float32
// compute under auto) in bf16 and float32. No GPU needed (host tensors: sizes only).
TEST(CudaBackward, WorkspaceHoldsOnlyThePartialsRead) {
  struct Form {
    Family fam;
    DType dt;
    bool f32_compute;
  };
  for (const Form& form : {Form{Family::kGLA, DType::kBFloat16, false}, Form{Family::kGLA, DType::kFloat16, false},
                           Form{Family::kKDA, DType::kBFloat16, true}, Form{Family::kKDA, DType::kFloat32, true}}) {
    Case c = form.fam == Family::kGLA ? no_delta_case(Family::kGLA) : Case{};
    c.dt = form.dt;
    c.B = 2;
    c.T = 150;
    c.h0 = true;
    c.dht = true;
    if (form.f32_compute) c.gate = Gate::kSoftplus;  // A_log: auto computes in float32
    Case l2 = c;
    l2.l2norm = true;
    c.l2norm = false;
    // has_saved: the front half (and its region the partials would reuse) is the caller's
    const std::size_t ws_direct = backward_workspace_of(c, true), ws_l2 = backward_workspace_of(l2, true);
    const bool b16 = form.dt == DType::kBFloat16;
    const std::size_t one = static_cast<std::size_t>(c.B * c.T * c.HV * c.K) * (b16 ? 2 : 4);  // pq or pk
    // (KDA has G = 1: without l2norm its dq, dk are direct too)
    EXPECT_EQ(ws_l2 - ws_direct, 2 * ((one + 255) / 256 * 256)) << c.name();
  }
}

// The no-delta families' workspace per 64-token block and value head, bf16, K = V = 128, no
// partials (no l2norm, G = 1, g given): Qg, KgT, Aqk, gexp, h, dh; where the Hopper kernels run
// (the state pass reading the v rows, pass 1 writing dv: ChunkPlan::no_delta_rows) h in bf16 and
// no U / dY or dN; elsewhere h in float32 plus dY (U) and dN. Seen as the difference between two
// lengths (B = 1, 32 and 64 chunks: every region a multiple of the 256-byte alignment), so the
// maps' fixed part cancels. Runs without a GPU (sizes only): there it checks the second layout.
TEST(CudaBackward, NoDeltaWorkspaceHoldsOnlyWhatIsRead) {
  for (Family fam : {Family::kGLA, Family::kSimpleGLA}) {
    Case c = no_delta_case(fam);
    c.K = c.V = 128;
    auto ws = [&](int64_t T) {
      Case cs = c;
      cs.T = T;
      return static_cast<int64_t>(backward_workspace_of(cs, false));
    };
    const int64_t n1 = 32, n2 = 64, blocks = (n2 - n1) * c.HV;
    auto al = [](int64_t b) { return (b + 255) / 256 * 256; };
    const int64_t maps = al(n2 * int64_t(sizeof(cuda::kern::ChunkInfo))) - al(n1 * int64_t(sizeof(cuda::kern::ChunkInfo)));
    const bool hopper = cuda::kern::recurrence_wgmma_supported(1, 128, 128);
    const int64_t per_block = 2 * 64 * 128 * 2 + 64 * 64 * 2 + 128 * 4 + 128 * 128 * 2 +  // Qg, KgT, Aqk, gexp, dh
                              (hopper ? 128 * 128 * 2 : 128 * 128 * 4 + 2 * 64 * 128 * 2);  // h (+ dY, dN)
    // g given with the identity transform: dg is pass 2's own (no pg); pb, one float a row, lies in
    // the front region (dead after pass 1), which it does not outgrow
    EXPECT_EQ(ws(64 * n2) - ws(64 * n1), maps + blocks * per_block) << c.name() << " hopper " << hopper;
  }
}

// The same two GLA problems run (pass 2 writing dq, dk itself, and through bfloat16 partials and
// finish_qk), both within SPEC against float64.
TEST(CudaBackward, SmallPartialsReadOrNot) {
  SKIP_WITHOUT_GPU();
  Case c = no_delta_case(Family::kGLA);
  c.B = 2;
  c.T = 150;
  c.h0 = true;
  c.dht = true;
  Case l2 = c;
  l2.l2norm = true;
  check_case(c, /*api=*/true);
  check_case(l2, /*api=*/true);
}

TEST(CudaBackward, NoDeltaSmallPublicApi) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA}) {
    Case c = no_delta_case(fam);
    c.T = 70;
    c.g_gamma = fam == Family::kSimpleGLA;
    c.h0 = true;
    c.dht = true;
    check_case(c, /*api=*/true);
  }
}

}  // namespace
}  // namespace linattn::test
