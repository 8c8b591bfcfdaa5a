// A validated call: sizes, flags and host-side sequence offsets resolved once from the user's
// tensor views, then handed to a backend. Every backend reads its inputs through this.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <cstring>
#include <vector>

#include "common/transforms.hpp"
#include "linattn/linattn.hpp"

namespace linattn::detail {

struct Problem {
  Family family = Family::kKDA;
  Options opt;

  bool delta = false;        // GDN, KDA: delta-rule update with beta
  bool vector_gate = false;  // KDA, GLA: g is [.., K]; otherwise one scalar per token and head

  int64_t B = 0, T = 0, H = 0, HV = 0, G = 1, K = 0, V = 0;
  int64_t N = 0;  // number of sequences
  bool varlen = false;
  // Sequence n covers tokens [cu[n], cu[n+1]) of the flattened B*T token axis (fixed length:
  // cu[n] = n*T). Host copy, always present after validation.
  std::vector<int64_t> cu;
  // Sequence n owns chunks [chunk_offsets[n], chunk_offsets[n+1]) of the h layout;
  // for fixed length chunk_offsets[n] = n * ceil(T / 64).
  std::vector<int64_t> chunk_offsets;
  int64_t num_chunks = 0;  // NT_total

  double scale = 0;  // resolved (K ** -0.5 when not given)

  bool has_g = false;        // g tensor given
  bool has_g_gamma = false;  // simple GLA constant gate given
  bool has_A_log = false;
  bool has_dt_bias = false;
  bool has_h0 = false;
  // A saved buffer (disable_recompute) takes part: the forward's out.saved or the backward's
  // in.saved; for forward_workspace_size, Options::disable_recompute.
  bool has_saved = false;

  // Test hook, never set by the public API: the backward runs the token replay (an independent
  // algorithm kept as the tests' oracle for the chunked backward) instead. Set only by
  // linattn::testing (common/testing.hpp).
  bool token_replay = false;
  // Test hook, never set by the public API: the backward's state recompute and pass 1 run as two
  // kernels even where one kernel runs both chains (cuda::bwd::bwd_chains_apply).
  bool separate_chains = false;

  BetaTransform beta_tf;  // identity unless use_beta_sigmoid_in_kernel
  GateTransform gate_tf;  // identity unless use_gate_in_kernel

  Device device;
  DType dtype = DType::kFloat32;  // dtype of q, k, v (float64 inputs select a float64 compute path)

  int64_t seq_len(int64_t n) const { return cu[n + 1] - cu[n]; }
  int64_t qk_head(int64_t hv) const { return hv / G; }
  // Flat offsets (elements) into the dense token-major tensors.
  int64_t qk_offset(int64_t token, int64_t h) const { return (token * H + h) * K; }
  int64_t v_offset(int64_t token, int64_t hv) const { return (token * HV + hv) * V; }
  int64_t g_offset(int64_t token, int64_t hv) const {
    return vector_gate ? (token * HV + hv) * K : token * HV + hv;
  }
  int64_t beta_offset(int64_t token, int64_t hv) const { return token * HV + hv; }
  int64_t gate_width() const { return vector_gate ? K : 1; }
  // Offset of state (n, hv) in [N, HV, K, V] (or [N, HV, V, K]); both have K*V elements.
  int64_t state_offset(int64_t n, int64_t hv) const { return (n * HV + hv) * K * V; }
  // Index of S[i][j] (i over K, j over V) inside one state, honouring state_v_first.
  int64_t state_index(int64_t i, int64_t j) const {
    return opt.state_v_first ? j * K + i : i * V + j;
  }
};

// FNV-1a hash of what a saved buffer's contents depend on beyond the sizes: the sequence offsets,
// the input transforms, which optional inputs are given, and the scale. The CPU and CUDA saved
// buffers' headers carry it, so that a backward refuses a buffer another problem's forward wrote.
inline uint64_t saved_problem_hash(const Problem& p) {
  uint64_t x = 1469598103934665603ull;
  auto mix = [&x](uint64_t v) {
    for (int i = 0; i < 8; ++i) x = (x ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  auto bits = [](double d) {
    uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    return u;
  };
  for (int64_t c : p.cu) mix(static_cast<uint64_t>(c));
  mix(p.opt.use_qk_l2norm_in_kernel);
  mix(static_cast<uint64_t>(p.gate_tf.kind));
  mix(bits(p.gate_tf.lower_bound));
  mix(p.beta_tf.sigmoid + 2 * p.beta_tf.neg_eigval);
  mix(p.has_h0 + 2 * p.has_g + 4 * p.has_g_gamma + 8 * p.has_A_log + 16 * p.has_dt_bias);
  mix(bits(p.scale));
  return x;
}

// Validation (validate.cpp). On success fills *p; on failure returns a Status naming the
// offending argument and rule, and leaves *p unspecified.
Status resolve_inputs(Family family, const ForwardInputs& in, const Options& opt, Problem* p);
Status resolve_forward(Family family, const ForwardInputs& in, const ForwardOutputs& out,
                       const Options& opt, Problem* p);
// Aliasing rules shared by every entry point's validation (validate.cpp).
struct NamedView {
  const char* name;
  const TensorView* t;
};
bool views_overlap(const TensorView& a, const TensorView& b);
// No output may share a byte with an input or with another output.
Status check_no_alias(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs);

Status resolve_backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                        const Options& opt, Problem* p);

// The workspace of a validated call: at least `need` bytes (kWorkspaceTooSmall otherwise),
// non-null when need > 0, on the inputs' device when its device is known, 16-byte aligned on
// CUDA, and sharing no byte with any input or output of the call (the backends may use all of
// ws.bytes, so the whole range is checked).
Status check_forward_workspace(const Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
                               Workspace ws, std::size_t need);
Status check_backward_workspace(const Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                                Workspace ws, std::size_t need);
// workspace_from_view's rules (api.cpp exposes it).
Status workspace_view(const TensorView& t, Workspace* ws);

}  // namespace linattn::detail
