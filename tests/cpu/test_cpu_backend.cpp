// CPU backend (chunked forward, chunked WY backward) against the float64 reference, for
// every family x option x dtype x direction; plus structural equivalences (varlen, GVA,
// disable_recompute, determinism) and edge shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <omp.h>

#include "test_cpu_util.hpp"

namespace linattn::test::cpu {
namespace {

// Worst relative error seen per dtype (printed at the end of the run).
std::map<std::string, double>& worst() {
  static std::map<std::string, double> w;
  return w;
}
struct WorstPrinter : ::testing::Environment {
  void TearDown() override {
    for (auto& [k, v] : worst()) std::printf("[cpu] worst relative error %-8s %.3e\n", k.c_str(), v);
  }
};
const auto* const kPrinter = ::testing::AddGlobalTestEnvironment(new WorstPrinter);

void expect_close(const char* what, const HostTensor& x, const HostTensor& ref, DType dt) {
  if (!ref.present()) return;
  ASSERT_TRUE(x.present()) << what;
  const double e = rel_err(x, ref);
  double& w = worst()[dtype_name(dt)];
  w = std::max(w, e);
  EXPECT_LE(e, tolerance_for(dt)) << what << " relative error " << e;
}

enum class Variant {
  kPlain, kState, kVFirst, kL2Norm, kGva, kVarlen, kHOut, kClamped, kBetaSigmoid, kNegEigval,
  kGateSoftplus, kGateLowerBound, kGateLowerBoundNoALog, kGamma, kGammaOnly, kAll,
};

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kPlain: return "Plain";
    case Variant::kState: return "InitialFinalState";
    case Variant::kVFirst: return "StateVFirst";
    case Variant::kL2Norm: return "L2Norm";
    case Variant::kGva: return "Gva";
    case Variant::kVarlen: return "Varlen";
    case Variant::kHOut: return "IntermediateStates";
    case Variant::kClamped: return "ClampedGate";
    case Variant::kBetaSigmoid: return "BetaSigmoid";
    case Variant::kNegEigval: return "NegEigval";
    case Variant::kGateSoftplus: return "GateSoftplus";
    case Variant::kGateLowerBound: return "GateLowerBound";
    case Variant::kGateLowerBoundNoALog: return "GateLowerBoundNoALog";
    case Variant::kGamma: return "GPlusGGamma";
    case Variant::kGammaOnly: return "GGammaOnly";
    case Variant::kAll: return "AllOptions";
  }
  return "?";
}

const char* short_dtype(DType d) {
  switch (d) {
    case DType::kFloat32: return "Fp32";
    case DType::kBFloat16: return "Bf16";
    case DType::kFloat16: return "Fp16";
    case DType::kFloat64: return "Fp64";
    default: return "X";
  }
}

const char* family_label(Family f) {
  switch (f) {
    case Family::kKDA: return "Kda";
    case Family::kGDN: return "Gdn";
    case Family::kGLA: return "Gla";
    case Family::kSimpleGLA: return "SimpleGla";
  }
  return "?";
}

const std::vector<int64_t> kVarlenCu = {0, 37, 37, 38, 150, 200};  // zero-length, 1 token, 112, 50

Config make_config(Family f, Variant v, DType dt) {
  Config c;
  c.family = f;
  c.dtype = dt;
  auto state = [&] { c.h0 = c.final_state = true; };
  auto varlen = [&] { c.B = 1; c.T = 200; c.cu = kVarlenCu; };
  switch (v) {
    case Variant::kPlain: break;
    case Variant::kState: state(); break;
    case Variant::kVFirst: state(); c.v_first = true; c.h_out = true; break;
    case Variant::kL2Norm: c.l2norm = true; break;
    case Variant::kGva: c.G = 2; break;
    case Variant::kVarlen: varlen(); state(); break;
    case Variant::kHOut: c.h_out = true; c.T = 150; break;
    case Variant::kClamped: c.gate = Gate::kClamped; state(); break;
    case Variant::kBetaSigmoid: c.beta_sigmoid = true; break;
    case Variant::kNegEigval: c.neg_eigval = true; c.l2norm = true; break;
    case Variant::kGateSoftplus: c.gate = Gate::kSoftplus; break;
    case Variant::kGateLowerBound: c.gate = Gate::kLowerBound; break;
    case Variant::kGateLowerBoundNoALog: c.gate = Gate::kLowerBoundNoALog; break;
    case Variant::kGamma: c.g_gamma = true; break;
    case Variant::kGammaOnly: c.g_gamma = true; c.has_g = false; break;
    case Variant::kAll:
      varlen(); state(); c.v_first = true; c.l2norm = true; c.G = 2; c.h_out = true;
      c.scale = 0.3;
      c.bf16_gate = dt == DType::kBFloat16;
      if (c.delta()) c.beta_sigmoid = true;
      if (f == Family::kKDA) c.gate = Gate::kLowerBound;
      if (f == Family::kGDN) c.gate = Gate::kSoftplus;
      if (f == Family::kSimpleGLA) c.g_gamma = true;
      break;
  }
  return c;
}

bool applies(Family f, Variant v) {
  const bool delta = f == Family::kKDA || f == Family::kGDN;
  switch (v) {
    case Variant::kBetaSigmoid:
    case Variant::kNegEigval: return delta;
    case Variant::kGateSoftplus: return delta;
    case Variant::kGateLowerBound:
    case Variant::kGateLowerBoundNoALog: return f == Family::kKDA;
    case Variant::kGamma:
    case Variant::kGammaOnly: return f == Family::kSimpleGLA;
    default: return true;
  }
}

using Param = std::tuple<Family, Variant, DType, bool /*backward*/>;

class CpuVsReference : public ::testing::TestWithParam<Param> {};

TEST_P(CpuVsReference, Matches) {
  const auto [f, v, dt, bwd] = GetParam();
  const Config c = make_config(f, v, dt);
  const Data d = make_data(c);
  const Data d64 = d.as_f64();
  Config c64 = c;
  c64.dtype = DType::kFloat64;
  if (!bwd) {
    const FwdResult got = run_forward(c, d, false);
    const FwdResult ref = run_forward(c64, d64, true);
    expect_close("o", got.o, ref.o, dt);
    expect_close("final_state", got.final_state, ref.final_state, dt);
    expect_close("h", got.h, ref.h, dt);
  } else {
    const BwdResult got = run_backward(c, d, false);
    const BwdResult ref = run_backward(c64, d64, true);
    expect_close("dq", got.dq, ref.dq, dt);
    expect_close("dk", got.dk, ref.dk, dt);
    expect_close("dv", got.dv, ref.dv, dt);
    expect_close("dg", got.dg, ref.dg, dt);
    expect_close("dg_gamma", got.dg_gamma, ref.dg_gamma, dt);
    expect_close("dbeta", got.dbeta, ref.dbeta, dt);
    expect_close("dA_log", got.dA_log, ref.dA_log, dt);
    expect_close("ddt_bias", got.ddt_bias, ref.ddt_bias, dt);
    expect_close("dh0", got.dh0, ref.dh0, dt);
  }
}

std::vector<Param> all_params() {
  std::vector<Param> ps;
  for (Family f : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA}) {
    for (int vi = 0; vi <= static_cast<int>(Variant::kAll); ++vi) {
      const Variant v = static_cast<Variant>(vi);
      if (!applies(f, v)) continue;
      for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kFloat16}) {
        // float16 only for the plain and all-options cases (it shares the bf16 path's math).
        if (dt == DType::kFloat16 && v != Variant::kPlain && v != Variant::kAll) continue;
        for (bool bwd : {false, true}) ps.emplace_back(f, v, dt, bwd);
      }
    }
  }
  return ps;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto [f, v, dt, bwd] = info.param;
  return std::string(family_label(f)) + "_" + variant_name(v) + "_" + short_dtype(dt) + "_" +
         (bwd ? "Backward" : "Forward");
}

INSTANTIATE_TEST_SUITE_P(Matrix, CpuVsReference, ::testing::ValuesIn(all_params()), param_name);

// ---------------------------------------------------------------- per-family structural tests
class CpuFamily : public ::testing::TestWithParam<Family> {};

std::string family_param_name(const ::testing::TestParamInfo<Family>& info) {
  return family_label(info.param);
}

// disable_recompute: backward from the saved states is bitwise identical to recomputation.
TEST_P(CpuFamily, CpuDisableRecomputeIsBitwiseIdentical) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Config c = make_config(GetParam(), Variant::kAll, dt);
    const Data d = make_data(c);
    const FwdResult plain = run_forward(c, d, false);
    const FwdResult with_saved = run_forward(c, d, false, /*want_saved=*/true);
    EXPECT_TRUE(bitwise_equal(plain.o, with_saved.o));
    EXPECT_TRUE(bitwise_equal(plain.final_state, with_saved.final_state));
    const BwdResult a = run_backward(c, d, false);
    const BwdResult b = run_backward(c, d, false, &with_saved.saved);
    EXPECT_TRUE(bitwise_equal(a.dq, b.dq));
    EXPECT_TRUE(bitwise_equal(a.dk, b.dk));
    EXPECT_TRUE(bitwise_equal(a.dv, b.dv));
    EXPECT_TRUE(bitwise_equal(a.dg, b.dg));
    EXPECT_TRUE(bitwise_equal(a.dg_gamma, b.dg_gamma));
    EXPECT_TRUE(bitwise_equal(a.dbeta, b.dbeta));
    EXPECT_TRUE(bitwise_equal(a.dA_log, b.dA_log));
    EXPECT_TRUE(bitwise_equal(a.ddt_bias, b.ddt_bias));
    EXPECT_TRUE(bitwise_equal(a.dh0, b.dh0));
    // and run to run
    const BwdResult a2 = run_backward(c, d, false);
    EXPECT_TRUE(bitwise_equal(a.dq, a2.dq) && bitwise_equal(a.dk, a2.dk) && bitwise_equal(a.dg, a2.dg) &&
                bitwise_equal(a.dA_log, a2.dA_log) && bitwise_equal(a.ddt_bias, a2.ddt_bias));
  }
}

// Varlen equals running the sequences one by one (zero-length: final = initial, dh0 = dht).
TEST_P(CpuFamily, CpuVarlenEqualsSeparateSequences) {
  const Config c = make_config(GetParam(), Variant::kAll, DType::kFloat64);
  const Data d = make_data(c);
  const FwdResult fv = run_forward(c, d, false);
  const BwdResult bv = run_backward(c, d, false);
  const int64_t HV = c.HV(), H = c.H, K = c.K, V = c.V, KV = K * V;
  const int64_t gw = c.vector_gate() ? K : 1;
  std::vector<double> dA(HV, 0.0), ddt(d.dt_bias.present() ? d.dt_bias.numel() : 0, 0.0), dgg(HV, 0.0);
  for (size_t n = 0; n + 1 < c.cu.size(); ++n) {
    const int64_t t0 = c.cu[n], L = c.cu[n + 1] - c.cu[n];
    if (L == 0) {
      for (int64_t i = 0; i < HV * KV; ++i) {
        EXPECT_EQ(fv.final_state.get(n * HV * KV + i), d.h0.get(n * HV * KV + i));
        EXPECT_EQ(bv.dh0.get(n * HV * KV + i), d.dht.get(n * HV * KV + i));
      }
      continue;
    }
    Config cs = c;
    cs.cu.clear();
    cs.B = 1;
    cs.T = L;
    Data ds = make_data(cs);  // shapes; values copied below
    auto slice = [&](const HostTensor& src, HostTensor& dst, int64_t row) {
      for (int64_t i = 0; i < L * row; ++i) dst.set(i, src.get(t0 * row + i));
    };
    auto state_slice = [&](const HostTensor& src, HostTensor& dst) {
      for (int64_t i = 0; i < HV * KV; ++i) dst.set(i, src.get(n * HV * KV + i));
    };
    slice(d.q, ds.q, H * K);
    slice(d.k, ds.k, H * K);
    slice(d.v, ds.v, HV * V);
    slice(d.d_o, ds.d_o, HV * V);
    if (d.g.present()) slice(d.g, ds.g, HV * gw);
    if (d.beta.present()) slice(d.beta, ds.beta, HV);
    ds.A_log = d.A_log;
    ds.dt_bias = d.dt_bias;
    ds.g_gamma = d.g_gamma;
    state_slice(d.h0, ds.h0);
    state_slice(d.dht, ds.dht);
    const FwdResult fs = run_forward(cs, ds, false);
    const BwdResult bs = run_backward(cs, ds, false);
    auto expect_slice = [&](const char* what, const HostTensor& whole, const HostTensor& part, int64_t row) {
      for (int64_t i = 0; i < L * row; ++i) {
        ASSERT_NEAR(whole.get(t0 * row + i), part.get(i), 1e-12) << what << " seq " << n << " i " << i;
      }
    };
    auto expect_state = [&](const char* what, const HostTensor& whole, const HostTensor& part) {
      for (int64_t i = 0; i < HV * KV; ++i) ASSERT_NEAR(whole.get(n * HV * KV + i), part.get(i), 1e-12) << what;
    };
    expect_slice("o", fv.o, fs.o, HV * V);
    expect_state("final_state", fv.final_state, fs.final_state);
    expect_slice("dq", bv.dq, bs.dq, H * K);
    expect_slice("dk", bv.dk, bs.dk, H * K);
    expect_slice("dv", bv.dv, bs.dv, HV * V);
    if (bv.dg.present()) expect_slice("dg", bv.dg, bs.dg, HV * gw);
    if (bv.dbeta.present()) expect_slice("dbeta", bv.dbeta, bs.dbeta, HV);
    expect_state("dh0", bv.dh0, bs.dh0);
    for (int64_t i = 0; i < HV; ++i) {
      if (bs.dA_log.present()) dA[i] += bs.dA_log.get(i);
      if (bs.dg_gamma.present()) dgg[i] += bs.dg_gamma.get(i);
    }
    for (size_t i = 0; i < ddt.size(); ++i) ddt[i] += bs.ddt_bias.get(i);
  }
  for (int64_t i = 0; i < HV; ++i) {
    if (bv.dA_log.present()) EXPECT_NEAR(bv.dA_log.get(i), dA[i], 1e-10);
    if (bv.dg_gamma.present()) EXPECT_NEAR(bv.dg_gamma.get(i), dgg[i], 1e-10);
  }
  for (size_t i = 0; i < ddt.size(); ++i) EXPECT_NEAR(bv.ddt_bias.get(i), ddt[i], 1e-10);
}

// GVA (G = 2) equals H = HV with the q/k heads repeated; dq/dk sum over the repeats.
TEST_P(CpuFamily, CpuGvaEqualsRepeatedHeads) {
  Config c = make_config(GetParam(), Variant::kPlain, DType::kFloat64);
  c.G = 2;
  c.h0 = c.final_state = true;
  c.l2norm = true;
  const Data d = make_data(c);
  Config cr = c;
  cr.H = c.H * c.G;
  cr.G = 1;
  Data dr = d;
  dr.q = HostTensor(DType::kFloat64, {c.B, c.T, cr.H, c.K});
  dr.k = HostTensor(DType::kFloat64, {c.B, c.T, cr.H, c.K});
  const int64_t K = c.K;
  for (int64_t bt = 0; bt < c.B * c.T; ++bt) {
    for (int64_t hv = 0; hv < cr.H; ++hv) {
      for (int64_t i = 0; i < K; ++i) {
        dr.q.set((bt * cr.H + hv) * K + i, d.q.get((bt * c.H + hv / c.G) * K + i));
        dr.k.set((bt * cr.H + hv) * K + i, d.k.get((bt * c.H + hv / c.G) * K + i));
      }
    }
  }
  const FwdResult fg = run_forward(c, d, false), fr = run_forward(cr, dr, false);
  EXPECT_LE(rel_err(fg.o, fr.o), 1e-12);
  EXPECT_LE(rel_err(fg.final_state, fr.final_state), 1e-12);
  const BwdResult bg = run_backward(c, d, false), br = run_backward(cr, dr, false);
  EXPECT_LE(rel_err(bg.dv, br.dv), 1e-12);
  if (bg.dg.present()) EXPECT_LE(rel_err(bg.dg, br.dg), 1e-12);
  if (bg.dbeta.present()) EXPECT_LE(rel_err(bg.dbeta, br.dbeta), 1e-12);
  EXPECT_LE(rel_err(bg.dh0, br.dh0), 1e-12);
  HostTensor dq_sum = bg.dq, dk_sum = bg.dk;
  for (int64_t bt = 0; bt < c.B * c.T; ++bt) {
    for (int64_t h = 0; h < c.H; ++h) {
      for (int64_t i = 0; i < K; ++i) {
        double sq = 0, sk = 0;
        for (int64_t g = 0; g < c.G; ++g) {
          sq += br.dq.get((bt * cr.H + h * c.G + g) * K + i);
          sk += br.dk.get((bt * cr.H + h * c.G + g) * K + i);
        }
        dq_sum.set((bt * c.H + h) * K + i, sq);
        dk_sum.set((bt * c.H + h) * K + i, sk);
      }
    }
  }
  EXPECT_LE(rel_err(bg.dq, dq_sum), 1e-12);
  EXPECT_LE(rel_err(bg.dk, dk_sum), 1e-12);
}

// Edge shapes against the reference: T = 1, odd head sizes, T = 65, K = V = 64, and one
// T = 130, K = V = 128 case.
TEST_P(CpuFamily, CpuEdgeShapesMatchReference) {
  struct Shape { int64_t B, T, K, V; DType dt; };
  const std::vector<Shape> shapes = {
      {1, 1, 32, 32, DType::kFloat64}, {2, 1, 16, 8, DType::kFloat32},  {1, 65, 17, 9, DType::kFloat64},
      {1, 64, 5, 3, DType::kFloat32},  {1, 90, 64, 64, DType::kFloat32}, {1, 130, 128, 128, DType::kFloat32},
      {1, 7, 1, 1, DType::kFloat64},
  };
  for (const Shape& s : shapes) {
    Config c = make_config(GetParam(), Variant::kState, s.dt);
    c.B = s.B; c.T = s.T; c.K = s.K; c.V = s.V; c.H = 1; c.G = 2; c.l2norm = s.K > 1;
    const Data d = make_data(c);
    const Data d64 = d.as_f64();
    Config c64 = c;
    c64.dtype = DType::kFloat64;
    const std::string tag = "T=" + std::to_string(s.T) + " K=" + std::to_string(s.K) + " V=" + std::to_string(s.V);
    const FwdResult got = run_forward(c, d, false), ref = run_forward(c64, d64, true);
    SCOPED_TRACE(tag);
    expect_close("o", got.o, ref.o, s.dt);
    expect_close("final_state", got.final_state, ref.final_state, s.dt);
    const BwdResult bg = run_backward(c, d, false), br = run_backward(c64, d64, true);
    expect_close("dq", bg.dq, br.dq, s.dt);
    expect_close("dk", bg.dk, br.dk, s.dt);
    expect_close("dv", bg.dv, br.dv, s.dt);
    expect_close("dg", bg.dg, br.dg, s.dt);
    expect_close("dbeta", bg.dbeta, br.dbeta, s.dt);
    expect_close("dh0", bg.dh0, br.dh0, s.dt);
  }
}

// Results do not depend on the thread count; optional gradients that are absent are not needed
// for the others (same dq, dk, dv without them).
TEST_P(CpuFamily, CpuThreadCountAndOptionalOutputsDoNotChangeResults) {
  Config c = make_config(GetParam(), Variant::kAll, DType::kFloat32);
  // Large enough (tokens x HV x K x V above the driver's 2^21 threshold) that the call really
  // runs on several threads.
  c.K = c.V = 64;
  ASSERT_GE((c.cu.empty() ? c.B * c.T : c.cu.back()) * c.HV() * c.K * c.V, int64_t(1) << 21);
  const Data d = make_data(c);
  const BwdResult full = run_backward(c, d, false);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const FwdResult f1 = run_forward(c, d, false);
  const BwdResult one = run_backward(c, d, false);
  omp_set_num_threads(saved_threads);
  const FwdResult f2 = run_forward(c, d, false);
  EXPECT_TRUE(bitwise_equal(f1.o, f2.o) && bitwise_equal(f1.h, f2.h) && bitwise_equal(f1.final_state, f2.final_state));
  EXPECT_TRUE(bitwise_equal(full.dq, one.dq) && bitwise_equal(full.dk, one.dk) && bitwise_equal(full.dv, one.dv));
  EXPECT_TRUE(bitwise_equal(full.dg, one.dg) && bitwise_equal(full.dbeta, one.dbeta) && bitwise_equal(full.dh0, one.dh0));
  EXPECT_TRUE(bitwise_equal(full.dA_log, one.dA_log) && bitwise_equal(full.ddt_bias, one.ddt_bias) &&
              bitwise_equal(full.dg_gamma, one.dg_gamma));

  // Only the required gradients.
  HostTensor dq = like(d.q, d.q.dtype()), dk = like(d.k, d.k.dtype()), dv = like(d.v, d.v.dtype());
  BackwardInputs in;
  in.fwd = d.inputs();
  in.d_o = d.d_o.view;
  in.dht = d.dht.view;
  BackwardOutputs out;
  out.dq = dq.view;
  out.dk = dk.view;
  out.dv = dv.view;
  std::size_t wb = 0;
  ASSERT_TRUE(backward_workspace_size(c.family, in, c.options(), &wb).ok());
  std::vector<unsigned char> ws(wb);
  const Status s = backward(c.family, in, out, c.options(), Workspace{ws.data(), ws.size()});
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_TRUE(bitwise_equal(full.dq, dq) && bitwise_equal(full.dk, dk) && bitwise_equal(full.dv, dv));
}

INSTANTIATE_TEST_SUITE_P(Families, CpuFamily,
                         ::testing::Values(Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA),
                         family_param_name);

// Strongly negative gates over full chunks stay finite (decay as exp of differences).
TEST(CpuKda, CpuLowerBoundGateAtMinusFiveStaysFinite) {
  Config c = make_config(Family::kKDA, Variant::kClamped, DType::kFloat32);
  c.T = 128;
  Data d = make_data(c);
  for (int64_t i = 0; i < d.g.numel(); ++i) d.g.set(i, -5.0);
  Config c64 = c;
  c64.dtype = DType::kFloat64;
  const FwdResult ref64 = run_forward(c64, d.as_f64(), true);
  const FwdResult got = run_forward(c, d, false);
  expect_close("o", got.o, ref64.o, DType::kFloat32);
  const BwdResult bg = run_backward(c, d, false), br = run_backward(c64, d.as_f64(), true);
  expect_close("dq", bg.dq, br.dq, DType::kFloat32);
  expect_close("dk", bg.dk, br.dk, DType::kFloat32);
  expect_close("dg", bg.dg, br.dg, DType::kFloat32);
}

// Workspace too small is refused.
TEST(CpuKda, CpuWorkspaceTooSmallIsRefused) {
  const Config c = make_config(Family::kKDA, Variant::kPlain, DType::kFloat32);
  const Data d = make_data(c);
  HostTensor o = like(d.v, c.dtype);
  ForwardOutputs out;
  out.o = o.view;
  std::size_t wb = 0;
  ASSERT_TRUE(forward_workspace_size(c.family, d.inputs(), c.options(), &wb).ok());
  ASSERT_GT(wb, 0u);
  std::vector<unsigned char> ws(wb - 1);
  const Status s = forward(c.family, d.inputs(), out, c.options(), Workspace{ws.data(), ws.size()});
  EXPECT_EQ(s.code, StatusCode::kWorkspaceTooSmall);
}

// Timing at the speed target: KDA forward + backward, B=1, T=4096, H=HV=8, K=V=128, bf16.
// Run with --gtest_also_run_disabled_tests --gtest_filter='*KdaSpeed*'.
TEST(CpuKda, DISABLED_KdaSpeed) {
  Config c;
  c.family = Family::kKDA;
  c.dtype = DType::kBFloat16;
  c.B = 1; c.T = 4096; c.H = 8; c.K = 128; c.V = 128;
  c.l2norm = true;
  c.h0 = c.final_state = true;
  const Data d = make_data(c);
  for (int rep = 0; rep < 2; ++rep) {
    const std::clock_t c0 = std::clock();
    const auto t0 = std::chrono::steady_clock::now();
    const FwdResult f = run_forward(c, d, false);
    const auto t1 = std::chrono::steady_clock::now();
    const BwdResult b = run_backward(c, d, false);
    const auto t2 = std::chrono::steady_clock::now();
    const std::clock_t c2 = std::clock();
    const double fw = std::chrono::duration<double>(t1 - t0).count();
    const double bw = std::chrono::duration<double>(t2 - t1).count();
    std::printf("[cpu] KDA bf16 B=1 T=4096 H=8 K=V=128 (%d threads): forward %.3f s, backward %.3f s, "
                "total %.3f s wall; %.3f s CPU\n", omp_get_max_threads(), fw, bw, fw + bw,
                static_cast<double>(c2 - c0) / CLOCKS_PER_SEC);
    EXPECT_LE(fw + bw, 5.0);
  }
}

}  // namespace
}  // namespace linattn::test::cpu
