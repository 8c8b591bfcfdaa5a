// The disable_recompute buffer carries a header naming the problem it was written for: a buffer
// from another problem is refused (and nothing is written), one from the same problem is reused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.hpp"

namespace {

using namespace linattn;
using linattn::test::HostTensor;

struct Problem {
  int64_t T = 90, H = 2, K = 16, V = 16;
  HostTensor q{DType::kFloat32, {1, T, H, K}}, k{DType::kFloat32, {1, T, H, K}}, v{DType::kFloat32, {1, T, H, V}},
      g{DType::kFloat32, {1, T, H, K}}, beta{DType::kFloat32, {1, T, H}}, o{DType::kFloat32, {1, T, H, V}},
      d_o{DType::kFloat32, {1, T, H, V}};
  Problem() {
    test::fill_normal(q);
    test::fill_normal(k, 0.0, 0.25);
    test::fill_normal(v);
    test::fill_logsigmoid_gate(g);
    test::fill_uniform(beta, 0.1, 0.9);
    test::fill_normal(d_o);
  }
  ForwardInputs in() const {
    ForwardInputs f;
    f.q = q.view;
    f.k = k.view;
    f.v = v.view;
    f.g = g.view;
    f.beta = beta.view;
    return f;
  }
};

std::vector<unsigned char> forward_saved(Problem& pb, const Options& opt) {
  std::size_t sb = 0, wb = 0;
  EXPECT_TRUE(saved_bytes(Family::kKDA, pb.in(), opt, &sb).ok());
  EXPECT_TRUE(forward_workspace_size(Family::kKDA, pb.in(), opt, &wb).ok());
  std::vector<unsigned char> saved(sb), ws(wb);
  ForwardOutputs out;
  out.o = pb.o.view;
  out.saved = make_view(saved.data(), DType::kUInt8, {static_cast<int64_t>(sb)});
  const Status s = forward(Family::kKDA, pb.in(), out, opt, Workspace{ws.data(), ws.size()});
  EXPECT_TRUE(s.ok()) << s.message;
  return saved;
}

Status backward_with(Problem& pb, const Options& opt, std::vector<unsigned char>& saved, HostTensor& dq) {
  HostTensor dk(DType::kFloat32, {1, pb.T, pb.H, pb.K}), dv(DType::kFloat32, {1, pb.T, pb.H, pb.V});
  BackwardInputs in;
  in.fwd = pb.in();
  in.d_o = pb.d_o.view;
  in.saved = make_view(saved.data(), DType::kUInt8, {static_cast<int64_t>(saved.size())});
  BackwardOutputs out;
  out.dq = dq.view;
  out.dk = dk.view;
  out.dv = dv.view;
  std::size_t wb = 0;
  EXPECT_TRUE(backward_workspace_size(Family::kKDA, in, opt, &wb).ok());
  std::vector<unsigned char> ws(wb);
  return backward(Family::kKDA, in, out, opt, Workspace{ws.data(), ws.size()});
}

TEST(CpuSaved, BufferFromAnotherProblemIsRefusedAndNothingIsWritten) {
  Problem pb;
  Options plain, l2;
  l2.use_qk_l2norm_in_kernel = true;
  std::vector<unsigned char> saved = forward_saved(pb, plain);
  HostTensor dq(DType::kFloat32, {1, pb.T, pb.H, pb.K});
  dq.poison();
  const Status s = backward_with(pb, l2, saved, dq);  // same sizes, other transform
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument);
  EXPECT_NE(s.message.find("saved"), std::string::npos) << s.message;
  for (int64_t i = 0; i < dq.numel(); ++i) ASSERT_TRUE(std::isnan(dq.get(i)));

  saved[0] ^= 1;  // a damaged header
  EXPECT_EQ(backward_with(pb, plain, saved, dq).code, StatusCode::kInvalidArgument);
}

TEST(CpuSaved, BufferFromTheSameProblemIsReused) {
  Problem pb;
  Options opt;
  std::vector<unsigned char> saved = forward_saved(pb, opt);
  HostTensor dq(DType::kFloat32, {1, pb.T, pb.H, pb.K});
  dq.poison();
  const Status s = backward_with(pb, opt, saved, dq);
  ASSERT_TRUE(s.ok()) << s.message;
  for (int64_t i = 0; i < dq.numel(); ++i) ASSERT_TRUE(std::isfinite(dq.get(i)));
}

// keep_chunk_local is a CUDA layout (GLA on Hopper): on the CPU saved_bytes is 0, a saved buffer
// is refused in the forward and the backward with nothing written, and the option cannot be
// combined with disable_recompute.
TEST(CpuSaved, KeepChunkLocalKeepsNothingHere) {
  Problem pb;
  Options opt;
  opt.keep_chunk_local = true;
  for (Family fam : {Family::kKDA, Family::kGLA}) {
    ForwardInputs in = pb.in();
    if (fam == Family::kGLA) in.beta = TensorView{};
    std::size_t sb = 1, wb = 0;
    ASSERT_TRUE(saved_bytes(fam, in, opt, &sb).ok());
    EXPECT_EQ(sb, 0u) << family_name(fam);
    ASSERT_TRUE(forward_workspace_size(fam, in, opt, &wb).ok());
    std::vector<unsigned char> saved(4096, 0xa5), ws(wb + 1);
    pb.o.poison();
    ForwardOutputs out;
    out.o = pb.o.view;
    out.saved = make_view(saved.data(), DType::kUInt8, {4096});
    Status s = forward(fam, in, out, opt, Workspace{ws.data(), ws.size()});
    EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
    EXPECT_NE(s.message.find("keep_chunk_local"), std::string::npos) << s.message;
    for (int64_t i = 0; i < pb.o.numel(); ++i) ASSERT_TRUE(std::isnan(pb.o.get(i)));
    for (unsigned char b : saved) ASSERT_EQ(b, 0xa5);
    out.saved = TensorView{};  // without one the plain forward runs
    s = forward(fam, in, out, opt, Workspace{ws.data(), ws.size()});
    EXPECT_TRUE(s.ok()) << s.message;
    if (fam == Family::kKDA) {
      HostTensor dq(DType::kFloat32, {1, pb.T, pb.H, pb.K});
      dq.poison();
      s = backward_with(pb, opt, saved, dq);
      EXPECT_EQ(s.code, StatusCode::kNotSupported) << s.message;
      for (int64_t i = 0; i < dq.numel(); ++i) ASSERT_TRUE(std::isnan(dq.get(i)));
    }
  }
  opt.disable_recompute = true;
  std::size_t n = 0;
  const Status s = forward_workspace_size(Family::kKDA, pb.in(), opt, &n);
  EXPECT_EQ(s.code, StatusCode::kInvalidArgument);
  EXPECT_NE(s.message.find("exclusive"), std::string::npos) << s.message;
}

}  // namespace
