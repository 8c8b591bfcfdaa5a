// What the CUDA backend is built around and what it can run: the chunk size, the workspace
// alignment, the shared-memory ceiling, the SM count, the dtype codes of the kernels' runtime
// switches, and can_implement() (one rule for the forward, the backward and the size queries).
// One home for each; the kernels' own tile constants stay beside their kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "linattn/linattn.hpp"

namespace linattn::detail {
struct Problem;
}

namespace linattn::cuda::config {

// Tokens per chunk: the h layout's chunk (linattn::kChunkSize) and every kernel's tile of tokens.
constexpr int kChunk = 64;
static_assert(kChunk == kChunkSize, "the CUDA kernels tile tokens by the public chunk size");

// Alignment of every buffer carved out of a workspace or saved buffer (as cudaMalloc's).
constexpr std::size_t kAlign = 256;
constexpr std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Dynamic shared memory one block may opt into on sm_90 (227 KiB): the Hopper kernels' bound
// (their static_asserts) and the limit the tile and stage choices assume where no device is asked.
constexpr std::size_t kMaxSmem = 227 * 1024;

// The shared memory of a device that the tile and stage choices (heuristics.hpp) fit: what one
// block may opt into, and what one SM holds (for choices of two CTAs an SM). sm_90: 227 / 228
// KiB; sm_80: 163 / 164; sm_86, sm_89: 99 / 100. A GPU with less runs shallower pipelines, or
// refuses with a message, instead of failing at a launch that asks for more than it has.
struct SmemLimits {
  std::size_t block;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
  std::size_t sm;     // cudaDevAttrMaxSharedMemoryPerMultiprocessor
};
constexpr SmemLimits kHopperSmem{kMaxSmem, 228 * 1024};
// `device`'s limits (device_info.hpp: asked once per device; kHopperSmem when the query fails).
SmemLimits smem_limits(int device);

// Multiprocessors of `device` (device_info.hpp: asked once per device; 132 when the query fails).
int sm_count(int device);

// The dtype codes of the kernels' runtime switches. They equal linattn::DType's values for the
// four float types; any other dtype maps to kCodeOther.
enum DtypeCode : int { kCodeF16 = 0, kCodeBF16 = 1, kCodeF32 = 2, kCodeF64 = 3, kCodeOther = 3 };
static_assert(kCodeF16 == static_cast<int>(DType::kFloat16) && kCodeBF16 == static_cast<int>(DType::kBFloat16) &&
                  kCodeF32 == static_cast<int>(DType::kFloat32) && kCodeF64 == static_cast<int>(DType::kFloat64),
              "dtype codes follow linattn::DType");
constexpr int dtype_code(DType d) {
  switch (d) {
    case DType::kFloat16: return kCodeF16;
    case DType::kBFloat16: return kCodeBF16;
    case DType::kFloat32: return kCodeF32;
    default: return kCodeOther;
  }
}

// Whether the CUDA backend runs problem p (every family; bf16 / fp16 / fp32 q, k, v; K and V in
// {64, 128, 256}; sizes within the kernels' 32-bit indices and grid limits). `direction` names the
// call in the message ("forward", "backward").
Status can_implement(const detail::Problem& p, const char* direction);

}  // namespace linattn::cuda::config
