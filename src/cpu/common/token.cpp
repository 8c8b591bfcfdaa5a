#include "cpu/common/token.hpp"

#include "cpu/common/simd.hpp"

namespace linattn::cpu {

template <class T>
void token_step(const T* S_prev, T* S_next, const T* e, const T* k, const T* v, T beta, bool delta,
                int64_t K, int64_t V, T* u, T* coef) {
  if (!delta) {
    for (int64_t c = 0; c < K; ++c) {
      const T* s = S_prev + c * V;
      T* d = S_next + c * V;
      const T ec = e[c], kc = k[c];
#pragma omp simd
      for (int64_t j = 0; j < V; ++j) d[j] = ec * s[j] + kc * v[j];
    }
    return;
  }
  copy(v, u, V);
  for (int64_t c = 0; c < K; ++c) coef[c] = e[c] * k[c];
  add_rows<T, /*kNegate=*/true>(coef, S_prev, K, V, u, V);
  for (int64_t c = 0; c < K; ++c) {
    const T* s = S_prev + c * V;
    T* d = S_next + c * V;
    const T ec = e[c], bk = beta * k[c];
#pragma omp simd
    for (int64_t j = 0; j < V; ++j) d[j] = ec * s[j] + bk * u[j];
  }
}

template <class T>
void token_backward(const T* S_prev, const T* e, const T* q, const T* k, const T* v, const T* u,
                    T beta, const T* dO, T scale, bool delta, int64_t K, int64_t V, T* dS, T* dq,
                    T* dk, T* dv, T* dg, T* dbeta, T* du) {
  if (!delta) {
    // S_t = S' + k v^T, o = scale S_t^T q.
    const T vdo = dot(v, dO, V);
    fill(dv, T(0), V);
    for (int64_t c = 0; c < K; ++c) {
      const T* s = S_prev + c * V;
      T* D = dS + c * V;
      const T sq = scale * q[c], kc = k[c], ec = e[c];
      T a = 0, kv = 0, gs = 0;
#pragma omp simd reduction(+ : a, kv, gs)
      for (int64_t j = 0; j < V; ++j) {
        const T Dj = D[j] + sq * dO[j];  // dL/dS_t
        dv[j] += kc * Dj;
        kv += Dj * v[j];
        a += s[j] * dO[j];
        gs += s[j] * Dj;
        D[j] = ec * Dj;  // dL/dS_{t-1}
      }
      dq[c] += scale * (ec * a + kc * vdo);
      dk[c] += kv;
      dg[c] = ec * gs;
    }
    *dbeta = 0;
    return;
  }
  // S' = Diag(e) S_prev, u = v - S'^T k, S_t = S' + beta k u^T, o = scale S_t^T q.
  const T udo = dot(u, dO, V);
  fill(du, T(0), V);
  T db = 0;
  for (int64_t c = 0; c < K; ++c) {
    const T* s = S_prev + c * V;
    T* D = dS + c * V;
    const T sq = scale * q[c], kc = k[c];
    T w = 0, a = 0;
#pragma omp simd reduction(+ : w, a)
    for (int64_t j = 0; j < V; ++j) {
      const T Dj = D[j] + sq * dO[j];  // dL/dS_t
      D[j] = Dj;
      du[j] += kc * Dj;
      w += Dj * u[j];
      a += s[j] * dO[j];
    }
    dq[c] += scale * (e[c] * a + beta * kc * udo);
    dk[c] += beta * w;
    db += kc * w;
  }
  *dbeta = db;
  scal(beta, du, V);  // dL/du
  copy(du, dv, V);
  for (int64_t c = 0; c < K; ++c) {
    const T* s = S_prev + c * V;
    T* D = dS + c * V;
    const T kc = k[c], ec = e[c];
    T b = 0, gs = 0;
#pragma omp simd reduction(+ : b, gs)
    for (int64_t j = 0; j < V; ++j) {
      const T Dp = D[j] - kc * du[j];  // dL/dS'
      b += s[j] * du[j];
      gs += s[j] * Dp;
      D[j] = ec * Dp;  // dL/dS_{t-1}
    }
    dk[c] -= ec * b;
    dg[c] = ec * gs;
  }
}

template void token_step<float>(const float*, float*, const float*, const float*, const float*,
                                float, bool, int64_t, int64_t, float*, float*);
template void token_step<double>(const double*, double*, const double*, const double*,
                                 const double*, double, bool, int64_t, int64_t, double*, double*);
template void token_backward<float>(const float*, const float*, const float*, const float*,
                                    const float*, const float*, float, const float*, float, bool,
                                    int64_t, int64_t, float*, float*, float*, float*, float*,
                                    float*, float*);
template void token_backward<double>(const double*, const double*, const double*, const double*,
                                     const double*, const double*, double, const double*, double,
                                     bool, int64_t, int64_t, double*, double*, double*, double*,
                                     double*, double*, double*);

}  // namespace linattn::cpu
