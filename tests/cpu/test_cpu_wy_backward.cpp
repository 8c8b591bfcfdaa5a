// The chunked (WY) backward of the CPU backend (src/cpu/common/chunk_bwd.*): each backward block
// against central finite differences (float64) of the forward block it reverses, the two passes
// of a whole chunk likewise, and the whole backward against the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "cpu/common/chunk.hpp"
#include "cpu/common/chunk_bwd.hpp"
#include "cpu/common/driver.hpp"
#include "test_cpu_util.hpp"

namespace linattn::test::cpu {
namespace {

namespace lc = linattn::cpu;
using Vec = std::vector<double>;
constexpr int64_t kC = lc::kC;

std::mt19937_64& gen() {
  static std::mt19937_64 g(1234);
  return g;
}
Vec normal(int64_t n, double sd = 1.0) {
  std::normal_distribution<double> d(0.0, sd);
  Vec x(static_cast<size_t>(n));
  for (auto& e : x) e = d(gen());
  return x;
}
Vec uniform(int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec x(static_cast<size_t>(n));
  for (auto& e : x) e = d(gen());
  return x;
}
double dotv(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central finite differences of f with respect to x, at every index in `idx` (all when empty).
Vec fd_grad(Vec& x, const std::function<double()>& f, double h = 1e-6) {
  Vec g(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f();
    x[i] = x0 - h;
    const double fm = f();
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// Relative norm error <= tol, plus an absolute allowance for the finite differences' own rounding
// (about 1e-16 |f| / h): with the [-5, 0) gates some gradients are exp(-25) small and below it.
void expect_grad(const char* what, const Vec& analytic, const Vec& fd, double tol = 1e-6,
                 double atol = 1e-8) {
  ASSERT_EQ(analytic.size(), fd.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < fd.size(); ++i) {
    ASSERT_TRUE(std::isfinite(analytic[i])) << what << " [" << i << "]";
    num += (analytic[i] - fd[i]) * (analytic[i] - fd[i]);
    den += fd[i] * fd[i];
  }
  EXPECT_LE(std::sqrt(num), tol * std::sqrt(den) + atol)
      << what << ": relative error " << std::sqrt(num / (den > 0 ? den : 1e-300));
}

// The chunk's scratch in float64.
struct Work {
  std::vector<char> mem;
  lc::ChunkBwdWork<double> w;
  Work(int64_t K, int64_t V) {
    detail::Problem p;
    p.K = K;
    p.V = V;
    lc::Arena count;
    lc::layout(count, p, &w);
    mem.resize(count.off + 64);
    lc::Arena a{reinterpret_cast<char*>((reinterpret_cast<std::uintptr_t>(mem.data()) + 63) & ~std::uintptr_t(63))};
    lc::layout(a, p, &w);
  }
};

enum class GateKind { kMild, kLowerBound };  // logsigmoid(randn)/16, or uniform in [-5, 0)

// One chunk of float64 inputs; the gate per channel (vector) or one value per token broadcast
// over the channels (scalar), as the CPU backend loads it.
struct ChunkCase {
  int64_t L, K, V;
  bool delta, vector_gate;
  double scale;
  Vec q, k, v, beta, g, S;
  ChunkCase(int64_t L_, int64_t K_, int64_t V_, bool delta_, bool vector_, GateKind gk)
      : L(L_), K(K_), V(V_), delta(delta_), vector_gate(vector_), scale(1.0 / std::sqrt(double(K_))) {
    q = normal(kC * K, 1.0 / std::sqrt(double(K)));
    k = normal(kC * K, 1.0 / std::sqrt(double(K)));
    v = normal(kC * V);
    beta = uniform(kC, 0.05, 1.0);
    S = normal(K * V, 0.5);
    g = Vec(kC * K, 0.0);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t c = 0; c < K; ++c) {
        if (!vector_gate && c > 0) { g[i * K + c] = g[i * K]; continue; }
        double x;
        if (gk == GateKind::kLowerBound) {
          x = uniform(1, -5.0, -1e-3)[0];
        } else {
          const double r = normal(1)[0];
          x = -std::log1p(std::exp(-r)) / 16.0;
        }
        g[i * K + c] = x;
      }
    }
  }
  Vec gam() const {
    Vec out(kC * K, 0.0);
    lc::gate_cumsum(g.data(), out.data(), L, K);
    return out;
  }
};

// The products Aqk, Akk of the chunk.
void products(const ChunkCase& c, const Vec& gam, Vec& Aqk, Vec& Akk) {
  Aqk.assign(kC * kC, 0.0);
  Akk.assign(kC * kC, 0.0);
  lc::decay_products(c.q.data(), c.k.data(), gam.data(), c.L, c.K, c.vector_gate, Aqk.data(), Akk.data());
}

// ---------------------------------------------------------------- per-block tests

struct BlockParam {
  bool vector_gate;
  GateKind gate;
};
std::string block_name(const ::testing::TestParamInfo<BlockParam>& i) {
  return std::string(i.param.vector_gate ? "PerChannel" : "Scalar") +
         (i.param.gate == GateKind::kLowerBound ? "LowerBound" : "Mild");
}

class WyBlock : public ::testing::TestWithParam<BlockParam> {
 protected:
  ChunkCase make(bool delta, int64_t L = 11) const {
    return ChunkCase(L, 6, 5, delta, GetParam().vector_gate, GetParam().gate);
  }
};

TEST_P(WyBlock, GateCumsum) {
  ChunkCase c = make(true);
  const Vec R = normal(kC * c.K);
  auto f = [&] { return dotv(R, c.gam()); };
  Vec dg(kC * c.K, 0.0);
  lc::gate_cumsum_backward(R.data(), dg.data(), c.L, c.K);
  dg.resize(c.L * c.K);
  Vec fd = fd_grad(c.g, f);
  fd.resize(c.L * c.K);
  expect_grad("dg", dg, fd);
}

TEST_P(WyBlock, DecayProducts) {
  ChunkCase c = make(true);
  Vec gam = c.gam();
  const Vec Rq = normal(kC * kC), Rk = normal(kC * kC);
  auto f = [&] {
    Vec Aqk, Akk;
    products(c, gam, Aqk, Akk);
    return dotv(Rq, Aqk) + dotv(Rk, Akk);  // the products are 0 outside their triangles
  };
  Vec dq(kC * c.K, 0.0), dkp(kC * c.K, 0.0), dkm(kC * c.K, 0.0), D(c.K);
  lc::decay_products_backward(c.q.data(), c.k.data(), gam.data(), Rq.data(), Rk.data(), c.L, c.K,
                              dq.data(), dkp.data(), dkm.data(), D.data());
  Vec dk(kC * c.K), dgam(kC * c.K);
  for (int64_t i = 0; i < kC * c.K; ++i) {
    dk[i] = dkp[i] + dkm[i];
    dgam[i] = c.q[i] * dq[i] + c.k[i] * (dkp[i] - dkm[i]);  // seed 001's form for this block
  }
  expect_grad("dq", dq, fd_grad(c.q, f));
  expect_grad("dk", dk, fd_grad(c.k, f));
  if (c.vector_gate) {
    expect_grad("dgam", dgam, fd_grad(gam, f));
  } else {  // decay_products reads channel 0 of a scalar gate: compare the channel sums
    Vec fd = fd_grad(gam, f), a(kC, 0.0), b(kC, 0.0);
    for (int64_t i = 0; i < kC; ++i) {
      a[i] = 0;
      for (int64_t ch = 0; ch < c.K; ++ch) a[i] += dgam[i * c.K + ch];
      b[i] = fd[i * c.K];
    }
    expect_grad("dgam (scalar)", a, b);
  }
}

TEST_P(WyBlock, TriangularSolveAndWU) {
  ChunkCase c = make(true);
  Vec gam = c.gam(), Aqk, Akk;
  products(c, gam, Aqk, Akk);
  const Vec RW = normal(kC * c.K), RU = normal(kC * c.V);
  auto f = [&] {
    Vec W(kC * c.K, 0.0), U(kC * c.V, 0.0), m(kC);
    lc::wy_solve(Akk.data(), c.beta.data(), c.k.data(), gam.data(), c.v.data(), c.L, c.K, c.V,
                 W.data(), U.data(), m.data());
    return dotv(RW, W) + dotv(RU, U);
  };
  Vec W(kC * c.K, 0.0), U(kC * c.V, 0.0), m(kC);
  lc::wy_solve(Akk.data(), c.beta.data(), c.k.data(), gam.data(), c.v.data(), c.L, c.K, c.V,
               W.data(), U.data(), m.data());
  Work w(c.K, c.V);
  Vec dX = RW, dY = RU, dAkk(kC * kC, 0.0), dbeta(kC, 0.0), dk(kC * c.K, 0.0), dv(kC * c.V, 0.0);
  lc::wy_backward(Akk.data(), c.beta.data(), c.k.data(), gam.data(), c.v.data(), W.data(), U.data(),
                  c.L, c.K, c.V, dX.data(), dY.data(), dAkk.data(), dbeta.data(), dk.data(), dv.data(), w.w);
  Vec fdA = fd_grad(Akk, f);  // only the strict lower triangle enters M
  Vec a, b;
  for (int64_t i = 0; i < c.L; ++i) {
    for (int64_t j = 0; j < i; ++j) { a.push_back(dAkk[i * kC + j]); b.push_back(fdA[i * kC + j]); }
  }
  expect_grad("dAkk (through the inverse)", a, b);
  Vec fdb = fd_grad(c.beta, f);
  dbeta.resize(c.L); fdb.resize(c.L);
  expect_grad("dbeta", dbeta, fdb);
  dk.resize(c.L * c.K);
  Vec fdk = fd_grad(c.k, f); fdk.resize(c.L * c.K);
  expect_grad("dk", dk, fdk);
  dv.resize(c.L * c.V);
  Vec fdv = fd_grad(c.v, f); fdv.resize(c.L * c.V);
  expect_grad("dv", dv, fdv);
  Vec dgam(c.L * c.K);  // k enters W only as exp(+gam) o k: dgam = k o dk
  for (int64_t i = 0; i < c.L * c.K; ++i) dgam[i] = c.k[i] * dk[i];
  Vec fdg = fd_grad(gam, f); fdg.resize(c.L * c.K);
  expect_grad("dgam", dgam, fdg);
}

TEST_P(WyBlock, DeltaVnew) {
  ChunkCase c = make(true);
  Vec W = normal(kC * c.K), U = normal(kC * c.V);
  const Vec R = normal(kC * c.V);
  auto f = [&] {
    Vec Un = U;
    lc::delta_vnew(W.data(), c.S.data(), c.L, c.K, c.V, Un.data());
    Vec r(R.begin(), R.begin() + c.L * c.V);
    Un.resize(c.L * c.V);
    return dotv(r, Un);
  };
  Work w(c.K, c.V);
  Vec dW(kC * c.K, 0.0), dS(c.K * c.V, 0.0);
  lc::delta_vnew_backward(W.data(), c.S.data(), R.data(), c.L, c.K, c.V, dW.data(), dS.data(), w.w);
  dW.resize(c.L * c.K);
  Vec fdW = fd_grad(W, f); fdW.resize(c.L * c.K);
  expect_grad("dW", dW, fdW);
  expect_grad("dS", dS, fd_grad(c.S, f));
}

TEST_P(WyBlock, Output) {
  ChunkCase c = make(false);
  Vec gam = c.gam(), Aqk, Akk;
  products(c, gam, Aqk, Akk);
  Vec vn = c.v;
  const Vec R = normal(kC * c.V);
  auto f = [&] {
    Vec o(kC * c.V, 0.0), tmp(kC * c.K);
    lc::chunk_output(c.q.data(), gam.data(), c.S.data(), Aqk.data(), vn.data(), c.scale, c.L, c.K,
                     c.V, tmp.data(), o.data());
    return dotv(R, o);
  };
  Work w(c.K, c.V);
  Vec dq(kC * c.K, 0.0), dAqk(kC * kC, 0.0), dS(c.K * c.V, 0.0), dvn(kC * c.V, 0.0);
  lc::chunk_output_backward(c.q.data(), gam.data(), c.S.data(), Aqk.data(), vn.data(), R.data(),
                            c.scale, c.L, c.K, c.V, dq.data(), dAqk.data(), dS.data(), dvn.data(), w.w);
  Vec fdq = fd_grad(c.q, f);
  expect_grad("dq", Vec(dq.begin(), dq.begin() + c.L * c.K), Vec(fdq.begin(), fdq.begin() + c.L * c.K));
  expect_grad("dS", dS, fd_grad(c.S, f));
  Vec fdv = fd_grad(vn, f);
  expect_grad("dvnew", Vec(dvn.begin(), dvn.begin() + c.L * c.V), Vec(fdv.begin(), fdv.begin() + c.L * c.V));
  Vec fdA = fd_grad(Aqk, f), a, b;
  for (int64_t i = 0; i < c.L; ++i) {
    for (int64_t j = 0; j <= i; ++j) { a.push_back(dAqk[i * kC + j]); b.push_back(fdA[i * kC + j]); }
  }
  expect_grad("dAqk", a, b);
  Vec dgam(c.L * c.K);  // with Aqk held fixed, gam enters as exp(+gam) o q only
  for (int64_t i = 0; i < c.L * c.K; ++i) dgam[i] = c.q[i] * dq[i];
  Vec fdg = fd_grad(gam, f); fdg.resize(c.L * c.K);
  expect_grad("dgam", dgam, fdg);
}

// L = 2 keeps exp(gam_L) >= exp(-10) with the [-5, 0) gates, so dS = exp(gam_L) o dSn is
// resolved by the finite differences (with L = 11 it is under their rounding).
TEST_P(WyBlock, StateUpdate) {
  for (int64_t len : {int64_t(2), int64_t(11)}) {
  ChunkCase c = make(false, len);
  Vec gam = c.gam(), vn = c.v;
  const Vec R = normal(c.K * c.V);
  auto f = [&] {
    Vec S = c.S, tmp(c.K * kC), row(c.K);
    lc::state_update(S.data(), c.k.data(), gam.data(), vn.data(), c.L, c.K, c.V, tmp.data(), row.data());
    return dotv(R, S);
  };
  Work w(c.K, c.V);
  Vec dS(c.K * c.V, 0.0), dvn(kC * c.V, 0.0), dk(kC * c.K, 0.0), dgl(c.K, 0.0);
  lc::state_update_backward(c.k.data(), gam.data(), c.S.data(), vn.data(), R.data(), c.L, c.K, c.V,
                            dS.data(), dvn.data(), dk.data(), dgl.data(), w.w);
  expect_grad("dS", dS, fd_grad(c.S, f));
  Vec fdv = fd_grad(vn, f);
  expect_grad("dvnew", Vec(dvn.begin(), dvn.begin() + c.L * c.V), Vec(fdv.begin(), fdv.begin() + c.L * c.V));
  Vec fdk = fd_grad(c.k, f);
  expect_grad("dk", Vec(dk.begin(), dk.begin() + c.L * c.K), Vec(fdk.begin(), fdk.begin() + c.L * c.K));
  Vec dgam(c.L * c.K);  // k enters with exp(-gam_i) ("minus" side), plus the chunk-end term
  for (int64_t i = 0; i < c.L * c.K; ++i) dgam[i] = -c.k[i] * dk[i];
  for (int64_t ch = 0; ch < c.K; ++ch) dgam[(c.L - 1) * c.K + ch] += dgl[ch];
  Vec fdg = fd_grad(gam, f); fdg.resize(c.L * c.K);
  expect_grad("dgam", dgam, fdg);
  }
}

INSTANTIATE_TEST_SUITE_P(Gates, WyBlock,
                         ::testing::Values(BlockParam{true, GateKind::kMild}, BlockParam{true, GateKind::kLowerBound},
                                           BlockParam{false, GateKind::kMild}, BlockParam{false, GateKind::kLowerBound}),
                         block_name);

// ---------------------------------------------------------------- a whole chunk, both passes

struct ChunkParam {
  bool delta, vector_gate;
  GateKind gate;
  int64_t L;
};
std::string chunk_name(const ::testing::TestParamInfo<ChunkParam>& i) {
  const auto& p = i.param;
  const char* fam = p.delta ? (p.vector_gate ? "Kda" : "Gdn") : (p.vector_gate ? "Gla" : "SimpleGla");
  return std::string(fam) + (p.gate == GateKind::kLowerBound ? "LowerBound" : "Mild") + "L" + std::to_string(p.L);
}

class WyChunk : public ::testing::TestWithParam<ChunkParam> {};

// The chunk forward from raw inputs: o and S_next, by the forward blocks of chunk.hpp.
void chunk_forward(const ChunkCase& c, Vec& o, Vec& Sn) {
  Vec gam = c.gam(), Aqk, Akk;
  products(c, gam, Aqk, Akk);
  Vec vn = c.v, W(kC * c.K, 0.0), m(kC), tmp(kC * c.K), row(c.K);
  if (c.delta) {
    lc::wy_solve(Akk.data(), c.beta.data(), c.k.data(), gam.data(), c.v.data(), c.L, c.K, c.V,
                 W.data(), vn.data(), m.data());
    lc::delta_vnew(W.data(), c.S.data(), c.L, c.K, c.V, vn.data());
  }
  o.assign(kC * c.V, 0.0);
  lc::chunk_output(c.q.data(), gam.data(), c.S.data(), Aqk.data(), vn.data(), c.scale, c.L, c.K,
                   c.V, tmp.data(), o.data());
  Sn = c.S;
  lc::state_update(Sn.data(), c.k.data(), gam.data(), vn.data(), c.L, c.K, c.V, tmp.data(), row.data());
}

TEST_P(WyChunk, BothPassesMatchFiniteDifferences) {
  const ChunkParam& prm = GetParam();
  ChunkCase c(prm.L, 6, 5, prm.delta, prm.vector_gate, prm.gate);
  const Vec dO = normal(kC * c.V), dSn = normal(c.K * c.V);
  auto f = [&] {
    Vec o, Sn;
    chunk_forward(c, o, Sn);
    return dotv(dO, o) + dotv(dSn, Sn);
  };
  // intermediates as the driver builds them
  Vec gam = c.gam(), Aqk, Akk;
  products(c, gam, Aqk, Akk);
  Vec W(kC * c.K, 0.0), U(kC * c.V, 0.0), m(kC), vn = c.v;
  if (c.delta) {
    lc::wy_solve(Akk.data(), c.beta.data(), c.k.data(), gam.data(), c.v.data(), c.L, c.K, c.V,
                 W.data(), U.data(), m.data());
    vn = U;
    lc::delta_vnew(W.data(), c.S.data(), c.L, c.K, c.V, vn.data());
  }
  const lc::ChunkFwd<double> cf{c.q.data(), c.k.data(), c.v.data(), c.beta.data(), gam.data(),
                                Aqk.data(), Akk.data(), W.data(), U.data(), vn.data(),
                                c.L, c.K, c.V, c.delta};
  Work w(c.K, c.V);
  Vec dvn(kC * c.V, 0.0), dS(c.K * c.V, 0.0);
  lc::chunk_bwd_pass1(cf, c.S.data(), dO.data(), dSn.data(), c.scale, dvn.data(), dS.data(), w.w);
  Vec dq(kC * c.K, 0.0), dk(kC * c.K, 0.0), dv(kC * c.V, 0.0), db(kC, 0.0), dg(kC * c.K, 0.0);
  lc::chunk_bwd_pass2(cf, c.S.data(), dO.data(), dSn.data(), dvn.data(), c.scale, dq.data(), dk.data(),
                      dv.data(), db.data(), dg.data(), w.w);
  auto head = [](const Vec& x, int64_t n) { return Vec(x.begin(), x.begin() + n); };
  const int64_t LK = c.L * c.K, LV = c.L * c.V;
  expect_grad("dS (pass 1)", dS, fd_grad(c.S, f));
  expect_grad("dq", head(dq, LK), head(fd_grad(c.q, f), LK));
  expect_grad("dk", head(dk, LK), head(fd_grad(c.k, f), LK));
  expect_grad("dv", head(dv, LV), head(fd_grad(c.v, f), LV));
  if (c.delta) expect_grad("dbeta", head(db, c.L), head(fd_grad(c.beta, f), c.L));
  if (c.vector_gate) {
    expect_grad("dg", head(dg, LK), head(fd_grad(c.g, f), LK));
  } else {  // one gate per token: perturb all channels together; its gradient is the channel sum
    Vec a(c.L, 0.0), b(c.L, 0.0);
    for (int64_t i = 0; i < c.L; ++i) {
      for (int64_t ch = 0; ch < c.K; ++ch) a[i] += dg[i * c.K + ch];
      const double h = 1e-6;
      for (int64_t ch = 0; ch < c.K; ++ch) c.g[i * c.K + ch] += h;
      const double fp = f();
      for (int64_t ch = 0; ch < c.K; ++ch) c.g[i * c.K + ch] -= 2 * h;
      const double fm = f();
      for (int64_t ch = 0; ch < c.K; ++ch) c.g[i * c.K + ch] += h;
      b[i] = (fp - fm) / (2 * h);
    }
    expect_grad("dg (scalar)", a, b);
  }
}

std::vector<ChunkParam> chunk_params() {
  std::vector<ChunkParam> v;
  for (bool delta : {true, false}) {
    for (bool vec : {true, false}) {
      for (GateKind gk : {GateKind::kMild, GateKind::kLowerBound}) {
        for (int64_t L : {int64_t(1), int64_t(13), kC}) v.push_back({delta, vec, gk, L});
      }
    }
  }
  return v;
}
INSTANTIATE_TEST_SUITE_P(Families, WyChunk, ::testing::ValuesIn(chunk_params()), chunk_name);

// ---------------------------------------------------------------- the whole backward

struct WholeParam {
  Family family;
  int option;  // 0 plain, 1 states + l2norm, 2 lower-bound / clamped gate, 3 varlen + GVA, 4 gate in kernel + beta sigmoid
  DType dtype;
};
const char* option_name(int o) {
  static const char* n[] = {"Plain", "StatesL2", "LowerBound", "VarlenGva", "GateInKernel"};
  return n[o];
}
std::string whole_name(const ::testing::TestParamInfo<WholeParam>& i) {
  return std::string(family_name(i.param.family)) + option_name(i.param.option) + dtype_name(i.param.dtype);
}

class WyWhole : public ::testing::TestWithParam<WholeParam> {};

Config whole_config(const WholeParam& w) {
  Config c;
  c.family = w.family;
  c.dtype = w.dtype;
  c.B = 2; c.T = 150; c.H = 2; c.K = 32; c.V = 16;
  switch (w.option) {
    case 1: c.h0 = c.final_state = true; c.l2norm = true; break;
    case 2: c.gate = Gate::kClamped; c.h0 = true; break;
    case 3: c.B = 1; c.T = 260; c.cu = {0, 7, 64, 65, 200, 260}; c.G = 2; c.final_state = true; break;
    case 4:
      if (w.family == Family::kKDA || w.family == Family::kGDN) {
        c.gate = w.family == Family::kKDA ? Gate::kLowerBound : Gate::kSoftplus;
        c.beta_sigmoid = true;
      } else if (w.family == Family::kSimpleGLA) {
        c.g_gamma = true;
      }
      break;
    default: break;
  }
  return c;
}

TEST_P(WyWhole, MatchesReferenceAndTokenReplay) {
  const Config c = whole_config(GetParam());
  const Data d = make_data(c);
  const BwdResult ref = run_backward(c, d.as_f64(), /*reference=*/true);
  const BwdResult wy = run_backward(c, d, false);
  const BwdResult replay = run_backward(c, d, false, nullptr, /*token_replay=*/true);
  const double tol = tolerance_for(c.dtype);
  auto check = [&](const char* what, const HostTensor& x, const HostTensor& r, const HostTensor& t) {
    if (!r.present()) return;
    EXPECT_LE(rel_err(x, r), tol) << what << " (WY vs reference)";
    EXPECT_LE(rel_err(t, r), tol) << what << " (token replay vs reference)";
  };
  check("dq", wy.dq, ref.dq, replay.dq);
  check("dk", wy.dk, ref.dk, replay.dk);
  check("dv", wy.dv, ref.dv, replay.dv);
  check("dg", wy.dg, ref.dg, replay.dg);
  check("dg_gamma", wy.dg_gamma, ref.dg_gamma, replay.dg_gamma);
  check("dbeta", wy.dbeta, ref.dbeta, replay.dbeta);
  check("dA_log", wy.dA_log, ref.dA_log, replay.dA_log);
  check("ddt_bias", wy.ddt_bias, ref.ddt_bias, replay.ddt_bias);
  check("dh0", wy.dh0, ref.dh0, replay.dh0);
}

std::vector<WholeParam> whole_params() {
  std::vector<WholeParam> v;
  for (Family f : {Family::kKDA, Family::kGDN, Family::kGLA, Family::kSimpleGLA}) {
    for (int o = 0; o < 5; ++o) {
      for (DType dt : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) v.push_back({f, o, dt});
    }
  }
  return v;
}
INSTANTIATE_TEST_SUITE_P(Families, WyWhole, ::testing::ValuesIn(whole_params()), whole_name);

}  // namespace
}  // namespace linattn::test::cpu
