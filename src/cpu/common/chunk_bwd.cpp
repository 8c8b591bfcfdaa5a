#include "cpu/common/chunk_bwd.hpp"

#include "cpu/common/simd.hpp"

namespace linattn::cpu {

namespace {

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols.
template <class T>
void transpose(const T* src, int64_t lds, int64_t rows, int64_t cols, T* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}

// y = exp(a - b) elementwise (a - b <= 0 wherever it is used).
template <class T>
void exp_diff(const T* a, const T* b, T* y, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) y[c] = a[c] - b[c];
  exp_array(y, y, n);
}

}  // namespace

template <class T>
void chunk_output_backward(const T* q, const T* gam, const T* S, const T* Aqk, const T* vnew,
                           const T* dO, T scale, int64_t L, int64_t K, int64_t V, T* dq, T* dAqk,
                           T* dS, T* dvnew, const ChunkBwdWork<T>& w) {
  if (dq) {
    transpose(S, V, K, V, w.St, K);
    for (int64_t i = 0; i < L; ++i) {
      T* di = dq + i * K;
      fill(di, T(0), K);
      add_rows(dO + i * V, w.St, V, K, di, K);  // dO_i S^T
      exp_array(gam + i * K, w.rowK, K);
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) di[c] *= scale * w.rowK[c];
    }
  }
  if (dAqk) {
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j <= i; ++j) dAqk[i * kC + j] = scale * dot(dO + i * V, vnew + j * V, V);
    }
  }
  if (dS) {
    // column c of (scale Q o exp(gam)), i.e. row c of its transpose
    for (int64_t i = 0; i < L; ++i) {
      exp_array(gam + i * K, w.rowK, K);
      for (int64_t c = 0; c < K; ++c) w.tKt[c * kC + i] = scale * q[i * K + c] * w.rowK[c];
    }
    for (int64_t c = 0; c < K; ++c) add_rows(w.tKt + c * kC, dO, L, V, dS + c * V, V);
  }
  if (dvnew) {
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = i; j < L; ++j) w.colC[j] = scale * Aqk[j * kC + i];
      add_rows(w.colC + i, dO + i * V, L - i, V, dvnew + i * V, V);
    }
  }
}

template <class T>
void state_update_backward(const T* k, const T* gam, const T* S, const T* vnew, const T* dSn,
                           int64_t L, int64_t K, int64_t V, T* dS, T* dvnew, T* dk, T* dgam_last,
                           const ChunkBwdWork<T>& w) {
  if (L <= 0) return;
  const T* glast = gam + (L - 1) * K;
  T* eL = w.rowK2;
  exp_array(glast, eL, K);
  if (dS) {
    for (int64_t c = 0; c < K; ++c) axpy(eL[c], dSn + c * V, dS + c * V, V);
  }
  if (dvnew) {
    for (int64_t i = 0; i < L; ++i) {
      exp_diff(glast, gam + i * K, w.rowK, K);
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) w.rowK[c] *= k[i * K + c];
      add_rows(w.rowK, dSn, K, V, dvnew + i * V, V);
    }
  }
  if (dk || dgam_last) {
    transpose(dSn, V, K, V, w.dSnT, K);
    if (dgam_last) {
      for (int64_t c = 0; c < K; ++c) dgam_last[c] = eL[c] * dot(S + c * V, dSn + c * V, V);
    }
    for (int64_t i = 0; i < L; ++i) {
      T* t = w.rowK;
      fill(t, T(0), K);
      add_rows(vnew + i * V, w.dSnT, V, K, t, K);  // V_new_i dSn^T
      exp_diff(glast, gam + i * K, w.rowK3, K);
      for (int64_t c = 0; c < K; ++c) {
        const T d = t[c] * w.rowK3[c];
        if (dk) dk[i * K + c] += d;
        if (dgam_last) dgam_last[c] += k[i * K + c] * d;
      }
    }
  }
}

template <class T>
void delta_vnew_backward(const T* W, const T* S, const T* dvnew, int64_t L, int64_t K, int64_t V,
                         T* dW, T* dS, const ChunkBwdWork<T>& w) {
  if (dW) {
    transpose(S, V, K, V, w.St, K);
    for (int64_t i = 0; i < L; ++i) {
      fill(dW + i * K, T(0), K);
      add_rows<T, /*kNegate=*/true>(dvnew + i * V, w.St, V, K, dW + i * K, K);
    }
  }
  if (dS) {
    transpose(W, K, L, K, w.tKt, kC);
    for (int64_t c = 0; c < K; ++c) add_rows<T, true>(w.tKt + c * kC, dvnew, L, V, dS + c * V, V);
  }
}

template <class T>
void wy_backward(const T* Akk, const T* beta, const T* k, const T* gam, const T* v, const T* W,
                 const T* U, int64_t L, int64_t K, int64_t V, T* dX, T* dY, T* dAkk, T* dbeta,
                 T* dk_plus, T* dv, const ChunkBwdWork<T>& w) {
  // M^T is unit upper triangular: z_j = r_j - sum_{i>j} M_ij z_i, last row first.
  for (int64_t j = L - 2; j >= 0; --j) {
    for (int64_t i = j + 1; i < L; ++i) w.colC[i] = beta[i] * Akk[i * kC + j];
    add_rows<T, true>(w.colC + j + 1, dX + (j + 1) * K, L - j - 1, K, dX + j * K, K);
    add_rows<T, true>(w.colC + j + 1, dY + (j + 1) * V, L - j - 1, V, dY + j * V, V);
  }
  for (int64_t i = 0; i < L; ++i) {
    const T* xi = dX + i * K;
    const T* yi = dY + i * V;
    T db = 0;
    for (int64_t j = 0; j < i; ++j) {
      const T dM = -(dot(xi, W + j * K, K) + dot(yi, U + j * V, V));  // dL/dM_ij
      db += dM * Akk[i * kC + j];
      dAkk[i * kC + j] = beta[i] * dM;
    }
    exp_array(gam + i * K, w.rowK, K);
    const T* ki = k + i * K;
    T* dki = dk_plus + i * K;
    T dx = 0;
    for (int64_t c = 0; c < K; ++c) {
      const T xe = xi[c] * w.rowK[c];
      dx += xe * ki[c];
      dki[c] += beta[i] * xe;
    }
    dbeta[i] = db + dx + dot(yi, v + i * V, V);
    T* dvi = dv + i * V;
#pragma omp simd
    for (int64_t c = 0; c < V; ++c) dvi[c] = beta[i] * yi[c];
  }
}

template <class T>
void decay_products_backward(const T* q, const T* k, const T* gam, const T* dAqk, const T* dAkk,
                             int64_t L, int64_t K, T* dq, T* dk_plus, T* dk_minus, T* D) {
  for (int64_t i = 0; i < L; ++i) {
    const T* qi = q + i * K;
    const T* ki = k + i * K;
    T* dqi = dq + i * K;
    T* dpi = dk_plus + i * K;
    for (int64_t j = 0; j <= i; ++j) {
      const T a = dAqk[i * kC + j];
      const T b = (dAkk && j < i) ? dAkk[i * kC + j] : T(0);
      const T* kj = k + j * K;
      T* dmj = dk_minus + j * K;
      exp_diff(gam + i * K, gam + j * K, D, K);  // Gamma_ij, one decay for all four products
#pragma omp simd
      for (int64_t c = 0; c < K; ++c) {
        const T kd = kj[c] * D[c];
        dqi[c] += a * kd;
        dpi[c] += b * kd;
        dmj[c] += D[c] * (a * qi[c] + b * ki[c]);
      }
    }
  }
}

template <class T>
void gate_cumsum_backward(const T* dgam, T* dg, int64_t L, int64_t K) {
  if (L <= 0) return;
  if (dg != dgam) copy(dgam + (L - 1) * K, dg + (L - 1) * K, K);
  for (int64_t i = L - 2; i >= 0; --i) {
    const T* next = dg + (i + 1) * K;
    const T* src = dgam + i * K;
    T* out = dg + i * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) out[c] = src[c] + next[c];
  }
}

template <class T>
void chunk_bwd_pass1(const ChunkFwd<T>& f, const T* S, const T* dO, const T* dSn, T scale,
                     T* dvnew, T* dS, const ChunkBwdWork<T>& w) {
  const int64_t L = f.L, K = f.K, V = f.V;
  fill(dvnew, T(0), L * V);
  fill(dS, T(0), K * V);
  state_update_backward(f.k, f.gam, S, f.vnew, dSn, L, K, V, dS, dvnew, (T*)nullptr, (T*)nullptr, w);
  chunk_output_backward(f.q, f.gam, S, f.Aqk, f.vnew, dO, scale, L, K, V, (T*)nullptr,
                        (T*)nullptr, dS, dvnew, w);
  if (f.delta) delta_vnew_backward(f.W, S, dvnew, L, K, V, (T*)nullptr, dS, w);
}

template <class T>
void chunk_bwd_pass2(const ChunkFwd<T>& f, const T* S, const T* dO, const T* dSn, const T* dvnew,
                     T scale, T* dq, T* dk, T* dv, T* dbeta, T* dg, const ChunkBwdWork<T>& w) {
  const int64_t L = f.L, K = f.K, V = f.V;
  if (L <= 0) return;
  fill(w.dkp, T(0), L * K);
  fill(w.dkm, T(0), L * K);
  chunk_output_backward(f.q, f.gam, S, f.Aqk, f.vnew, dO, scale, L, K, V, dq, w.dAqk,
                        (T*)nullptr, (T*)nullptr, w);
  state_update_backward(f.k, f.gam, S, f.vnew, dSn, L, K, V, (T*)nullptr, (T*)nullptr, w.dkm,
                        w.dglast, w);
  const T* dAkk = nullptr;
  if (f.delta) {
    delta_vnew_backward(f.W, S, dvnew, L, K, V, w.dX, (T*)nullptr, w);  // dX = dW
    copy(dvnew, w.dY, L * V);                                            // dY = dU
    wy_backward(f.Akk, f.beta, f.k, f.gam, f.v, f.W, f.U, L, K, V, w.dX, w.dY, w.dAkk, dbeta,
                w.dkp, dv, w);
    dAkk = w.dAkk;
  } else {
    copy(dvnew, dv, L * V);
  }
  decay_products_backward(f.q, f.k, f.gam, w.dAqk, dAkk, L, K, dq, w.dkp, w.dkm, w.rowK);
  for (int64_t i = 0; i < L; ++i) {
    const T* qi = f.q + i * K;
    const T* ki = f.k + i * K;
    const T* dqi = dq + i * K;
    const T* dpi = w.dkp + i * K;
    const T* dmi = w.dkm + i * K;
    T* dgi = w.dgam + i * K;
    T* dki = dk + i * K;
#pragma omp simd
    for (int64_t c = 0; c < K; ++c) {
      dgi[c] = qi[c] * dqi[c] + ki[c] * (dpi[c] - dmi[c]);
      dki[c] = dpi[c] + dmi[c];
    }
  }
  axpy(T(1), w.dglast, w.dgam + (L - 1) * K, K);
  gate_cumsum_backward(w.dgam, dg, L, K);
}

#define LINATTN_INSTANTIATE(T)                                                                     \
  template void chunk_output_backward<T>(const T*, const T*, const T*, const T*, const T*,         \
                                         const T*, T, int64_t, int64_t, int64_t, T*, T*, T*, T*,   \
                                         const ChunkBwdWork<T>&);                                  \
  template void state_update_backward<T>(const T*, const T*, const T*, const T*, const T*,         \
                                         int64_t, int64_t, int64_t, T*, T*, T*, T*,                \
                                         const ChunkBwdWork<T>&);                                  \
  template void delta_vnew_backward<T>(const T*, const T*, const T*, int64_t, int64_t, int64_t,    \
                                       T*, T*, const ChunkBwdWork<T>&);                            \
  template void wy_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*,         \
                               const T*, int64_t, int64_t, int64_t, T*, T*, T*, T*, T*, T*,        \
                               const ChunkBwdWork<T>&);                                            \
  template void decay_products_backward<T>(const T*, const T*, const T*, const T*, const T*,       \
                                           int64_t, int64_t, T*, T*, T*, T*);                      \
  template void gate_cumsum_backward<T>(const T*, T*, int64_t, int64_t);                           \
  template void chunk_bwd_pass1<T>(const ChunkFwd<T>&, const T*, const T*, const T*, T, T*, T*,    \
                                   const ChunkBwdWork<T>&);                                        \
  template void chunk_bwd_pass2<T>(const ChunkFwd<T>&, const T*, const T*, const T*, const T*, T,  \
                                   T*, T*, T*, T*, T*, const ChunkBwdWork<T>&);
LINATTN_INSTANTIATE(float)
LINATTN_INSTANTIATE(double)
#undef LINATTN_INSTANTIATE

}  // namespace linattn::cpu
