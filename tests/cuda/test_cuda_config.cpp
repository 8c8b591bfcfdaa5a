// The CUDA backend's host-side policy (src/cuda/config/): what it can run, the tile / stage /
// split choices, and the backward's compute form for each backward_precision. Host code only: no
// GPU needed. These pin today's choices; a change to a heuristic shows up here first.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/problem.hpp"
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/config/backward_form.hpp"
#include "cuda/config/device_code.hpp"
#include "cuda/config/device_info.hpp"
#include "cuda/config/heuristics.hpp"
#include "cuda/config/limits.hpp"
#include "cuda/cuda_test_util.hpp"

// Declared with pass 2's kernel in cuda/common/chunk_bwd.cuh (device code this host test does not include).
namespace linattn::cuda::bwd {
std::size_t wy_smem_bytes(int dtype);
}

namespace linattn::test {
namespace {

namespace cfg = linattn::cuda::config;

// A validated problem for case c (host tensors: validation and sizes only).
detail::Problem problem_of(const Case& c, BackwardPrecision bp = BackwardPrecision::kAuto) {
  const Inputs x = make_inputs(c, /*backward=*/false);
  std::vector<DevBuf> keep;
  const ForwardInputs in = forward_views(x, false, keep);
  Options o = make_options(c);
  o.backward_precision = bp;
  detail::Problem p;
  const Status s = detail::resolve_inputs(c.fam, in, o, &p);
  EXPECT_TRUE(s.ok()) << s.message;
  return p;
}

TEST(CudaConfig, Limits) {
  EXPECT_EQ(cfg::kChunk, 64);
  EXPECT_EQ(cfg::align_up(1), 256u);
  EXPECT_EQ(cfg::align_up(256), 256u);
  EXPECT_EQ(cfg::align_up(257), 512u);
  EXPECT_EQ(cfg::kMaxSmem, 227u * 1024);
  EXPECT_EQ(cfg::kHopperSmem.block, cfg::kMaxSmem);
  EXPECT_EQ(cfg::kHopperSmem.sm, 228u * 1024);
  // no device named: the Hopper limits, without a query
  EXPECT_EQ(cfg::smem_limits(-1).block, cfg::kHopperSmem.block);
  EXPECT_EQ(cfg::smem_limits(-1).sm, cfg::kHopperSmem.sm);
  EXPECT_EQ(cfg::dtype_code(DType::kFloat16), 0);
  EXPECT_EQ(cfg::dtype_code(DType::kBFloat16), 1);
  EXPECT_EQ(cfg::dtype_code(DType::kFloat32), 2);
  EXPECT_EQ(cfg::dtype_code(DType::kFloat64), 3);
  EXPECT_EQ(cfg::dtype_code(DType::kInt32), 3);
}

// The one home of the device queries: the defaults off the device range, the device's own
// attributes on it (asked once; a second call returns the same record), and the Hopper kernels
// exactly where the build has them and the compute capability is 9.0.
TEST(CudaConfig, DeviceInfo) {
  const cfg::DeviceInfo& none = cfg::device_info(-1);
  EXPECT_EQ(none.sm_count, 132);
  EXPECT_EQ(none.smem.block, cfg::kHopperSmem.block);
  EXPECT_EQ(none.cc, 0);
  EXPECT_EQ(&cfg::device_info(64), &none);
  // which query results mean "no code for this device" (DeviceGuard::enter's refusal)
  EXPECT_TRUE(cfg::no_device_code(static_cast<int>(cudaErrorNoKernelImageForDevice)));
  EXPECT_FALSE(cfg::no_device_code(static_cast<int>(cudaErrorMemoryAllocation)));
  EXPECT_FALSE(cfg::no_device_code(static_cast<int>(cudaSuccess)));
  EXPECT_FALSE(std::string(cfg::build_archs()).empty());
  SKIP_WITHOUT_GPU();
  int dev = -1;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, dev), cudaSuccess);
  const cfg::DeviceInfo& d = cfg::device_info(dev);
  EXPECT_EQ(&cfg::current_device_info(), &d);
  EXPECT_EQ(d.sm_count, prop.multiProcessorCount);
  EXPECT_EQ(d.smem.block, prop.sharedMemPerBlockOptin);
  EXPECT_EQ(d.smem.sm, prop.sharedMemPerMultiprocessor);
  EXPECT_EQ(d.cc, 10 * prop.major + prop.minor);
  EXPECT_EQ(cfg::sm_count(dev), d.sm_count);
  EXPECT_EQ(cfg::smem_limits(dev).block, d.smem.block);
  const bool hopper_kernels = cuda::kern::recurrence_wgmma_supported(1, 128, 128);
  EXPECT_EQ(hopper_kernels, cuda::kern::sm90a_built() && d.cc == 90);
  // the code this build runs here (config/device_code.hpp): some, of a virtual architecture at
  // most the device's (what DeviceGuard::enter asks before every call)
  int arch = 0;
  const int q = cfg::query_device_code_arch(dev, &arch);
  EXPECT_EQ(q, static_cast<int>(cudaSuccess));
  EXPECT_FALSE(cfg::no_device_code(q));
  EXPECT_GE(arch, 80);
  EXPECT_LE(arch, d.cc);
  EXPECT_EQ(cfg::device_code_arch(dev), arch);
  std::printf("[ device   ] %s: %d SMs, %zu / %zu B shared, cc %d, Hopper kernels %s, code of build %s: %d\n", prop.name,
              d.sm_count, d.smem.block, d.smem.sm, d.cc, hopper_kernels ? "yes" : "no", cfg::build_archs(), arch);
}

TEST(CudaConfig, CanImplement) {
  Case c;
  c.K = c.V = 128;
  EXPECT_TRUE(cfg::can_implement(problem_of(c), "forward").ok());
  c.fam = Family::kGDN;
  EXPECT_TRUE(cfg::can_implement(problem_of(c), "backward").ok());
  Case k96;
  k96.K = 96;
  Status s = cfg::can_implement(problem_of(k96), "forward");
  EXPECT_EQ(s.code, StatusCode::kNotSupported);
  EXPECT_NE(s.message.find("CUDA forward supports head size K"), std::string::npos) << s.message;
  Case v32;
  v32.V = 32;
  s = cfg::can_implement(problem_of(v32), "backward");
  EXPECT_EQ(s.code, StatusCode::kNotSupported);
  EXPECT_NE(s.message.find("CUDA backward supports head size V"), std::string::npos) << s.message;
  Case f64;
  f64.dt = DType::kFloat64;
  EXPECT_EQ(cfg::can_implement(problem_of(f64), "forward").code, StatusCode::kNotSupported);
}

// GLA and simple GLA: implemented; the scalar gate takes the raw-row state pass like GDN; their
// backward never splits (kAuto / kSplit compute in the 16-bit type, kFloat32 in float32), except
// that g_gamma (its gradient is a whole-head sum, like dA_log) makes kAuto compute in float32.
TEST(CudaConfig, NoDeltaFamilies) {
  for (Family fam : {Family::kGLA, Family::kSimpleGLA}) {
    Case c = no_delta_case(fam);
    c.g_gamma = false;
    const detail::Problem p = problem_of(c);
    EXPECT_FALSE(p.delta);
    EXPECT_TRUE(cfg::can_implement(p, "forward").ok());
    EXPECT_TRUE(cfg::can_implement(p, "backward").ok());
    EXPECT_EQ(cfg::raw_rows(p), fam == Family::kSimpleGLA);
    EXPECT_EQ(cfg::compute_of(p), cfg::Compute::kSixteen);
    EXPECT_EQ(cfg::compute_of(problem_of(c, BackwardPrecision::kSplit)), cfg::Compute::kSixteen);
    if (fam == Family::kSimpleGLA) {
      c.g_gamma = true;
      EXPECT_EQ(cfg::compute_of(problem_of(c)), cfg::Compute::kFloat32);
      EXPECT_EQ(cfg::compute_of(problem_of(c, BackwardPrecision::kFast16)), cfg::Compute::kSixteen);
    }
    EXPECT_EQ(cfg::compute_of(problem_of(c, BackwardPrecision::kFloat32)), cfg::Compute::kFloat32);
    c.dt = DType::kFloat32;
    EXPECT_EQ(cfg::compute_of(problem_of(c)), cfg::Compute::kFloat32);
  }
}

TEST(CudaConfig, FusedTile) {
  const int sms = 132;
  // bf16, K = V = 128: tiles of 64 unless half the SMs would idle (B = 2, HV = 32: 128 CTAs of 64)
  const cfg::FusedTile big = cfg::fused_tile(1, 128, 128, 32, 2, sms, false, cfg::kHopperSmem);
  EXPECT_EQ(big.vt, 64);
  EXPECT_GT(big.stages, 0);
  EXPECT_LE(big.smem, cfg::kMaxSmem);
  // 32 CTAs of 64: 2 x 32 <= 132 -> tiles of 32 for the mma.sync pass; the wgmma pass (sm_90a build
  // on a CC 9.0 device) keeps 64, its M
  EXPECT_EQ(cfg::fused_tile(1, 128, 128, 16, 1, sms, false, cfg::kHopperSmem).vt,
            linattn::cuda::kern::recurrence_wgmma_supported(1, 128, 128) ? 64 : 32);
  EXPECT_EQ(cfg::fused_tile(1, 64, 128, 16, 1, sms, false, cfg::kHopperSmem).vt, 32);  // K = 64: the mma.sync pass
  EXPECT_EQ(cfg::fused_tile(0, 128, 128, 33, 2, sms, false, cfg::kHopperSmem).vt, 64);
  EXPECT_EQ(cfg::fused_tile(2, 128, 128, 32, 2, sms, false, cfg::kHopperSmem).vt, 32);  // float32: always 32
  EXPECT_GT(cfg::fused_tile(1, 128, 128, 32, 2, sms, /*raw_rows=*/true, cfg::kHopperSmem).stages, 0);
}

// The sequence-split pass: only where the wgmma pass runs (elsewhere always 0), only when the
// chains leave SMs idle, never into segments under 8 chunks.
TEST(CudaConfig, SequenceSplit) {
  const int sms = 132;
  const bool hopper = linattn::cuda::kern::recurrence_wgmma_supported(1, 128, 128);
  // the reference shape (B = 2, HV = 32: 128 CTAs of 64 columns) and B = 1, HV = 64: no split
  EXPECT_EQ(cfg::seq_split_chunks(1, 128, 128, 32, true, 2, 128, sms), 0);
  EXPECT_EQ(cfg::seq_split_chunks(1, 128, 128, 64, true, 1, 256, sms), 0);
  // few chains (B = 1, T = 16384, H = 16) on a Hopper GPU: three segments of 86 chunks with the
  // delta rule, four of 64 without (no M tiles); fp16 alike
  EXPECT_EQ(cfg::seq_split_chunks(1, 128, 128, 16, true, 1, 256, sms), hopper ? 86 : 0);
  EXPECT_EQ(cfg::seq_split_chunks(0, 128, 128, 16, true, 1, 256, sms), hopper ? 86 : 0);
  EXPECT_EQ(cfg::seq_split_chunks(1, 128, 128, 16, false, 1, 256, sms), hopper ? 64 : 0);
  // B = 1, T = 32768, H = 32: two segments
  EXPECT_EQ(cfg::seq_split_chunks(1, 128, 128, 32, true, 1, 512, sms), hopper ? 256 : 0);
  // short sequences: the launches and the combine outweigh the gain
  EXPECT_EQ(cfg::seq_split_chunks(1, 128, 128, 1, true, 1, 16, sms), 0);
  EXPECT_EQ(cfg::seq_split_chunks(1, 128, 128, 1, true, 1, 64, sms), hopper ? 8 : 0);
  // not the wgmma pass: K = 64, float32
  EXPECT_EQ(cfg::seq_split_chunks(1, 64, 128, 16, true, 1, 256, sms), 0);
  EXPECT_EQ(cfg::seq_split_chunks(2, 128, 128, 16, true, 1, 256, sms), 0);
  for (int64_t nch : {16, 40, 100, 1000, 5000})
    for (int hv : {1, 2, 4, 8, 16, 32})
      for (bool delta : {true, false}) {
        const int seg = cfg::seq_split_chunks(1, 128, 128, hv, delta, 1, nch, sms);
        if (seg == 0) continue;
        EXPECT_GE(seg, 8);
        EXPECT_LT(seg, nch);
        EXPECT_LE((nch + seg - 1) / seg, 8);
      }
}

TEST(CudaConfig, RawRowsAndPrepSmem) {
  Case c;
  c.fam = Family::kGDN;
  EXPECT_TRUE(cfg::raw_rows(problem_of(c)));
  c.dt = DType::kFloat32;
  EXPECT_FALSE(cfg::raw_rows(problem_of(c)));
  c.fam = Family::kKDA;
  c.dt = DType::kBFloat16;
  EXPECT_FALSE(cfg::raw_rows(problem_of(c)));
  for (int dt : {0, 1, 2})
    for (int K : {64, 128, 256}) {
      const cfg::PrepSmem ps = cfg::prep_smem(dt, K, true, cfg::kHopperSmem);
      EXPECT_LE(ps.bytes, cfg::kMaxSmem) << dt << " " << K;
      EXPECT_TRUE(ps.fits) << dt << " " << K;
      EXPECT_TRUE(ps.q_in_smem == 0 || ps.bytes <= 200 * 1024) << dt << " " << K;
    }
}

TEST(CudaConfig, BackwardStagesAndSplits) {
  for (int dt : {0, 1, 2})
    for (int K : {64, 128}) {
      EXPECT_GT(cfg::state_stages(dt, K, cfg::kHopperSmem).stages, 0) << dt << " " << K;
      EXPECT_GT(cfg::dh_stages(dt, K, dt != 2, cfg::kHopperSmem).stages, 0) << dt << " " << K;
    }
  EXPECT_EQ(cfg::dh_v_tile(0), 64);
  EXPECT_EQ(cfg::dh_v_tile(1), 64);
  EXPECT_EQ(cfg::dh_v_tile(2), 32);
  Case c;
  c.K = c.V = 128;
  EXPECT_TRUE(cfg::split_fits(problem_of(c), cfg::kHopperSmem));
  c.K = c.V = 256;
  EXPECT_FALSE(cfg::split_fits(problem_of(c), cfg::kHopperSmem));  // KgT's low half does not fit pass 1 at K = 256
  int ns = 0, tps = 0;
  cfg::token_v_splits(8, 1, &ns, &tps);  // V = 128: 8 tiles of 16; one chain: 4 splits of 2 tiles
  EXPECT_EQ(ns, 4);
  EXPECT_EQ(tps, 2);
  cfg::token_v_splits(8, 1024, &ns, &tps);  // enough chains: no split
  EXPECT_EQ(ns, 1);
  EXPECT_EQ(tps, 8);
  cfg::token_v_splits(16, 200, &ns, &tps);  // want 3: 3 splits of 6, 6, 4 tiles
  EXPECT_EQ(ns, 3);
  EXPECT_EQ(tps, 6);
}

// Cards with less shared memory a block than Hopper's 227 KiB (sm_80: 163 KiB; sm_86 / sm_89:
// 99 KiB): every choice fits the card it is made for, or says it does not (the launch sites then
// refuse with both sizes), and the Hopper choices are the ones the suite pins above.
TEST(CudaConfig, ChoicesFitSmallerCards) {
  const cfg::SmemLimits a100{163 * 1024, 164 * 1024}, ada{99 * 1024, 100 * 1024};
  for (const cfg::SmemLimits& lim : {cfg::kHopperSmem, a100, ada})
    for (int dt : {0, 1, 2})
      for (int K : {64, 128, 256}) {
        const std::string at = std::to_string(lim.block / 1024) + " KiB, dtype " + std::to_string(dt) + ", K " + std::to_string(K);
        for (bool vec : {true, false}) {
          const cfg::PrepSmem ps = cfg::prep_smem(dt, K, vec, lim);
          EXPECT_EQ(ps.fits, ps.bytes <= lim.block) << at;
          EXPECT_TRUE(ps.q_in_smem == 0 || ps.bytes <= lim.block) << at;
          // q leaves shared memory only to fit (or, float32, for two CTAs an SM)
          if (!ps.q_in_smem && dt != 2) {
            EXPECT_GT(linattn::cuda::kern::prep_smem_bytes(dt, K, true, vec), std::min<std::size_t>(200 * 1024, lim.block)) << at;
          }
        }
        for (bool split : {false, true}) {
          const cfg::Staged d = cfg::dh_stages(dt, K, split, lim);
          EXPECT_TRUE(d.stages == 0 || d.smem <= lim.block) << at;
        }
        const cfg::Staged st = cfg::state_stages(dt, K, lim);
        EXPECT_TRUE(st.stages == 0 || st.smem <= lim.block) << at;
        for (int V : {64, 128, 256})
          for (bool rows : {false, true}) {
            const cfg::FusedTile ft = cfg::fused_tile(dt, K, V, 32, 2, 108, rows, lim);
            EXPECT_TRUE(ft.stages == 0 || ft.smem <= lim.block) << at << ", V " << V;
          }
      }
  // the two kernels of one fixed size: the warp-owned state pass (the forward reads the v rows only
  // where it fits at the largest tile) and pass 2's wy_kernel (refused before its launch where it
  // does not fit)
  namespace kern = linattn::cuda::kern;
  EXPECT_GT(kern::fused_warp_smem_bytes(128, 64), a100.block);
  EXPECT_LE(kern::fused_warp_smem_bytes(128, 64), cfg::kHopperSmem.block);
  EXPECT_LE(kern::fused_warp_smem_bytes(64, 64), a100.block);
  EXPECT_GT(kern::fused_warp_smem_bytes(64, 64), ada.block);
  EXPECT_LT(kern::fused_warp_smem_bytes(128, 32), kern::fused_warp_smem_bytes(128, 64));
  Case c;
  c.fam = Family::kGLA;
  c.K = c.V = 128;
  EXPECT_TRUE(cfg::reads_v_rows(problem_of(c), cfg::kHopperSmem));
  EXPECT_FALSE(cfg::reads_v_rows(problem_of(c), a100));
  c.K = c.V = 64;
  EXPECT_TRUE(cfg::reads_v_rows(problem_of(c), a100));
  EXPECT_FALSE(cfg::reads_v_rows(problem_of(c), ada));
  c.fam = Family::kKDA;
  EXPECT_FALSE(cfg::reads_v_rows(problem_of(c), cfg::kHopperSmem));  // the delta rule needs U
  EXPECT_LE(linattn::cuda::bwd::wy_smem_bytes(1), a100.block);
  EXPECT_GT(linattn::cuda::bwd::wy_smem_bytes(1), ada.block);
  EXPECT_GT(linattn::cuda::bwd::wy_smem_bytes(2), a100.block);  // float32 pass 2: Hopper alone
  EXPECT_LE(linattn::cuda::bwd::wy_smem_bytes(2), cfg::kHopperSmem.block);
  // the same shapes choose no deeper pipelines on a smaller card
  for (int dt : {0, 1, 2})
    for (int K : {64, 128, 256}) {
      EXPECT_LE(cfg::state_stages(dt, K, ada).stages, cfg::state_stages(dt, K, a100).stages);
      EXPECT_LE(cfg::state_stages(dt, K, a100).stages, cfg::state_stages(dt, K, cfg::kHopperSmem).stages);
      EXPECT_LE(cfg::dh_stages(dt, K, true, a100).stages, cfg::dh_stages(dt, K, true, cfg::kHopperSmem).stages);
    }
}

TEST(CudaConfig, BackwardForm) {
  using cfg::Compute;
  Case c;  // KDA bf16, g given
  EXPECT_EQ(cfg::compute_of(problem_of(c)), Compute::kSplit);
  EXPECT_EQ(cfg::compute_of(problem_of(c, BackwardPrecision::kSplit)), Compute::kSplit);
  EXPECT_EQ(cfg::compute_of(problem_of(c, BackwardPrecision::kFast16)), Compute::kSixteen);
  EXPECT_EQ(cfg::compute_of(problem_of(c, BackwardPrecision::kFloat32)), Compute::kFloat32);
  Case gate = c;  // in-kernel gate with A_log: auto computes in float32, split stays split
  gate.gate = Gate::kSoftplus;
  EXPECT_TRUE(cfg::needs_float32(problem_of(gate)));
  EXPECT_EQ(cfg::compute_of(problem_of(gate)), Compute::kFloat32);
  EXPECT_EQ(cfg::compute_of(problem_of(gate, BackwardPrecision::kSplit)), Compute::kSplit);
  Case wide = c;  // K = 256: the split form does not fit
  wide.K = wide.V = 256;
  EXPECT_EQ(cfg::compute_of(problem_of(wide)), Compute::kFloat32);
  EXPECT_EQ(cfg::compute_of(problem_of(wide, BackwardPrecision::kSplit)), Compute::kFloat32);
  EXPECT_EQ(cfg::compute_of(problem_of(wide, BackwardPrecision::kFast16)), Compute::kSixteen);
  Case f32 = c;  // float32 inputs: float32 whatever the option
  f32.dt = DType::kFloat32;
  for (BackwardPrecision bp : {BackwardPrecision::kAuto, BackwardPrecision::kSplit, BackwardPrecision::kFast16,
                               BackwardPrecision::kFloat32})
    EXPECT_EQ(cfg::compute_of(problem_of(f32, bp)), Compute::kFloat32);
  // the values a saved header records
  EXPECT_EQ(static_cast<int>(Compute::kSixteen), 0);
  EXPECT_EQ(static_cast<int>(Compute::kSplit), 1);
  EXPECT_EQ(static_cast<int>(Compute::kFloat32), 2);
  EXPECT_STREQ(cfg::compute_name(1), "split");
  const cfg::ComputeForm f32_on_bf16(DType::kBFloat16, Compute::kFloat32);
  EXPECT_TRUE(f32_on_bf16.f32 && !f32_on_bf16.split);
  const cfg::ComputeForm split(DType::kFloat16, Compute::kSplit);
  EXPECT_TRUE(!split.f32 && split.split);
  const cfg::ComputeForm fp32_in(DType::kFloat32, Compute::kSplit);
  EXPECT_TRUE(fp32_in.f32 && !fp32_in.split);
}

}  // namespace
}  // namespace linattn::test
