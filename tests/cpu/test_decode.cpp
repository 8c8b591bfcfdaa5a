// The decode path (linattn::decode) on the CPU: against the float64 token recurrence
// (reference_forward), its state-pool semantics against per-prefix recurrences, float32 within
// SPEC, and every validation rule (error, nothing written).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "decode_cases.hpp"

namespace linattn::test {
namespace {

// Tokens [bos, bos + len) of a [1, T, ...] tensor as a new [1, len, ...] tensor.
HostTensor slice_tokens(const HostTensor& t, int64_t bos, int64_t len) {
  if (!t.present()) return {};
  const int64_t row = t.numel() / t.view.shape[1];
  HostTensor s;
  s.bytes.assign(static_cast<size_t>(len * row) * dtype_size(t.dtype()), 0);
  s.view = t.view;
  s.view.data = s.bytes.data();
  s.view.shape[1] = len;
  int64_t stride = 1;
  for (int i = s.view.ndim - 1; i >= 0; --i) {
    s.view.strides[i] = stride;
    stride *= s.view.shape[i];
  }
  for (int64_t i = 0; i < len * row; ++i) s.set(i, t.get(bos * row + i));
  return s;
}

// One state slot [HV, a, b] of a pool as a [1, HV, a, b] tensor.
HostTensor slot_of(const HostTensor& pool, int64_t slot) {
  const auto& sh = pool.view.shape;
  HostTensor s(pool.dtype(), {1, sh[1], sh[2], sh[3]});
  const int64_t n = s.numel();
  for (int64_t i = 0; i < n; ++i) s.set(i, pool.get(slot * n + i));
  return s;
}

TEST(CpuDecode, MatchesTokenRecurrence) {
  int checked = 0;
  for (const DecodeConfig& cfg : decode_configs()) {
    if (cfg.beta_per_v || cfg.pool == Pool::kIndices1D || cfg.pool == Pool::kIndices2D) continue;
    DecodeCase c = make_decode_case(cfg);
    Status s;
    DecodeCase e = expected_decode(c, &s);
    ASSERT_TRUE(s.ok()) << cfg.name() << ": " << s.message;
    // the same problem through the float64 token recurrence
    DecodeCase r = to_float64(c);
    r.o.poison();
    HostTensor fs(DType::kFloat64, {r.N, cfg.HV, cfg.v_first ? cfg.V : cfg.K, cfg.v_first ? cfg.K : cfg.V});
    fs.poison();
    ForwardInputs in;
    in.q = r.q.view;
    in.k = r.k.view;
    in.v = r.v.view;
    in.g = r.g.view;
    in.g_gamma = r.g_gamma.view;
    in.beta = r.beta.view;
    in.A_log = r.A_log.view;
    in.dt_bias = r.dt_bias.view;
    in.initial_state = r.state.view;
    in.cu_seqlens = r.cu.view;
    ForwardOutputs out;
    out.o = r.o.view;
    out.final_state = fs.view;
    s = reference_forward(cfg.family, in, out, r.options());
    ASSERT_TRUE(s.ok()) << cfg.name() << ": " << s.message;
    EXPECT_LT(rel_err(e.o, r.o), 1e-12) << cfg.name();
    const HostTensor& dec_final = cfg.final_out ? e.final_state : e.state;
    if (dec_final.present() && (cfg.final_out || cfg.inplace)) {  // else the decode keeps no state
      // empty sequences keep their state; compare the sequences that ran
      EXPECT_LT(rel_err(dec_final, fs), 1e-12) << cfg.name();
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

// Per-token states and accepted tokens: the state written after token t of sequence n equals the
// recurrence over tokens 0..t from the slot sequence n reads.
TEST(CpuDecode, SpeculativePoolMatchesPrefixRecurrence) {
  for (Family f : {Family::kKDA, Family::kGDN}) {
    DecodeConfig cfg;
    cfg.family = f;
    cfg.lens = {4, 3, 0, 4, 2};
    cfg.varlen = true;
    cfg.pool = Pool::kIndices2D;
    cfg.t_max = 4;
    cfg.accepted = true;
    cfg.padding = true;
    cfg.K = 32;
    cfg.V = 16;
    DecodeCase c = make_decode_case(cfg);
    Status s;
    const DecodeCase before = to_float64(c);
    DecodeCase e = expected_decode(c, &s);
    ASSERT_TRUE(s.ok()) << s.message;
    int64_t bos = 0, prefixes = 0;
    for (int64_t n = 0; n < c.N; ++n) {
      const int64_t len = cfg.lens[n];
      const int64_t a = static_cast<int64_t>(c.accepted.get(n));
      const int64_t r = static_cast<int64_t>(c.indices.get(n * c.t_max + a - 1));
      if (len > 0 && r < 0) {  // padding: o rows are zero
        for (int64_t t = 0; t < len; ++t)
          for (int64_t i = 0; i < cfg.HV * cfg.V; ++i) EXPECT_EQ(e.o.get((bos + t) * cfg.HV * cfg.V + i), 0.0);
      }
      for (int64_t t = 0; r >= 0 && t < len; ++t) {
        const int64_t w = static_cast<int64_t>(c.indices.get(n * c.t_max + t));
        if (w < 0) continue;
        DecodeCase sub = before;
        ForwardInputs in;
        HostTensor q = slice_tokens(before.q, bos, t + 1), k = slice_tokens(before.k, bos, t + 1),
                   v = slice_tokens(before.v, bos, t + 1), g = slice_tokens(before.g, bos, t + 1),
                   b = slice_tokens(before.beta, bos, t + 1), h0 = slot_of(before.state, r);
        HostTensor o(DType::kFloat64, {1, t + 1, cfg.HV, cfg.V}), fs(DType::kFloat64, {1, cfg.HV, cfg.K, cfg.V});
        in.q = q.view;
        in.k = k.view;
        in.v = v.view;
        in.g = g.view;
        in.beta = b.view;
        in.initial_state = h0.view;
        ForwardOutputs out;
        out.o = o.view;
        out.final_state = fs.view;
        s = reference_forward(f, in, out, sub.options());
        ASSERT_TRUE(s.ok()) << s.message;
        EXPECT_LT(rel_err(slot_of(e.state, w), fs), 1e-12) << "seq " << n << " token " << t;
        ++prefixes;
      }
      bos += len;
    }
    EXPECT_GE(prefixes, 5);
  }
}

TEST(CpuDecode, Float32WithinSpec) {
  for (const DecodeConfig& cfg : decode_configs()) {
    DecodeCase c = make_decode_case(cfg);
    const HostTensor pool0 = c.state;
    Status s;
    DecodeCase e = expected_decode(c, &s);
    ASSERT_TRUE(s.ok()) << cfg.name() << ": " << s.message;
    s = decode(cfg.family, c.inputs(), c.outputs(), c.options());
    ASSERT_TRUE(s.ok()) << cfg.name() << ": " << s.message;
    const double tol = tolerance_for(cfg.dtype);
    EXPECT_LT(rel_err(c.o, e.o), tol) << cfg.name();
    if (cfg.final_out) EXPECT_LT(rel_err(c.final_state, e.final_state), tol) << cfg.name();
    const PoolCheck pc = check_pool(c.state, e.state, pool0, c.written_slots);
    EXPECT_LT(pc.err, tol) << cfg.name();
    EXPECT_TRUE(pc.others_unchanged) << cfg.name();
  }
}

// Each bad input: an error naming the problem, o still poisoned, the pool unchanged.
TEST(CpuDecode, RefusesBadInputWritingNothing) {
  DecodeConfig base;
  base.lens = {2, 2, 2};
  base.pool = Pool::kIndices2D;
  base.t_max = 2;
  base.accepted = true;
  base.K = 32;
  base.V = 32;
  struct Mutation {
    const char* what;
    std::function<void(DecodeCase&, DecodeInputs&, DecodeOutputs&)> apply;
  };
  HostTensor keep_f32;
  const std::vector<Mutation> muts = {
      {"index past the pool", [](DecodeCase& c, DecodeInputs&, DecodeOutputs&) { c.indices.set(1, double(c.P)); }},
      {"accepted 0", [](DecodeCase& c, DecodeInputs&, DecodeOutputs&) { c.accepted.set(0, 0); }},
      {"accepted > T_max", [](DecodeCase& c, DecodeInputs&, DecodeOutputs&) { c.accepted.set(2, 3); }},
      {"indices float", [&](DecodeCase& c, DecodeInputs& in, DecodeOutputs&) {
         keep_f32 = c.indices.as(DType::kFloat32);
         in.ssm_state_indices = keep_f32.view;
       }},
      {"indices wrong length", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) { in.ssm_state_indices.shape[0] -= 1; }},
      {"T_max shorter than T", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) {
         in.ssm_state_indices.shape[1] = 1;
         in.ssm_state_indices.strides[0] = 1;
       }},
      {"per-token indices not in place", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) { in.inplace_final_state = false; }},
      {"accepted without 2-D indices", [](DecodeCase& c, DecodeInputs& in, DecodeOutputs&) {
         in.ssm_state_indices.ndim = 1;
         in.ssm_state_indices.shape[0] = c.N;
         in.ssm_state_indices.strides[0] = 1;
       }},
      {"pool float16", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) { in.state.dtype = DType::kFloat16; }},
      {"pool wrong HV", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) { in.state.shape[1] += 1; }},
      {"pool inner dims not dense", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) { in.state.strides[2] += 1; }},
      {"indices without pool", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) { in.state = TensorView{}; }},
      {"o aliases the pool", [](DecodeCase& c, DecodeInputs& in, DecodeOutputs& out) { out.o.data = in.state.data; (void)c; }},
      {"o aliases q", [](DecodeCase&, DecodeInputs& in, DecodeOutputs& out) { out.o.data = in.q.data; }},
      {"final_state with in place", [](DecodeCase& c, DecodeInputs&, DecodeOutputs& out) {
         static HostTensor fs;
         fs = HostTensor(DType::kFloat32, {c.N, c.cfg.HV, c.cfg.K, c.cfg.V});
         out.final_state = fs.view;
       }},
      {"status float", [&](DecodeCase&, DecodeInputs&, DecodeOutputs& out) {
         keep_f32 = HostTensor(DType::kFloat32, {1});
         out.status = keep_f32.view;
       }},
      {"beta with the wrong head count", [&](DecodeCase&, DecodeInputs& in, DecodeOutputs&) { in.beta.shape[2] += 1; }},
      {"q/k head size unlike g's", [](DecodeCase&, DecodeInputs& in, DecodeOutputs&) {
         in.q.shape[3] = in.k.shape[3] = 300;
       }},
  };
  for (const Mutation& m : muts) {
    DecodeCase c = make_decode_case(base);
    DecodeInputs in = c.inputs();
    DecodeOutputs out = c.outputs();
    m.apply(c, in, out);
    const HostTensor pool0 = c.state;
    const Status s = decode(base.family, in, out, c.options());
    EXPECT_FALSE(s.ok()) << m.what;
    EXPECT_FALSE(s.message.empty()) << m.what;
    for (int64_t i = 0; i < c.o.numel(); ++i) {
      if (!std::isnan(c.o.get(i))) {
        ADD_FAILURE() << m.what << ": o was written";
        break;
      }
    }
    EXPECT_EQ(std::memcmp(pool0.bytes.data(), c.state.bytes.data(), pool0.bytes.size()), 0) << m.what;
  }
}

TEST(CpuDecode, DeterministicAndInPlaceEqualsSeparateOutput) {
  DecodeConfig cfg;
  cfg.lens = {3, 3};
  cfg.pool = Pool::kInitial;
  DecodeCase a = make_decode_case(cfg);
  DecodeCase b = a;
  cfg.inplace = false;
  cfg.final_out = true;
  DecodeCase sep = a;
  sep.cfg = cfg;
  sep.final_state = HostTensor(DType::kFloat32, {a.N, cfg.HV, cfg.K, cfg.V});
  sep.final_state.poison();
  ASSERT_TRUE(decode(cfg.family, a.inputs(), a.outputs(), a.options()).ok());
  ASSERT_TRUE(decode(cfg.family, b.inputs(), b.outputs(), b.options()).ok());
  ASSERT_TRUE(decode(cfg.family, sep.inputs(), sep.outputs(), sep.options()).ok());
  EXPECT_EQ(a.o.bytes, b.o.bytes);
  EXPECT_EQ(a.state.bytes, b.state.bytes);
  EXPECT_EQ(a.o.bytes, sep.o.bytes);
  EXPECT_EQ(a.state.bytes, sep.final_state.bytes);
}

}  // namespace
}  // namespace linattn::test
