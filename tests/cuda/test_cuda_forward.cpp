// GPU tests of the CUDA forward (KDA, GDN, GLA, simple GLA) against the float64 reference
// (linattn::reference_forward).
// Skips itself when no GPU is present. Tests whose names contain "Small" use small shapes, for
// compute-sanitizer (memcheck, racecheck). Cases, inputs and reference runs: cuda_test_util.hpp.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/config/heuristics.hpp"
#include "cuda/config/limits.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/host/forward_stages.hpp"
#include "cuda/host/stage_timer.hpp"

namespace linattn::test {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

// Runs the CUDA forward; outputs copied back to host tensors. graph: the call is captured into a
// CUDA graph (global capture mode, as frameworks capture) on a fresh stream and the graph launched.
// timer: the backend's forward called directly with its stages marked (the stage bench's form).
Status run_cuda(const Case& c, const Inputs& x, FwdResult* r, cudaStream_t stream = nullptr, bool graph = false,
                cuda::StageTimer* timer = nullptr) {
  std::vector<DevBuf> keep;
  keep.reserve(32);
  ForwardInputs in = forward_views(x, true, keep);
  const Options opt = make_options(c);
  *r = forward_outputs(c, x, c.dt, DType::kFloat32);
  ForwardOutputs out;
  out.o = upload(r->o, keep);
  out.final_state = upload(r->ht, keep);
  out.h = upload(r->h, keep);
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
  } else if (timer) {
    detail::Problem p;
    s = detail::resolve_forward(c.fam, in, out, opt, &p);
    if (!s.ok()) return s;
    s = cuda::forward(p, in, out, Workspace{ws.p, ws_bytes}, stream, timer);
    if (!s.ok()) return s;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
  } else {
    s = forward(c.fam, in, out, opt, Workspace{ws.p, ws_bytes}, stream);
    if (!s.ok()) return s;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return {StatusCode::kBackendError, "sync failed"};
  }
  download(out.o, r->o);
  download(out.final_state, r->ht);
  download(out.h, r->h);
  return Status::Ok();
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
  const Inputs x = make_inputs(c, /*backward=*/false);
  FwdResult got, ref;
  Status s = run_cuda(c, x, &got);
  ASSERT_TRUE(s.ok()) << s.message;
  s = run_reference_forward(c, x, &ref);
  ASSERT_TRUE(s.ok()) << s.message;
  const double tol = tolerance_for(c.dt);
  const int di = dtype_index(c.dt);
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

// Two calls on the same inputs give bitwise the same o, final state and h.
void expect_repeatable(const Case& c) {
  const Inputs x = make_inputs(c, /*backward=*/false);
  FwdResult a, b;
  ASSERT_TRUE(run_cuda(c, x, &a).ok()) << c.name();
  ASSERT_TRUE(run_cuda(c, x, &b).ok()) << c.name();
  EXPECT_EQ(a.o.bytes, b.o.bytes) << c.name();
  EXPECT_EQ(a.ht.bytes, b.ht.bytes) << c.name();
  EXPECT_EQ(a.h.bytes, b.h.bytes) << c.name();
}

// ------------------------------------------------------------------ option coverage (small)

TEST(CudaForward, KdaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kKDA, Pass::kForward)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaForward, GdnSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : option_cases(Family::kGDN, Pass::kForward)) {
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
      c.gate = fam == Family::kKDA ? Gate::kLowerBound : Gate::kSoftplus;
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
    expect_repeatable(c);
  }
}

// The forward with its stages marked, beside the plain call on the same inputs: bitwise the same
// o and final state, every stage timed (>= 0); returns the stage names, comma-separated.
std::string marked_stage_names(const Case& c) {
  const Inputs x = make_inputs(c, /*backward=*/false);
  FwdResult a, b;
  cuda::StageTimer timer;
  EXPECT_TRUE(run_cuda(c, x, &a).ok());
  EXPECT_TRUE(run_cuda(c, x, &b, nullptr, false, &timer).ok());
  EXPECT_EQ(a.o.bytes, b.o.bytes);
  EXPECT_EQ(a.ht.bytes, b.ht.bytes);
  std::string names;
  for (const auto& [name, ms] : timer.stages()) {
    names += (names.empty() ? "" : ",") + name;
    EXPECT_GE(ms, 0.f) << name;
  }
  return names;
}

// The forward with its stages marked (linattn_cuda_stage_bench forward --stages) is the product's
// forward: bitwise the same outputs, and the stages host/forward_stages.hpp names, each timed:
// the sequence split's where config::seq_split_chunks picks it (one long chain on Hopper), the
// whole-sequence pass's otherwise.
TEST(CudaForward, SmallStagesMarked) {
  SKIP_WITHOUT_GPU();
  const bool hopper = cuda::kern::recurrence_wgmma_supported(1, 128, 128);
  for (Family fam : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA})
    for (bool few_chains : {false, true}) {
      const bool delta = fam == Family::kKDA || fam == Family::kGDN;
      Case c = delta ? Case{} : no_delta_case(fam);
      c.fam = fam;
      if (few_chains) {  // one long chain
        c.B = 1;
        c.H = c.HV = 1;
        c.K = c.V = 128;
        c.T = 4100;
      } else {
        c.cu = {0, 100, 300, 301, 520};
        c.T = 520;
      }
      c.final_state = true;
      SCOPED_TRACE(c.name());
      const std::string names = marked_stage_names(c);
      const bool split = few_chains && hopper &&
                         cuda::config::seq_split_chunks(1, 128, static_cast<int>(c.V), static_cast<int>(c.HV), delta,
                                                        c.B, (c.T + 63) / 64, cuda::config::sm_count(0)) > 0;
      // simple GLA on Hopper at K = 128 in 16 bits without the split: one kernel, its chunk-local
      // work in the pass (sm90/fused_scalar_forward_wgmma.cuh)
      const bool one_kernel = hopper && fam == Family::kSimpleGLA && c.K == 128 && c.dt != DType::kFloat32 && !split;
      // (the one kernel of at most 128 sequences takes its sequence map by value: no map kernel)
      EXPECT_EQ(names, split ? "maps,prep,segments,combine,state" : one_kernel ? "state" : "maps,prep,state");
    }
}

// The one-kernel simple GLA forward (sm90/fused_scalar_forward_wgmma.cuh: two producer
// warpgroups on alternate chunks, four stages) against float64, where the split does not apply:
// both 16-bit types; g alone, g_gamma alone, both; GVA; V 64, 128 and 256 (its V tiles); the l2
// norm (K Kᵀ in the producers' second batch); state V-first; sequences of 0, 1, 63, 64, 65 tokens
// and of 11 and 20 chunks (every stage's barriers through several phases, both producers ending
// on either parity); a second layout of 4 and 5 chunks and a last sequence of one whole chunk
// (its output tile ends at the token axis's end); 130 short sequences (more than the by-value
// sequence map holds: the map kernels run first). Then: the stage names (no prep on Hopper, no maps
// with the by-value map), the same bits with the timer and again (deterministic). Small, for the
// sanitizers.
TEST(CudaForward, SmallSimpleGlaOneKernel) {
  SKIP_WITHOUT_GPU();
  const bool hopper = cuda::kern::recurrence_wgmma_supported(1, 128, 128);
  struct Variant {
    DType dt;
    bool has_g, g_gamma, l2norm, h0, v_first;
    int64_t H, HV, V;
    double scale = 0;  // 0: the default; negative: the producer's Aqk folds |scale| into its exponents
    Gate gate = Gate::kLogsigmoid;
    // sequence boundaries; empty: the layout below
    std::vector<int64_t> cu = {};
  };
  // the second layout: 4 and 5 chunks (the first stage refills: chunk 4 arrives while chunk 1 runs)
  // and a whole chunk that ends the token axis (an output tile stored up to the tensor's last row)
  const std::vector<int64_t> whole_chunks = {0, 256, 576, 640};
  // 130 sequences of 1..80 tokens: more than a by-value sequence map holds (kSeqBatchSmall), so
  // the map kernels run first and the kernel reads the workspace map (one head, one V tile: 130
  // CTAs, small for the sanitizers)
  std::vector<int64_t> many = {0};
  std::mt19937_64 gen(11);
  for (int i = 0; i < 130; ++i) many.push_back(many.back() + 1 + static_cast<int64_t>(gen() % 80));
  const Variant variants[] = {
      {DType::kBFloat16, true, true, false, true, false, 1, 2, 128},
      {DType::kBFloat16, true, false, false, false, false, 2, 2, 64},
      {DType::kBFloat16, false, true, true, true, true, 1, 4, 128},
      {DType::kFloat16, true, true, false, true, false, 2, 4, 256},
      {DType::kFloat16, false, true, false, false, false, 1, 1, 128},
      {DType::kBFloat16, true, false, true, false, false, 1, 2, 128, -0.3},
      {DType::kBFloat16, true, true, false, true, false, 1, 2, 128, 0, Gate::kVeryNegative},
      {DType::kBFloat16, true, true, false, true, false, 1, 2, 128, 0, Gate::kLogsigmoid, whole_chunks},
      {DType::kFloat16, false, true, false, false, true, 2, 2, 256, 0, Gate::kLogsigmoid, whole_chunks},
      {DType::kBFloat16, true, true, false, true, false, 1, 1, 64, 0, Gate::kLogsigmoid, many},
  };
  for (const Variant& v : variants) {
    Case c = no_delta_case(Family::kSimpleGLA);
    c.dt = v.dt;
    c.has_g = v.has_g;
    c.g_gamma = v.g_gamma;
    c.l2norm = v.l2norm;
    c.h0 = v.h0;
    c.v_first = v.v_first;
    c.H = v.H;
    c.HV = v.HV;
    c.K = 128;
    c.V = v.V;
    c.scale = v.scale;
    c.gate = v.gate;
    c.cu = {0, 100, 300, 300, 301, 364, 428, 493, 1197, 2477, 2540};  // 100, 200, 0, 1, 63, 64, 65, 704, 1280, 63
    if (!v.cu.empty()) c.cu = v.cu;
    c.T = c.cu.back();
    c.final_state = true;
    SCOPED_TRACE(c.name());
    check_case(c);
    const std::string names = marked_stage_names(c);
    int64_t longest = 0;  // chunks
    for (size_t n = 0; n + 1 < c.cu.size(); ++n) longest = std::max(longest, (c.cu[n + 1] - c.cu[n] + 63) / 64);
    const bool split = hopper && cuda::config::seq_split_chunks(1, 128, static_cast<int>(c.V), static_cast<int>(c.HV), false,
                                                                static_cast<int64_t>(c.cu.size()) - 1, longest,
                                                                cuda::config::sm_count(0)) > 0;
    ASSERT_FALSE(split) << "the case meant for the one-kernel forward takes the split";
    const bool inline_map = c.cu.size() - 1 <= static_cast<size_t>(cuda::kern::kSeqBatchSmall);
    EXPECT_EQ(names, !hopper ? "maps,prep,state" : inline_map ? "state" : "maps,state");
    expect_repeatable(c);
  }
}

// One sequence's inputs never reach another's outputs (cuda_test_util.hpp's isolation_case): the
// middle sequence of three gets q, k, v = inf and a NaN gate / β; the first (whose tail chunk
// overlaps it) and the last keep bitwise the clean run's o rows and final states. Every family,
// 16-bit, K = V = 128 (the Hopper paths: simple GLA's one kernel, the others' chunk_prep and state
// pass), and float32.
TEST(CudaForward, SmallNeighbourSequencesIsolated) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA})
    for (DType dt : {DType::kBFloat16, DType::kFloat32}) {
      Case c = isolation_case(fam, dt);
      c.final_state = true;
      SCOPED_TRACE(c.name());
      const Inputs x = make_inputs(c, /*backward=*/false);
      FwdResult a, b;
      ASSERT_TRUE(run_cuda(c, x, &a).ok());
      ASSERT_TRUE(run_cuda(c, poison_middle_sequence(c, x), &b).ok());
      expect_tokens_unchanged(a.o, b.o, c, "o");
      expect_neighbour_states_unchanged(a.ht, b.ht, "final state");
    }
}

// Graph capture: no host sync or allocation inside the call (the chunk maps come from the host
// copy as kernel parameters), and the captured graph gives the eager result bit for bit.
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
      const Inputs x = make_inputs(c, /*backward=*/false);
      FwdResult a, b;
      ASSERT_TRUE(run_cuda(c, x, &a).ok());
      const Status s = run_cuda(c, x, &b, nullptr, /*graph=*/true);
      ASSERT_TRUE(s.ok()) << s.message;
      EXPECT_EQ(a.o.bytes, b.o.bytes) << family_name(fam) << " " << dtype_name(dt);
      EXPECT_EQ(a.ht.bytes, b.ht.bytes) << family_name(fam) << " " << dtype_name(dt);
    }
}

// The host copy of cu_seqlens defines the sequences; the forward does not read the device copy. One
// that disagrees (here: lengths that would need more chunks than the host's, and a decreasing
// entry) gives bitwise the consistent call's result (memcheck runs the Small tests).
TEST(CudaForward, SmallVarlenMismatchedCopies) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN}) {
    Case c;
    c.fam = fam;
    c.cu = {0, 100, 200};
    c.T = 200;
    c.final_state = true;
    const Inputs x = make_inputs(c, /*backward=*/false);
    FwdResult want;
    ASSERT_TRUE(run_cuda(c, x, &want).ok());
    for (const std::vector<int32_t>& dev_cu : {std::vector<int32_t>{0, 130, 260}, std::vector<int32_t>{0, 150, 20}}) {
      std::vector<DevBuf> keep;
      ForwardInputs in = forward_views(x, true, keep);
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
      download(out.o, o);
      download(out.final_state, ht);
      EXPECT_EQ(o.bytes, want.o.bytes) << family_name(fam) << " device cu_seqlens {0, " << dev_cu[1] << ", " << dev_cu[2] << "}";
      EXPECT_EQ(ht.bytes, want.ht.bytes) << family_name(fam) << " device cu_seqlens {0, " << dev_cu[1] << ", " << dev_cu[2] << "}";
    }
  }
}

TEST(CudaForward, SmallUnsupported) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.K = 96;
  const Inputs x = make_inputs(c, /*backward=*/false);
  FwdResult r;
  Status s = run_cuda(c, x, &r);
  EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
  Case c2;
  c2.V = 32;
  s = run_cuda(c2, make_inputs(c2, /*backward=*/false), &r);
  EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
  // GLA and simple GLA run on CUDA with the delta-rule families' head sizes: K = 96 is refused
  for (Family fam : {Family::kGLA, Family::kSimpleGLA}) {
    Case c3 = no_delta_case(fam);
    c3.K = 96;
    s = run_cuda(c3, make_inputs(c3, /*backward=*/false), &r);
    EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
  }
}

// ------------------------------------------------------------------ GLA and simple GLA
// The delta-rule forward with the delta rule dropped (chunk_fwd.hpp): every option these families
// take (no beta, no in-kernel gate), simple GLA's gate modes (g alone, g_gamma alone, both).

TEST(CudaForward, GlaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : no_delta_cases(Family::kGLA, Pass::kForward)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaForward, SimpleGlaSmallOptions) {
  SKIP_WITHOUT_GPU();
  for (DType dt : kDtypes)
    for (Case c : no_delta_cases(Family::kSimpleGLA, Pass::kForward)) {
      c.dt = dt;
      check_case(c);
    }
}

TEST(CudaForward, NoDeltaSmallOddLengthsAndVarlen) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : kDtypes) {
      for (int64_t T : {1, 63, 65, 200}) {
        Case c = no_delta_case(fam);
        c.dt = dt;
        c.T = T;
        c.g_gamma = fam == Family::kSimpleGLA;
        c.h0 = true;
        c.final_state = true;
        c.inter = true;
        check_case(c);
      }
      Case c = no_delta_case(fam);
      c.dt = dt;
      c.cu = {0, 1, 1, 70, 133, 197};  // includes an empty sequence
      c.cu64 = dt == DType::kFloat32;
      c.T = 197;
      c.g_gamma = fam == Family::kSimpleGLA;
      c.has_g = fam == Family::kGLA || dt != DType::kFloat16;  // fp16: simple GLA on g_gamma alone
      c.H = 1;
      c.HV = 2;
      c.h0 = true;
      c.final_state = true;
      c.inter = true;
      check_case(c);
    }
}

TEST(CudaForward, NoDeltaHeadSizes) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : kDtypes)
      for (int64_t K : {64, 128, 256})
        for (int64_t V : {64, 128, 256}) {
          if (dt != DType::kBFloat16 && K != V && !(K == 256 && V == 64) && !(K == 64 && V == 256)) continue;
          Case c = no_delta_case(fam);
          c.dt = dt;
          c.K = K;
          c.V = V;
          c.T = 200;
          c.H = 1;
          c.HV = 2;
          c.g_gamma = fam == Family::kSimpleGLA;
          c.h0 = true;
          c.final_state = true;
          c.inter = true;
          c.v_first = (K == 256);
          check_case(c);
        }
}

// Long sequences and many chunks per state pass (B = 1 with few heads picks 32-column V tiles,
// B = 4 64-column ones), bitwise reproducible.
TEST(CudaForward, NoDeltaLongAndDeterministic) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kGLA, Family::kSimpleGLA})
    for (DType dt : kDtypes)
      for (int64_t B : {1, 4}) {
        Case c = no_delta_case(fam);
        c.dt = dt;
        c.B = B;
        c.T = 1500;
        c.H = 2;
        c.HV = 4;
        c.K = 128;
        c.V = 128;
        c.g_gamma = fam == Family::kSimpleGLA;
        c.final_state = true;
        check_case(c);
        if (dt == DType::kBFloat16) expect_repeatable(c);
      }
}

// ------------------------------------------------------------------ the Hopper (wgmma) pass
// The sequential pass on wgmma (src/cuda/sm90/) runs at K = 128, a V tile of 64, 16-bit inputs and
// no `h` output (on an sm_90a build and a CC 9.0 GPU; elsewhere these cases take the mma.sync pass
// and still check it): every option of every family there, with V = 128 and 256, odd lengths, a
// varlen layout with empty sequences and a partial last chunk, and bitwise repeatability.
TEST(CudaForward, SmallHopperPassEveryOption) {
  SKIP_WITHOUT_GPU();
  for (Family fam : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA}) {
    for (DType dt : {DType::kBFloat16, DType::kFloat16})
      for (Case c : hopper_cases(fam, Pass::kForward)) {
        c.dt = dt;
        c.inter = false;  // h: the mma.sync pass
        check_case(c);
      }
    Case c = hopper_cases(fam, Pass::kForward).front();
    c.T = 1000;
    c.h0 = true;
    c.final_state = true;
    expect_repeatable(c);
  }
}

// The sequence-split pass (docs/sequence_split.md): few chains and long sequences, where
// config::seq_split_chunks cuts each sequence into segments (asserted on a GPU that runs the wgmma
// pass), for each family: an initial and a final state, GVA, V = 256 with state_v_first, the
// in-kernel and the very negative gates, a varlen layout with empty and short sequences beside
// long ones, fp16 and bf16, and bitwise repeatability. One test a family, so that racecheck can
// take one at a time.
void check_sequence_split(Family fam) {
  const bool hopper = cuda::kern::recurrence_wgmma_supported(1, 128, 128);
  const bool delta = fam == Family::kKDA || fam == Family::kGDN;
  Case base = delta ? option_cases(fam, Pass::kForward).front() : no_delta_cases(fam, Pass::kForward).front();
  base.B = 1;
  base.T = 64 * 41 + 17;
  base.H = 1;
  base.HV = 2;  // GVA
  base.K = 128;
  base.V = 128;
  base.h0 = true;
  base.final_state = true;
  base.inter = false;  // h: the mma.sync pass
  base.g_gamma = fam == Family::kSimpleGLA;
  std::vector<Case> cases = {base};
  { Case c = base; c.V = 256; c.HV = 1; c.v_first = true; cases.push_back(c); }
  { Case c = base; c.gate = Gate::kVeryNegative; cases.push_back(c); }
  if (delta) { Case c = base; c.gate = Gate::kSoftplus; c.beta_sigmoid = true; cases.push_back(c); }
  if (fam == Family::kKDA) { Case c = base; c.gate = Gate::kLowerBound; c.safe_gate = true; cases.push_back(c); }
  {  // varlen: the 30- and 36-chunk sequences split, the rest whole (empty ones included)
    Case c = base;
    c.cu = {0, 0, 5, 1925, 1925, 2625, 2625 + 64 * 36, 2625 + 64 * 36 + 63};
    c.T = c.cu.back();
    cases.push_back(c);
  }
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (Case c : cases) {
      c.dt = dt;
      if (hopper && !c.varlen())
        EXPECT_GT(cuda::config::seq_split_chunks(1, 128, static_cast<int>(c.V), static_cast<int>(c.HV), delta, c.B,
                                                 (c.T + 63) / 64, cuda::config::sm_count(0)),
                  0)
            << c.name();
      check_case(c);
    }
  expect_repeatable(base);
}

// The state map (ForwardOutputs::state_map_o / state_map_final, context parallelism): computed in
// the forward's own pass on Hopper; checked against the float64 reference of its definition, the
// call from the identity state with zero values (width K), and o / final_state against the
// ordinary reference, on a few-chain case (where the pass would otherwise split the sequence),
// GVA, varlen with empty sequences, the in-kernel and steep gates, bf16 and fp16 (GDN's raw rows);
// repeatable bitwise. Elsewhere (another GPU, float32, K != 128) the call is refused with nothing
// written.
void check_state_map(Family fam) {
  Case base = option_cases(fam, Pass::kForward).front();
  base.B = 1;
  base.T = 64 * 21 + 17;
  base.H = 1;
  base.HV = 2;
  base.K = 128;
  base.V = 128;
  base.h0 = true;
  base.final_state = true;
  base.inter = false;
  std::vector<Case> cases = {base};
  { Case c = base; c.gate = Gate::kVeryNegative; cases.push_back(c); }
  { Case c = base; c.gate = Gate::kSoftplus; c.beta_sigmoid = true; c.v_first = true; cases.push_back(c); }
  { Case c = base; c.cu = {0, 0, 5, 700, 700, 1361}; c.T = c.cu.back(); cases.push_back(c); }
  const bool hopper = cuda::kern::recurrence_wgmma_supported(1, 128, 128);
  for (DType dt : {DType::kBFloat16, DType::kFloat16})
    for (Case c : cases) {
      c.dt = dt;
      SCOPED_TRACE(c.name());
      const Inputs x = make_inputs(c, /*backward=*/false);
      std::vector<DevBuf> keep;
      keep.reserve(32);
      ForwardInputs in = forward_views(x, true, keep);
      const Options opt = make_options(c);
      FwdResult got = forward_outputs(c, x, c.dt, DType::kFloat32);
      HostTensor qmap(c.dt, {c.B, c.T, c.HV, c.K}), mmap(DType::kFloat32, {x.N, c.HV, c.K, c.K});
      qmap.poison();
      mmap.poison();
      ForwardOutputs out;
      out.o = upload(got.o, keep);
      out.final_state = upload(got.ht, keep);
      out.state_map_o = upload(qmap, keep);
      out.state_map_final = upload(mmap, keep);
      std::size_t ws_bytes = 0;
      ASSERT_TRUE(forward_workspace_size(c.fam, in, opt, &ws_bytes).ok());
      DevBuf ws(ws_bytes);
      const Status s = forward(c.fam, in, out, opt, Workspace{ws.p, ws_bytes}, nullptr);
      if (!hopper) {
        EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
        HostTensor o_back = got.o;
        download(out.o, o_back);
        EXPECT_EQ(o_back.bytes, got.o.bytes) << "a refused call wrote o";
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.message;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      HostTensor qmap2 = qmap, mmap2 = mmap;
      download(out.o, got.o);
      download(out.final_state, got.ht);
      download(out.state_map_o, qmap);
      download(out.state_map_final, mmap);
      FwdResult ref;
      ASSERT_TRUE(run_reference_forward(c, x, &ref).ok());
      const double tol = tolerance_for(c.dt);
      EXPECT_LE(rel_err(got.o, ref.o), tol) << "o";
      EXPECT_LE(rel_err(got.ht, ref.ht), tol) << "final_state";
      // the definition: outputs and final states of the call from the identity with zero values
      Case cm = c;
      cm.V = c.K;
      cm.h0 = true;
      cm.final_state = true;
      Inputs xm = x;
      xm.v = HostTensor(c.dt, {c.B, c.T, c.HV, c.K});
      xm.h0 = state_tensor(cm, x.N);
      for (int64_t n = 0; n < x.N; ++n)
        for (int64_t h = 0; h < c.HV; ++h)
          for (int64_t i = 0; i < c.K; ++i) xm.h0.set(((n * c.HV + h) * c.K + i) * c.K + i, 1.0);
      FwdResult mref;
      ASSERT_TRUE(run_reference_forward(cm, xm, &mref).ok());
      // The map's error relative to its scale at the identity (S_t = M_t S_0 + C_t: an error in M
      // moves S_t by (dM) S_0): the identity for M, scale q for Q~. Long decays take both far below
      // it, where fp16's operands of the pass underflow (M ~ 1e-30 after 1361 tokens of the
      // logsigmoid gate): an absolute error there is no error of S_t.
      const double sc = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.K));
      double qfloor = 0;
      for (int64_t r = 0; r < c.B * c.T * c.H; ++r) {
        double n2 = 0;
        for (int64_t e = 0; e < c.K; ++e) n2 += x.q.get(r * c.K + e) * x.q.get(r * c.K + e);
        qfloor += (c.l2norm ? 1.0 : n2) * sc * sc * static_cast<double>(c.HV / c.H);
      }
      const double mfloor = std::sqrt(static_cast<double>(x.N * c.HV * c.K));
      auto map_err = [](const HostTensor& a, const HostTensor& r, double floor) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < a.numel(); ++i) {
          if (!std::isfinite(a.get(i))) return std::numeric_limits<double>::infinity();
          num += (a.get(i) - r.get(i)) * (a.get(i) - r.get(i));
          den += r.get(i) * r.get(i);
        }
        return std::sqrt(num) / std::max(std::sqrt(den), floor);
      };
      EXPECT_LE(map_err(qmap, mref.o, std::sqrt(qfloor)), tol) << "state_map_o";
      EXPECT_LE(map_err(mmap, mref.ht, mfloor), tol) << "state_map_final";
      // bf16 has float32's range: the plain relative error holds while the reference stays far
      // from float32's underflow (a softplus gate can decay M to ~1e-295, zero in float32: one draw
      // of session 24 did)
      auto norm = [](const HostTensor& r) {
        double n2 = 0;
        for (int64_t i = 0; i < r.numel(); ++i) n2 += r.get(i) * r.get(i);
        return std::sqrt(n2);
      };
      if (c.dt == DType::kBFloat16 && norm(mref.o) > 1e-25 * std::sqrt(qfloor)) {
        EXPECT_LE(rel_err(qmap, mref.o), tol) << "state_map_o (bf16)";
      }
      if (c.dt == DType::kBFloat16 && norm(mref.ht) > 1e-25 * mfloor) {
        EXPECT_LE(rel_err(mmap, mref.ht), tol) << "state_map_final (bf16)";
      }
      // bitwise repeatable
      ForwardOutputs out2 = out;
      out2.state_map_o = upload(qmap2, keep);
      out2.state_map_final = upload(mmap2, keep);
      ASSERT_TRUE(forward(c.fam, in, out2, opt, Workspace{ws.p, ws_bytes}, nullptr).ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      download(out2.state_map_o, qmap2);
      download(out2.state_map_final, mmap2);
      EXPECT_EQ(qmap.bytes, qmap2.bytes) << "state_map_o not repeatable";
      EXPECT_EQ(mmap.bytes, mmap2.bytes) << "state_map_final not repeatable";
    }
}

TEST(CudaForward, SmallStateMapKda) {
  SKIP_WITHOUT_GPU();
  check_state_map(Family::kKDA);
}
TEST(CudaForward, SmallStateMapGdn) {
  SKIP_WITHOUT_GPU();
  check_state_map(Family::kGDN);
}

TEST(CudaForward, SmallSequenceSplitKda) {
  SKIP_WITHOUT_GPU();
  check_sequence_split(Family::kKDA);
}
TEST(CudaForward, SmallSequenceSplitGdn) {
  SKIP_WITHOUT_GPU();
  check_sequence_split(Family::kGDN);
}
TEST(CudaForward, SmallSequenceSplitGla) {
  SKIP_WITHOUT_GPU();
  check_sequence_split(Family::kGLA);
}
TEST(CudaForward, SmallSequenceSplitSimpleGla) {
  SKIP_WITHOUT_GPU();
  check_sequence_split(Family::kSimpleGLA);
}

}  // namespace
}  // namespace linattn::test
