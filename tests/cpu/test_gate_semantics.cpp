// Gate semantics of SPEC.md on the CPU backend and the float64 reference: g = -inf is a valid full
// forget (exp(-inf) = 0) with the recurrence's finite result, forward and backward; huge finite
// negative gates (-1e5 .. -FLT_MAX) next to ordinary ones stay within SPEC's tolerance; an
// in-kernel gate whose exp(A_log) overflows gives the formula's limit, never NaN. Every output is
// poisoned (NaN) before each run, so an unwritten or NaN element fails.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu/common/driver.hpp"
#include "test_cpu_util.hpp"

namespace linattn::test::cpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  Family family;
  DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(family_name(info.param.family)) + "_" + dtype_name(info.param.dtype);
}

// Sets the gate of token `t` (every head and channel of batch row 0) to x.
void set_gate(const Config& c, Data& d, int64_t t, double x) {
  const int64_t w = c.HV() * (c.vector_gate() ? c.K : 1);
  for (int64_t i = 0; i < w; ++i) d.g.set(t * w + i, x);
}

void expect_close(const char* what, const HostTensor& x, const HostTensor& ref, double tol,
                  const std::string& ctx) {
  if (!ref.present()) return;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(ref.get(i))) << ctx << ": the reference's " << what << "[" << i << "] is not finite";
  }
  const double e = rel_err(x, ref);
  EXPECT_LE(e, tol) << ctx << ": " << what << " rel_err " << e;
}

// The CPU backend (both backward forms) and the reference on d: every output finite and within
// SPEC of the reference.
void check_against_reference(const Config& c, const Data& d, const std::string& ctx) {
  const double tol = tolerance_for(c.dtype);
  const FwdResult ref = run_forward(c, d.as_f64(), /*reference=*/true);
  const FwdResult got = run_forward(c, d, /*reference=*/false);
  expect_close("o", got.o, ref.o, tol, ctx);
  expect_close("final_state", got.final_state, ref.final_state, tol, ctx);
  const BwdResult rb = run_backward(c, d.as_f64(), /*reference=*/true);
  for (bool wy : {true, false}) {
    const BwdResult gb = run_backward(c, d, /*reference=*/false, /*saved=*/nullptr, /*token_replay=*/!wy);
    const std::string cx = ctx + (wy ? " (WY backward)" : " (token backward)");
    expect_close("dq", gb.dq, rb.dq, tol, cx);
    expect_close("dk", gb.dk, rb.dk, tol, cx);
    expect_close("dv", gb.dv, rb.dv, tol, cx);
    expect_close("dg", gb.dg, rb.dg, tol, cx);
    expect_close("dg_gamma", gb.dg_gamma, rb.dg_gamma, tol, cx);
    expect_close("dbeta", gb.dbeta, rb.dbeta, tol, cx);
    expect_close("dA_log", gb.dA_log, rb.dA_log, tol, cx);
    expect_close("ddt_bias", gb.ddt_bias, rb.ddt_bias, tol, cx);
    expect_close("dh0", gb.dh0, rb.dh0, tol, cx);
  }
}

Config base_config(const Case& p) {
  Config c;
  c.family = p.family;
  c.dtype = p.dtype;
  c.B = 1;
  c.T = 150;  // three chunks, the last partial
  c.H = 2;
  c.K = 16;
  c.V = 16;
  c.h0 = true;
  c.final_state = true;
  return c;
}

class GateSemantics : public ::testing::TestWithParam<Case> {};

// g = -inf at chunk starts, ends and inside, alone and in runs.
TEST_P(GateSemantics, NegativeInfinityIsAFullForget) {
  const Config c = base_config(GetParam());
  const std::vector<std::vector<int64_t>> placements = {
      {0}, {1}, {63}, {64}, {100}, {149}, {5, 6, 7, 70}, {10, 20, 30, 40, 50, 60, 70, 80, 90}};
  for (const auto& ts : placements) {
    Data d = make_data(c);
    std::string ctx = "g = -inf at tokens";
    for (int64_t t : ts) {
      set_gate(c, d, t, -kInf);
      ctx += " " + std::to_string(t);
    }
    check_against_reference(c, d, ctx);
  }
  Data all = make_data(c);
  for (int64_t t = 0; t < c.T; ++t) set_gate(c, all, t, -kInf);
  check_against_reference(c, all, "g = -inf at every token");
}

// The full forget restarts the recurrence: from a -inf gate at token t on, outputs and the final
// state equal those of the sequence that starts at t with no initial state (the forgotten
// initial state and tokens must leave no trace, NaN or otherwise).
TEST_P(GateSemantics, FullForgetRestartsTheRecurrence) {
  const Config c = base_config(GetParam());
  for (int64_t t : {int64_t{0}, int64_t{37}, int64_t{64}, int64_t{101}}) {
    Data d = make_data(c);
    set_gate(c, d, t, -kInf);
    Config tail = c;
    tail.T = c.T - t;
    tail.h0 = false;
    Data dt = make_data(tail);  // replaced below by the tail of d
    auto slice = [&](const HostTensor& full, HostTensor& part) {
      if (!full.present()) return;
      const std::size_t row = full.bytes.size() / static_cast<std::size_t>(c.T);
      std::memcpy(part.bytes.data(), full.bytes.data() + row * static_cast<std::size_t>(t), part.bytes.size());
    };
    slice(d.q, dt.q);
    slice(d.k, dt.k);
    slice(d.v, dt.v);
    slice(d.g, dt.g);
    slice(d.beta, dt.beta);
    for (bool reference : {false, true}) {
      const FwdResult full = run_forward(c, reference ? d.as_f64() : d, reference);
      const FwdResult part = run_forward(tail, reference ? dt.as_f64() : dt, reference);
      const std::string ctx = std::string(reference ? "reference" : "CPU") + ", -inf at " + std::to_string(t);
      // o of tokens t.. of the full run against the tail run
      const int64_t row = c.HV() * c.V;
      HostTensor o_tail = part.o;
      for (int64_t i = 0; i < o_tail.numel(); ++i) o_tail.set(i, full.o.get(t * row + i));
      expect_close("o (tokens from the forget on)", o_tail, part.o, tolerance_for(c.dtype), ctx);
      expect_close("final_state", full.final_state, part.final_state, tolerance_for(c.dtype), ctx);
    }
  }
}

// Huge finite negative gates next to ordinary ones in one chunk: a full forget to every
// precision, within SPEC (float32 lost 4e-3 .. 0.24 here before the gate floor).
TEST_P(GateSemantics, HugeFiniteNegativeGates) {
  const Config c = base_config(GetParam());
  const double flt_max = std::numeric_limits<float>::max();
  for (double x : {-120.0, -1e5, -1e30, -flt_max}) {
    Data d = make_data(c);
    for (int64_t t : {3, 40, 64, 65, 120}) set_gate(c, d, t, x);
    check_against_reference(c, d, "gates of " + std::to_string(x));
  }
  // a run of them: the cumulative sums would reach -64 * |x|
  Data d = make_data(c);
  for (int64_t t = 64; t < 100; ++t) set_gate(c, d, t, -1e30);
  check_against_reference(c, d, "tokens 64..99 at -1e30");
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (Family f : {Family::kSimpleGLA, Family::kGLA, Family::kGDN, Family::kKDA}) {
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) v.push_back({f, dt});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cpu, GateSemantics, ::testing::ValuesIn(all_cases()), case_name);

// simple GLA's per-head constant gate g_gamma = -inf: every token forgets everything before it.
TEST(GateSemanticsSimpleGLA, GGammaNegativeInfinity) {
  Config c = base_config({Family::kSimpleGLA, DType::kFloat32});
  c.g_gamma = true;
  for (bool with_g : {true, false}) {
    c.has_g = with_g;
    Data d = make_data(c);
    d.g_gamma.set(0, -kInf);
    check_against_reference(c, d, with_g ? "g_gamma[0] = -inf with g" : "g_gamma[0] = -inf alone");
  }
}

// The in-kernel gate with exp(A_log) beyond float32's range (and float64's): the gate is its
// limit (-inf: a full forget; or -0 where softplus(x) underflows), never NaN; raw gates of
// -inf / +inf (softplus 0 / inf) too.
TEST(GateSemanticsInKernel, ALogOverflow) {
  for (Family f : {Family::kGDN, Family::kKDA}) {
    Config c = base_config({f, DType::kFloat32});
    c.gate = Gate::kSoftplus;
    for (double a : {100.0, 1e4, 3e38, -1e4}) {
      for (bool inf_raw : {false, true}) {
        Data d = make_data(c);
        d.A_log.set(0, a);
        if (inf_raw) {
          set_gate(c, d, 3, -kInf);
          set_gate(c, d, 70, kInf);
        }
        check_against_reference(c, d, std::string(family_name(f)) + " A_log[0] = " + std::to_string(a) +
                                          (inf_raw ? " with raw gates of -inf and +inf" : ""));
      }
    }
  }
}

TEST(GateSemanticsInKernel, LowerBoundALogOverflow) {
  Config c = base_config({Family::kKDA, DType::kFloat32});
  c.gate = Gate::kLowerBound;
  for (double a : {100.0, 1e4}) {
    Data d = make_data(c);
    d.A_log.set(0, a);
    check_against_reference(c, d, "lower-bound gate, A_log[0] = " + std::to_string(a));
  }
}

}  // namespace
}  // namespace linattn::test::cpu
