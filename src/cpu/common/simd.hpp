// Small vector helpers of the CPU backend: dot products, axpy, a vectorised exp for float.
// Loops use `omp simd` so float reductions vectorise without -ffast-math; the order of the
// operations is fixed by the code, so results are identical run to run.
#pragma once

#include <cmath>
#include <cstdint>
#include "common/transforms.hpp"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LINATTN_CPU_AVX2 1
#endif

namespace linattn::cpu {

template <class T>
inline T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += a * x
template <class T>
inline void axpy(T a, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

template <class T>
inline void scal(T a, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

template <class T>
inline void fill(T* y, T value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = value;
}

template <class T>
inline void copy(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}

#ifdef LINATTN_CPU_AVX2
// float kernel of add_rows: 32-column tiles in 4 registers, then 8-column tiles, then scalars.
inline void add_rows_f32(const float* a, const float* M, int64_t nr, int64_t ld, float* y,
                         int64_t n, bool negate) {
  const float sgn = negate ? -1.0f : 1.0f;
  int64_t j0 = 0;
  for (; j0 + 32 <= n; j0 += 32) {
    __m256 c0 = _mm256_loadu_ps(y + j0), c1 = _mm256_loadu_ps(y + j0 + 8);
    __m256 c2 = _mm256_loadu_ps(y + j0 + 16), c3 = _mm256_loadu_ps(y + j0 + 24);
    const float* m = M + j0;
    for (int64_t r = 0; r < nr; ++r, m += ld) {
      const __m256 b = _mm256_set1_ps(sgn * a[r]);
      c0 = _mm256_fmadd_ps(b, _mm256_loadu_ps(m), c0);
      c1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(m + 8), c1);
      c2 = _mm256_fmadd_ps(b, _mm256_loadu_ps(m + 16), c2);
      c3 = _mm256_fmadd_ps(b, _mm256_loadu_ps(m + 24), c3);
    }
    _mm256_storeu_ps(y + j0, c0);
    _mm256_storeu_ps(y + j0 + 8, c1);
    _mm256_storeu_ps(y + j0 + 16, c2);
    _mm256_storeu_ps(y + j0 + 24, c3);
  }
  for (; j0 + 8 <= n; j0 += 8) {
    __m256 c0 = _mm256_loadu_ps(y + j0);
    const float* m = M + j0;
    for (int64_t r = 0; r < nr; ++r, m += ld) {
      c0 = _mm256_fmadd_ps(_mm256_set1_ps(sgn * a[r]), _mm256_loadu_ps(m), c0);
    }
    _mm256_storeu_ps(y + j0, c0);
  }
  for (; j0 < n; ++j0) {
    float acc = y[j0];
    for (int64_t r = 0; r < nr; ++r) acc = std::fma(sgn * a[r], M[r * ld + j0], acc);
    y[j0] = acc;
  }
}
#endif

// y[0, n) += sum_r a[r] * M[r * ld + (0, n)] (kNegate: -=): a linear combination of nr rows,
// accumulated in register tiles of columns (rows in ascending order for every element).
template <class T, bool kNegate = false>
inline void add_rows(const T* a, const T* M, int64_t nr, int64_t ld, T* y, int64_t n) {
#ifdef LINATTN_CPU_AVX2
  if constexpr (sizeof(T) == sizeof(float)) {
    add_rows_f32(a, M, nr, ld, y, n, kNegate);
    return;
  }
#endif
  constexpr int64_t kTile = 16;
  int64_t j0 = 0;
  for (; j0 + kTile <= n; j0 += kTile) {
    T acc[kTile];
    for (int64_t j = 0; j < kTile; ++j) acc[j] = y[j0 + j];
    for (int64_t r = 0; r < nr; ++r) {
      const T ar = kNegate ? -a[r] : a[r];
      const T* m = M + r * ld + j0;
#pragma omp simd
      for (int64_t j = 0; j < kTile; ++j) acc[j] += ar * m[j];
    }
    for (int64_t j = 0; j < kTile; ++j) y[j0 + j] = acc[j];
  }
  if (j0 < n) {
    for (int64_t r = 0; r < nr; ++r) axpy(kNegate ? -a[r] : a[r], M + r * ld + j0, y + j0, n - j0);
  }
}

#ifdef LINATTN_CPU_AVX2
// exp for 8 floats: x = n ln2 + r (Cody-Waite split of ln2), |r| <= ln2/2, exp(r) by its
// degree-7 Taylor polynomial (relative error < 1e-8 before rounding), times 2^n built in the
// exponent bits. Inputs are clamped to [-87.3, 88.3] for the polynomial; below -87.3 (float32's
// normal range ends at exp(-87.34)) the result is exactly 0, so that a forgotten state (a gate at
// the floor, or -inf) contributes exactly nothing. NaN stays NaN.
inline __m256 exp8(__m256 x0) {
  // min/max return their second operand when one is NaN: x0 first keeps NaN.
  const __m256 x = _mm256_max_ps(_mm256_set1_ps(-87.3f), _mm256_min_ps(_mm256_set1_ps(88.3f), x0));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 keep = _mm256_cmp_ps(x0, _mm256_set1_ps(-87.3f), _CMP_NLT_UQ);  // x0 >= -87.3 or NaN
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#endif

// exp of a log decay (a gate, a sum or a difference of gates): exactly 0 at or below
// kDecayFlush (transforms.hpp), where the decay is a full forget, so that the forgotten state and
// tokens contribute exactly nothing (not exp(-110) of themselves); NaN stays NaN.
template <class T>
inline T decay_exp(T x) {
  return x <= T(detail::kDecayFlush) ? T(0) : std::exp(x);
}

// y[i] = decay_exp(x[i])
template <class T>
inline void exp_array(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = decay_exp(x[i]);
}
#ifdef LINATTN_CPU_AVX2
template <>
inline void exp_array<float>(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = decay_exp(x[i]);
}
#endif

// The two decayed products of tokens i >= j of one chunk (per-channel gate):
//   *qk = sum_c q_i[c] k_j[c] exp(gi[c] - gj[c]),  *kk = sum_c k_i[c] k_j[c] exp(gi[c] - gj[c]).
// The decay is always the exp of the difference (never exp(gi) * exp(-gj), which overflows).
template <class T>
inline void decay_dot2(const T* qi, const T* ki, const T* gi, const T* kj, const T* gj, int64_t K,
                       T* qk, T* kk) {
  T aq = 0, ak = 0;
  for (int64_t c = 0; c < K; ++c) {
    const T kd = kj[c] * decay_exp(gi[c] - gj[c]);
    aq += qi[c] * kd;
    ak += ki[c] * kd;
  }
  *qk = aq;
  *kk = ak;
}
#ifdef LINATTN_CPU_AVX2
template <>
inline void decay_dot2<float>(const float* qi, const float* ki, const float* gi, const float* kj,
                              const float* gj, int64_t K, float* qk, float* kk) {
  __m256 aq = _mm256_setzero_ps(), ak = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= K; c += 8) {
    const __m256 d = exp8(_mm256_sub_ps(_mm256_loadu_ps(gi + c), _mm256_loadu_ps(gj + c)));
    const __m256 kd = _mm256_mul_ps(_mm256_loadu_ps(kj + c), d);
    aq = _mm256_fmadd_ps(_mm256_loadu_ps(qi + c), kd, aq);
    ak = _mm256_fmadd_ps(_mm256_loadu_ps(ki + c), kd, ak);
  }
  float sq = hsum8(aq), sk = hsum8(ak);
  for (; c < K; ++c) {
    const float kd = kj[c] * decay_exp(gi[c] - gj[c]);
    sq += qi[c] * kd;
    sk += ki[c] * kd;
  }
  *qk = sq;
  *kk = sk;
}
#endif

}  // namespace linattn::cpu
