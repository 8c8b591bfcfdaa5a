#include "cpu/common/chunk.hpp"

#include <cmath>

#include "cpu/common/scratch.hpp"
#include "cpu/common/simd.hpp"

namespace linattn::cpu {

template <class T>
void gate_cumsum(const T* g, T* gam, int64_t L, int64_t K) {
  if (L <= 0) return;
  copy(g, gam, K);
  for (int64_t i = 1; i < L; ++i) {
    const T* prev = gam + (i - 1) * K;
    const T* gi = g + i * K;
    T* out = gam + i * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) out[c] = prev[c] + gi[c];
  }
}

template <class T>
void decay_products(const T* q, const T* k, const T* gam, int64_t L, int64_t K, bool vector_gate,
                    T* Aqk, T* Akk) {
  for (int64_t i = 0; i < L; ++i) {
    const T* qi = q + i * K;
    const T* ki = k + i * K;
    const T* gi = gam + i * K;
    T* aq = Aqk + i * kC;
    T* ak = Akk + i * kC;
    if (vector_gate) {
      for (int64_t j = 0; j < i; ++j) decay_dot2(qi, ki, gi, k + j * K, gam + j * K, K, aq + j, ak + j);
    } else {
      for (int64_t j = 0; j < i; ++j) {
        const T d = decay_exp(gi[0] - gam[j * K]);
        const T* kj = k + j * K;
        aq[j] = dot(qi, kj, K) * d;
        ak[j] = dot(ki, kj, K) * d;
      }
    }
    aq[i] = dot(qi, ki, K);
    ak[i] = 0;
  }
}

template <class T>
void wy_solve(const T* Akk, const T* beta, const T* k, const T* gam, const T* v, int64_t L,
              int64_t K, int64_t V, T* W, T* U, T* m) {
  for (int64_t i = 0; i < L; ++i) {
    T* wi = W + i * K;
    T* ui = U + i * V;
    exp_array(gam + i * K, wi, K);
    const T b = beta[i];
    const T* ki = k + i * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) wi[c] *= b * ki[c];
    const T* vi = v + i * V;
#pragma omp simd
    for (int64_t c = 0; c < V; ++c) ui[c] = b * vi[c];
    const T* ak = Akk + i * kC;
    for (int64_t j = 0; j < i; ++j) m[j] = b * ak[j];  // row i of tril(diag(beta) Akk, -1)
    add_rows<T, /*kNegate=*/true>(m, W, i, K, wi, K);
    add_rows<T, /*kNegate=*/true>(m, U, i, V, ui, V);
  }
}

template <class T>
void delta_vnew(const T* W, const T* S, int64_t L, int64_t K, int64_t V, T* U) {
  for (int64_t i = 0; i < L; ++i) {
    const T* wi = W + i * K;
    T* ui = U + i * V;
    add_rows<T, /*kNegate=*/true>(wi, S, K, V, ui, V);
  }
}

template <class T>
void chunk_output(const T* q, const T* gam, const T* S, const T* Aqk, const T* vnew, T scale,
                  int64_t L, int64_t K, int64_t V, T* tmp, T* o) {
  exp_array(gam, tmp, L * K);
  for (int64_t i = 0; i < L; ++i) {
    T* qg = tmp + i * K;
    const T* qi = q + i * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) qg[c] *= qi[c];
    T* oi = o + i * V;
    fill(oi, T(0), V);
    add_rows(qg, S, K, V, oi, V);
    add_rows(Aqk + i * kC, vnew, i + 1, V, oi, V);
    scal(scale, oi, V);
  }
}

template <class T>
void state_update(T* S, const T* k, const T* gam, const T* vnew, int64_t L, int64_t K, int64_t V,
                  T* tmp, T* rowK) {
  if (L <= 0) return;
  const T* glast = gam + (L - 1) * K;
  // tmp[c][i] = k_i[c] exp(gam_last[c] - gam_i[c]): column c of (K o exp(gam_last - gam))^T.
  for (int64_t c = 0; c < K; ++c) {
    T* col = tmp + c * kC;
    for (int64_t i = 0; i < L; ++i) col[i] = glast[c] - gam[i * K + c];
    exp_array(col, col, L);
    for (int64_t i = 0; i < L; ++i) col[i] *= k[i * K + c];
  }
  exp_array(glast, rowK, K);
  for (int64_t c = 0; c < K; ++c) {
    T* row = S + c * V;
    scal(rowK[c], row, V);
    add_rows(tmp + c * kC, vnew, L, V, row, V);
  }
}

#define LINATTN_INSTANTIATE(T)                                                                  \
  template void gate_cumsum<T>(const T*, T*, int64_t, int64_t);                                 \
  template void decay_products<T>(const T*, const T*, const T*, int64_t, int64_t, bool, T*, T*); \
  template void wy_solve<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                            int64_t, T*, T*, T*);                                                \
  template void delta_vnew<T>(const T*, const T*, int64_t, int64_t, int64_t, T*);               \
  template void chunk_output<T>(const T*, const T*, const T*, const T*, const T*, T, int64_t,   \
                                int64_t, int64_t, T*, T*);                                      \
  template void state_update<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, T*, T*);
LINATTN_INSTANTIATE(float)
LINATTN_INSTANTIATE(double)
#undef LINATTN_INSTANTIATE

}  // namespace linattn::cpu
