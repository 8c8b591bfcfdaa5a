// One test per input rule of src/common/validate.cpp (and the workspace / saved-buffer checks of
// api.cpp), through the public API on CPU tensors. Each test asserts the status code, that the
// message names the offending argument, and that no output was written (every output buffer is
// filled with a sentinel byte pattern before the call and compared after).
//
// Rules about the inputs are checked through every entry point that validates them: forward,
// backward, reference_forward, reference_backward and the size queries.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "linattn/linattn.hpp"
#include "test_util.hpp"

namespace linattn::test {
namespace {

constexpr DType f32 = DType::kFloat32;
constexpr unsigned char kSentinel = 0x5A;
constexpr Device kCudaDevice{DeviceType::kCUDA, 0};

void sentinel(HostTensor& t) { std::fill(t.bytes.begin(), t.bytes.end(), kSentinel); }

bool untouched(const HostTensor& t) {
  for (unsigned char b : t.bytes)
    if (b != kSentinel) return false;
  return true;
}

// A complete, valid call of one family (forward and backward, every optional output), which each
// test breaks in exactly one way. Sizes: B = 2, T = 8, H = 2, HV = 4 (G = 2), K = 8, V = 16.
struct Call {
  Family fam;
  Options opt;
  int64_t B = 2, T = 8, H = 2, HV = 4, K = 8, V = 16;
  HostTensor q, k, v, g, g_gamma, beta, A_log, dt_bias, h0, cu;
  HostTensor o, fs, h;                                                      // forward outputs
  HostTensor d_o, dht;                                                      // backward inputs
  HostTensor dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0;        // backward outputs
  ForwardInputs fin;
  ForwardOutputs fout;
  BackwardInputs bin;  // its .fwd is replaced by fin at each call
  BackwardOutputs bout;

  // varlen: B = 1 with cu_seqlens = {0, 3, 8}.
  explicit Call(Family f, bool varlen = false) : fam(f) {
    if (varlen) B = 1;
    const int64_t N = varlen ? 2 : B;
    const int64_t NT = varlen ? 2 : 1;
    const bool vg = f == Family::kKDA || f == Family::kGLA;
    const bool delta = f == Family::kKDA || f == Family::kGDN;
    q = HostTensor(f32, {B, T, H, K});
    k = HostTensor(f32, {B, T, H, K});
    v = HostTensor(f32, {B, T, HV, V});
    fill_normal(q);
    fill_normal(k);
    fill_normal(v);
    g = vg ? HostTensor(f32, {B, T, HV, K}) : HostTensor(f32, {B, T, HV});
    fill_logsigmoid_gate(g);
    if (f == Family::kSimpleGLA) {
      g_gamma = HostTensor(f32, {HV});
      fill_uniform(g_gamma, -0.1, -0.01);
    }
    if (delta) {
      beta = HostTensor(f32, {B, T, HV});
      fill_uniform(beta, 0.1, 0.9);
    }
    h0 = HostTensor(f32, {N, HV, K, V});
    fill_normal(h0);
    if (varlen) {
      cu = HostTensor(DType::kInt32, {3});
      int32_t* c = static_cast<int32_t*>(cu.view.data);
      c[0] = 0;
      c[1] = 3;
      c[2] = 8;
    }
    o = HostTensor(f32, {B, T, HV, V});
    fs = HostTensor(f32, {N, HV, K, V});
    h = HostTensor(f32, {varlen ? 1 : B, NT, HV, K, V});
    d_o = HostTensor(f32, {B, T, HV, V});
    fill_normal(d_o);
    dht = HostTensor(f32, {N, HV, K, V});
    fill_normal(dht);
    dq = q;
    dk = k;
    dv = v;
    dg = g;
    if (g_gamma.present()) dg_gamma = g_gamma;
    if (beta.present()) dbeta = beta;
    dh0 = h0;
    for (HostTensor* t : outputs()) sentinel(*t);

    fin.q = q.view;
    fin.k = k.view;
    fin.v = v.view;
    fin.g = g.view;
    fin.g_gamma = g_gamma.view;
    fin.beta = beta.view;
    fin.initial_state = h0.view;
    fin.cu_seqlens = cu.view;
    fout.o = o.view;
    fout.final_state = fs.view;
    fout.h = h.view;
    bin.d_o = d_o.view;
    bin.dht = dht.view;
    bout.dq = dq.view;
    bout.dk = dk.view;
    bout.dv = dv.view;
    bout.dg = dg.view;
    bout.dg_gamma = dg_gamma.view;
    bout.dbeta = dbeta.view;
    bout.dh0 = dh0.view;
  }

  // KDA / GDN: the in-kernel gate with A_log and dt_bias (and their gradients).
  void enable_gate_in_kernel() {
    opt.use_gate_in_kernel = true;
    A_log = HostTensor(f32, {HV});
    fill_uniform(A_log, -1, 0.5);
    dt_bias = fam == Family::kKDA ? HostTensor(f32, {HV * K}) : HostTensor(f32, {HV});
    fill_normal(dt_bias);
    dA_log = A_log;
    ddt_bias = dt_bias;
    sentinel(dA_log);
    sentinel(ddt_bias);
    fin.A_log = A_log.view;
    fin.dt_bias = dt_bias.view;
    bout.dA_log = dA_log.view;
    bout.ddt_bias = ddt_bias.view;
  }

  std::vector<HostTensor*> outputs() {
    return {&o, &fs, &h, &dq, &dk, &dv, &dg, &dg_gamma, &dbeta, &dA_log, &ddt_bias, &dh0};
  }

  BackwardInputs backward_inputs() const {
    BackwardInputs in = bin;
    in.fwd = fin;
    return in;
  }

  Status forward() { return linattn::forward(fam, fin, fout, opt); }
  Status backward() { return linattn::backward(fam, backward_inputs(), bout, opt); }
  Status ref_forward() { return reference_forward(fam, fin, fout, opt); }
  Status ref_backward() { return reference_backward(fam, backward_inputs(), bout, opt); }
};

void expect_status(const Status& s, StatusCode code, const std::string& needle, const char* entry) {
  EXPECT_EQ(static_cast<int>(s.code), static_cast<int>(code))
      << entry << " returned \"" << s.message << "\"";
  EXPECT_NE(s.message.find(needle), std::string::npos)
      << entry << ": message \"" << s.message << "\" does not mention \"" << needle << "\"";
}

void expect_nothing_written(Call& c, const char* entry) {
  const char* names[] = {"o", "final_state", "h", "dq", "dk", "dv", "dg", "dg_gamma",
                         "dbeta", "dA_log", "ddt_bias", "dh0"};
  int i = 0;
  for (HostTensor* t : c.outputs()) {
    EXPECT_TRUE(untouched(*t)) << entry << " wrote " << names[i] << " although it failed";
    ++i;
  }
}

// A rule about the forward *inputs*: every entry point refuses the call.
void expect_input_rejected(Call& c, StatusCode code, const std::string& needle) {
  expect_status(c.forward(), code, needle, "forward");
  expect_nothing_written(c, "forward");
  expect_status(c.backward(), code, needle, "backward");
  expect_nothing_written(c, "backward");
  expect_status(c.ref_forward(), code, needle, "reference_forward");
  expect_nothing_written(c, "reference_forward");
  expect_status(c.ref_backward(), code, needle, "reference_backward");
  expect_nothing_written(c, "reference_backward");
  const std::size_t kUnset = 0xDEADBEEF;
  std::size_t bytes = kUnset;
  expect_status(forward_workspace_size(c.fam, c.fin, c.opt, &bytes), code, needle,
                "forward_workspace_size");
  expect_status(backward_workspace_size(c.fam, c.backward_inputs(), c.opt, &bytes), code, needle,
                "backward_workspace_size");
  expect_status(saved_bytes(c.fam, c.fin, c.opt, &bytes), code, needle, "saved_bytes");
  EXPECT_EQ(bytes, kUnset) << "a failing query wrote its result";
}

// A rule about the forward outputs only.
void expect_forward_rejected(Call& c, StatusCode code, const std::string& needle) {
  expect_status(c.forward(), code, needle, "forward");
  expect_nothing_written(c, "forward");
  expect_status(c.ref_forward(), code, needle, "reference_forward");
  expect_nothing_written(c, "reference_forward");
}

// A rule about the backward's own inputs / outputs.
void expect_backward_rejected(Call& c, StatusCode code, const std::string& needle) {
  expect_status(c.backward(), code, needle, "backward");
  expect_nothing_written(c, "backward");
  expect_status(c.ref_backward(), code, needle, "reference_backward");
  expect_nothing_written(c, "reference_backward");
}

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
constexpr StatusCode kUnsupported = StatusCode::kNotSupported;

// ================================================================ the base call is valid
class ValidationFamily : public ::testing::TestWithParam<Family> {};

TEST_P(ValidationFamily, BaseCallIsAccepted) {
  for (bool varlen : {false, true}) {
    Call c(GetParam(), varlen);
    if (c.fam == Family::kKDA || c.fam == Family::kGDN) c.enable_gate_in_kernel();
    Status s = c.ref_forward();
    EXPECT_TRUE(s.ok()) << s.message;
    s = c.ref_backward();
    EXPECT_TRUE(s.ok()) << s.message;
    std::size_t bytes = 0;
    EXPECT_TRUE(forward_workspace_size(c.fam, c.fin, c.opt, &bytes).ok());
    EXPECT_TRUE(backward_workspace_size(c.fam, c.backward_inputs(), c.opt, &bytes).ok());
    EXPECT_TRUE(saved_bytes(c.fam, c.fin, c.opt, &bytes).ok());
    int64_t nt = 0;
    EXPECT_TRUE(num_chunks(c.fin, &nt).ok());
    EXPECT_EQ(nt, 2);  // B = 2 x 1 chunk, or 2 sequences x 1 chunk
  }
}

// ================================================================ dtypes
TEST_P(ValidationFamily, QIntDtype) {
  Call c(GetParam());
  c.fin.q.dtype = DType::kInt32;
  expect_input_rejected(c, kInvalid, "q must be float");
}

TEST_P(ValidationFamily, KDtypeDiffersFromQ) {
  Call c(GetParam());
  c.fin.k.dtype = DType::kBFloat16;
  expect_input_rejected(c, kInvalid, "k must have the dtype of q");
}

TEST_P(ValidationFamily, VDtypeDiffersFromQ) {
  Call c(GetParam());
  c.fin.v.dtype = DType::kFloat16;
  expect_input_rejected(c, kInvalid, "v must have the dtype of q");
}

TEST_P(ValidationFamily, GIntDtype) {
  Call c(GetParam());
  c.fin.g.dtype = DType::kInt32;
  expect_input_rejected(c, kInvalid, "g must be float");
}

TEST(Validation, GGammaIntDtype) {
  Call c(Family::kSimpleGLA);
  c.fin.g_gamma.dtype = DType::kInt64;
  expect_input_rejected(c, kInvalid, "g_gamma must be float");
}

TEST(Validation, BetaIntDtype) {
  Call c(Family::kGDN);
  c.fin.beta.dtype = DType::kInt32;
  expect_input_rejected(c, kInvalid, "beta must be float");
}

TEST(Validation, ALogIntDtype) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.fin.A_log.dtype = DType::kInt32;
  expect_input_rejected(c, kInvalid, "A_log must be float");
}

TEST(Validation, DtBiasIntDtype) {
  Call c(Family::kGDN);
  c.enable_gate_in_kernel();
  c.fin.dt_bias.dtype = DType::kInt32;
  expect_input_rejected(c, kInvalid, "dt_bias must be float");
}

TEST_P(ValidationFamily, InitialStateBf16) {
  Call c(GetParam());
  c.fin.initial_state.dtype = DType::kBFloat16;
  expect_input_rejected(c, kInvalid, "initial_state must be float32");
}

TEST_P(ValidationFamily, CuSeqlensFloat) {
  Call c(GetParam(), /*varlen=*/true);
  c.fin.cu_seqlens.dtype = DType::kFloat32;
  expect_input_rejected(c, kInvalid, "cu_seqlens must be int32 or int64");
}

TEST_P(ValidationFamily, OutputODtypeDiffersFromV) {
  Call c(GetParam());
  c.fout.o.dtype = DType::kBFloat16;
  expect_forward_rejected(c, kInvalid, "o must have the dtype of v");
}

TEST_P(ValidationFamily, FinalStateBf16) {
  Call c(GetParam());
  c.fout.final_state.dtype = DType::kBFloat16;
  expect_forward_rejected(c, kInvalid, "final_state must be float32");
}

TEST_P(ValidationFamily, HBf16) {
  Call c(GetParam());
  c.fout.h.dtype = DType::kBFloat16;
  expect_forward_rejected(c, kInvalid, "h must be float32");
}

TEST_P(ValidationFamily, DoDtypeDiffersFromV) {
  Call c(GetParam());
  c.bin.d_o.dtype = DType::kBFloat16;
  expect_backward_rejected(c, kInvalid, "d_o must have the dtype of v");
}

TEST_P(ValidationFamily, DhtBf16) {
  Call c(GetParam());
  c.bin.dht.dtype = DType::kBFloat16;
  expect_backward_rejected(c, kInvalid, "dht must be float32");
}

TEST_P(ValidationFamily, DqDtypeDiffersFromQ) {
  Call c(GetParam());
  c.bout.dq.dtype = DType::kFloat64;
  expect_backward_rejected(c, kInvalid, "dq must have the dtype of q");
}

TEST_P(ValidationFamily, DgDtypeDiffersFromG) {
  Call c(GetParam());
  c.bout.dg.dtype = DType::kBFloat16;
  expect_backward_rejected(c, kInvalid, "dg must have the dtype of g");
}

// ================================================================ shapes
TEST_P(ValidationFamily, QNot4D) {
  Call c(GetParam());
  c.fin.q.ndim = 3;
  expect_input_rejected(c, kInvalid, "q must be 4-D");
}

TEST_P(ValidationFamily, VNot4D) {
  Call c(GetParam());
  c.fin.v.ndim = 3;
  expect_input_rejected(c, kInvalid, "v must be 4-D");
}

TEST_P(ValidationFamily, KShapeDiffersFromQ) {
  Call c(GetParam());
  HostTensor k2(f32, {c.B, c.T, c.H, c.K / 2});
  c.fin.k = k2.view;
  expect_input_rejected(c, kInvalid, "k must have the shape of q");
}

TEST_P(ValidationFamily, VBatchDiffers) {
  Call c(GetParam());
  HostTensor v2(f32, {c.B + 1, c.T, c.HV, c.V});
  c.fin.v = v2.view;
  expect_input_rejected(c, kInvalid, "v must have shape");
}

TEST_P(ValidationFamily, VLengthDiffers) {
  Call c(GetParam());
  HostTensor v2(f32, {c.B, c.T - 1, c.HV, c.V});
  c.fin.v = v2.view;
  expect_input_rejected(c, kInvalid, "v must have shape");
}

TEST_P(ValidationFamily, ZeroLength) {
  Call c(GetParam());
  c.fin.q.shape[1] = 0;
  expect_input_rejected(c, kInvalid, "T >= 1");
}

TEST_P(ValidationFamily, ZeroHeads) {
  Call c(GetParam());
  c.fin.q.shape[2] = 0;
  expect_input_rejected(c, kInvalid, "head count");
}

TEST_P(ValidationFamily, HDoesNotDivideHV) {
  Call c(GetParam());
  HostTensor q3(f32, {c.B, c.T, 3, c.K}), k3(f32, {c.B, c.T, 3, c.K});
  c.fin.q = q3.view;
  c.fin.k = k3.view;
  expect_input_rejected(c, kInvalid, "must be a multiple of the query/key head count");
}

TEST_P(ValidationFamily, KTooLarge) {
  Call c(GetParam());
  HostTensor q2(f32, {c.B, c.T, c.H, 300}), k2(f32, {c.B, c.T, c.H, 300});
  c.fin.q = q2.view;
  c.fin.k = k2.view;
  expect_input_rejected(c, kUnsupported, "head size K = 300");
}

TEST_P(ValidationFamily, VTooLarge) {
  Call c(GetParam());
  HostTensor v2(f32, {c.B, c.T, c.HV, 300});
  c.fin.v = v2.view;
  expect_input_rejected(c, kUnsupported, "head size V = 300");
}

TEST(Validation, GPerChannelGivenToScalarGateFamily) {
  Call c(Family::kGDN);
  HostTensor g4(f32, {c.B, c.T, c.HV, c.K});
  c.fin.g = g4.view;
  expect_input_rejected(c, kInvalid, "g must have shape [2, 8, 4]");
}

TEST(Validation, GScalarGivenToPerChannelFamily) {
  Call c(Family::kKDA);
  HostTensor g3(f32, {c.B, c.T, c.HV});
  c.fin.g = g3.view;
  expect_input_rejected(c, kInvalid, "g must have shape [2, 8, 4, 8]");
}

TEST(Validation, GLAGateWrongLastDim) {
  Call c(Family::kGLA);
  HostTensor g4(f32, {c.B, c.T, c.HV, c.V});
  c.fin.g = g4.view;
  expect_input_rejected(c, kInvalid, "g must have shape");
}

TEST(Validation, SimpleGLAGateWrongHeads) {
  Call c(Family::kSimpleGLA);
  HostTensor g3(f32, {c.B, c.T, c.H});
  c.fin.g = g3.view;
  expect_input_rejected(c, kInvalid, "g must have shape");
}

TEST(Validation, GGammaShape) {
  Call c(Family::kSimpleGLA);
  HostTensor gg(f32, {c.H});
  c.fin.g_gamma = gg.view;
  expect_input_rejected(c, kInvalid, "g_gamma must have shape [4]");
}

TEST(Validation, BetaShapePerChannel) {
  Call c(Family::kKDA);
  HostTensor b4(f32, {c.B, c.T, c.HV, c.K});
  c.fin.beta = b4.view;
  expect_input_rejected(c, kInvalid, "beta must have shape");
}

TEST(Validation, BetaShapeQkHeads) {
  Call c(Family::kGDN);
  HostTensor b3(f32, {c.B, c.T, c.H});
  c.fin.beta = b3.view;
  expect_input_rejected(c, kInvalid, "beta must have shape");
}

TEST(Validation, ALogShape) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  HostTensor a(f32, {c.HV * c.K});
  c.fin.A_log = a.view;
  expect_input_rejected(c, kInvalid, "A_log must hold HV = 4 elements");
}

TEST(Validation, DtBiasShapeKDA) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  HostTensor d(f32, {c.HV});
  c.fin.dt_bias = d.view;
  expect_input_rejected(c, kInvalid, "dt_bias must hold HV * K = 32 elements");
}

TEST(Validation, DtBiasShapeGDN) {
  Call c(Family::kGDN);
  c.enable_gate_in_kernel();
  HostTensor d(f32, {c.HV * c.K});
  c.fin.dt_bias = d.view;
  expect_input_rejected(c, kInvalid, "dt_bias must hold HV = 4 elements");
}

TEST_P(ValidationFamily, InitialStateVFirstLayoutWithoutOption) {
  Call c(GetParam());
  HostTensor s(f32, {c.B, c.HV, c.V, c.K});
  c.fin.initial_state = s.view;
  expect_input_rejected(c, kInvalid, "initial_state must have shape [2, 4, 8, 16]");
}

TEST_P(ValidationFamily, InitialStateKFirstLayoutWithVFirstOption) {
  Call c(GetParam());
  c.opt.state_v_first = true;
  expect_input_rejected(c, kInvalid, "initial_state must have shape [2, 4, 16, 8]");
}

TEST_P(ValidationFamily, InitialStatePerBatchWithVarlen) {
  Call c(GetParam(), /*varlen=*/true);
  HostTensor s(f32, {1, c.HV, c.K, c.V});  // N = 2 sequences, not B = 1
  c.fin.initial_state = s.view;
  expect_input_rejected(c, kInvalid, "initial_state must have shape [2, 4, 8, 16]");
}

TEST_P(ValidationFamily, OShape) {
  Call c(GetParam());
  HostTensor o2(f32, {c.B, c.T, c.H, c.V});
  sentinel(o2);
  c.fout.o = o2.view;
  expect_forward_rejected(c, kInvalid, "o must have the shape of v");
  EXPECT_TRUE(untouched(o2));
}

TEST_P(ValidationFamily, FinalStateShape) {
  Call c(GetParam());
  c.fout.final_state.shape[0] = 1;  // a prefix of the buffer: still writable, wrong N
  expect_forward_rejected(c, kInvalid, "final_state must have shape [2, 4, 8, 16]");
}

TEST_P(ValidationFamily, HWrongChunkCount) {
  Call c(GetParam());
  HostTensor h2(f32, {c.B, 2, c.HV, c.K, c.V});
  sentinel(h2);
  c.fout.h = h2.view;
  expect_forward_rejected(c, kInvalid, "h must have shape [2, 1, 4, 8, 16]");
  EXPECT_TRUE(untouched(h2));
}

TEST_P(ValidationFamily, HVarlenNeedsBatchOne) {
  Call c(GetParam(), /*varlen=*/true);
  HostTensor h2(f32, {2, 1, c.HV, c.K, c.V});
  sentinel(h2);
  c.fout.h = h2.view;
  expect_forward_rejected(c, kInvalid, "h must have shape [1, 2, 4, 8, 16]");
  EXPECT_TRUE(untouched(h2));
}

TEST_P(ValidationFamily, DoShape) {
  Call c(GetParam());
  c.bin.d_o.shape[1] = c.T - 1;
  expect_backward_rejected(c, kInvalid, "d_o must have the shape of v");
}

TEST_P(ValidationFamily, DhtShape) {
  Call c(GetParam());
  c.bin.dht.shape[2] = c.V;
  c.bin.dht.shape[3] = c.K;
  expect_backward_rejected(c, kInvalid, "dht must have shape");
}

TEST_P(ValidationFamily, DqShape) {
  Call c(GetParam());
  c.bout.dq.shape[3] = c.K / 2;
  expect_backward_rejected(c, kInvalid, "dq must have the shape of q");
}

TEST_P(ValidationFamily, DkShape) {
  Call c(GetParam());
  c.bout.dk.shape[2] = 1;
  expect_backward_rejected(c, kInvalid, "dk must have the shape of k");
}

TEST_P(ValidationFamily, DvShape) {
  Call c(GetParam());
  c.bout.dv.shape[0] = 1;
  expect_backward_rejected(c, kInvalid, "dv must have the shape of v");
}

TEST_P(ValidationFamily, DgShape) {
  Call c(GetParam());
  c.bout.dg.shape[1] = 1;
  expect_backward_rejected(c, kInvalid, "dg must have the shape of g");
}

TEST(Validation, DbetaShape) {
  Call c(Family::kKDA);
  c.bout.dbeta.shape[2] = 1;
  expect_backward_rejected(c, kInvalid, "dbeta must have the shape of beta");
}

TEST(Validation, DgGammaShape) {
  Call c(Family::kSimpleGLA);
  c.bout.dg_gamma.shape[0] = 1;
  expect_backward_rejected(c, kInvalid, "dg_gamma must have the shape of g_gamma");
}

TEST(Validation, DALogShape) {
  Call c(Family::kGDN);
  c.enable_gate_in_kernel();
  c.bout.dA_log.shape[0] = 1;
  expect_backward_rejected(c, kInvalid, "dA_log must have the shape of A_log");
}

TEST(Validation, DdtBiasShape) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.bout.ddt_bias.shape[0] = c.HV;
  expect_backward_rejected(c, kInvalid, "ddt_bias must have the shape of dt_bias");
}

TEST_P(ValidationFamily, Dh0Shape) {
  Call c(GetParam());
  c.bout.dh0.shape[0] = 1;
  expect_backward_rejected(c, kInvalid, "dh0 must have the shape of initial_state");
}

// ================================================================ variable length
TEST_P(ValidationFamily, CuSeqlensWithBatchNotOne) {
  Call c(GetParam());  // B = 2
  HostTensor cu(DType::kInt64, {2});
  static_cast<int64_t*>(cu.view.data)[1] = 2 * c.T;
  c.fin.cu_seqlens = cu.view;
  expect_input_rejected(c, kInvalid, "with cu_seqlens the batch size must be 1");
}

void set_cu(Call& c, std::vector<int32_t> vals) {
  c.cu = HostTensor(DType::kInt32, {static_cast<int64_t>(vals.size())});
  std::memcpy(c.cu.view.data, vals.data(), vals.size() * 4);
  c.fin.cu_seqlens = c.cu.view;
}

TEST_P(ValidationFamily, CuSeqlensNotStartingAtZero) {
  Call c(GetParam(), true);
  set_cu(c, {1, 3, 8});
  expect_input_rejected(c, kInvalid, "cu_seqlens must start at 0");
}

TEST_P(ValidationFamily, CuSeqlensDecreasing) {
  Call c(GetParam(), true);
  set_cu(c, {0, 5, 3, 8});
  HostTensor s(f32, {3, c.HV, c.K, c.V});  // keep initial_state consistent with N = 3
  c.fin.initial_state = s.view;
  expect_input_rejected(c, kInvalid, "cu_seqlens must be non-decreasing");
}

TEST_P(ValidationFamily, CuSeqlensNotEndingAtT) {
  Call c(GetParam(), true);
  set_cu(c, {0, 3, 7});
  expect_input_rejected(c, kInvalid, "cu_seqlens must end at T = 8");
}

TEST_P(ValidationFamily, CuSeqlens2D) {
  Call c(GetParam(), true);
  c.fin.cu_seqlens.ndim = 2;
  c.fin.cu_seqlens.shape[0] = 1;
  c.fin.cu_seqlens.shape[1] = 3;
  c.fin.cu_seqlens.strides[0] = 3;
  c.fin.cu_seqlens.strides[1] = 1;
  expect_input_rejected(c, kInvalid, "cu_seqlens must be 1-D");
}

TEST_P(ValidationFamily, CuSeqlensTooShort) {
  Call c(GetParam(), true);
  set_cu(c, {0});
  expect_input_rejected(c, kInvalid, "cu_seqlens needs at least 2 entries");
}

TEST_P(ValidationFamily, CuSeqlensNonContiguous) {
  Call c(GetParam(), true);
  c.fin.cu_seqlens.strides[0] = 2;
  expect_input_rejected(c, kInvalid, "cu_seqlens must be contiguous");
}

TEST_P(ValidationFamily, CuSeqlensNull) {
  Call c(GetParam(), true);
  c.fin.cu_seqlens.data = nullptr;
  expect_input_rejected(c, kInvalid, "cu_seqlens has a null data pointer");
}

TEST_P(ValidationFamily, CuSeqlensHostWithoutCuSeqlens) {
  Call c(GetParam());
  HostTensor cu(DType::kInt64, {2});
  c.fin.cu_seqlens_host = cu.view;
  expect_input_rejected(c, kInvalid, "cu_seqlens_host is given without cu_seqlens");
}

TEST_P(ValidationFamily, CuSeqlensHostDiffers) {
  Call c(GetParam(), true);
  HostTensor other(DType::kInt32, {3});
  int32_t* o = static_cast<int32_t*>(other.view.data);
  o[0] = 0;
  o[1] = 4;
  o[2] = 8;
  c.fin.cu_seqlens_host = other.view;
  expect_input_rejected(c, kInvalid, "cu_seqlens_host differs from cu_seqlens");
}

TEST_P(ValidationFamily, CuSeqlensHostNotOnHost) {
  Call c(GetParam(), true);
  HostTensor other = c.cu;
  other.view.device = kCudaDevice;
  c.fin.cu_seqlens_host = other.view;
  expect_input_rejected(c, kInvalid, "cu_seqlens_host must be in host (CPU) memory");
}

// ================================================================ strides, pointers, devices
TEST_P(ValidationFamily, QNonContiguous) {
  Call c(GetParam());
  c.fin.q.strides[2] = c.K * 2;  // heads strided as if K were padded
  expect_input_rejected(c, kInvalid, "q must be contiguous");
}

TEST_P(ValidationFamily, KNonContiguous) {
  Call c(GetParam());
  std::swap(c.fin.k.strides[0], c.fin.k.strides[1]);  // a transposed [T, B] view
  expect_input_rejected(c, kInvalid, "k must be contiguous");
}

TEST_P(ValidationFamily, VNonContiguous) {
  Call c(GetParam());
  c.fin.v.strides[3] = 2;
  expect_input_rejected(c, kInvalid, "v must be contiguous");
}

TEST_P(ValidationFamily, GNonContiguous) {
  Call c(GetParam());
  c.fin.g.strides[c.fin.g.ndim - 1] = 2;
  expect_input_rejected(c, kInvalid, "g must be contiguous");
}

TEST_P(ValidationFamily, InitialStateNonContiguous) {
  Call c(GetParam());
  std::swap(c.fin.initial_state.strides[2], c.fin.initial_state.strides[3]);
  expect_input_rejected(c, kInvalid, "initial_state must be contiguous");
}

TEST_P(ValidationFamily, ONonContiguous) {
  Call c(GetParam());
  c.fout.o.strides[0] = c.fout.o.strides[0] + 1;
  expect_forward_rejected(c, kInvalid, "o must be contiguous");
}

TEST_P(ValidationFamily, DqNonContiguous) {
  Call c(GetParam());
  c.bout.dq.strides[3] = 3;
  expect_backward_rejected(c, kInvalid, "dq must be contiguous");
}

TEST_P(ValidationFamily, SizeOneDimsMayHaveAnyStrideIsAccepted) {
  Call c(GetParam(), /*varlen=*/true);  // B = 1
  c.fin.q.strides[0] = 12345;
  c.bout.dv.strides[0] = 7;
  EXPECT_TRUE(c.ref_forward().ok());
  EXPECT_TRUE(c.ref_backward().ok());
}

TEST_P(ValidationFamily, QNullData) {
  Call c(GetParam());
  c.fin.q.data = nullptr;
  expect_input_rejected(c, kInvalid, "q has a null data pointer");
}

TEST_P(ValidationFamily, VNullData) {
  Call c(GetParam());
  c.fin.v.data = nullptr;
  expect_input_rejected(c, kInvalid, "v has a null data pointer");
}

TEST_P(ValidationFamily, GNullData) {
  Call c(GetParam());
  c.fin.g.data = nullptr;
  expect_input_rejected(c, kInvalid, "g has a null data pointer");
}

TEST_P(ValidationFamily, InitialStateNullData) {
  Call c(GetParam());
  c.fin.initial_state.data = nullptr;
  expect_input_rejected(c, kInvalid, "initial_state has a null data pointer");
}

TEST_P(ValidationFamily, ONullData) {
  Call c(GetParam());
  c.fout.o.data = nullptr;
  expect_forward_rejected(c, kInvalid, "o has a null data pointer");
}

TEST_P(ValidationFamily, DvNullData) {
  Call c(GetParam());
  c.bout.dv.data = nullptr;
  expect_backward_rejected(c, kInvalid, "dv has a null data pointer");
}

TEST_P(ValidationFamily, KOnOtherDevice) {
  Call c(GetParam());
  c.fin.k.device = kCudaDevice;
  expect_input_rejected(c, kInvalid, "k is on a different device than q");
}

TEST_P(ValidationFamily, QOnOtherDeviceThanTheRest) {
  Call c(GetParam());
  c.fin.q.device = kCudaDevice;
  expect_input_rejected(c, kInvalid, "k is on a different device than q");
}

TEST_P(ValidationFamily, GOnOtherDevice) {
  Call c(GetParam());
  c.fin.g.device = kCudaDevice;
  expect_input_rejected(c, kInvalid, "g is on a different device than q");
}

TEST_P(ValidationFamily, InitialStateOnOtherDevice) {
  Call c(GetParam());
  c.fin.initial_state.device = kCudaDevice;
  expect_input_rejected(c, kInvalid, "initial_state is on a different device than q");
}

TEST_P(ValidationFamily, CuSeqlensOnOtherDevice) {
  Call c(GetParam(), true);
  c.fin.cu_seqlens.device = kCudaDevice;
  expect_input_rejected(c, kInvalid, "cu_seqlens must be on the device of q");
}

TEST_P(ValidationFamily, OOnOtherDevice) {
  Call c(GetParam());
  c.fout.o.device = kCudaDevice;
  expect_forward_rejected(c, kInvalid, "o is on a different device than q");
}

TEST_P(ValidationFamily, DhtOnOtherDevice) {
  Call c(GetParam());
  c.bin.dht.device = kCudaDevice;
  expect_backward_rejected(c, kInvalid, "dht is on a different device than q");
}

TEST_P(ValidationFamily, DkOnOtherDevice) {
  Call c(GetParam());
  c.bout.dk.device = kCudaDevice;
  expect_backward_rejected(c, kInvalid, "dk is on a different device than q");
}

// All tensors "on CUDA" (host memory labelled CUDA, never touched): in a build without CUDA the
// call is refused as not supported; the reference always refuses CUDA tensors.
TEST_P(ValidationFamily, AllOnCudaWithoutCudaBackend) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA backend is present: these views are host memory";
  Call c(GetParam());
  for (TensorView* t : {&c.fin.q, &c.fin.k, &c.fin.v, &c.fin.g, &c.fin.g_gamma, &c.fin.beta,
                        &c.fin.initial_state, &c.fout.o, &c.fout.final_state, &c.fout.h,
                        &c.bin.d_o, &c.bin.dht, &c.bout.dq, &c.bout.dk, &c.bout.dv, &c.bout.dg,
                        &c.bout.dg_gamma, &c.bout.dbeta, &c.bout.dh0}) {
    t->device = kCudaDevice;
  }
  expect_status(c.forward(), kUnsupported, "CUDA", "forward");
  expect_nothing_written(c, "forward");
  expect_status(c.backward(), kUnsupported, "CUDA", "backward");
  expect_nothing_written(c, "backward");
  expect_status(c.ref_forward(), kUnsupported, "CPU tensors only", "reference_forward");
  expect_status(c.ref_backward(), kUnsupported, "CPU tensors only", "reference_backward");
  expect_nothing_written(c, "reference");
}

TEST_P(ValidationFamily, CudaVarlenNeedsHostCopy) {
  Call c(GetParam(), true);
  for (TensorView* t : {&c.fin.q, &c.fin.k, &c.fin.v, &c.fin.g, &c.fin.g_gamma, &c.fin.beta,
                        &c.fin.initial_state, &c.fin.cu_seqlens}) {
    t->device = kCudaDevice;
  }
  std::size_t bytes = 0;
  expect_status(forward_workspace_size(c.fam, c.fin, c.opt, &bytes), kInvalid, "cu_seqlens_host",
                "forward_workspace_size");
  int64_t nt = -7;
  expect_status(num_chunks(c.fin, &nt), kInvalid, "cu_seqlens_host", "num_chunks");
  EXPECT_EQ(nt, -7);
}

// ================================================================ missing arguments
TEST_P(ValidationFamily, MissingQ) {
  Call c(GetParam());
  c.fin.q = TensorView{};
  expect_input_rejected(c, kInvalid, "q is required");
}

TEST_P(ValidationFamily, MissingK) {
  Call c(GetParam());
  c.fin.k = TensorView{};
  expect_input_rejected(c, kInvalid, "k is required");
}

TEST_P(ValidationFamily, MissingV) {
  Call c(GetParam());
  c.fin.v = TensorView{};
  expect_input_rejected(c, kInvalid, "v is required");
}

TEST_P(ValidationFamily, MissingO) {
  Call c(GetParam());
  c.fout.o = TensorView{};
  expect_forward_rejected(c, kInvalid, "o (the output) is required");
}

TEST_P(ValidationFamily, MissingDo) {
  Call c(GetParam());
  c.bin.d_o = TensorView{};
  expect_backward_rejected(c, kInvalid, "d_o (the output gradient) is required");
}

TEST_P(ValidationFamily, MissingDq) {
  Call c(GetParam());
  c.bout.dq = TensorView{};
  expect_backward_rejected(c, kInvalid, "dq is required");
}

TEST_P(ValidationFamily, MissingDv) {
  Call c(GetParam());
  c.bout.dv = TensorView{};
  expect_backward_rejected(c, kInvalid, "dv is required");
}

TEST(Validation, MissingGForKDA) {
  Call c(Family::kKDA);
  c.fin.g = TensorView{};
  expect_input_rejected(c, kInvalid, "g is required for kda");
}

TEST(Validation, MissingGForGLA) {
  Call c(Family::kGLA);
  c.fin.g = TensorView{};
  expect_input_rejected(c, kInvalid, "g is required for gla");
}

TEST(Validation, MissingBetaForGDN) {
  Call c(Family::kGDN);
  c.fin.beta = TensorView{};
  expect_input_rejected(c, kInvalid, "beta is required for gdn");
}

TEST(Validation, SimpleGLAWithoutAnyGateIsAccepted) {
  Call c(Family::kSimpleGLA);
  c.fin.g = TensorView{};
  c.fin.g_gamma = TensorView{};
  c.bout.dg = TensorView{};
  c.bout.dg_gamma = TensorView{};
  EXPECT_TRUE(c.ref_forward().ok());
  EXPECT_TRUE(c.ref_backward().ok());
}

// ================================================================ options misuse
TEST(Validation, GateInKernelWithoutALogOrSafeGate) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.fin.A_log = TensorView{};
  c.bout.dA_log = TensorView{};
  expect_input_rejected(c, kInvalid, "use_gate_in_kernel needs A_log (or a lower_bound)");
}

TEST(Validation, ALogWithoutGateInKernel) {
  Call c(Family::kGDN);
  c.enable_gate_in_kernel();
  c.opt.use_gate_in_kernel = false;
  c.fin.dt_bias = TensorView{};
  expect_input_rejected(c, kInvalid, "A_log is given but use_gate_in_kernel is false");
}

TEST(Validation, DtBiasWithoutGateInKernel) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.opt.use_gate_in_kernel = false;
  c.fin.A_log = TensorView{};
  expect_input_rejected(c, kInvalid, "dt_bias is given but use_gate_in_kernel is false");
}

TEST(Validation, GateInKernelOnGLA) {
  Call c(Family::kGLA);
  c.opt.use_gate_in_kernel = true;
  expect_input_rejected(c, kUnsupported, "use_gate_in_kernel is for KDA and GDN");
}

TEST(Validation, SafeGateOnGLA) {
  Call c(Family::kGLA);
  c.opt.safe_gate = true;
  c.opt.lower_bound = -5.0f;
  expect_input_rejected(c, kUnsupported, "safe_gate");
}

TEST(Validation, SafeGateOnGDNWithGateInKernel) {
  Call c(Family::kGDN);
  c.enable_gate_in_kernel();
  c.opt.safe_gate = true;
  c.opt.lower_bound = -5.0f;
  expect_input_rejected(c, kUnsupported, "safe_gate");
}

// As in FLA: the in-kernel safe gate needs its bound; a caller-computed g promised safe is
// taken with FLA's default bound -5.
TEST(Validation, SafeGateInKernelWithoutLowerBound) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.opt.safe_gate = true;
  expect_input_rejected(c, kInvalid, "safe_gate with use_gate_in_kernel needs lower_bound");
}

TEST(Validation, SafeGateWithoutLowerBoundIsAccepted) {
  Call c(Family::kKDA);
  c.opt.safe_gate = true;
  EXPECT_TRUE(c.ref_forward().ok());
  EXPECT_TRUE(c.ref_backward().ok());
  std::size_t bytes = 0;
  EXPECT_TRUE(forward_workspace_size(c.fam, c.fin, c.opt, &bytes).ok());
  EXPECT_TRUE(backward_workspace_size(c.fam, c.backward_inputs(), c.opt, &bytes).ok());
}

// FLA reads A_log and dt_bias with .view(HV, -1): any shape with the element count is the same
// parameter ([1, 1, HV, 1] in FLA's own tests, [HV, K] for a per-channel bias).
TEST(Validation, GateParametersOfAnyShapeWithTheirElementCount) {
  for (Family fam : {Family::kKDA, Family::kGDN}) {
    Call c(fam);
    c.enable_gate_in_kernel();
    HostTensor a(f32, {1, 1, c.HV, 1});
    fill_uniform(a, -1, 0.5);
    HostTensor da = a;
    c.fin.A_log = a.view;
    c.bout.dA_log = da.view;
    HostTensor d = fam == Family::kKDA ? HostTensor(f32, {c.HV, c.K}) : HostTensor(f32, {1, c.HV});
    fill_normal(d);
    HostTensor dd = d;
    c.fin.dt_bias = d.view;
    c.bout.ddt_bias = dd.view;
    EXPECT_TRUE(c.ref_forward().ok()) << c.ref_forward().message;
    EXPECT_TRUE(c.ref_backward().ok());
    std::size_t bytes = 0;
    EXPECT_TRUE(forward_workspace_size(c.fam, c.fin, c.opt, &bytes).ok());
    EXPECT_TRUE(backward_workspace_size(c.fam, c.backward_inputs(), c.opt, &bytes).ok());
  }
}

TEST(Validation, LowerBoundBelowRange) {
  Call c(Family::kKDA);
  c.opt.safe_gate = true;
  c.opt.lower_bound = -5.5f;
  expect_input_rejected(c, kInvalid, "lower_bound must lie in [-5, 0)");
}

TEST(Validation, LowerBoundZero) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.opt.safe_gate = true;
  c.opt.lower_bound = 0.0f;
  expect_input_rejected(c, kInvalid, "lower_bound must lie in [-5, 0)");
}

TEST(Validation, LowerBoundNaN) {
  Call c(Family::kKDA);
  c.opt.safe_gate = true;
  c.opt.lower_bound = std::numeric_limits<float>::quiet_NaN();
  expect_input_rejected(c, kInvalid, "lower_bound must lie in [-5, 0)");
}

TEST(Validation, LowerBoundWithoutGateInKernelOrSafeGate) {
  Call c(Family::kKDA);
  c.opt.lower_bound = -3.0f;
  expect_input_rejected(c, kInvalid, "lower_bound has no effect without use_gate_in_kernel or safe_gate");
}

TEST(Validation, LowerBoundOnGDN) {
  Call c(Family::kGDN);
  c.enable_gate_in_kernel();
  c.opt.lower_bound = -3.0f;
  expect_input_rejected(c, kUnsupported, "lower_bound / safe_gate is for KDA only");
}

// As in FLA: with use_gate_in_kernel, lower_bound alone selects the lower-bound activation
// (safe_gate only promises the bound); A_log is then optional.
TEST(Validation, LowerBoundWithGateInKernelIsAccepted) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.opt.lower_bound = -3.0f;
  c.fin.A_log = TensorView{};
  c.bout.dA_log = TensorView{};
  Status s = c.ref_forward();
  EXPECT_TRUE(s.ok()) << s.message;
  s = c.ref_backward();
  EXPECT_TRUE(s.ok()) << s.message;
}

TEST(Validation, AllowNegEigvalWithoutBetaSigmoid) {
  Call c(Family::kGDN);
  c.opt.allow_neg_eigval = true;
  expect_input_rejected(c, kInvalid, "allow_neg_eigval needs use_beta_sigmoid_in_kernel");
}

TEST(Validation, BetaSigmoidOnGLA) {
  Call c(Family::kGLA);
  c.opt.use_beta_sigmoid_in_kernel = true;
  expect_input_rejected(c, kInvalid, "use_beta_sigmoid_in_kernel needs beta");
}

TEST(Validation, BetaGivenToGLA) {
  Call c(Family::kGLA);
  HostTensor b(f32, {c.B, c.T, c.HV});
  c.fin.beta = b.view;
  expect_input_rejected(c, kInvalid, "beta is only for the delta rule");
}

TEST(Validation, BetaGivenToSimpleGLA) {
  Call c(Family::kSimpleGLA);
  HostTensor b(f32, {c.B, c.T, c.HV});
  c.fin.beta = b.view;
  expect_input_rejected(c, kInvalid, "beta is only for the delta rule");
}

TEST(Validation, GGammaGivenToKDA) {
  Call c(Family::kKDA);
  HostTensor gg(f32, {c.HV});
  c.fin.g_gamma = gg.view;
  expect_input_rejected(c, kInvalid, "g_gamma is only for simple GLA");
}

TEST(Validation, GGammaGivenToGDN) {
  Call c(Family::kGDN);
  HostTensor gg(f32, {c.HV});
  c.fin.g_gamma = gg.view;
  expect_input_rejected(c, kInvalid, "g_gamma is only for simple GLA");
}

TEST_P(ValidationFamily, ScaleNotFinite) {
  Call c(GetParam());
  c.opt.scale = std::numeric_limits<double>::infinity();
  expect_input_rejected(c, kInvalid, "scale must be finite");
}

// ---- review fixes: rank past kMaxDims, device type, size overflow, aliasing
TEST(Validation, RankAboveMaxDimsIsNotReadPastTheShape) {
  Call c(Family::kKDA);
  c.fin.q.ndim = kMaxDims + 1;  // shape[] holds kMaxDims entries; the next int64 is strides[0]
  c.fin.q.strides[0] = 987654321;
  expect_input_rejected(c, kInvalid, "q must be 4-D");
  const Status s = c.forward();
  EXPECT_EQ(s.message.find("987654321"), std::string::npos) << s.message;
}

TEST(Validation, UnknownDeviceType) {
  Call c(Family::kGLA);
  const Device odd{static_cast<DeviceType>(3), 0};  // e.g. DLPack's CUDA-host
  for (TensorView* t : {&c.fin.q, &c.fin.k, &c.fin.v, &c.fin.g, &c.fin.initial_state, &c.fout.o,
                        &c.fout.final_state, &c.fout.h, &c.bin.d_o, &c.bin.dht, &c.bout.dq,
                        &c.bout.dk, &c.bout.dv, &c.bout.dg, &c.bout.dh0}) {
    t->device = odd;
  }
  expect_input_rejected(c, kInvalid, "unsupported device type");
}

TEST(Validation, SizesOverflowingInt64) {
  Call c(Family::kGLA);
  const int64_t T = int64_t{1} << 56;  // B * T * H * K * 8 bytes does not fit in int64
  for (TensorView* t : {&c.fin.q, &c.fin.k, &c.fin.v, &c.fin.g}) {
    t->shape[1] = T;
    for (int i = 0; i < t->ndim; ++i) t->strides[i] = 1;  // only sizes matter here
  }
  std::size_t bytes = 0;
  const Status s = forward_workspace_size(c.fam, c.fin, c.opt, &bytes);
  expect_status(s, kInvalid, "too large", "forward_workspace_size");
}

TEST(Validation, OutputAliasesInput) {
  Call c(Family::kKDA);
  c.fout.o.data = c.v.view.data;  // o has v's shape and dtype: an in-place request
  expect_forward_rejected(c, kInvalid, "o overlaps the input v");
}

TEST(Validation, OutputPartlyOverlapsInput) {
  Call c(Family::kGDN);
  // initial_state and final_state in one buffer, final_state starting at initial_state's last
  // element.
  std::vector<unsigned char> both(2 * c.h0.bytes.size());
  std::memcpy(both.data(), c.h0.bytes.data(), c.h0.bytes.size());
  c.fin.initial_state.data = both.data();
  c.fout.final_state.data = both.data() + c.h0.bytes.size() - 4;
  expect_forward_rejected(c, kInvalid, "final_state overlaps the input initial_state");
}

TEST(Validation, OutputsAliasEachOther) {
  Call c(Family::kGLA);
  c.fout.h.data = c.fs.view.data;
  expect_forward_rejected(c, kInvalid, "h overlaps the output final_state");
}

TEST(Validation, GradientAliasesInput) {
  Call c(Family::kKDA);
  c.bout.dq.data = c.q.view.data;
  expect_backward_rejected(c, kInvalid, "dq overlaps the input q");
  Call d(Family::kSimpleGLA);
  d.bout.dv.data = d.d_o.view.data;
  expect_backward_rejected(d, kInvalid, "dv overlaps the input d_o");
}

TEST(Validation, GradientsAliasEachOther) {
  Call c(Family::kGDN);
  c.bout.dk.data = c.dq.view.data;
  expect_backward_rejected(c, kInvalid, "dk overlaps the output dq");
}

// The state map (ForwardOutputs::state_map_o / state_map_final): both or neither, the delta-rule
// families, their shapes and dtypes, no aliasing; valid ones are refused on the CPU (the CUDA
// backend computes them on Hopper), with nothing written.
TEST(Validation, StateMapOutputs) {
  for (Family f : {Family::kKDA, Family::kGDN, Family::kGLA}) {
    Call c(f);
    HostTensor qm(f32, {c.B, c.T, c.HV, c.K}), mm(f32, {c.B, c.HV, c.K, c.K});
    qm.poison();
    mm.poison();
    c.fout.state_map_o = qm.view;
    if (f == Family::kGLA) {
      c.fout.state_map_final = mm.view;
      expect_forward_rejected(c, kInvalid, "delta-rule families");
      continue;
    }
    expect_forward_rejected(c, kInvalid, "together");
    c.fout.state_map_final = mm.view;
    expect_status(c.forward(), kUnsupported, "CPU backend", "forward");
    expect_nothing_written(c, "forward");
    EXPECT_TRUE(std::isnan(qm.get(0)) && std::isnan(mm.get(0)));
    HostTensor wrong(f32, {c.B, c.T, c.HV, c.V});
    c.fout.state_map_o = wrong.view;
    expect_forward_rejected(c, kInvalid, "state_map_o must have shape");
    c.fout.state_map_o = qm.view;
    HostTensor mm64(DType::kFloat64, {c.B, c.HV, c.K, c.K});
    c.fout.state_map_final = mm64.view;
    expect_forward_rejected(c, kInvalid, "state_map_final must be float32");
    // aliasing: state_map_final inside initial_state ([N, HV, K, V] holds [N, HV, K, K])
    c.fout.state_map_final = mm.view;
    c.fout.state_map_final.data = c.h0.view.data;
    expect_forward_rejected(c, kInvalid, "state_map_final overlaps the input initial_state");
    c.fout.state_map_final = mm.view;
    c.fout.state_map_o.data = c.fs.view.data;  // and an output
    expect_forward_rejected(c, kInvalid, "overlaps the output final_state");
  }
}

TEST(Validation, UnknownFamily) {
  Call c(Family::kKDA);
  c.fam = static_cast<Family>(7);
  expect_input_rejected(c, kInvalid, "unknown family");
}

// ---- gradients requested for inputs that were not given
TEST(Validation, DbetaWithoutBeta) {
  Call c(Family::kGLA);
  HostTensor db(f32, {c.B, c.T, c.HV});
  sentinel(db);
  c.bout.dbeta = db.view;
  expect_backward_rejected(c, kInvalid, "dbeta is given but beta is not");
  EXPECT_TRUE(untouched(db));
}

TEST(Validation, DgWithoutG) {
  Call c(Family::kSimpleGLA);
  c.fin.g = TensorView{};
  expect_backward_rejected(c, kInvalid, "dg is given but g is not");
}

TEST(Validation, DgGammaWithoutGGamma) {
  Call c(Family::kSimpleGLA);
  c.fin.g_gamma = TensorView{};
  expect_backward_rejected(c, kInvalid, "dg_gamma is given but g_gamma is not");
}

TEST(Validation, DALogWithoutALog) {
  Call c(Family::kKDA);
  c.enable_gate_in_kernel();
  c.opt.safe_gate = true;
  c.opt.lower_bound = -5.0f;
  c.fin.A_log = TensorView{};  // allowed with the lower-bound gate, but then no dA_log
  expect_backward_rejected(c, kInvalid, "dA_log is given but A_log is not");
}

TEST(Validation, DdtBiasWithoutDtBias) {
  Call c(Family::kGDN);
  c.enable_gate_in_kernel();
  c.fin.dt_bias = TensorView{};
  expect_backward_rejected(c, kInvalid, "ddt_bias is given but dt_bias is not");
}

TEST_P(ValidationFamily, Dh0WithoutInitialState) {
  Call c(GetParam());
  c.fin.initial_state = TensorView{};
  expect_backward_rejected(c, kInvalid, "dh0 is given but initial_state is not");
}

// ================================================================ workspace and saved buffer
TEST_P(ValidationFamily, WorkspaceTooSmallForward) {
  Call c(GetParam());
  std::size_t need = 0;
  ASSERT_TRUE(forward_workspace_size(c.fam, c.fin, c.opt, &need).ok());
  if (need == 0) GTEST_SKIP() << "the CPU backend needs no forward workspace for this call";
  std::vector<unsigned char> ws(need - 1);
  Status s = linattn::forward(c.fam, c.fin, c.fout, c.opt, Workspace{ws.data(), need - 1});
  expect_status(s, StatusCode::kWorkspaceTooSmall, "workspace", "forward");
  expect_nothing_written(c, "forward");
  s = linattn::forward(c.fam, c.fin, c.fout, c.opt, Workspace{nullptr, need});
  expect_status(s, kInvalid, "workspace data pointer is null", "forward");
  expect_nothing_written(c, "forward");
}

TEST_P(ValidationFamily, WorkspaceTooSmallBackward) {
  Call c(GetParam());
  std::size_t need = 0;
  ASSERT_TRUE(backward_workspace_size(c.fam, c.backward_inputs(), c.opt, &need).ok());
  if (need == 0) GTEST_SKIP() << "the CPU backend needs no backward workspace for this call";
  std::vector<unsigned char> ws(need - 1);
  Status s = linattn::backward(c.fam, c.backward_inputs(), c.bout, c.opt, Workspace{ws.data(), need - 1});
  expect_status(s, StatusCode::kWorkspaceTooSmall, "workspace", "backward");
  expect_nothing_written(c, "backward");
}

TEST_P(ValidationFamily, SavedBufferTooSmall) {
  Call c(GetParam());
  std::size_t need = 0;
  ASSERT_TRUE(saved_bytes(c.fam, c.fin, c.opt, &need).ok());
  if (need == 0) GTEST_SKIP() << "the CPU backend keeps nothing for this call (saved_bytes = 0)";
  HostTensor saved(DType::kUInt8, {static_cast<int64_t>(need) - 1});
  sentinel(saved);
  c.fout.saved = saved.view;
  expect_status(c.forward(), kInvalid, "saved buffer has", "forward");
  expect_nothing_written(c, "forward");
  EXPECT_TRUE(untouched(saved));
  c.bin.saved = saved.view;
  expect_status(c.backward(), kInvalid, "saved buffer has", "backward");
  expect_nothing_written(c, "backward");
}

TEST_P(ValidationFamily, SavedBufferNotUint8) {
  Call c(GetParam());
  HostTensor saved(f32, {1024});
  sentinel(saved);
  c.fout.saved = saved.view;
  expect_forward_rejected(c, kInvalid, "saved must be a uint8 buffer");
  EXPECT_TRUE(untouched(saved));
  c.bin.saved = saved.view;
  expect_backward_rejected(c, kInvalid, "saved must be a uint8 buffer");
}

TEST_P(ValidationFamily, SavedBufferNot1D) {
  Call c(GetParam());
  HostTensor saved(DType::kUInt8, {32, 32});
  c.fout.saved = saved.view;
  expect_forward_rejected(c, kInvalid, "saved must be 1-D");
}

TEST_P(ValidationFamily, SavedBufferNull) {
  Call c(GetParam());
  HostTensor saved(DType::kUInt8, {64});
  c.bin.saved = saved.view;
  c.bin.saved.data = nullptr;
  expect_backward_rejected(c, kInvalid, "saved must be a contiguous, non-null buffer");
}

TEST_P(ValidationFamily, SavedBufferOnOtherDevice) {
  Call c(GetParam());
  HostTensor saved(DType::kUInt8, {64});
  c.fout.saved = saved.view;
  c.fout.saved.device = kCudaDevice;
  expect_forward_rejected(c, kInvalid, "saved is on a different device than q");
}

// ================================================================ hardening (issue 19)
// The workspace: every interface (C++ API, C ABI, Python) reaches these checks through
// forward / backward. A workspace sharing a byte with any input or output is refused before
// anything is written (it used to be accepted and silently corrupted q / o).
TEST_P(ValidationFamily, WorkspaceOverlappingAnInputOrOutputIsRefused) {
  Call c(GetParam());
  std::size_t fneed = 0, bneed = 0;
  ASSERT_TRUE(forward_workspace_size(c.fam, c.fin, c.opt, &fneed).ok());
  ASSERT_TRUE(backward_workspace_size(c.fam, c.backward_inputs(), c.opt, &bneed).ok());
  // A workspace that starts inside the tensor (its last byte) and is large enough.
  auto inside = [](HostTensor& t) { return static_cast<unsigned char*>(t.view.data) + t.bytes.size() - 1; };
  struct Target {
    const char* name;
    HostTensor* t;
  };
  for (Target tg : {Target{"q", &c.q}, Target{"v", &c.v}, Target{"g", &c.g}, Target{"initial_state", &c.h0},
                    Target{"o", &c.o}, Target{"final_state", &c.fs}, Target{"h", &c.h}}) {
    const std::vector<unsigned char> before = tg.t->bytes;
    std::vector<unsigned char> big(tg.t->bytes.size() + fneed + 64);
    std::memcpy(big.data(), tg.t->bytes.data(), tg.t->bytes.size());
    HostTensor* t = tg.t;
    void* const orig = t->view.data;
    // move the tensor's view into `big`, the workspace right after its first byte
    for (TensorView* v : {&c.fin.q, &c.fin.v, &c.fin.g, &c.fin.initial_state, &c.fout.o, &c.fout.final_state, &c.fout.h}) {
      if (v->data == orig) v->data = big.data();
    }
    Status s = linattn::forward(c.fam, c.fin, c.fout, c.opt, Workspace{big.data() + 1, fneed + 32});
    expect_status(s, kInvalid, std::string("workspace overlaps ") + tg.name, "forward");
    expect_nothing_written(c, "forward");
    EXPECT_EQ(std::memcmp(big.data(), before.data(), before.size()), 0) << tg.name << " was modified";
    for (TensorView* v : {&c.fin.q, &c.fin.v, &c.fin.g, &c.fin.initial_state, &c.fout.o, &c.fout.final_state, &c.fout.h}) {
      if (v->data == big.data()) v->data = orig;
    }
    (void)inside;
  }
  // backward: the workspace ending inside dq, and starting inside d_o
  for (Target tg : {Target{"dq", &c.dq}, Target{"d_o", &c.d_o}, Target{"dh0", &c.dh0}, Target{"k", &c.k}}) {
    std::vector<unsigned char> big(tg.t->bytes.size() + bneed + 64);
    void* const orig = tg.t->view.data;
    for (TensorView* v : {&c.bout.dq, &c.bin.d_o, &c.bout.dh0, &c.fin.k}) {
      if (v->data == orig) v->data = big.data() + bneed + 32 - 4;  // ws = [big, big + bneed + 32)
    }
    Status s = linattn::backward(c.fam, c.backward_inputs(), c.bout, c.opt, Workspace{big.data(), bneed + 32});
    expect_status(s, kInvalid, std::string("workspace overlaps ") + tg.name, "backward");
    expect_nothing_written(c, "backward");
    for (TensorView* v : {&c.bout.dq, &c.bin.d_o, &c.bout.dh0, &c.fin.k}) {
      if (v->data == big.data() + bneed + 32 - 4) v->data = orig;
    }
  }
}

TEST_P(ValidationFamily, WorkspaceExactlyAdjacentIsAccepted) {
  Call c(GetParam());
  std::size_t need = 0;
  ASSERT_TRUE(forward_workspace_size(c.fam, c.fin, c.opt, &need).ok());
  // o followed directly by the workspace in one allocation: no shared byte, accepted.
  std::vector<unsigned char> big(c.o.bytes.size() + need + 1);
  c.fout.o.data = big.data();
  Status s = linattn::forward(c.fam, c.fin, c.fout, c.opt, Workspace{big.data() + c.o.bytes.size(), need + 1});
  EXPECT_TRUE(s.ok()) << s.message;
}

TEST_P(ValidationFamily, WorkspaceOnOtherDevice) {
  Call c(GetParam());
  std::size_t need = 0;
  ASSERT_TRUE(forward_workspace_size(c.fam, c.fin, c.opt, &need).ok());
  std::vector<unsigned char> ws(need + 1);
  Workspace w{ws.data(), ws.size(), kCudaDevice};
  expect_status(linattn::forward(c.fam, c.fin, c.fout, c.opt, w), kInvalid, "workspace is on a different device", "forward");
  expect_nothing_written(c, "forward");
}

TEST(Validation, WorkspaceFromView) {
  HostTensor buf(DType::kUInt8, {256});
  Workspace w;
  ASSERT_TRUE(workspace_from_view(buf.view, &w).ok());
  EXPECT_EQ(w.data, buf.view.data);
  EXPECT_EQ(w.bytes, 256u);
  ASSERT_TRUE(w.device.has_value());
  TensorView rev = buf.view;  // NumPy's a[::-1]: data at the last byte, stride -1
  rev.data = static_cast<unsigned char*>(buf.view.data) + 255;
  rev.strides[0] = -1;
  expect_status(workspace_from_view(rev, &w), kInvalid, "workspace must be contiguous", "workspace_from_view");
  TensorView strided = buf.view;
  strided.shape[0] = 128;
  strided.strides[0] = 2;
  expect_status(workspace_from_view(strided, &w), kInvalid, "workspace must be contiguous", "workspace_from_view");
  HostTensor f(f32, {64});
  expect_status(workspace_from_view(f.view, &w), kInvalid, "workspace must be a uint8 buffer", "workspace_from_view");
  HostTensor two(DType::kUInt8, {16, 16});
  expect_status(workspace_from_view(two.view, &w), kInvalid, "workspace must be 1-D", "workspace_from_view");
  TensorView null = buf.view;
  null.data = nullptr;
  expect_status(workspace_from_view(null, &w), kInvalid, "null data pointer", "workspace_from_view");
  EXPECT_TRUE(workspace_from_view(TensorView{}, &w).ok());
  EXPECT_EQ(w.bytes, 0u);
}

// A tensor at an address that is not a multiple of its element size (NumPy frombuffer at a byte
// offset) would be read with misaligned loads: refused.
TEST_P(ValidationFamily, MisalignedTensors) {
  for (const char* which : {"q", "v", "g", "initial_state", "o", "final_state", "cu_seqlens"}) {
    Call c(GetParam(), /*varlen=*/std::string(which) == "cu_seqlens");
    if (std::string(which) == "cu_seqlens") {
      c.fin.initial_state = TensorView{};
      c.fout.final_state = TensorView{};
      c.bout.dh0 = TensorView{};
      c.bin.dht = TensorView{};
    }
    std::vector<unsigned char> shifted(4096 * 16 + 16);
    TensorView* v = nullptr;
    if (std::string(which) == "q") v = &c.fin.q;
    if (std::string(which) == "v") v = &c.fin.v;
    if (std::string(which) == "g") v = &c.fin.g;
    if (std::string(which) == "initial_state") v = &c.fin.initial_state;
    if (std::string(which) == "o") v = &c.fout.o;
    if (std::string(which) == "final_state") v = &c.fout.final_state;
    if (std::string(which) == "cu_seqlens") v = &c.fin.cu_seqlens;
    const std::size_t n = static_cast<std::size_t>(v->numel()) * dtype_size(v->dtype);
    ASSERT_LE(n + 2, shifted.size());
    std::memcpy(shifted.data() + 2, v->data, n);
    v->data = shifted.data() + 2;
    const std::string needle = std::string(which) + " starts at an address that is not a multiple of its element size";
    if (v == &c.fout.o || v == &c.fout.final_state) {
      expect_forward_rejected(c, kInvalid, needle);
    } else {
      expect_input_rejected(c, kInvalid, needle);
    }
  }
}

TEST_P(ValidationFamily, ScaleOutsideFloat32) {
  for (double sc : {1e39, -1e39, 1e-39, 1e300, -1e-300}) {
    Call c(GetParam());
    c.opt.scale = sc;
    expect_input_rejected(c, kInvalid, "scale must be 0 or of a magnitude float32 represents");
  }
  Call c(GetParam());
  for (double sc : {0.0, -0.5, 3e38, 1.2e-38}) {
    c.opt.scale = sc;
    Status s = c.ref_forward();
    EXPECT_TRUE(s.ok()) << "scale " << sc << ": " << s.message;
  }
}

TEST_P(ValidationFamily, ZeroHeadSizeIsAnInvalidShape) {
  // K = 0 / V = 0: an invalid shape (ValueError in Python), named as such rather than as a layout
  // problem (a zero-size dimension makes any stride pattern look non-contiguous).
  {
    Call c(GetParam());
    for (TensorView* t : {&c.fin.q, &c.fin.k}) {
      t->shape[3] = 0;
      t->strides[0] = t->strides[1] = t->strides[2] = 7;
    }
    expect_input_rejected(c, kInvalid, "head size K");
  }
  {
    Call c(GetParam());
    c.fin.v.shape[3] = 0;
    c.fin.v.strides[2] = 5;
    expect_input_rejected(c, kInvalid, "head size V");
  }
}

// Sizes no machine can hold (host vectors of B + 1 sequence offsets): a Status, never an
// exception out of the API.
TEST(Validation, AbsurdBatchIsAStatusNotAnException) {
  Call c(Family::kGLA);
  const int64_t B = int64_t{1} << 50;
  for (TensorView* t : {&c.fin.q, &c.fin.k, &c.fin.v, &c.fin.g}) {
    t->shape[0] = B;
    t->shape[1] = 1;
    t->shape[2] = 1;
    t->shape[3] = 1;
    for (int i = 0; i < t->ndim; ++i) t->strides[i] = 1;
  }
  c.fin.initial_state = TensorView{};
  std::size_t bytes = 0;
  Status s;
  EXPECT_NO_THROW(s = forward_workspace_size(c.fam, c.fin, c.opt, &bytes));
  EXPECT_FALSE(s.ok());
}

INSTANTIATE_TEST_SUITE_P(Validation, ValidationFamily,
                         ::testing::Values(Family::kSimpleGLA, Family::kGLA, Family::kGDN,
                                           Family::kKDA),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(family_name(info.param));
                         });

}  // namespace
}  // namespace linattn::test
