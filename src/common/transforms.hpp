// Per-token input transforms of SPEC.md ("Options") and their derivatives, shared by the CPU
// backend (float) and the float64 reference (double) so both apply the same definitions.
#pragma once

#include <cmath>
#include <cstdint>

namespace linattn::detail {

constexpr double kL2NormEps = 1e-6;  // inside the square root

// y = x / sqrt(sum x^2 + eps). Returns rstd = 1 / sqrt(sum x^2 + eps) for the backward.
template <typename T>
inline T l2norm_forward(const T* x, T* y, int64_t n) {
  T ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const T rstd = T(1) / std::sqrt(ss + T(kL2NormEps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * rstd;
  return rstd;
}

// dx = rstd * (dy - y * <y, dy>), with y the normalised vector.
template <typename T>
inline void l2norm_backward(const T* y, T rstd, const T* dy, T* dx, int64_t n) {
  T dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += y[i] * dy[i];
  for (int64_t i = 0; i < n; ++i) dx[i] = rstd * (dy[i] - y[i] * dot);
}

template <typename T>
inline T sigmoid(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

// log(1 + exp(x)), stable for any x.
template <typename T>
inline T softplus(T x) {
  return (x > 0 ? x : T(0)) + std::log1p(std::exp(-std::fabs(x)));
}

// ---- beta: identity, sigmoid, or 2 * sigmoid (allow_neg_eigval)
struct BetaTransform {
  bool sigmoid = false;
  bool neg_eigval = false;

  template <typename T>
  T forward(T x) const {
    if (!sigmoid) return x;
    return (neg_eigval ? T(2) : T(1)) * linattn::detail::sigmoid(x);
  }
  // d beta / d raw
  template <typename T>
  T derivative(T x) const {
    if (!sigmoid) return T(1);
    const T s = linattn::detail::sigmoid(x);
    return (neg_eigval ? T(2) : T(1)) * s * (T(1) - s);
  }
};

// log(softplus(x)) = log(log(1 + exp(x))), finite wherever softplus(x) > 0 and equal to x where
// softplus(x) underflows (softplus(x) = exp(x) (1 - exp(x)/2 + ...) for x << 0).
template <typename T>
inline T log_softplus(T x) {
  if (x < T(-20)) return x;  // relative error of exp(x)/2 < 1.1e-9
  return std::log(softplus(x));
}

// log(sigmoid(x)) = -softplus(-x).
template <typename T>
inline T log_sigmoid(T x) {
  return -softplus(-x);
}

// Gates (after the in-kernel transform) at or below this value are a full forget to the
// precision of every compute type: exp(-110) < 1.7e-48, below float32's smallest subnormal
// (1.4e-45), and for float64 a contribution of 1e-48 relative to the state it forgets. The CPU
// and CUDA backends raise such gates to kGateFloor before the chunk-local cumulative sums: this
// keeps -inf (a valid full forget, exp(-inf) = 0) from becoming -inf - (-inf) = NaN in the
// decay differences gamma_i - gamma_j, and keeps huge finite gates (-1e30) from swamping the
// ordinary gates summed with them in float32 (the cumulative sums stay within 64 * 110 of 0).
// The gradient of a floored gate is 0 (the true one is exp(g) times bounded terms, below
// 1e-47 of them). The float64 reference evaluates the recurrence exactly and needs no floor.
constexpr double kGateFloor = -110.0;
// The backends' exp of a log decay is exactly 0 at or below this (exp(-100) < 3.8e-44): every
// decay that spans a floored gate lies below it whatever the rounding of the cumulative sums, so
// a full forget leaves exactly nothing of the forgotten state (a zero gradient for a forgotten
// initial state is exactly zero, as in the recurrence).
constexpr double kDecayFlush = -100.0;

// ---- gate: identity (g is the log decay), or computed in-kernel from raw g, A_log, dt_bias.
//   softplus:    g = -exp(A_log) * softplus(x),            x = g_raw + dt_bias
//   lower bound: g = L * sigmoid(exp(A_log) * x)           (L * sigmoid(x) without A_log)
// Both are evaluated so that exp(A_log) overflowing the compute type gives the limit of the
// formula, never NaN: -exp(A_log) * softplus(x) as -exp(A_log + log(softplus(x))) (-inf when it
// overflows, a full forget; 0 when softplus(x) is 0), and exp(A_log) * x as
// sign(x) exp(A_log + log|x|) when exp(A_log) alone overflows (0 for x = 0).
struct GateTransform {
  enum class Kind { kIdentity, kSoftplus, kLowerBound };
  Kind kind = Kind::kIdentity;
  double lower_bound = 0;

  // Whether exp(A_log) * softplus(x) can be formed as the product (no 0 * inf, no overflow of
  // a factor); otherwise it is exp(A_log + log(softplus(x))).
  template <typename T>
  static bool direct(T ea, T sp) {
    return std::isfinite(ea) && ea > T(0) && std::isfinite(sp);
  }

  template <typename T>
  static T scaled(T a_log, T x) {  // exp(a_log) * x without inf * 0
    const T ea = std::exp(a_log);
    if (std::isfinite(ea) || std::isnan(x)) return ea * x;
    if (x == T(0)) return T(0);
    return std::copysign(std::exp(a_log + std::log(std::fabs(x))), x);
  }

  // Returns g; `a_log` is ignored when !has_a_log (lower bound) and must be given for softplus.
  template <typename T>
  T forward(T raw, T dt_bias, T a_log, bool has_a_log) const {
    const T x = raw + dt_bias;
    switch (kind) {
      case Kind::kIdentity: return raw;
      case Kind::kSoftplus: {
        const T ea = std::exp(a_log), sp = softplus(x);
        if (direct(ea, sp)) return -ea * sp;
        return -std::exp(a_log + log_softplus(x));
      }
      case Kind::kLowerBound: {
        const T z = has_a_log ? scaled(a_log, x) : x;
        return T(lower_bound) * sigmoid(z);
      }
    }
    return raw;
  }

  // Given dL/dg, returns dL/draw (== dL/d dt_bias) and adds dL/dA_log into *d_a_log. A zero dg
  // (a floored or fully decayed gate) contributes exactly 0, whatever the overflowing factors.
  template <typename T>
  T backward(T raw, T dt_bias, T a_log, bool has_a_log, T dg, T* d_a_log) const {
    if (kind == Kind::kIdentity) return dg;
    if (dg == T(0)) return T(0);
    const T x = raw + dt_bias;
    switch (kind) {
      case Kind::kIdentity: return dg;
      case Kind::kSoftplus: {
        // dg/dA_log = g = -exp(A_log) softplus(x); dg/dx = -exp(A_log) sigmoid(x) (in log space
        // when exp(A_log) overflows)
        const T ea = std::exp(a_log), sp = softplus(x);
        if (direct(ea, sp)) {
          *d_a_log += dg * (-ea * sp);
          return dg * (-ea * sigmoid(x));
        }
        *d_a_log += dg * (-std::exp(a_log + log_softplus(x)));
        return dg * (-std::exp(a_log + log_sigmoid(x)));
      }
      case Kind::kLowerBound: {
        if (!has_a_log) {
          const T s = sigmoid(x);
          return dg * T(lower_bound) * s * (T(1) - s);
        }
        const T z = scaled(a_log, x);
        const T s = sigmoid(z);
        const T sd = s * (T(1) - s);
        if (sd == T(0)) return T(0);  // saturated: the exact derivative underflows too
        const T ds = dg * T(lower_bound) * sd;  // dL/dz
        const T ea = std::exp(a_log);
        if (std::isfinite(ea)) {
          *d_a_log += ds * ea * x;  // dz/dA_log = z
          return ds * ea;           // dz/dx = exp(A_log)
        }
        *d_a_log += ds * z;
        return ds * ea;
      }
    }
    return dg;
  }
};

}  // namespace linattn::detail
