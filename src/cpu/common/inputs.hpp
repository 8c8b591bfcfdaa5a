// Input loading and transforms for one (sequence, value head) of the CPU backend: q/k l2norm,
// the gate (in-kernel activation, scalar broadcast, simple GLA's g + g_gamma), beta sigmoid, and
// state load/store in either state layout.
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "cpu/common/scratch.hpp"

namespace linattn::cpu {

// Per-value-head constants of the gate transform.
template <class T>
struct HeadParams {
  T a_log = 0;
  T g_gamma = 0;  // simple GLA; 0 when absent
  T dt_bias[256] = {};  // gate_width() values (KDA: K per head, GDN: 1); 0 when absent
};

template <class T>
HeadParams<T> load_head_params(const detail::Problem& p, const ForwardInputs& in, int64_t hv);

// Loads tokens [t0, t0 + L) of sequence n (t0 relative to the sequence start) for value head hv
// into c: q, k (normalised when requested), v, g (transformed, broadcast over K), beta
// (transformed); with_raw also keeps the raw gate and raw beta (for the backward).
template <class T>
void load_chunk(const detail::Problem& p, const ForwardInputs& in, const HeadParams<T>& hp,
                int64_t n, int64_t hv, int64_t t0, int64_t L, bool with_raw, const ChunkIn<T>& c);

// Reads state (n, hv) of a [N, HV, K, V] (or V-first) tensor into S [K][V]; zeros when absent.
template <class T>
void load_state(const detail::Problem& p, const TensorView& t, int64_t n, int64_t hv, T* S);

// Writes S [K][V] as the state at flat state index `index` (= n * HV + hv, or chunk * HV + hv
// for h) of a state-shaped tensor, in its dtype and layout.
template <class T>
void store_state(const detail::Problem& p, const TensorView& t, int64_t index, const T* S);

}  // namespace linattn::cpu
