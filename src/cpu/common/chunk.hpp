// Chunk building blocks of the chunked forward (SPEC.md "Chunked form"), for one chunk of L <= 64
// tokens of one (sequence, value head). Matrices are row-major; [C][C] matrices have row stride C.
#pragma once

#include <cstdint>

namespace linattn::cpu {

// gam[i] = sum_{t <= i} g[t] (per channel), i < L.
template <class T>
void gate_cumsum(const T* g, T* gam, int64_t L, int64_t K);

// Aqk[i][j] = sum_c q_i[c] k_j[c] exp(gam_i[c] - gam_j[c]) for j <= i (diagonal: plain q.k);
// Akk[i][j] = sum_c k_i[c] k_j[c] exp(gam_i[c] - gam_j[c]) for j < i. Each decay factor is
// computed once and shared by both products. vector_gate == false: gam is constant over c.
template <class T>
void decay_products(const T* q, const T* k, const T* gam, int64_t L, int64_t K, bool vector_gate,
                    T* Aqk, T* Akk);

// WY representation by forward substitution with M = I + tril(diag(beta) Akk, -1) (unit lower
// triangular): solves M W = diag(beta) (exp(gam) o K) and M U = diag(beta) V, i.e.
// W = A (exp(gam) o K), U = A V with A = M^-1 diag(beta). No inverse is formed.
// m is [C] scratch.
template <class T>
void wy_solve(const T* Akk, const T* beta, const T* k, const T* gam, const T* v, int64_t L,
              int64_t K, int64_t V, T* W, T* U, T* m);

// U <- U - W S   (V_new of the delta rule; U holds V_new afterwards)
template <class T>
void delta_vnew(const T* W, const T* S, int64_t L, int64_t K, int64_t V, T* U);

// o = scale * [(Q o exp(gam)) S + tril(Aqk) V_new]; tmp is [C][K] scratch.
template <class T>
void chunk_output(const T* q, const T* gam, const T* S, const T* Aqk, const T* vnew, T scale,
                  int64_t L, int64_t K, int64_t V, T* tmp, T* o);

// S <- Diag(exp(gam_last)) S + (K o exp(gam_last - gam))^T V_new; tmp is [K][C], rowK [K].
template <class T>
void state_update(T* S, const T* k, const T* gam, const T* vnew, int64_t L, int64_t K, int64_t V,
                  T* tmp, T* rowK);

}  // namespace linattn::cpu
