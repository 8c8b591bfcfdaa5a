// Backward building blocks: the token recurrence of SPEC.md (replayed inside a chunk from its
// start state) and its exact reverse-mode step.
#pragma once

#include <cstdint>

namespace linattn::cpu {

// One token of the recurrence, S_prev -> S_next (may alias): S' = Diag(e) S_prev, e = exp(g_t);
// delta: u = v - S'^T k (written to u when non-null), S_next = S' + beta k u^T;
// otherwise S_next = S' + k v^T. coef is [K] scratch.
template <class T>
void token_step(const T* S_prev, T* S_next, const T* e, const T* k, const T* v, T beta, bool delta,
                int64_t K, int64_t V, T* u, T* coef);

// Reverse-mode through one token. On entry dS = dL/dS_t from the later tokens; on exit
// dS = dL/dS_{t-1}. S_prev = S_{t-1}; u the token's delta-rule u (ignored otherwise).
// Accumulates (+=) dq and dk [K]; writes dv [V], dg [K] (gradient of the per-channel log decay
// g_t) and *dbeta. du is [V] scratch.
template <class T>
void token_backward(const T* S_prev, const T* e, const T* q, const T* k, const T* v, const T* u,
                    T beta, const T* dO, T scale, bool delta, int64_t K, int64_t V, T* dS, T* dq,
                    T* dk, T* dv, T* dg, T* dbeta, T* du);

}  // namespace linattn::cpu
