// Tests that the float64 reference (reference_forward / reference_backward) is right:
//   ReferenceFD        backward == central finite differences of the forward, every gradient,
//                      every family, every option (float64, relative error <= 1e-6)
//   ReferenceForward   hand checks: T = 1 closed form, chunk-boundary states h, varlen equals
//                      the sequences run one by one, low-precision dtypes are read and written
//                      through the same float64 evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "linattn/linattn.hpp"
#include "test_util.hpp"

namespace linattn::test {
namespace {

constexpr DType f64 = DType::kFloat64;

// ---------------------------------------------------------------- a test case and its data
enum class GateFill {
  kLogsigmoid,  // logsigmoid(randn) / 16: the decay as passed
  kRaw,         // randn: a raw gate for use_gate_in_kernel
  kBounded,     // uniform in [-5, 0): the caller's gate under safe_gate
};

struct Case {
  std::string name;
  Family fam = Family::kKDA;
  int64_t B = 1, T = 9, H = 2, G = 1, K = 3, V = 4;
  std::vector<int64_t> cu;  // empty: fixed length
  Options opt;
  bool h0 = false;
  bool dht = false;  // loss includes sum(final_state * W_s), backward gets dht = W_s
  bool g = true;
  bool g_gamma = false;
  bool A_log = false;
  bool dt_bias = false;
  GateFill gate_fill = GateFill::kLogsigmoid;

  bool delta() const { return fam == Family::kGDN || fam == Family::kKDA; }
  bool vector_gate() const { return fam == Family::kKDA || fam == Family::kGLA; }
  int64_t HV() const { return H * G; }
  int64_t N() const { return cu.empty() ? B : static_cast<int64_t>(cu.size()) - 1; }
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

struct Data {
  HostTensor q, k, v, g, g_gamma, beta, A_log, dt_bias, h0, cu;
  HostTensor W_o, W_s;  // loss weights (d_o and dht)
};

HostTensor state_tensor(const Case& c, int64_t N, DType dt = f64) {
  return c.opt.state_v_first ? HostTensor(dt, {N, c.HV(), c.V, c.K})
                             : HostTensor(dt, {N, c.HV(), c.K, c.V});
}

Data make_data(const Case& c) {
  Data d;
  const int64_t B = c.B, T = c.T, H = c.H, HV = c.HV(), K = c.K, V = c.V;
  d.q = HostTensor(f64, {B, T, H, K});
  d.k = HostTensor(f64, {B, T, H, K});
  d.v = HostTensor(f64, {B, T, HV, V});
  fill_normal(d.q);
  fill_normal(d.k);
  fill_normal(d.v);
  if (!c.opt.use_qk_l2norm_in_kernel) {
    // Keep the delta rule contractive-ish without the normalisation: |k| ~ 1.
    for (int64_t i = 0; i < d.k.numel(); ++i) d.k.set(i, d.k.get(i) / std::sqrt(double(K)));
  }
  if (c.g) {
    d.g = c.vector_gate() ? HostTensor(f64, {B, T, HV, K}) : HostTensor(f64, {B, T, HV});
    switch (c.gate_fill) {
      case GateFill::kLogsigmoid: fill_logsigmoid_gate(d.g); break;
      case GateFill::kRaw: fill_normal(d.g); break;
      case GateFill::kBounded: fill_uniform(d.g, -5.0, -0.01); break;
    }
  }
  if (c.g_gamma) {
    d.g_gamma = HostTensor(f64, {HV});
    fill_uniform(d.g_gamma, -0.3, -0.01);
  }
  if (c.delta()) {
    d.beta = HostTensor(f64, {B, T, HV});
    if (c.opt.use_beta_sigmoid_in_kernel) {
      fill_normal(d.beta);
    } else {
      fill_uniform(d.beta, 0.1, 0.9);
    }
  }
  if (c.A_log) {
    d.A_log = HostTensor(f64, {HV});
    fill_uniform(d.A_log, -1.0, 0.5);
  }
  if (c.dt_bias) {
    d.dt_bias = c.fam == Family::kKDA ? HostTensor(f64, {HV * K}) : HostTensor(f64, {HV});
    fill_normal(d.dt_bias, 0.0, 0.5);
  }
  if (c.h0) {
    d.h0 = state_tensor(c, c.N());
    fill_normal(d.h0, 0.0, 0.5);
  }
  if (!c.cu.empty()) {
    d.cu = HostTensor(DType::kInt64, {static_cast<int64_t>(c.cu.size())});
    for (size_t i = 0; i < c.cu.size(); ++i) static_cast<int64_t*>(d.cu.view.data)[i] = c.cu[i];
  }
  d.W_o = HostTensor(f64, {B, T, HV, V});
  fill_normal(d.W_o);
  if (c.dht) {
    d.W_s = state_tensor(c, c.N());
    fill_normal(d.W_s);
  }
  return d;
}

ForwardInputs fwd_inputs(const Data& d) {
  ForwardInputs in;
  in.q = d.q.view;
  in.k = d.k.view;
  in.v = d.v.view;
  in.g = d.g.view;
  in.g_gamma = d.g_gamma.view;
  in.beta = d.beta.view;
  in.A_log = d.A_log.view;
  in.dt_bias = d.dt_bias.view;
  in.initial_state = d.h0.view;
  in.cu_seqlens = d.cu.view;
  return in;
}

// Runs the reference forward; o and final_state (when c.dht) in float64.
Status run_forward(const Case& c, const Data& d, HostTensor* o, HostTensor* fs) {
  *o = HostTensor(f64, {c.B, c.T, c.HV(), c.V});
  o->poison();
  ForwardOutputs out;
  out.o = o->view;
  if (c.dht) {
    *fs = state_tensor(c, c.N());
    fs->poison();
    out.final_state = fs->view;
  }
  return reference_forward(c.fam, fwd_inputs(d), out, c.opt);
}

double dot(const HostTensor& a, const HostTensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.get(i) * b.get(i);
  return s;
}

double loss(const Case& c, const Data& d) {
  HostTensor o, fs;
  Status s = run_forward(c, d, &o, &fs);
  if (!s.ok()) {
    ADD_FAILURE() << "reference_forward: " << s.message;
    return std::nan("");
  }
  double l = dot(o, d.W_o);
  if (c.dht) l += dot(fs, d.W_s);
  return l;
}

// The gradient outputs of one backward call, each poisoned, plus which input each belongs to.
struct GradSet {
  HostTensor dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0;
};

HostTensor like(const HostTensor& t) {
  HostTensor r = t;
  r.poison();
  return r;
}

Status run_backward(const Case& c, const Data& d, GradSet* gs, bool all_optional = true) {
  BackwardInputs in;
  in.fwd = fwd_inputs(d);
  in.d_o = d.W_o.view;
  if (c.dht) in.dht = d.W_s.view;
  BackwardOutputs out;
  gs->dq = like(d.q);
  gs->dk = like(d.k);
  gs->dv = like(d.v);
  out.dq = gs->dq.view;
  out.dk = gs->dk.view;
  out.dv = gs->dv.view;
  if (all_optional) {
    if (d.g.present()) out.dg = (gs->dg = like(d.g)).view;
    if (d.g_gamma.present()) out.dg_gamma = (gs->dg_gamma = like(d.g_gamma)).view;
    if (d.beta.present()) out.dbeta = (gs->dbeta = like(d.beta)).view;
    if (d.A_log.present()) out.dA_log = (gs->dA_log = like(d.A_log)).view;
    if (d.dt_bias.present()) out.ddt_bias = (gs->ddt_bias = like(d.dt_bias)).view;
    if (d.h0.present()) out.dh0 = (gs->dh0 = like(d.h0)).view;
  }
  return reference_backward(c.fam, in, out, c.opt);
}

// ---------------------------------------------------------------- finite differences
class ReferenceFD : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceFD, Gradients) {
  const Case& c = GetParam();
  Data d = make_data(c);
  GradSet gs;
  Status s = run_backward(c, d, &gs);
  ASSERT_TRUE(s.ok()) << s.message;

  struct Item {
    const char* name;
    HostTensor* x;
    const HostTensor* grad;
  };
  std::vector<Item> items = {{"dq", &d.q, &gs.dq}, {"dk", &d.k, &gs.dk}, {"dv", &d.v, &gs.dv}};
  if (d.g.present()) items.push_back({"dg", &d.g, &gs.dg});
  if (d.g_gamma.present()) items.push_back({"dg_gamma", &d.g_gamma, &gs.dg_gamma});
  if (d.beta.present()) items.push_back({"dbeta", &d.beta, &gs.dbeta});
  if (d.A_log.present()) items.push_back({"dA_log", &d.A_log, &gs.dA_log});
  if (d.dt_bias.present()) items.push_back({"ddt_bias", &d.dt_bias, &gs.ddt_bias});
  if (d.h0.present()) items.push_back({"dh0", &d.h0, &gs.dh0});

  double worst = 0;
  std::string report;
  for (const Item& it : items) {
    HostTensor fd = like(*it.grad);
    for (int64_t i = 0; i < it.x->numel(); ++i) {
      const double x0 = it.x->get(i);
      const double e = 1e-6 * std::max(1.0, std::fabs(x0));
      it.x->set(i, x0 + e);
      const double lp = loss(c, d);
      it.x->set(i, x0 - e);
      const double lm = loss(c, d);
      it.x->set(i, x0);
      fd.set(i, (lp - lm) / (2 * e));
    }
    const double err = rel_err(*it.grad, fd);
    worst = std::max(worst, err);
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s=%.2e", it.name, err);
    report += buf;
    EXPECT_LE(err, 1e-6) << it.name << " differs from central finite differences";
  }
  RecordProperty("worst_fd_rel_err", std::to_string(worst));
  std::printf("  [fd] %-28s%s\n", c.name.c_str(), report.c_str());
}

std::vector<Case> fd_cases() {
  std::vector<Case> out;
  for (Family f : {Family::kSimpleGLA, Family::kGLA, Family::kGDN, Family::kKDA}) {
    const std::string fam = family_name(f);
    const bool delta = f == Family::kGDN || f == Family::kKDA;
    auto add = [&](const std::string& opt, const std::function<void(Case&)>& set) {
      Case c;
      c.fam = f;
      c.name = fam + "_" + opt;
      set(c);
      out.push_back(c);
    };
    add("plain", [](Case&) {});
    add("batch2", [](Case& c) { c.B = 2; c.T = 6; });
    add("initial_state_dht", [](Case& c) { c.h0 = c.dht = true; });
    add("l2norm", [](Case& c) { c.opt.use_qk_l2norm_in_kernel = true; });
    add("scale", [](Case& c) { c.opt.scale = 0.7; });
    add("gva2", [](Case& c) { c.H = 1; c.G = 2; c.h0 = c.dht = true; });
    add("gva2_h2", [](Case& c) { c.H = 2; c.G = 2; c.T = 6; });
    add("varlen3", [](Case& c) { c.T = 12; c.cu = {0, 5, 6, 12}; c.h0 = c.dht = true; });
    add("varlen_empty_seqs", [](Case& c) { c.T = 9; c.cu = {0, 0, 4, 4, 9, 9}; c.h0 = c.dht = true; });
    add("state_v_first", [](Case& c) { c.opt.state_v_first = true; c.h0 = c.dht = true; });
    if (delta) {
      add("beta_sigmoid", [](Case& c) { c.opt.use_beta_sigmoid_in_kernel = true; });
      add("allow_neg_eigval", [](Case& c) {
        c.opt.use_beta_sigmoid_in_kernel = c.opt.allow_neg_eigval = true;
      });
      add("gate_softplus_dt_bias", [](Case& c) {
        c.opt.use_gate_in_kernel = true;
        c.A_log = c.dt_bias = true;
        c.gate_fill = GateFill::kRaw;
        c.h0 = c.dht = true;
      });
      add("gate_softplus", [](Case& c) {
        c.opt.use_gate_in_kernel = true;
        c.A_log = true;
        c.gate_fill = GateFill::kRaw;
      });
    }
    if (f == Family::kKDA) {
      add("gate_lower_bound_A_log", [](Case& c) {
        c.opt.use_gate_in_kernel = c.opt.safe_gate = true;
        c.opt.lower_bound = -5.0f;
        c.A_log = c.dt_bias = true;
        c.gate_fill = GateFill::kRaw;
      });
      add("gate_lower_bound_no_A_log", [](Case& c) {
        c.opt.use_gate_in_kernel = c.opt.safe_gate = true;
        c.opt.lower_bound = -3.0f;
        c.dt_bias = true;
        c.gate_fill = GateFill::kRaw;
      });
      add("gate_lower_bound_no_dt_bias", [](Case& c) {
        c.opt.use_gate_in_kernel = c.opt.safe_gate = true;
        c.opt.lower_bound = -2.0f;
        c.A_log = true;
        c.gate_fill = GateFill::kRaw;
      });
      add("gate_lower_bound_without_safe_gate", [](Case& c) {
        c.opt.use_gate_in_kernel = true;
        c.opt.lower_bound = -4.0f;
        c.A_log = c.dt_bias = true;
        c.gate_fill = GateFill::kRaw;
        c.h0 = c.dht = true;
      });
      add("safe_gate_given", [](Case& c) {
        c.opt.safe_gate = true;
        c.opt.lower_bound = -5.0f;
        c.gate_fill = GateFill::kBounded;
      });
    }
    if (f == Family::kSimpleGLA) {
      add("g_gamma_only", [](Case& c) { c.g = false; c.g_gamma = true; });
      add("g_and_g_gamma", [](Case& c) { c.g_gamma = true; c.h0 = c.dht = true; });
      add("no_decay", [](Case& c) { c.g = false; });
    }
    // Everything at once.
    add("all_options", [f, delta](Case& c) {
      c.H = 1;
      c.G = 2;
      c.T = 11;
      c.cu = {0, 4, 5, 5, 11};
      c.h0 = c.dht = true;
      c.opt.use_qk_l2norm_in_kernel = true;
      c.opt.state_v_first = true;
      c.opt.scale = 0.9;
      if (delta) {
        c.opt.use_beta_sigmoid_in_kernel = c.opt.allow_neg_eigval = true;
        c.opt.use_gate_in_kernel = true;
        c.A_log = c.dt_bias = true;
        c.gate_fill = GateFill::kRaw;
        if (f == Family::kKDA) {
          c.opt.safe_gate = true;
          c.opt.lower_bound = -4.0f;
        }
      }
      if (f == Family::kSimpleGLA) c.g_gamma = true;
    });
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Reference, ReferenceFD, ::testing::ValuesIn(fd_cases()), case_name);

// ---------------------------------------------------------------- forward hand checks
std::vector<Family> all_families() {
  return {Family::kSimpleGLA, Family::kGLA, Family::kGDN, Family::kKDA};
}
std::string family_param_name(const ::testing::TestParamInfo<Family>& info) {
  return family_name(info.param);
}

class ReferenceForward : public ::testing::TestWithParam<Family> {};

// T = 1 from a zero state: o = scale * (beta k v^T)^T q (delta) or scale * (k v^T)^T q.
TEST_P(ReferenceForward, SingleTokenClosedForm) {
  Case c;
  c.fam = GetParam();
  c.T = 1;
  c.B = 2;
  c.dht = true;  // also read final_state = beta k v^T
  c.g_gamma = c.fam == Family::kSimpleGLA;
  Data d = make_data(c);
  HostTensor o, fs;
  Status s = run_forward(c, d, &o, &fs);
  ASSERT_TRUE(s.ok()) << s.message;
  const double scale = 1.0 / std::sqrt(double(c.K));
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t hv = 0; hv < c.HV(); ++hv) {
      const int64_t h = hv / c.G;
      const double beta = c.delta() ? d.beta.get(b * c.HV() + hv) : 1.0;
      double qk = 0;
      for (int64_t i = 0; i < c.K; ++i) {
        qk += d.q.get((b * c.H + h) * c.K + i) * d.k.get((b * c.H + h) * c.K + i);
      }
      for (int64_t j = 0; j < c.V; ++j) {
        const double vj = d.v.get((b * c.HV() + hv) * c.V + j);
        EXPECT_NEAR(o.get((b * c.HV() + hv) * c.V + j), scale * beta * vj * qk, 1e-14);
        for (int64_t i = 0; i < c.K; ++i) {
          const double ki = d.k.get((b * c.H + h) * c.K + i);
          EXPECT_NEAR(fs.get(((b * c.HV() + hv) * c.K + i) * c.V + j), beta * ki * vj, 1e-14);
        }
      }
    }
  }
}

// Two tokens from a given initial state, every option's formula written out from SPEC.md here
// (not through transforms.hpp): checks the forward, including the order "decay, then delta
// update against the decayed state", the in-kernel gate, beta sigmoid and the l2norm.
class ReferenceHand : public ::testing::TestWithParam<std::pair<Family, int>> {};

std::vector<std::pair<Family, int>> hand_params() {
  std::vector<std::pair<Family, int>> r;
  for (Family f : all_families()) {
    const int n = f == Family::kKDA ? 4 : (f == Family::kGDN ? 3 : 2);
    for (int i = 0; i < n; ++i) r.push_back({f, i});
  }
  return r;
}
std::string hand_name(const ::testing::TestParamInfo<std::pair<Family, int>>& info) {
  static const char* names[] = {"plain", "l2norm_sigmoid", "softplus_gate", "lower_bound_gate"};
  std::string n = names[info.param.second];
  if (info.param.first == Family::kSimpleGLA && info.param.second == 1) n = "l2norm_g_gamma";
  if (info.param.first == Family::kGLA && info.param.second == 1) n = "l2norm";
  return std::string(family_name(info.param.first)) + "_" + n;
}

TEST_P(ReferenceHand, TwoTokensFromInitialState) {
  const Family f = GetParam().first;
  const int variant = GetParam().second;
  Case c;
  c.fam = f;
  c.B = 1;
  c.T = 2;
  c.H = 1;
  c.K = 3;
  c.V = 2;
  c.h0 = c.dht = true;
  c.opt.scale = 0.8;
  if (variant == 1) {
    c.opt.use_qk_l2norm_in_kernel = true;
    if (c.delta()) c.opt.use_beta_sigmoid_in_kernel = c.opt.allow_neg_eigval = true;
    if (f == Family::kSimpleGLA) c.g_gamma = true;
  } else if (variant == 2) {
    c.opt.use_gate_in_kernel = true;
    c.A_log = c.dt_bias = true;
    c.gate_fill = GateFill::kRaw;
  } else if (variant == 3) {
    c.opt.use_gate_in_kernel = c.opt.safe_gate = true;
    c.opt.lower_bound = -5.0f;
    c.A_log = c.dt_bias = true;
    c.gate_fill = GateFill::kRaw;
  }
  Data d = make_data(c);
  HostTensor o, fs;
  Status s = run_forward(c, d, &o, &fs);
  ASSERT_TRUE(s.ok()) << s.message;

  const int64_t K = c.K, V = c.V;
  std::vector<std::vector<double>> S(K, std::vector<double>(V));
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) S[i][j] = d.h0.get(i * V + j);
  for (int64_t t = 0; t < 2; ++t) {
    std::vector<double> q(K), k(K), v(V), gate(K, 0.0);
    double qn = 0, kn = 0;
    for (int64_t i = 0; i < K; ++i) {
      q[i] = d.q.get(t * K + i);
      k[i] = d.k.get(t * K + i);
      qn += q[i] * q[i];
      kn += k[i] * k[i];
    }
    if (c.opt.use_qk_l2norm_in_kernel) {
      for (int64_t i = 0; i < K; ++i) {
        q[i] /= std::sqrt(qn + 1e-6);
        k[i] /= std::sqrt(kn + 1e-6);
      }
    }
    for (int64_t j = 0; j < V; ++j) v[j] = d.v.get(t * V + j);
    for (int64_t i = 0; i < K; ++i) {
      if (d.g.present()) {
        const double raw = c.vector_gate() ? d.g.get(t * K + i) : d.g.get(t);
        if (variant == 2) {
          const double x = raw + d.dt_bias.get(c.vector_gate() ? i : 0);
          gate[i] = -std::exp(d.A_log.get(0)) * std::log(1 + std::exp(x));
        } else if (variant == 3) {
          const double x = raw + d.dt_bias.get(i);
          gate[i] = -5.0 / (1 + std::exp(-std::exp(d.A_log.get(0)) * x));
        } else {
          gate[i] = raw;
        }
      }
      if (d.g_gamma.present()) gate[i] += d.g_gamma.get(0);
    }
    double beta = 1;
    if (c.delta()) {
      beta = d.beta.get(t);
      if (c.opt.use_beta_sigmoid_in_kernel) beta = 2 / (1 + std::exp(-beta));
    }
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) S[i][j] *= std::exp(gate[i]);
    for (int64_t j = 0; j < V; ++j) {
      double pred = 0;  // (S'^T k)_j
      for (int64_t i = 0; i < K; ++i) pred += S[i][j] * k[i];
      const double u = c.delta() ? beta * (v[j] - pred) : v[j];
      for (int64_t i = 0; i < K; ++i) S[i][j] += k[i] * u;
    }
    for (int64_t j = 0; j < V; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < K; ++i) acc += S[i][j] * q[i];
      EXPECT_NEAR(o.get(t * V + j), 0.8 * acc, 1e-13) << "o[t=" << t << "][" << j << "]";
    }
  }
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < V; ++j) EXPECT_NEAR(fs.get(i * V + j), S[i][j], 1e-13);
}

INSTANTIATE_TEST_SUITE_P(Reference, ReferenceHand, ::testing::ValuesIn(hand_params()), hand_name);

// Copies the flat tokens [tok0, tok0 + len) of a [B, T, ...] tensor into a [1, len, ...] one.
HostTensor slice_tokens(const HostTensor& t, int64_t T_full, int64_t tok0, int64_t len) {
  if (!t.present()) return HostTensor();
  const int64_t per_token = t.numel() / (t.view.shape[0] * T_full);
  HostTensor r = t;
  r.bytes.assign(static_cast<size_t>(len * per_token) * dtype_size(t.dtype()), 0);
  r.view.data = r.bytes.data();
  r.view.shape[0] = 1;
  r.view.shape[1] = len;
  int64_t stride = 1;
  for (int i = r.view.ndim - 1; i >= 0; --i) {
    r.view.strides[i] = stride;
    stride *= r.view.shape[i];
  }
  for (int64_t i = 0; i < len * per_token; ++i) r.set(i, t.get(tok0 * per_token + i));
  return r;
}

// State n of a [N, HV, ., .] tensor as a [1, HV, ., .] one.
HostTensor slice_state(const HostTensor& t, int64_t n) {
  if (!t.present()) return HostTensor();
  HostTensor r(t.dtype(), {1, t.view.shape[1], t.view.shape[2], t.view.shape[3]});
  const int64_t per = r.numel();
  for (int64_t i = 0; i < per; ++i) r.set(i, t.get(n * per + i));
  return r;
}

// The single sequence of flat tokens [tok0, tok0 + len) with initial state n, as its own call.
std::pair<Case, Data> sub_problem(const Case& c, const Data& d, int64_t tok0, int64_t len, int64_t n) {
  Case s = c;
  s.B = 1;
  s.T = len;
  s.cu.clear();
  const int64_t Tf = c.T;
  Data r;
  r.q = slice_tokens(d.q, Tf, tok0, len);
  r.k = slice_tokens(d.k, Tf, tok0, len);
  r.v = slice_tokens(d.v, Tf, tok0, len);
  r.g = slice_tokens(d.g, Tf, tok0, len);
  r.beta = slice_tokens(d.beta, Tf, tok0, len);
  r.W_o = slice_tokens(d.W_o, Tf, tok0, len);
  r.g_gamma = d.g_gamma;
  r.A_log = d.A_log;
  r.dt_bias = d.dt_bias;
  r.h0 = slice_state(d.h0, n);
  r.W_s = slice_state(d.W_s, n);
  return {s, r};
}

void expect_equal_range(const HostTensor& full, int64_t off, const HostTensor& part, const char* what,
                        double tol = 1e-13) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < part.numel(); ++i) {
    const double a = full.get(off + i), b = part.get(i);
    ASSERT_TRUE(std::isfinite(a)) << what << " element " << off + i << " is not finite";
    num += (a - b) * (a - b);
    den += b * b;
  }
  EXPECT_LE(std::sqrt(num), tol * std::max(1.0, std::sqrt(den))) << what;
}

Case long_case(Family f, bool v_first) {
  Case c;
  c.fam = f;
  c.T = 130;
  c.H = 1;
  c.G = 2;
  c.h0 = true;
  c.dht = true;
  c.opt.state_v_first = v_first;
  c.g_gamma = f == Family::kSimpleGLA;
  return c;
}

// h[c] is the state before chunk c: the final state of the prefix of 64 c tokens.
void check_chunk_states(const Case& c, DType h_dtype) {
  Data d = make_data(c);
  ForwardInputs in = fwd_inputs(d);
  int64_t nt = 0;
  ASSERT_TRUE(num_chunks(in, &nt).ok());
  int64_t nt_expected = 0;
  std::vector<int64_t> cu = c.cu;
  if (cu.empty()) {
    for (int64_t b = 0; b <= c.B; ++b) cu.push_back(b * c.T);
  }
  for (size_t n = 0; n + 1 < cu.size(); ++n) nt_expected += (cu[n + 1] - cu[n] + 63) / 64;
  ASSERT_EQ(nt, nt_expected);
  const int64_t hb = c.cu.empty() ? c.B : 1;
  const int64_t hnt = c.cu.empty() ? nt / c.B : nt;
  HostTensor o(f64, {c.B, c.T, c.HV(), c.V});
  HostTensor h = c.opt.state_v_first ? HostTensor(h_dtype, {hb, hnt, c.HV(), c.V, c.K})
                                     : HostTensor(h_dtype, {hb, hnt, c.HV(), c.K, c.V});
  o.poison();
  h.poison();
  ForwardOutputs out;
  out.o = o.view;
  out.h = h.view;
  Status s = reference_forward(c.fam, in, out, c.opt);
  ASSERT_TRUE(s.ok()) << s.message;
  const int64_t state_elems = c.HV() * c.K * c.V;
  int64_t chunk = 0;
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    const int64_t len = cu[n + 1] - cu[n];
    for (int64_t lc = 0; lc * 64 < len; ++lc, ++chunk) {
      HostTensor expect;
      if (lc == 0) {
        expect = slice_state(d.h0, static_cast<int64_t>(n));
      } else {
        auto [sc, sd] = sub_problem(c, d, cu[n], lc * 64, static_cast<int64_t>(n));
        HostTensor so, sfs;
        Status ss = run_forward(sc, sd, &so, &sfs);
        ASSERT_TRUE(ss.ok()) << ss.message;
        expect = sfs;
      }
      const double tol = h_dtype == f64 ? 1e-13 : 1e-6;
      expect_equal_range(h, chunk * state_elems, expect,
                         ("h of sequence " + std::to_string(n) + ", chunk " + std::to_string(lc)).c_str(),
                         tol);
    }
  }
  ASSERT_EQ(chunk, nt);
}

TEST_P(ReferenceForward, ChunkBoundaryStatesT130) {
  check_chunk_states(long_case(GetParam(), false), f64);
}

TEST_P(ReferenceForward, ChunkBoundaryStatesBatch2Float32VFirst) {
  Case c = long_case(GetParam(), true);
  c.B = 2;
  check_chunk_states(c, DType::kFloat32);
}

TEST_P(ReferenceForward, ChunkBoundaryStatesVarlen) {
  Case c = long_case(GetParam(), false);
  c.T = 200;
  c.cu = {0, 70, 70, 134, 135, 200};  // 2 chunks, none, 1 (exactly 64), 1, 2 (65 tokens)
  check_chunk_states(c, f64);
}

// Varlen forward and backward equal the sequences run one by one (including empty ones).
TEST_P(ReferenceForward, VarlenEqualsSeparateSequences) {
  Case c;
  c.fam = GetParam();
  c.T = 13;
  c.H = 1;
  c.G = 2;
  c.cu = {0, 5, 6, 6, 13};
  c.h0 = c.dht = true;
  c.opt.use_qk_l2norm_in_kernel = true;
  c.g_gamma = c.fam == Family::kSimpleGLA;
  if (c.delta()) {
    c.opt.use_gate_in_kernel = true;
    c.opt.use_beta_sigmoid_in_kernel = true;
    c.A_log = c.dt_bias = true;
    c.gate_fill = GateFill::kRaw;
  }
  Data d = make_data(c);
  HostTensor o, fs;
  Status s = run_forward(c, d, &o, &fs);
  ASSERT_TRUE(s.ok()) << s.message;
  GradSet gs;
  s = run_backward(c, d, &gs);
  ASSERT_TRUE(s.ok()) << s.message;

  const int64_t HV = c.HV(), K = c.K, V = c.V, H = c.H;
  const int64_t state_elems = HV * K * V;
  std::vector<double> dA(HV, 0), ddt(d.dt_bias.present() ? d.dt_bias.numel() : 0, 0), dgg(HV, 0);
  for (size_t n = 0; n + 1 < c.cu.size(); ++n) {
    const int64_t t0 = c.cu[n], len = c.cu[n + 1] - c.cu[n];
    const std::string tag = "sequence " + std::to_string(n);
    if (len == 0) {
      // Nothing happens: the final state is the initial state, dh0 is dht.
      expect_equal_range(fs, n * state_elems, slice_state(d.h0, n), (tag + " final_state").c_str());
      expect_equal_range(gs.dh0, n * state_elems, slice_state(d.W_s, n), (tag + " dh0").c_str());
      continue;
    }
    auto [sc, sd] = sub_problem(c, d, t0, len, n);
    HostTensor so, sfs;
    s = run_forward(sc, sd, &so, &sfs);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_equal_range(o, t0 * HV * V, so, (tag + " o").c_str());
    expect_equal_range(fs, n * state_elems, sfs, (tag + " final_state").c_str());
    GradSet sg;
    s = run_backward(sc, sd, &sg);
    ASSERT_TRUE(s.ok()) << s.message;
    expect_equal_range(gs.dq, t0 * H * K, sg.dq, (tag + " dq").c_str());
    expect_equal_range(gs.dk, t0 * H * K, sg.dk, (tag + " dk").c_str());
    expect_equal_range(gs.dv, t0 * HV * V, sg.dv, (tag + " dv").c_str());
    if (d.g.present()) {
      expect_equal_range(gs.dg, t0 * HV * (c.vector_gate() ? K : 1), sg.dg, (tag + " dg").c_str());
    }
    if (d.beta.present()) expect_equal_range(gs.dbeta, t0 * HV, sg.dbeta, (tag + " dbeta").c_str());
    expect_equal_range(gs.dh0, n * state_elems, sg.dh0, (tag + " dh0").c_str());
    for (int64_t i = 0; i < HV; ++i) {
      if (d.A_log.present()) dA[i] += sg.dA_log.get(i);
      if (d.g_gamma.present()) dgg[i] += sg.dg_gamma.get(i);
    }
    for (size_t i = 0; i < ddt.size(); ++i) ddt[i] += sg.ddt_bias.get(i);
  }
  for (int64_t i = 0; i < HV; ++i) {
    if (d.A_log.present()) EXPECT_NEAR(gs.dA_log.get(i), dA[i], 1e-12);
    if (d.g_gamma.present()) EXPECT_NEAR(gs.dg_gamma.get(i), dgg[i], 1e-12);
  }
  for (size_t i = 0; i < ddt.size(); ++i) EXPECT_NEAR(gs.ddt_bias.get(i), ddt[i], 1e-12);
}

// Low-precision inputs are read exactly and outputs are the float64 result rounded once.
TEST_P(ReferenceForward, LowPrecisionDtypesRoundOnce) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    Case c;
    c.fam = GetParam();
    c.T = 7;
    c.h0 = c.dht = true;
    Data d64 = make_data(c);
    // Round the inputs to dt (gates to float32), then use those exact values in float64.
    Data dlo = d64;
    dlo.q = d64.q.as(dt);
    dlo.k = d64.k.as(dt);
    dlo.v = d64.v.as(dt);
    if (d64.g.present()) dlo.g = d64.g.as(DType::kFloat32);
    if (d64.beta.present()) dlo.beta = d64.beta.as(dt);
    dlo.h0 = d64.h0.as(DType::kFloat32);
    dlo.W_o = d64.W_o.as(dt);
    dlo.W_s = d64.W_s.as(DType::kFloat32);
    Data dex = dlo;  // the same values, held in float64
    for (HostTensor* t : {&dex.q, &dex.k, &dex.v, &dex.g, &dex.beta, &dex.h0, &dex.W_o, &dex.W_s}) {
      if (t->present()) *t = t->as(f64);
    }
    HostTensor o64, fs64;
    ASSERT_TRUE(run_forward(c, dex, &o64, &fs64).ok());
    HostTensor olo(dt, {c.B, c.T, c.HV(), c.V}), fslo = state_tensor(c, c.N(), DType::kFloat32);
    olo.poison();
    fslo.poison();
    ForwardOutputs out;
    out.o = olo.view;
    out.final_state = fslo.view;
    Status s = reference_forward(c.fam, fwd_inputs(dlo), out, c.opt);
    ASSERT_TRUE(s.ok()) << s.message;
    const HostTensor o_expect = o64.as(dt), fs_expect = fs64.as(DType::kFloat32);
    EXPECT_EQ(olo.bytes, o_expect.bytes) << dtype_name(dt);
    EXPECT_EQ(fslo.bytes, fs_expect.bytes) << dtype_name(dt);

    // Backward: every gradient in its input's dtype, equal to the float64 one rounded once.
    GradSet g64, glo;
    ASSERT_TRUE(run_backward(c, dex, &g64).ok());
    ASSERT_TRUE(run_backward(c, dlo, &glo).ok());
    EXPECT_EQ(glo.dq.bytes, g64.dq.as(dt).bytes) << dtype_name(dt);
    EXPECT_EQ(glo.dk.bytes, g64.dk.as(dt).bytes) << dtype_name(dt);
    EXPECT_EQ(glo.dv.bytes, g64.dv.as(dt).bytes) << dtype_name(dt);
    if (dlo.g.present()) EXPECT_EQ(glo.dg.bytes, g64.dg.as(DType::kFloat32).bytes);
    if (dlo.beta.present()) EXPECT_EQ(glo.dbeta.bytes, g64.dbeta.as(dt).bytes);
    EXPECT_EQ(glo.dh0.bytes, g64.dh0.as(DType::kFloat32).bytes);
  }
}

// Absent optional gradients are simply not produced; the required ones still are.
TEST_P(ReferenceForward, BackwardWithOnlyRequiredGradients) {
  Case c;
  c.fam = GetParam();
  c.h0 = c.dht = true;
  Data d = make_data(c);
  GradSet all, req;
  ASSERT_TRUE(run_backward(c, d, &all).ok());
  ASSERT_TRUE(run_backward(c, d, &req, /*all_optional=*/false).ok());
  EXPECT_EQ(req.dq.bytes, all.dq.bytes);
  EXPECT_EQ(req.dk.bytes, all.dk.bytes);
  EXPECT_EQ(req.dv.bytes, all.dv.bytes);
}

INSTANTIATE_TEST_SUITE_P(Reference, ReferenceForward, ::testing::ValuesIn(all_families()),
                         family_param_name);

}  // namespace
}  // namespace linattn::test
