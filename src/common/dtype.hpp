// Host-side scalar conversions for the storage dtypes (bfloat16, float16, float32, float64).
// Used by the CPU backend and the float64 reference to read inputs and write outputs of any
// dtype; device code has its own conversions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "linattn/linattn.hpp"

namespace linattn::detail {

inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16_bits(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(static_cast<float>(man), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_fp16_bits(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00u;  // overflow (>= 65520) -> inf
  if (absu < 0x38800000u) {                         // below the smallest normal: subnormal
    float a;
    std::memcpy(&a, &absu, 4);
    const float scaled = a * 16777216.0f;  // 2^24, exact
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);
  return sign | static_cast<uint16_t>(((r >> 13) - (112u << 10)) & 0xffffu);
}

// Read element `i` (flat, contiguous) of a buffer of `dtype` as double.
inline double load_as_double(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat16: return fp16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kBFloat16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kFloat64: return static_cast<const double*>(base)[i];
    case DType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::kUInt8: return static_cast<const uint8_t*>(base)[i];
  }
  return 0.0;
}

inline float load_as_float(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kFloat16: return fp16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kBFloat16: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    default: return static_cast<float>(load_as_double(base, dtype, i));
  }
}

inline void store_from_double(void* base, DType dtype, int64_t i, double x) {
  switch (dtype) {
    case DType::kFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_fp16_bits(static_cast<float>(x));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(x));
      break;
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(x); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = x; break;
    case DType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(x); break;
    case DType::kInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(x); break;
    case DType::kUInt8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(x); break;
  }
}

// Contiguous row of n elements starting at flat index `offset`, converted to T.
template <typename T>
inline void load_row(const void* base, DType dtype, int64_t offset, int64_t n, T* out) {
  if (dtype == DType::kFloat32) {
    const float* p = static_cast<const float*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(p[i]);
  } else if (dtype == DType::kBFloat16) {
    const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(bf16_bits_to_float(p[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(load_as_double(base, dtype, offset + i));
  }
}

template <typename T>
inline void store_row(void* base, DType dtype, int64_t offset, int64_t n, const T* in) {
  if (dtype == DType::kFloat32) {
    float* p = static_cast<float*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(in[i]);
  } else if (dtype == DType::kBFloat16) {
    uint16_t* p = static_cast<uint16_t*>(base) + offset;
    for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16_bits(static_cast<float>(in[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) store_from_double(base, dtype, offset + i, static_cast<double>(in[i]));
  }
}

}  // namespace linattn::detail
