// The chunked (WY-form) backward of one chunk: the reverse of each block of chunk.hpp, and the
// two passes composed from them (docs/chunked_backward.md derives every formula).
//   pass 1 (sequential over chunks, last to first): dV_new and the state gradient carried back.
//   pass 2 (independent per chunk once pass 1 is done): dq, dk, dv, dbeta, dg.
// Layouts as in chunk.hpp: rows of K or V values, [C][C] matrices with leading dimension kC.
// Every exp is of a non-positive difference of cumulated gates (never exp(-gam)).
#pragma once

#include <cstdint>

#include "cpu/common/scratch.hpp"

namespace linattn::cpu {

// The forward intermediates of one chunk that the backward reads (recomputed or kept).
template <class T>
struct ChunkFwd {
  const T* q;     // [L][K]
  const T* k;     // [L][K]
  const T* v;     // [L][V]
  const T* beta;  // [L] (delta only)
  const T* gam;   // [L][K] chunk-local cumsum of g
  const T* Aqk;   // [L][kC] tril(Q K^T o decay), diagonal included
  const T* Akk;   // [L][kC] strict tril(K K^T o decay) (delta only)
  const T* W;     // [L][K] (delta only)
  const T* U;     // [L][V] before the subtraction of W S (delta only)
  const T* vnew;  // [L][V] V_new (= v without the delta rule)
  int64_t L, K, V;
  bool delta;
};

// ---- the reverse of each forward block (outputs marked += accumulate, = overwrite; any output
// pointer may be null when not wanted) ----

// o = scale [(Q o exp(gam)) S + tril(Aqk) V_new]:
// dq (=) = scale exp(gam) o (dO S^T); dAqk (=, lower incl. diagonal) = scale dO V_new^T;
// dS (+=) = scale (Q o exp(gam))^T dO; dvnew (+=) = scale tril(Aqk)^T dO.
template <class T>
void chunk_output_backward(const T* q, const T* gam, const T* S, const T* Aqk, const T* vnew,
                           const T* dO, T scale, int64_t L, int64_t K, int64_t V, T* dq, T* dAqk,
                           T* dS, T* dvnew, const ChunkBwdWork<T>& w);

// S_next = Diag(exp(gam_L)) S + (K o exp(gam_L - gam))^T V_new, with dSn = dL/dS_next:
// dS (+=) = exp(gam_L) o dSn; dvnew (+=) = (K o exp(gam_L - gam)) dSn;
// dk (+=) = exp(gam_L - gam) o (V_new dSn^T)  [k enters with exp(-gam_i): the "minus" side];
// dgam_last (=) = exp(gam_L) o rowsum(S o dSn) + sum_i k_i o (this dk)_i.
template <class T>
void state_update_backward(const T* k, const T* gam, const T* S, const T* vnew, const T* dSn,
                           int64_t L, int64_t K, int64_t V, T* dS, T* dvnew, T* dk, T* dgam_last,
                           const ChunkBwdWork<T>& w);

// V_new = U - W S:  dW (=) = -dV_new S^T;  dS (-=) W^T dV_new.  (dU = dV_new.)
template <class T>
void delta_vnew_backward(const T* W, const T* S, const T* dvnew, int64_t L, int64_t K, int64_t V,
                         T* dW, T* dS, const ChunkBwdWork<T>& w);

// W = M^-1 diag(beta) (exp(gam) o K), U = M^-1 diag(beta) V, M = I + tril(diag(beta) Akk, -1).
// On entry dX = dW, dY = dU; on exit dX = M^-T dW, dY = M^-T dU (back substitution).
// dAkk (=, strict lower) = -diag(beta) (dX W^T + dY U^T); dbeta (=); dk (+=) = beta dX o exp(gam)
// [k enters with exp(+gam_i): the "plus" side]; dv (=) = beta dY.
template <class T>
void wy_backward(const T* Akk, const T* beta, const T* k, const T* gam, const T* v, const T* W,
                 const T* U, int64_t L, int64_t K, int64_t V, T* dX, T* dY, T* dAkk, T* dbeta,
                 T* dk_plus, T* dv, const ChunkBwdWork<T>& w);

// Aqk_ij = sum_c q_ic k_jc exp(gam_ic - gam_jc) (j <= i), Akk_ij likewise with k_i (j < i).
// dq (+=), dk_plus (+=, from the row side of Akk), dk_minus (+=, column sides). dAkk may be null.
template <class T>
void decay_products_backward(const T* q, const T* k, const T* gam, const T* dAqk, const T* dAkk,
                             int64_t L, int64_t K, T* dq, T* dk_plus, T* dk_minus, T* D);

// gam = cumsum(g) over the chunk's rows: dg_t = sum_{i >= t} dgam_i (may alias).
template <class T>
void gate_cumsum_backward(const T* dgam, T* dg, int64_t L, int64_t K);

// ---- the two passes on one chunk ----

// Pass 1: from dO and dSn (= dL/dS after the chunk): dvnew (=) and dS (=, dL/dS before it).
template <class T>
void chunk_bwd_pass1(const ChunkFwd<T>& f, const T* S, const T* dO, const T* dSn, T scale,
                     T* dvnew, T* dS, const ChunkBwdWork<T>& w);

// Pass 2: from the chunk's start state S, dSn, dO and pass 1's dvnew: this value head's dq, dk
// (=, before any l2norm backward), dv (=), dbeta (=, delta only) and dg (=, per channel; a
// scalar gate's gradient is the sum over the K channels). dg uses seed 001's form:
// dgam = q o dq + k o (dk_plus - dk_minus), plus the chunk-end term on the last row.
template <class T>
void chunk_bwd_pass2(const ChunkFwd<T>& f, const T* S, const T* dO, const T* dSn, const T* dvnew,
                     T scale, T* dq, T* dk, T* dv, T* dbeta, T* dg, const ChunkBwdWork<T>& w);

}  // namespace linattn::cpu
