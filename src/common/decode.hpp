// A validated decode call (linattn::decode): the forward's Problem for q/k/v/gates plus what the
// recurrent serving path adds (state pool, indices, accepted tokens, per-channel beta).
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "linattn/linattn.hpp"

namespace linattn::detail {

struct DecodeProblem {
  Problem p;  // sizes, transforms, device, dtype; p.cu is empty when cu_device_only
  bool cu_device_only = false;  // CUDA varlen without cu_seqlens_host: the kernel reads cu_seqlens
  int64_t total_tokens = 0;     // B * T

  bool beta_per_v = false;  // beta is [B, T, HV, V]
  bool has_state = false;
  DType state_dtype = DType::kFloat32;
  int64_t pool_slots = 0;    // P (N without indices)
  int64_t state_stride = 0;  // elements between slots of `state`
  bool inplace = false;
  bool has_final = false;
  DType final_dtype = DType::kFloat32;

  bool has_indices = false;
  bool indices_2d = false;  // [N, T_max]
  bool indices_64 = false;
  int64_t index_cols = 1;   // T_max (1 for the 1-D form)
  bool has_accepted = false;
  bool accepted_64 = false;
  bool has_status = false;
};

// Validation of a decode call (validate_decode.cpp): on success fills *d; nothing is written.
Status resolve_decode(Family family, const DecodeInputs& in, const DecodeOutputs& out, const Options& opt,
                      DecodeProblem* d);

// Host-side value checks the CPU backend runs before it writes anything (the CUDA kernels raise
// DecodeStatus flags instead): every index and accepted count in range, sequences fit T_max.
Status check_decode_values(const DecodeProblem& d, const DecodeInputs& in);

}  // namespace linattn::detail

namespace linattn::cuda {
// The CUDA recurrent decode kernels (src/cuda/decode/); refuses without a CUDA build.
Status decode(const detail::DecodeProblem& d, const DecodeInputs& in, const DecodeOutputs& out, Stream stream);
}  // namespace linattn::cuda
