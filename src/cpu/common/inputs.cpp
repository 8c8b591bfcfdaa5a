#include "cpu/common/inputs.hpp"

#include "common/dtype.hpp"
#include "common/transforms.hpp"

namespace linattn::cpu {

using detail::Problem;

template <class T>
HeadParams<T> load_head_params(const Problem& p, const ForwardInputs& in, int64_t hv) {
  HeadParams<T> hp;
  if (p.has_A_log) hp.a_log = static_cast<T>(detail::load_as_double(in.A_log.data, in.A_log.dtype, hv));
  if (p.has_g_gamma) {
    hp.g_gamma = static_cast<T>(detail::load_as_double(in.g_gamma.data, in.g_gamma.dtype, hv));
  }
  if (p.has_dt_bias) {
    const int64_t gw = p.gate_width();
    detail::load_row(in.dt_bias.data, in.dt_bias.dtype, hv * gw, gw, hp.dt_bias);
  }
  return hp;
}

// The gate floor of transforms.hpp (kGateFloor): NaN passes through.
template <class T>
inline T floor_gate(T g) {
  return g < T(detail::kGateFloor) ? T(detail::kGateFloor) : g;
}

template <class T>
void load_chunk(const Problem& p, const ForwardInputs& in, const HeadParams<T>& hp, int64_t n,
                int64_t hv, int64_t t0, int64_t L, bool with_raw, const ChunkIn<T>& c) {
  const int64_t K = p.K, V = p.V, h = p.qk_head(hv);
  const bool l2 = p.opt.use_qk_l2norm_in_kernel;
  for (int64_t i = 0; i < L; ++i) {
    const int64_t tok = p.cu[n] + t0 + i;
    T* q = c.q + i * K;
    T* k = c.k + i * K;
    detail::load_row(in.q.data, in.q.dtype, p.qk_offset(tok, h), K, q);
    detail::load_row(in.k.data, in.k.dtype, p.qk_offset(tok, h), K, k);
    if (l2) {
      detail::l2norm_forward(q, q, K);
      detail::l2norm_forward(k, k, K);
    }
    detail::load_row(in.v.data, in.v.dtype, p.v_offset(tok, hv), V, c.v + i * V);

    // gate
    T* g = c.g + i * K;
    if (p.vector_gate) {
      T* raw = with_raw ? c.graw + i * K : g;
      detail::load_row(in.g.data, in.g.dtype, p.g_offset(tok, hv), K, raw);
      for (int64_t j = 0; j < K; ++j) {
        g[j] = floor_gate(p.gate_tf.forward(raw[j], hp.dt_bias[j], hp.a_log, p.has_A_log));
      }
    } else {
      T raw = 0;
      if (p.has_g) raw = static_cast<T>(detail::load_as_double(in.g.data, in.g.dtype, p.g_offset(tok, hv)));
      if (with_raw) c.graw[i] = raw;
      T gs = p.has_g ? p.gate_tf.forward(raw, hp.dt_bias[0], hp.a_log, p.has_A_log) : T(0);
      gs = floor_gate(gs + hp.g_gamma);
      for (int64_t j = 0; j < K; ++j) g[j] = gs;
    }

    if (p.delta) {
      const T b = static_cast<T>(detail::load_as_double(in.beta.data, in.beta.dtype, p.beta_offset(tok, hv)));
      if (with_raw) c.beta_raw[i] = b;
      c.beta[i] = p.beta_tf.forward(b);
    }
  }
}

template <class T>
void load_state(const Problem& p, const TensorView& t, int64_t n, int64_t hv, T* S) {
  const int64_t K = p.K, V = p.V;
  if (!t.present()) {
    for (int64_t i = 0; i < K * V; ++i) S[i] = 0;
    return;
  }
  const int64_t base = p.state_offset(n, hv);
  if (!p.opt.state_v_first) {
    detail::load_row(t.data, t.dtype, base, K * V, S);
    return;
  }
  for (int64_t i = 0; i < K; ++i) {
    for (int64_t j = 0; j < V; ++j) {
      S[i * V + j] = static_cast<T>(detail::load_as_double(t.data, t.dtype, base + p.state_index(i, j)));
    }
  }
}

template <class T>
void store_state(const Problem& p, const TensorView& t, int64_t index, const T* S) {
  const int64_t K = p.K, V = p.V;
  const int64_t base = index * K * V;
  if (!p.opt.state_v_first) {
    detail::store_row(t.data, t.dtype, base, K * V, S);
    return;
  }
  for (int64_t i = 0; i < K; ++i) {
    for (int64_t j = 0; j < V; ++j) {
      detail::store_from_double(t.data, t.dtype, base + p.state_index(i, j), static_cast<double>(S[i * V + j]));
    }
  }
}

#define LINATTN_INSTANTIATE(T)                                                                   \
  template HeadParams<T> load_head_params<T>(const Problem&, const ForwardInputs&, int64_t);    \
  template void load_chunk<T>(const Problem&, const ForwardInputs&, const HeadParams<T>&,       \
                              int64_t, int64_t, int64_t, int64_t, bool, const ChunkIn<T>&);     \
  template void load_state<T>(const Problem&, const TensorView&, int64_t, int64_t, T*);         \
  template void store_state<T>(const Problem&, const TensorView&, int64_t, const T*);
LINATTN_INSTANTIATE(float)
LINATTN_INSTANTIATE(double)
#undef LINATTN_INSTANTIATE

}  // namespace linattn::cpu
