// The C ABI gives the same results and the same errors as the C++ API.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "linattn/linattn.h"
#include "test_util.hpp"

namespace {

using namespace linattn;
using linattn::test::HostTensor;

linattn_tensor c_view(const TensorView& v) {
  linattn_tensor t = linattn_absent_tensor();
  if (!v.present()) return t;
  t.data = v.data;
  t.dtype = static_cast<int32_t>(v.dtype);
  t.ndim = v.ndim;
  for (int i = 0; i < v.ndim; ++i) {
    t.shape[i] = v.shape[i];
    t.strides[i] = v.strides[i];
  }
  t.device_type = LINATTN_CPU;
  return t;
}

struct Case {
  int64_t B = 1, T = 70, H = 2, HV = 4, K = 16, V = 8;
  HostTensor q{DType::kFloat32, {B, T, H, K}}, k{DType::kFloat32, {B, T, H, K}},
      v{DType::kFloat32, {B, T, HV, V}}, g{DType::kFloat32, {B, T, HV, K}}, beta{DType::kFloat32, {B, T, HV}},
      o{DType::kFloat32, {B, T, HV, V}}, ht{DType::kFloat32, {B, HV, K, V}};
  Case() {
    test::fill_normal(q);
    test::fill_normal(k, 0.0, 0.25);
    test::fill_normal(v);
    test::fill_logsigmoid_gate(g);
    test::fill_uniform(beta, 0.1, 0.9);
  }
  ForwardInputs cpp_in() const {
    ForwardInputs in;
    in.q = q.view;
    in.k = k.view;
    in.v = v.view;
    in.g = g.view;
    in.beta = beta.view;
    return in;
  }
  linattn_forward_inputs c_in() const {
    linattn_forward_inputs in;
    linattn_forward_inputs_init(&in);
    in.q = c_view(q.view);
    in.k = c_view(k.view);
    in.v = c_view(v.view);
    in.g = c_view(g.view);
    in.beta = c_view(beta.view);
    return in;
  }
};

TEST(CApi, ForwardMatchesCppBitwise) {
  Case c;
  linattn_options opt = linattn_default_options();
  opt.use_qk_l2norm_in_kernel = 1;
  Options cpp_opt;
  cpp_opt.use_qk_l2norm_in_kernel = true;

  size_t bytes = 0;
  char err[512] = {0};
  linattn_forward_inputs in = c.c_in();
  ASSERT_EQ(linattn_forward_workspace_size(LINATTN_KDA, &in, &opt, &bytes, err, sizeof err), LINATTN_OK) << err;
  std::vector<unsigned char> ws(bytes + 1);

  linattn_forward_outputs out;
  linattn_forward_outputs_init(&out);
  c.o.poison();
  c.ht.poison();
  out.o = c_view(c.o.view);
  out.final_state = c_view(c.ht.view);
  ASSERT_EQ(linattn_forward(LINATTN_KDA, &in, &out, &opt, ws.data(), ws.size(), nullptr, err, sizeof err),
            LINATTN_OK)
      << err;

  HostTensor o2(DType::kFloat32, {c.B, c.T, c.HV, c.V}), ht2(DType::kFloat32, {c.B, c.HV, c.K, c.V});
  o2.poison();
  ForwardOutputs cpp_out;
  cpp_out.o = o2.view;
  cpp_out.final_state = ht2.view;
  Status s = forward(Family::kKDA, c.cpp_in(), cpp_out, cpp_opt, Workspace{ws.data(), ws.size()});
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(0, std::memcmp(c.o.bytes.data(), o2.bytes.data(), c.o.bytes.size()));
  EXPECT_EQ(0, std::memcmp(c.ht.bytes.data(), ht2.bytes.data(), c.ht.bytes.size()));
  EXPECT_LT(test::rel_err(c.o, o2), 1e-12);  // also fails on NaN (unwritten)
}

TEST(CApi, ErrorsCarryCodeAndMessageAndWriteNothing) {
  Case c;
  linattn_forward_inputs in = c.c_in();
  in.beta = linattn_absent_tensor();  // KDA needs beta
  linattn_options opt = linattn_default_options();
  linattn_forward_outputs out;
  linattn_forward_outputs_init(&out);
  c.o.poison();
  out.o = c_view(c.o.view);
  char err[512] = {0};
  std::vector<unsigned char> ws(1 << 20);
  EXPECT_EQ(linattn_forward(LINATTN_KDA, &in, &out, &opt, ws.data(), ws.size(), nullptr, err, sizeof err),
            LINATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("beta"), std::string::npos) << err;
  for (int64_t i = 0; i < c.o.numel(); ++i) ASSERT_TRUE(std::isnan(c.o.get(i)));

  EXPECT_EQ(linattn_forward(7, &in, &out, &opt, ws.data(), ws.size(), nullptr, err, sizeof err),
            LINATTN_INVALID_ARGUMENT);
  EXPECT_EQ(linattn_forward(LINATTN_KDA, nullptr, &out, &opt, nullptr, 0, nullptr, err, sizeof err),
            LINATTN_INVALID_ARGUMENT);
  // A rank beyond the maximum is rejected, not read out of bounds.
  in = c.c_in();
  in.q.ndim = 9;
  EXPECT_EQ(linattn_forward(LINATTN_KDA, &in, &out, &opt, ws.data(), ws.size(), nullptr, err, sizeof err),
            LINATTN_INVALID_ARGUMENT);
  // backward_precision: the defaults agree, every enum value is accepted (the CPU ignores it), a
  // value outside the enum is refused naming the accepted ones.
  in = c.c_in();
  EXPECT_EQ(opt.backward_precision, LINATTN_BACKWARD_AUTO);
  EXPECT_EQ(static_cast<int>(Options{}.backward_precision), LINATTN_BACKWARD_AUTO);
  for (int bp : {LINATTN_BACKWARD_AUTO, LINATTN_BACKWARD_SPLIT, LINATTN_BACKWARD_FAST16, LINATTN_BACKWARD_FLOAT32}) {
    opt.backward_precision = bp;
    EXPECT_EQ(linattn_forward(LINATTN_KDA, &in, &out, &opt, ws.data(), ws.size(), nullptr, err, sizeof err),
              LINATTN_OK)
        << err;
  }
  opt.backward_precision = 4;
  size_t bytes = 0;
  EXPECT_EQ(linattn_forward_workspace_size(LINATTN_KDA, &in, &opt, &bytes, err, sizeof err), LINATTN_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("backward_precision"), std::string::npos) << err;
  EXPECT_NE(std::string(err).find("fast16"), std::string::npos) << err;
  opt = linattn_default_options();
  // A short error buffer is truncated and terminated.
  char tiny[4] = {'x', 'x', 'x', 'x'};
  linattn_forward(LINATTN_KDA, nullptr, &out, &opt, nullptr, 0, nullptr, tiny, sizeof tiny);
  EXPECT_EQ(tiny[3], '\0');
}

}  // namespace

namespace {

// Issue 19: the C ABI's workspace is a raw pointer and size; the shared validation refuses one
// that overlaps an input or an output (it used to be accepted and silently corrupted q / o), and
// a short or null one, before anything is written.
TEST(CApi, WorkspaceOverlappingAnInputOrOutputIsRefused) {
  Case c;
  linattn_options opt = linattn_default_options();
  size_t need = 0;
  char err[512] = {0};
  linattn_forward_inputs in = c.c_in();
  ASSERT_EQ(linattn_forward_workspace_size(LINATTN_KDA, &in, &opt, &need, err, sizeof err), LINATTN_OK) << err;
  ASSERT_GT(need, 0u);
  for (const char* where : {"q", "o"}) {
    // one allocation holding the tensor and, from 8 bytes in, the workspace
    HostTensor& t = std::string(where) == "q" ? c.q : c.o;
    std::vector<unsigned char> big(t.bytes.size() + need + 64, 0x5A);
    std::memcpy(big.data(), t.bytes.data(), t.bytes.size());
    const std::vector<unsigned char> before = big;
    linattn_forward_inputs fin = c.c_in();
    linattn_forward_outputs out;
    linattn_forward_outputs_init(&out);
    std::vector<unsigned char> o_other(c.o.bytes.size(), 0x5A);
    out.o = c_view(c.o.view);
    out.o.data = o_other.data();
    if (std::string(where) == "q") fin.q.data = big.data();
    else out.o.data = big.data();
    const int rc = linattn_forward(LINATTN_KDA, &fin, &out, &opt, big.data() + 8, big.size() - 8, nullptr, err, sizeof err);
    EXPECT_EQ(rc, LINATTN_INVALID_ARGUMENT) << where;
    EXPECT_NE(std::string(err).find(std::string("workspace overlaps ") + where), std::string::npos) << err;
    EXPECT_EQ(big, before) << where << "'s allocation was written";
    for (unsigned char b : o_other) ASSERT_EQ(b, 0x5A) << "o was written";
  }
  // short and null workspaces
  linattn_forward_outputs out;
  linattn_forward_outputs_init(&out);
  out.o = c_view(c.o.view);
  std::vector<unsigned char> ws(need);
  EXPECT_EQ(linattn_forward(LINATTN_KDA, &in, &out, &opt, ws.data(), need - 1, nullptr, err, sizeof err),
            LINATTN_WORKSPACE_TOO_SMALL);
  EXPECT_EQ(linattn_forward(LINATTN_KDA, &in, &out, &opt, nullptr, need, nullptr, err, sizeof err),
            LINATTN_INVALID_ARGUMENT);
}

}  // namespace
