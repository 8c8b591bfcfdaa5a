// The README's C++ example, built and run by ctest: KDA forward and backward on CPU buffers.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <linattn/linattn.hpp>

using namespace linattn;

int main() {
  const int64_t B = 1, T = 200, H = 2, HV = 2, K = 64, V = 64;
  std::mt19937 gen(0);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto randn = [&](std::size_t n, float scale) {
    std::vector<float> x(n);
    for (float& e : x) e = scale * normal(gen);
    return x;
  };
  std::vector<float> q = randn(B * T * H * K, 1.f), k = randn(B * T * H * K, 1.f), v = randn(B * T * HV * V, 1.f);
  std::vector<float> g(B * T * HV * K), beta(B * T * HV, 0.5f);
  for (float& e : g) e = -std::log1p(std::exp(-normal(gen))) / 16.f;  // logsigmoid(randn) / 16
  std::vector<float> o(B * T * HV * V), ht(B * HV * K * V);

  ForwardInputs in;  // q, k: [B,T,H,K]; v: [B,T,HV,V]; g: [B,T,HV,K]; beta: [B,T,HV]
  in.q = make_view(q.data(), DType::kFloat32, {B, T, H, K});
  in.k = make_view(k.data(), DType::kFloat32, {B, T, H, K});
  in.v = make_view(v.data(), DType::kFloat32, {B, T, HV, V});
  in.g = make_view(g.data(), DType::kFloat32, {B, T, HV, K});
  in.beta = make_view(beta.data(), DType::kFloat32, {B, T, HV});
  ForwardOutputs out;
  out.o = make_view(o.data(), DType::kFloat32, {B, T, HV, V});
  out.final_state = make_view(ht.data(), DType::kFloat32, {B, HV, K, V});

  Options opt;  // FLA's option names
  opt.use_qk_l2norm_in_kernel = true;

  std::size_t ws_bytes = 0;
  Status s = forward_workspace_size(Family::kKDA, in, opt, &ws_bytes);
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message.c_str()), 1;
  std::vector<unsigned char> ws(ws_bytes);
  s = kda_forward(in, out, opt, Workspace{ws.data(), ws.size()});
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message.c_str()), 1;

  // Backward with d_o = 1 and no dht: gradients of sum(o).
  std::vector<float> d_o(o.size(), 1.f), dq(q.size()), dk(k.size()), dv(v.size()), dg(g.size()), dbeta(beta.size());
  BackwardInputs bin;
  bin.fwd = in;
  bin.d_o = make_view(d_o.data(), DType::kFloat32, {B, T, HV, V});
  BackwardOutputs bout;
  bout.dq = make_view(dq.data(), DType::kFloat32, {B, T, H, K});
  bout.dk = make_view(dk.data(), DType::kFloat32, {B, T, H, K});
  bout.dv = make_view(dv.data(), DType::kFloat32, {B, T, HV, V});
  bout.dg = make_view(dg.data(), DType::kFloat32, {B, T, HV, K});
  bout.dbeta = make_view(dbeta.data(), DType::kFloat32, {B, T, HV});
  s = backward_workspace_size(Family::kKDA, bin, opt, &ws_bytes);
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message.c_str()), 1;
  ws.resize(ws_bytes);
  s = kda_backward(bin, bout, opt, Workspace{ws.data(), ws.size()});
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message.c_str()), 1;

  double so = 0, sdq = 0;
  for (float x : o) so += x;
  for (float x : dq) sdq += x;
  std::printf("sum(o) = %.6f  sum(dq) = %.6f\n", so, sdq);
  return std::isfinite(so) && std::isfinite(sdq) ? 0 : 1;
}
