// The float64 ground truth: a token-by-token evaluation of the recurrences of SPEC.md, forward
// and exact reverse mode backward. Written for obviousness, not speed: every (sequence, value
// head) is evaluated on its own, one token at a time, in double precision.
//
// Per step (S is K x V, S_0 = initial_state or 0, g_t in R^K with scalar gates broadcast):
//   S'  = Diag(exp(g_t)) S_{t-1}
//   delta families (GDN, KDA):  u_t = v_t - S'^T k_t,   S_t = S' + beta_t k_t u_t^T
//   others (GLA, simple GLA):   S_t = S' + k_t v_t^T
//   o_t = scale * S_t^T q_t
// with q_t, k_t, g_t, beta_t the transformed inputs (l2norm, in-kernel gate, beta sigmoid).
//
// Backward: states are kept only at chunk boundaries (every 64 tokens); the states inside a chunk
// are recomputed from its checkpoint while walking the chunk backwards.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/backend.hpp"
#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "common/transforms.hpp"

namespace linattn::reference {
namespace {

using detail::Problem;

// The transformed per-token inputs of one (sequence, value head).
struct HeadInputs {
  int64_t L = 0;              // sequence length
  int64_t t0 = 0;             // first flat token of the sequence
  std::vector<double> q, k;   // [L, K] after l2norm (if any)
  std::vector<double> q_rstd, k_rstd;  // [L] (l2norm only)
  std::vector<double> v;      // [L, V]
  std::vector<double> g_raw;  // [L, gate_width] as passed (absent gate: empty)
  std::vector<double> g;      // [L, K] effective log decay (broadcast for scalar gates)
  std::vector<double> beta_raw, beta;  // [L]
};

double load1(const TensorView& t, int64_t i) { return detail::load_as_double(t.data, t.dtype, i); }

// Reads and transforms everything (sequence n, value head hv) needs.
HeadInputs load_head(const Problem& p, const ForwardInputs& in, int64_t n, int64_t hv) {
  const int64_t K = p.K, V = p.V, h = p.qk_head(hv), gw = p.gate_width();
  HeadInputs x;
  x.L = p.seq_len(n);
  x.t0 = p.cu[n];
  const int64_t L = x.L;
  x.q.assign(L * K, 0);
  x.k.assign(L * K, 0);
  x.q_rstd.assign(L, 1);
  x.k_rstd.assign(L, 1);
  x.v.assign(L * V, 0);
  x.g.assign(L * K, 0);
  x.beta_raw.assign(L, 0);
  x.beta.assign(L, 1);
  if (p.has_g) x.g_raw.assign(L * gw, 0);

  const double a_log = p.has_A_log ? load1(in.A_log, hv) : 0.0;
  const double g_gamma = p.has_g_gamma ? load1(in.g_gamma, hv) : 0.0;
  std::vector<double> raw(K);
  for (int64_t t = 0; t < L; ++t) {
    const int64_t tok = x.t0 + t;
    double* q = &x.q[t * K];
    double* k = &x.k[t * K];
    detail::load_row(in.q.data, in.q.dtype, p.qk_offset(tok, h), K, q);
    detail::load_row(in.k.data, in.k.dtype, p.qk_offset(tok, h), K, k);
    if (p.opt.use_qk_l2norm_in_kernel) {
      std::copy(q, q + K, raw.begin());
      x.q_rstd[t] = detail::l2norm_forward(raw.data(), q, K);
      std::copy(k, k + K, raw.begin());
      x.k_rstd[t] = detail::l2norm_forward(raw.data(), k, K);
    }
    detail::load_row(in.v.data, in.v.dtype, p.v_offset(tok, hv), V, &x.v[t * V]);

    // gate
    double* g = &x.g[t * K];
    if (p.has_g) {
      double* gr = &x.g_raw[t * gw];
      detail::load_row(in.g.data, in.g.dtype, p.g_offset(tok, hv), gw, gr);
      for (int64_t i = 0; i < gw; ++i) {
        double dt = 0;
        if (p.has_dt_bias) dt = load1(in.dt_bias, p.vector_gate ? hv * K + i : hv);
        const double ge = p.gate_tf.forward(gr[i], dt, a_log, p.has_A_log);
        if (p.vector_gate) {
          g[i] = ge;
        } else {
          for (int64_t j = 0; j < K; ++j) g[j] = ge;
        }
      }
    }
    if (p.has_g_gamma) {
      for (int64_t j = 0; j < K; ++j) g[j] += g_gamma;
    }

    if (p.delta) {
      x.beta_raw[t] = load1(in.beta, p.beta_offset(tok, hv));
      x.beta[t] = p.beta_tf.forward(x.beta_raw[t]);
    }
  }
  return x;
}

// One step of the recurrence: S (in: S_{t-1}, out: S_t), o = scale * S_t^T q.
void step_forward(const Problem& p, const HeadInputs& x, int64_t t, std::vector<double>& S,
                  double* o) {
  const int64_t K = p.K, V = p.V;
  const double* k = &x.k[t * K];
  const double* v = &x.v[t * V];
  const double* q = &x.q[t * K];
  const double* g = &x.g[t * K];
  for (int64_t i = 0; i < K; ++i) {
    const double d = std::exp(g[i]);
    for (int64_t j = 0; j < V; ++j) S[i * V + j] *= d;
  }
  if (p.delta) {
    std::vector<double> u(v, v + V);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) u[j] -= S[i * V + j] * k[i];
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) S[i * V + j] += x.beta[t] * k[i] * u[j];
  } else {
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) S[i * V + j] += k[i] * v[j];
  }
  if (o != nullptr) {
    for (int64_t j = 0; j < V; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < K; ++i) acc += S[i * V + j] * q[i];
      o[j] = p.scale * acc;
    }
  }
}

// Reads state (n, hv) of a [N, HV, K, V] / [N, HV, V, K] tensor into S[i * V + j].
void load_state(const Problem& p, const TensorView& t, int64_t n, int64_t hv, std::vector<double>& S) {
  const int64_t base = p.state_offset(n, hv);
  for (int64_t i = 0; i < p.K; ++i)
    for (int64_t j = 0; j < p.V; ++j) S[i * p.V + j] = load1(t, base + p.state_index(i, j));
}

// Writes S at element offset `base` of a state-like tensor (honours state_v_first).
void store_state(const Problem& p, const TensorView& t, int64_t base, const std::vector<double>& S) {
  for (int64_t i = 0; i < p.K; ++i)
    for (int64_t j = 0; j < p.V; ++j)
      detail::store_from_double(t.data, t.dtype, base + p.state_index(i, j), S[i * p.V + j]);
}

// Runs the forward of (n, hv): writes o, h, final_state when present; returns the chunk-boundary
// states (checkpoints[c] = state before local chunk c, plus the final state last).
std::vector<std::vector<double>> run_head_forward(const Problem& p, const ForwardInputs& in,
                                                  const HeadInputs& x, int64_t n, int64_t hv,
                                                  const ForwardOutputs* out) {
  const int64_t K = p.K, V = p.V, L = x.L;
  std::vector<double> S(K * V, 0.0);
  if (p.has_h0) load_state(p, in.initial_state, n, hv, S);
  std::vector<std::vector<double>> checkpoints;
  std::vector<double> o(V);
  for (int64_t t = 0; t < L; ++t) {
    if (t % kChunkSize == 0) {
      checkpoints.push_back(S);
      if (out != nullptr && out->h.present()) {
        const int64_t c = p.chunk_offsets[n] + t / kChunkSize;
        store_state(p, out->h, (c * p.HV + hv) * K * V, S);
      }
    }
    step_forward(p, x, t, S, o.data());
    if (out != nullptr) detail::store_row(out->o.data, out->o.dtype, p.v_offset(x.t0 + t, hv), V, o.data());
  }
  checkpoints.push_back(S);
  if (out != nullptr && out->final_state.present()) {
    store_state(p, out->final_state, p.state_offset(n, hv), S);
  }
  return checkpoints;
}

// Gradient accumulators over the whole call, in double, laid out like the inputs.
struct Grads {
  std::vector<double> dq, dk;  // w.r.t. the normalised q, k until finalised
  std::vector<double> dv, dg, dbeta, dA_log, ddt_bias, dg_gamma, dh0;
};

// Reverse mode through the recurrence of (n, hv), then through the per-token transforms of
// g and beta. dq/dk are accumulated w.r.t. the (possibly normalised) q, k.
void run_head_backward(const Problem& p, const BackwardInputs& in, const HeadInputs& x, int64_t n,
                       int64_t hv, Grads& gr) {
  const int64_t K = p.K, V = p.V, L = x.L, h = p.qk_head(hv);
  const auto checkpoints = run_head_forward(p, in.fwd, x, n, hv, nullptr);

  std::vector<double> dS(K * V, 0.0);
  if (in.dht.present()) load_state(p, in.dht, n, hv, dS);
  std::vector<double> dg_eff(L * K, 0.0);  // dL / d(effective g)[t][i]
  std::vector<double> dbeta_eff(L, 0.0);
  std::vector<double> d_o(V), u(V), du(V);

  const int64_t nchunks = (L + kChunkSize - 1) / kChunkSize;
  for (int64_t c = nchunks - 1; c >= 0; --c) {
    const int64_t ts = c * kChunkSize, te = std::min(L, ts + kChunkSize);
    // states[j] = S_{ts + j - 1} in 1-based step terms: states[0] is the state before token ts.
    std::vector<std::vector<double>> states;
    states.push_back(checkpoints[c]);
    for (int64_t t = ts; t < te; ++t) {
      std::vector<double> S = states.back();
      step_forward(p, x, t, S, nullptr);
      states.push_back(std::move(S));
    }
    for (int64_t t = te - 1; t >= ts; --t) {
      const std::vector<double>& Sprev = states[t - ts];
      const std::vector<double>& Scur = states[t - ts + 1];
      const int64_t tok = x.t0 + t;
      const double* q = &x.q[t * K];
      const double* k = &x.k[t * K];
      const double* v = &x.v[t * V];
      const double* g = &x.g[t * K];
      double* dq = &gr.dq[p.qk_offset(tok, h)];
      double* dk = &gr.dk[p.qk_offset(tok, h)];
      double* dv = &gr.dv[p.v_offset(tok, hv)];
      detail::load_row(in.d_o.data, in.d_o.dtype, p.v_offset(tok, hv), V, d_o.data());

      // o_t = scale * S_t^T q_t
      for (int64_t i = 0; i < K; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < V; ++j) acc += Scur[i * V + j] * d_o[j];
        dq[i] += p.scale * acc;
        for (int64_t j = 0; j < V; ++j) dS[i * V + j] += p.scale * q[i] * d_o[j];
      }
      // S' = Diag(exp(g)) S_{t-1}
      std::vector<double> Sp(K * V);
      for (int64_t i = 0; i < K; ++i) {
        const double d = std::exp(g[i]);
        for (int64_t j = 0; j < V; ++j) Sp[i * V + j] = d * Sprev[i * V + j];
      }
      // dSp starts as dS (S_t = S' + ...)
      std::vector<double> dSp = dS;
      if (p.delta) {
        const double b = x.beta[t];
        for (int64_t j = 0; j < V; ++j) {
          double acc = v[j];
          for (int64_t i = 0; i < K; ++i) acc -= Sp[i * V + j] * k[i];
          u[j] = acc;
        }
        // S_t = S' + b k u^T
        double db = 0;
        for (int64_t i = 0; i < K; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < V; ++j) acc += dS[i * V + j] * u[j];
          db += k[i] * acc;
          dk[i] += b * acc;
        }
        dbeta_eff[t] = db;
        for (int64_t j = 0; j < V; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < K; ++i) acc += dS[i * V + j] * k[i];
          du[j] = b * acc;
          dv[j] += du[j];
        }
        // u = v - S'^T k
        for (int64_t i = 0; i < K; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < V; ++j) {
            dSp[i * V + j] -= k[i] * du[j];
            acc += Sp[i * V + j] * du[j];
          }
          dk[i] -= acc;
        }
      } else {
        // S_t = S' + k v^T
        for (int64_t i = 0; i < K; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < V; ++j) acc += dS[i * V + j] * v[j];
          dk[i] += acc;
        }
        for (int64_t j = 0; j < V; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < K; ++i) acc += dS[i * V + j] * k[i];
          dv[j] += acc;
        }
      }
      // S' = Diag(exp(g)) S_{t-1}: dg_i = sum_j dSp_ij S'_ij, dS_{t-1} = Diag(exp(g)) dSp
      for (int64_t i = 0; i < K; ++i) {
        const double d = std::exp(g[i]);
        double acc = 0;
        for (int64_t j = 0; j < V; ++j) {
          acc += dSp[i * V + j] * Sp[i * V + j];
          dS[i * V + j] = d * dSp[i * V + j];
        }
        dg_eff[t * K + i] = acc;
      }
    }
  }
  // dh0
  if (p.has_h0) {
    const int64_t base = p.state_offset(n, hv);
    for (int64_t i = 0; i < K; ++i)
      for (int64_t j = 0; j < V; ++j) gr.dh0[base + p.state_index(i, j)] = dS[i * V + j];
  }

  // Through the transforms of g and beta.
  const double a_log = p.has_A_log ? load1(in.fwd.A_log, hv) : 0.0;
  const int64_t gw = p.gate_width();
  for (int64_t t = 0; t < L; ++t) {
    const int64_t tok = x.t0 + t;
    // dL/d(effective g) per gate element: scalar gates sum over K.
    double dsum = 0;
    for (int64_t i = 0; i < K; ++i) dsum += dg_eff[t * K + i];
    if (p.has_g_gamma) gr.dg_gamma[hv] += dsum;
    if (p.has_g) {
      for (int64_t i = 0; i < gw; ++i) {
        const double dge = p.vector_gate ? dg_eff[t * K + i] : dsum;
        const int64_t dti = p.vector_gate ? hv * K + i : hv;
        const double dt = p.has_dt_bias ? load1(in.fwd.dt_bias, dti) : 0.0;
        double da = 0;
        const double draw = p.gate_tf.backward(x.g_raw[t * gw + i], dt, a_log, p.has_A_log, dge, &da);
        gr.dg[p.g_offset(tok, hv) + i] = draw;
        if (p.has_dt_bias) gr.ddt_bias[dti] += draw;
        if (p.has_A_log) gr.dA_log[hv] += da;
      }
    }
    if (p.delta) {
      gr.dbeta[p.beta_offset(tok, hv)] = dbeta_eff[t] * p.beta_tf.derivative(x.beta_raw[t]);
    }
  }
}

void store_all(const TensorView& t, const std::vector<double>& x) {
  if (!t.present()) return;
  detail::store_row(t.data, t.dtype, 0, static_cast<int64_t>(x.size()), x.data());
}

// Threads only pay off for large calls; tiny ones (finite-difference tests) stay serial.
bool worth_threads(const Problem& p) { return p.B * p.T * p.HV * p.K * p.V >= (int64_t(1) << 20); }

}  // namespace

Status forward(const Problem& p, const ForwardInputs& in, const ForwardOutputs& out) {
  // Sequences of zero length still own their final state (= initial state or 0).
  const int64_t units = p.N * p.HV;
#pragma omp parallel for schedule(dynamic, 1) if (worth_threads(p))
  for (int64_t u = 0; u < units; ++u) {
    const int64_t n = u / p.HV, hv = u % p.HV;
    const HeadInputs x = load_head(p, in, n, hv);
    run_head_forward(p, in, x, n, hv, &out);
  }
  return Status::Ok();
}

Status backward(const Problem& p, const BackwardInputs& in, const BackwardOutputs& out) {
  const int64_t BT = p.B * p.T;
  Grads gr;
  gr.dq.assign(BT * p.H * p.K, 0.0);
  gr.dk.assign(BT * p.H * p.K, 0.0);
  gr.dv.assign(BT * p.HV * p.V, 0.0);
  gr.dg.assign(p.has_g ? BT * p.HV * p.gate_width() : 0, 0.0);
  gr.dbeta.assign(p.delta ? BT * p.HV : 0, 0.0);
  gr.dA_log.assign(p.HV, 0.0);
  gr.ddt_bias.assign(p.vector_gate ? p.HV * p.K : p.HV, 0.0);
  gr.dg_gamma.assign(p.HV, 0.0);
  gr.dh0.assign(p.has_h0 ? p.N * p.HV * p.K * p.V : 0, 0.0);

  // One task per query/key head: it owns dq, dk of that head and everything of its G value
  // heads (dv, dg, dbeta, dA_log[hv], ddt_bias[hv..], dg_gamma[hv], dh0[.., hv]), so tasks never
  // write the same element.
#pragma omp parallel for schedule(dynamic, 1) if (worth_threads(p))
  for (int64_t h = 0; h < p.H; ++h) {
    for (int64_t n = 0; n < p.N; ++n) {
      for (int64_t hv = h * p.G; hv < (h + 1) * p.G; ++hv) {
        const HeadInputs x = load_head(p, in.fwd, n, hv);
        run_head_backward(p, in, x, n, hv, gr);
      }
    }
  }

  // dq, dk: through the l2norm (linear in the incoming gradient, so summing the G value heads
  // first is exact).
  if (p.opt.use_qk_l2norm_in_kernel) {
    std::vector<double> raw(p.K), y(p.K), dx(p.K);
    for (int64_t tok = 0; tok < BT; ++tok) {
      for (int64_t h = 0; h < p.H; ++h) {
        const int64_t off = p.qk_offset(tok, h);
        for (int pass = 0; pass < 2; ++pass) {
          const TensorView& src = pass == 0 ? in.fwd.q : in.fwd.k;
          std::vector<double>& d = pass == 0 ? gr.dq : gr.dk;
          detail::load_row(src.data, src.dtype, off, p.K, raw.data());
          const double rstd = detail::l2norm_forward(raw.data(), y.data(), p.K);
          detail::l2norm_backward(y.data(), rstd, &d[off], dx.data(), p.K);
          std::copy(dx.begin(), dx.end(), d.begin() + off);
        }
      }
    }
  }

  store_all(out.dq, gr.dq);
  store_all(out.dk, gr.dk);
  store_all(out.dv, gr.dv);
  store_all(out.dg, gr.dg);
  store_all(out.dbeta, gr.dbeta);
  store_all(out.dA_log, gr.dA_log);
  store_all(out.ddt_bias, gr.ddt_bias);
  store_all(out.dg_gamma, gr.dg_gamma);
  store_all(out.dh0, gr.dh0);
  return Status::Ok();
}

}  // namespace linattn::reference
