// Test helpers: owning host tensors, random inputs, poisoning, relative error.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "linattn/linattn.hpp"

namespace linattn {
// Readable parameter names in GoogleTest output (found by argument-dependent lookup).
inline void PrintTo(Family family, std::ostream* os) { *os << family_name(family); }
}  // namespace linattn

namespace linattn::test {

// An owning, contiguous host tensor.
struct HostTensor {
  std::vector<unsigned char> bytes;
  TensorView view;  // absent when default-constructed

  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.assign(static_cast<size_t>(n) * dtype_size(dtype), 0);
    view = make_view(bytes.data(), dtype, shape);
  }
  HostTensor(const HostTensor& o) : bytes(o.bytes), view(o.view) { view.data = bytes.data(); }
  HostTensor& operator=(const HostTensor& o) {
    bytes = o.bytes;
    view = o.view;
    view.data = bytes.data();
    return *this;
  }
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  bool present() const { return view.present(); }
  int64_t numel() const { return view.numel(); }
  DType dtype() const { return view.dtype; }
  double get(int64_t i) const { return detail::load_as_double(view.data, view.dtype, i); }
  void set(int64_t i, double x) { detail::store_from_double(view.data, view.dtype, i, x); }
  std::vector<double> to_double() const {
    std::vector<double> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = get(i);
    return out;
  }
  // A copy converted to another dtype (same shape).
  HostTensor as(DType dtype) const {
    HostTensor t = *this;
    t.bytes.assign(static_cast<size_t>(numel()) * dtype_size(dtype), 0);
    t.view.data = t.bytes.data();
    t.view.dtype = dtype;
    for (int64_t i = 0; i < numel(); ++i) t.set(i, get(i));
    return t;
  }
  // Fill with NaN (floats) or a huge pattern so an unwritten element fails any comparison.
  void poison() {
    for (int64_t i = 0; i < numel(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
  }
};

inline std::mt19937_64& rng() {
  static std::mt19937_64 gen(20261121);
  return gen;
}

// Seeds rng() from a case's description (FNV-1a of key): the case's inputs are then the same
// whichever tests ran before it, so a failure reproduces under --gtest_filter or a sanitizer.
inline void seed_rng(const std::string& key) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : key) h = (h ^ ch) * 1099511628211ull;
  rng().seed(h);
}

inline void fill_normal(HostTensor& t, double mean = 0.0, double stddev = 1.0) {
  std::normal_distribution<double> d(mean, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, d(rng()));
}

inline void fill_uniform(HostTensor& t, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, d(rng()));
}

// Realistic log-decay gates: logsigmoid(randn) / 16 (in (-inf, 0), mostly small).
inline void fill_logsigmoid_gate(HostTensor& t, double divisor = 16.0) {
  std::normal_distribution<double> d(0.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = d(rng());
    const double ls = x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x));
    t.set(i, ls / divisor);
  }
}

// ||x - ref|| / ||ref||; +inf when x has a NaN/Inf or shapes differ.
inline double rel_err(const HostTensor& x, const HostTensor& ref) {
  if (x.numel() != ref.numel()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = x.get(i), b = ref.get(i);
    if (!std::isfinite(a) || !std::isfinite(b)) return std::numeric_limits<double>::infinity();
    num += (a - b) * (a - b);
    den += b * b;
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

// SPEC.md's bar for an input dtype.
inline double tolerance_for(DType input_dtype) {
  switch (input_dtype) {
    case DType::kFloat64: return 1e-5;
    case DType::kFloat32: return 2e-3;
    default: return 1e-2;
  }
}

}  // namespace linattn::test
