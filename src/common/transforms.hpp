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

// ---- gate: identity (g is the log decay), or computed in-kernel from raw g, A_log, dt_bias.
//   softplus:    g = -exp(A_log) * softplus(x),            x = g_raw + dt_bias
//   lower bound: g = L * sigmoid(exp(A_log) * x)           (L * sigmoid(x) without A_log)
struct GateTransform {
  enum class Kind { kIdentity, kSoftplus, kLowerBound };
  Kind kind = Kind::kIdentity;
  double lower_bound = 0;

  // Returns g; `a_log` is ignored when !has_a_log (lower bound) and must be given for softplus.
  template <typename T>
  T forward(T raw, T dt_bias, T a_log, bool has_a_log) const {
    const T x = raw + dt_bias;
    switch (kind) {
      case Kind::kIdentity: return raw;
      case Kind::kSoftplus: return -std::exp(a_log) * softplus(x);
      case Kind::kLowerBound: {
        const T z = has_a_log ? std::exp(a_log) * x : x;
        return T(lower_bound) * sigmoid(z);
      }
    }
    return raw;
  }

  // Given dL/dg, returns dL/draw (== dL/d dt_bias) and adds dL/dA_log into *d_a_log.
  template <typename T>
  T backward(T raw, T dt_bias, T a_log, bool has_a_log, T dg, T* d_a_log) const {
    const T x = raw + dt_bias;
    switch (kind) {
      case Kind::kIdentity: return dg;
      case Kind::kSoftplus: {
        const T ea = std::exp(a_log);
        *d_a_log += dg * (-ea * softplus(x));
        return dg * (-ea * sigmoid(x));
      }
      case Kind::kLowerBound: {
        if (!has_a_log) {
          const T s = sigmoid(x);
          return dg * T(lower_bound) * s * (T(1) - s);
        }
        const T ea = std::exp(a_log);
        const T s = sigmoid(ea * x);
        const T ds = dg * T(lower_bound) * s * (T(1) - s);  // dL/dz
        *d_a_log += ds * ea * x;
        return ds * ea;
      }
    }
    return dg;
  }
};

}  // namespace linattn::detail
