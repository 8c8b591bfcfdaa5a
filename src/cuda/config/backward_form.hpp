// The CUDA backward's compute form: what Options::backward_precision (linattn.hpp) resolves to for
// a problem, and what that form means for the buffers. One home for the precision policy; the
// workspace planners, the saved buffer and the kernels' dtype switches read it from here.
#pragma once

#include <cstdint>

#include "linattn/linattn.hpp"

namespace linattn::detail {
struct Problem;
}

namespace linattn::cuda::config {

// How the chunked (WY) backward computes: in the 16-bit input type (kSixteen, BackwardPrecision::
// kFast16), in it with hi + lo halves where accuracy needs them (kSplit; see
// docs/chunked_backward.md, "Precision on 16-bit inputs"), or in float32 (kFloat32). The value
// is recorded in a saved buffer's header: never renumber.
enum class Compute : int32_t { kSixteen = 0, kSplit = 1, kFloat32 = 2 };

// The compute form of the chunked path for problem p. kAuto: for 16-bit inputs the split form,
// float32 when the gate parameters' gradients are asked for (needs_float32) or the split form
// does not fit (split_fits, heuristics.hpp); float32 inputs always compute in float32. Families
// without the delta rule (GLA, simple GLA) never split: kAuto and kSplit compute in the 16-bit
// type there (as FLA does), kFloat32 in float32. A saved
// buffer is written and read in this form.
Compute compute_of(const detail::Problem& p);

// The gradients of the gate parameters A_log and dt_bias are per-head sums over every token of
// dg times the gate's derivative, and they cancel heavily: 16-bit intermediates, even split, leave
// them up to 0.2 off on SPEC's test cases (dg itself is within 4e-3). With those parameters kAuto
// therefore computes in float32.
bool needs_float32(const detail::Problem& p);

// Name of a Compute value as recorded in a saved header ("fast16", "split", "float32").
const char* compute_name(int32_t c);

// What the compute form means for the buffers: float32 (16-bit inputs read in place, converted as
// the kernels load them), or the 16-bit input type, with the split form's low halves.
struct ComputeForm {
  bool f32, split;
  ComputeForm(DType input, Compute compute)
      : f32(compute == Compute::kFloat32 || input == DType::kFloat32), split(!f32 && compute == Compute::kSplit) {}
};

}  // namespace linattn::cuda::config
