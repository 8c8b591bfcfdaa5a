// linattn public C++ API.
//
// One call per operator family and direction:
//   kda_forward / kda_backward             Kimi delta attention (per-channel gate, delta rule)
//   gdn_forward / gdn_backward             gated delta rule (scalar gate, delta rule)
//   gla_forward / gla_backward             gated linear attention (per-channel gate)
//   simple_gla_forward / simple_gla_backward  scalar gate (g) and/or per-head constant gate (g_gamma)
// plus the generic forward()/backward() taking the Family as an argument.
//
// Every tensor is a non-owning view (pointer, dtype, shape, strides, device); outputs are
// allocated by the caller and must not overlap any input or each other (in-place calls are
// refused). CUDA tensors must start 16-byte aligned (allocations do; a view at an odd element
// offset is refused with kNotSupported). Each call validates every input first and returns a
// Status with a readable message; on error nothing is written. Scratch memory comes from a
// caller-provided Workspace whose size the *_workspace_size() queries return. ../shared/SPEC.md (the repository's
// copy lives beside this project) defines the math, shapes and options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace linattn {

// ---------------------------------------------------------------- tensors
enum class DType : int32_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFloat64 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kUInt8 = 6,
};
const char* dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);

// Values follow DLPack's DLDeviceType so bindings can pass them through.
enum class DeviceType : int32_t { kCPU = 1, kCUDA = 2 };
struct Device {
  DeviceType type = DeviceType::kCPU;
  int32_t index = 0;
};

constexpr int kMaxDims = 6;

// A strided, non-owning view. Strides are in elements. ndim < 0 means "absent" (optional
// argument not given); a default-constructed view is absent.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int32_t ndim = -1;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  Device device{};

  bool present() const { return ndim >= 0; }
  int64_t numel() const;
  bool is_contiguous() const;  // row-major dense
};

// Contiguous (row-major) view over `data`.
TensorView make_view(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                     Device device = Device{});

// ---------------------------------------------------------------- status
enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // bad dtype / shape / stride / device / value
  kNotSupported = 2,     // valid request this build or backend cannot run
  kWorkspaceTooSmall = 3,
  kBackendError = 4,     // e.g. a CUDA error
};

struct Status {
  StatusCode code = StatusCode::kOk;
  std::string message;

  bool ok() const { return code == StatusCode::kOk; }
  static Status Ok() { return {}; }
  static Status Invalid(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status Unsupported(std::string msg) { return {StatusCode::kNotSupported, std::move(msg)}; }
};

// ---------------------------------------------------------------- operators
enum class Family : int32_t { kSimpleGLA = 0, kGLA = 1, kGDN = 2, kKDA = 3 };
const char* family_name(Family family);

// How the CUDA backward of the delta-rule families (KDA, GDN) computes; the forward that fills a
// saved buffer (disable_recompute) writes it in the same form, so forward and backward must be
// given the same value (a mismatch is refused with kInvalidArgument). The CPU backend ignores it
// (it computes in float32, float64 for float64 inputs). Float32 inputs compute in float32 whatever
// the value. docs/chunked_backward.md ("Precision on 16-bit inputs") explains the forms.
enum class BackwardPrecision : int32_t {
  // The default. bfloat16 / float16 inputs: the split form (kSplit), except float32 (kFloat32) when
  // the in-kernel gate has A_log or dt_bias (their gradients are per-head sums over all tokens that
  // 16-bit intermediates cannot resolve to SPEC's 1e-2) and at K = 256 (the split form's operands
  // do not fit shared memory). Every gradient within SPEC.
  kAuto = 0,
  // Always the split form: the 16-bit input type with hi + lo halves of the few operands whose
  // rounding matters (U, Kg, V_new, dN, dY); float32 at K = 256. Per-token gradients within SPEC;
  // dA_log / ddt_bias can miss 1e-2 (0.2 measured on a one-head varlen case).
  kSplit = 1,
  // The 16-bit input type alone: the fastest and smallest workspace; dbeta, dg and the
  // gate-parameter gradients can miss SPEC's 1e-2.
  kFast16 = 2,
  // Float32 compute (16-bit q, k, v, dO read in place, exact in float32; on Hopper the backward's
  // state pass (16-bit inputs), its prep and pass 1 (bfloat16 inputs) carry each derived operand as
  // two bfloat16 halves, ~16 mantissa bits, which the gate gradients were checked to need and no
  // more): about 1.6x kSplit's time and ~7% more workspace; the most accurate.
  kFloat32 = 3,
};
const char* backward_precision_name(BackwardPrecision p);

// Options of SPEC.md, with FLA's names.
struct Options {
  std::optional<double> scale;           // default K ** -0.5
  bool use_qk_l2norm_in_kernel = false;  // q, k <- x / sqrt(sum x^2 + 1e-6) per token and head
  bool use_beta_sigmoid_in_kernel = false;
  bool allow_neg_eigval = false;         // with beta sigmoid: beta <- 2 sigmoid(beta)
  bool use_gate_in_kernel = false;       // KDA, GDN: g is raw; A_log (+ dt_bias) form the decay
  bool safe_gate = false;                // KDA: promises g in [lower_bound, 0) (faster GPU path);
                                         // without use_gate_in_kernel lower_bound defaults to -5
  std::optional<float> lower_bound;      // KDA, in [-5, 0): with use_gate_in_kernel selects
                                         // g = L * sigmoid(exp(A_log) * (g + dt_bias))
  bool state_v_first = false;            // states stored [.., V, K] instead of [.., K, V]
  bool disable_recompute = false;        // training: the forward will fill a `saved` buffer
                                         // (saved_bytes) that the backward reads instead of
                                         // recomputing; forward_workspace_size sizes for that
                                         // forward alone (on CUDA it can be smaller than a plain
                                         // forward's, which is then refused as too small)
  bool keep_chunk_local = false;         // training, GLA / simple GLA on CUDA (Hopper, 16-bit,
                                         // K = 128, computed in the 16-bit type): the
                                         // forward keeps its chunk-local intermediates (Q ⊙ e^γ,
                                         // (K ⊙ e^-γ)ᵀ, the masked Q Kᵀ, e^γ_C) and the chunk-start
                                         // states its pass reaches (16-bit; float32 with
                                         // state_v_first) in `saved` (saved_bytes), and the
                                         // backward reads them and recomputes nothing before its
                                         // dh pass, with bitwise the same results. saved_bytes is
                                         // 0 where it does not apply (then pass no saved buffer).
                                         // Not together with disable_recompute (another layout
                                         // of the same idea) nor with the forward's h output
  // CUDA backward (KDA, GDN): numerics, workspace size and the saved buffer's layout (above).
  BackwardPrecision backward_precision = BackwardPrecision::kAuto;
};

// Shapes (N = number of sequences: B, or len(cu_seqlens) - 1 with B == 1):
//   q, k          [B, T, H, K]
//   v             [B, T, HV, V]           HV = G * H
//   g             KDA/GLA [B, T, HV, K];  GDN/simple GLA [B, T, HV]   (float32 or bfloat16)
//   g_gamma       simple GLA only: [HV]   (constant per-head log decay; may be combined with g)
//   beta          GDN/KDA: [B, T, HV]
//   A_log         use_gate_in_kernel: HV elements;  dt_bias: KDA HV * K, GDN HV elements (optional);
//                 any contiguous shape with that many elements ([HV], [1, 1, HV, 1], [HV, K]), as in FLA
//   initial_state [N, HV, K, V] float32 ([N, HV, V, K] with state_v_first)
//   cu_seqlens    [N + 1] int32/int64 on the compute device; for CUDA also cu_seqlens_host
//                 (the same values in host memory: validation and chunk indexing read it,
//                 so no call synchronises with the device). The two must hold equal values;
//                 on CUDA forward / backward read only the host copy (it defines the sequences).
struct ForwardInputs {
  TensorView q, k, v;
  TensorView g;
  TensorView g_gamma;
  TensorView beta;
  TensorView A_log;
  TensorView dt_bias;
  TensorView initial_state;
  TensorView cu_seqlens;
  TensorView cu_seqlens_host;
};

//   o            [B, T, HV, V] in v's dtype
//   final_state  optional, like initial_state (output_final_state)
//   h            optional, float32 chunk-boundary states (return_intermediate_states):
//                [B, NT, HV, K, V] where NT = ceil(T / 64), or [1, NT_total, HV, K, V] with
//                cu_seqlens (NT_total = sum of ceil(len_i / 64)); h[.., c, ..] is the state
//                *before* chunk c. state_v_first swaps the last two dims.
//   saved        optional uint8 buffer of saved_bytes() (disable_recompute): forward keeps
//                its intermediates there and backward reuses them instead of recomputing.
//   state_map_o, state_map_final   optional, together (KDA, GDN; context parallelism): how the
//                outputs depend on the initial state. Per sequence and value head the state
//                after token t is S_t = M_t S_0 + C_t, so o_t = o_t(S_0 = 0) + S_0^T Q~_t with
//                Q~_t = scale M_t^T q_t: state_map_o [B, T, HV, K] in v's dtype holds Q~,
//                state_map_final [N, HV, K, K] float32 (transposed with state_v_first) the final
//                M. The CUDA backend computes them in the same pass as o (Hopper, 16-bit inputs,
//                K = 128, without h or saved); elsewhere the call is refused with kNotSupported
//                (compute them as the outputs of a call from the identity state with zero values).
struct ForwardOutputs {
  TensorView o;
  TensorView final_state;
  TensorView h;
  TensorView saved;
  TensorView state_map_o;
  TensorView state_map_final;
};

// Backward: the forward's inputs, the output gradient `d_o`, the optional final-state gradient
// `dht` (shape of final_state) and the optional `saved` buffer a forward filled.
// saved_as_filled: the caller vouches that `saved` holds what a forward of this same problem
// (same inputs' shapes, options and sequences) wrote, unchanged, as an autograd engine's own saved
// tensor does. On CUDA the backward then skips reading saved's header back to check it, a
// device-to-host read that waits for the stream (and so serialises host and GPU once a backward);
// its size and alignment are still checked. Left false, the header is read and a buffer written
// for another problem or backward form is refused.
struct BackwardInputs {
  ForwardInputs fwd;
  TensorView d_o;
  TensorView dht;
  TensorView saved;
  bool saved_as_filled = false;
};

// Gradients, each shaped like (and in the dtype of) the input it belongs to; each is optional
// except dq, dk, dv. dg is the gradient of the g that was passed (raw g with
// use_gate_in_kernel); dbeta of the beta that was passed (pre-sigmoid with
// use_beta_sigmoid_in_kernel). dh0 needs initial_state. dg_gamma: simple GLA's g_gamma.
struct BackwardOutputs {
  TensorView dq, dk, dv;
  TensorView dg;
  TensorView dg_gamma;
  TensorView dbeta;
  TensorView dA_log;
  TensorView ddt_bias;
  TensorView dh0;
};

// Scratch memory. On CPU it is host memory, on CUDA device memory of the inputs' device. Like
// every output it must not overlap any input or output of the call (refused otherwise); on CUDA
// it must start 16-byte aligned. `device`, when set (workspace_from_view sets it), must be the
// inputs' device; unset, the pointer is taken to be on it.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  std::optional<Device> device;
};

// A Workspace over a tensor view, for bindings that receive the workspace as an array: the view
// must be a dense 1-D uint8 buffer (non-null when non-empty) on a CPU or CUDA device. The rules
// that depend on the call (size, alignment, overlap, device) are checked by forward / backward.
Status workspace_from_view(const TensorView& t, Workspace* ws);

// cudaStream_t for CUDA tensors (nullptr = default stream); ignored on CPU.
using Stream = void*;

constexpr int64_t kChunkSize = 64;

// ---- queries (validate the inputs too)
Status forward_workspace_size(Family family, const ForwardInputs& in, const Options& opt,
                              std::size_t* bytes);
Status backward_workspace_size(Family family, const BackwardInputs& in, const Options& opt,
                               std::size_t* bytes);
Status saved_bytes(Family family, const ForwardInputs& in, const Options& opt, std::size_t* bytes);
// Total chunk count NT of the h layout above (needs cu_seqlens_host for CUDA varlen).
Status num_chunks(const ForwardInputs& in, int64_t* nt);

// ---- generic entry points
Status forward(Family family, const ForwardInputs& in, const ForwardOutputs& out,
               const Options& opt, Workspace ws = {}, Stream stream = nullptr);
Status backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                const Options& opt, Workspace ws = {}, Stream stream = nullptr);

// ---- one call per operator and direction
inline Status kda_forward(const ForwardInputs& in, const ForwardOutputs& out, const Options& opt,
                          Workspace ws = {}, Stream s = nullptr) {
  return forward(Family::kKDA, in, out, opt, ws, s);
}
inline Status kda_backward(const BackwardInputs& in, const BackwardOutputs& out,
                           const Options& opt, Workspace ws = {}, Stream s = nullptr) {
  return backward(Family::kKDA, in, out, opt, ws, s);
}
inline Status gdn_forward(const ForwardInputs& in, const ForwardOutputs& out, const Options& opt,
                          Workspace ws = {}, Stream s = nullptr) {
  return forward(Family::kGDN, in, out, opt, ws, s);
}
inline Status gdn_backward(const BackwardInputs& in, const BackwardOutputs& out,
                           const Options& opt, Workspace ws = {}, Stream s = nullptr) {
  return backward(Family::kGDN, in, out, opt, ws, s);
}
inline Status gla_forward(const ForwardInputs& in, const ForwardOutputs& out, const Options& opt,
                          Workspace ws = {}, Stream s = nullptr) {
  return forward(Family::kGLA, in, out, opt, ws, s);
}
inline Status gla_backward(const BackwardInputs& in, const BackwardOutputs& out,
                           const Options& opt, Workspace ws = {}, Stream s = nullptr) {
  return backward(Family::kGLA, in, out, opt, ws, s);
}
inline Status simple_gla_forward(const ForwardInputs& in, const ForwardOutputs& out,
                                 const Options& opt, Workspace ws = {}, Stream s = nullptr) {
  return forward(Family::kSimpleGLA, in, out, opt, ws, s);
}
inline Status simple_gla_backward(const BackwardInputs& in, const BackwardOutputs& out,
                                  const Options& opt, Workspace ws = {}, Stream s = nullptr) {
  return backward(Family::kSimpleGLA, in, out, opt, ws, s);
}

// ---------------------------------------------------------------- decode (serving)
// The recurrent form for short per-sequence lengths (T = 1 per generated token, up to ~16 for
// speculative drafts): one pass over each state, no workspace, no allocation and no host
// synchronisation, so a whole decode step can be captured in a CUDA graph. FLA's
// fused_recurrent_* semantics (SPEC.md, "Decode / serving"); all four families.
//
//   q, k, v, g, beta, A_log, dt_bias, g_gamma, cu_seqlens: as in ForwardInputs, except that
//                 beta may also be per value channel, [B, T, HV, V], and that with CUDA
//                 tensors cu_seqlens_host is optional (without it the device reads and checks
//                 cu_seqlens itself, see DecodeStatus).
//   state         optional. Without ssm_state_indices: the initial states, [N, HV, K, V].
//                 With ssm_state_indices: a pool of P slots, [P, HV, K, V]. float32 or bfloat16
//                 (arithmetic is float32 either way); [.., V, K] with state_v_first. The three
//                 inner dims must be dense; the slot stride (dim 0) may be larger (a view into
//                 an engine's cache).
//   ssm_state_indices  optional int32/int64, [N] or [N, T_max] (per token: speculative decoding).
//                 Sequence n starts from pool[idx[n, a_n - 1]] where a_n = num_accepted_tokens[n]
//                 if given, else 1 (idx[n] for the 1-D form). The 1-D form writes the final
//                 state back to pool[idx[n]] (inplace_final_state) or to final_state[n]; the
//                 per-token form writes the state after token t to pool[idx[n, t]] (in place
//                 only). A negative index marks padding: the read slot negative skips the
//                 sequence (its o rows are set to 0, no state is written); a negative write slot
//                 skips that write. Slots must be distinct across sequences (a repeat races).
//   num_accepted_tokens  optional int32/int64 [N], in [1, T_max]; needs the per-token form.
//   inplace_final_state  write the new states into `state` (the pool) instead of final_state.
struct DecodeInputs {
  TensorView q, k, v;
  TensorView g;
  TensorView g_gamma;
  TensorView beta;
  TensorView A_log;
  TensorView dt_bias;
  TensorView state;
  TensorView ssm_state_indices;
  TensorView num_accepted_tokens;
  TensorView cu_seqlens;
  TensorView cu_seqlens_host;
  bool inplace_final_state = false;
};

// Flags a decode call raises, OR-ed into DecodeOutputs::status (on the device for CUDA, where
// they can only be seen without a host synchronisation). A flagged sequence is skipped: nothing
// outside the pool is read or written, its o rows are 0 (or, with a bad cu_seqlens, whatever o held).
enum DecodeStatus : int32_t {
  kDecodeOk = 0,
  kDecodeIndexOutOfRange = 1,     // a state index >= P (or a slot past the pool)
  kDecodeBadAcceptedTokens = 2,   // num_accepted_tokens[n] outside [1, T_max]
  kDecodeSequenceTooLong = 4,     // a sequence longer than the per-token index row T_max
  kDecodeBadCuSeqlens = 8,        // device cu_seqlens not non-decreasing within [0, total tokens]
};

//   o             [B, T, HV, V] in v's dtype.
//   final_state   optional [N, HV, K, V] (state_v_first: [N, HV, V, K]), float32 or bfloat16;
//                 not with inplace_final_state.
//   status        optional int32 [1] in the inputs' memory: the call ORs DecodeStatus flags into
//                 it (the caller zeroes it once and checks it when convenient). On the CPU a
//                 condition that would raise a flag is refused as an error instead.
struct DecodeOutputs {
  TensorView o;
  TensorView final_state;
  TensorView status;
};

// Longest per-sequence length the recurrent path is meant for; longer sequences still compute
// the right result (chunked is faster there: the Python functions switch by length).
constexpr int64_t kDecodeMaxTokens = 16;

Status decode(Family family, const DecodeInputs& in, const DecodeOutputs& out, const Options& opt,
              Stream stream = nullptr);
inline Status kda_decode(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt,
                         Stream s = nullptr) {
  return decode(Family::kKDA, in, out, opt, s);
}
inline Status gdn_decode(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt,
                         Stream s = nullptr) {
  return decode(Family::kGDN, in, out, opt, s);
}

// ---- float64 token-by-token evaluation of the recurrence (SPEC.md), the ground truth every
// backend is tested against. CPU tensors only; outputs follow the rules of forward()/backward()
// (o and each gradient in the dtype of its input; states float32 or float64).
Status reference_forward(Family family, const ForwardInputs& in, const ForwardOutputs& out,
                         const Options& opt);
Status reference_backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                          const Options& opt);

// Whether this build has the CUDA backend and a usable GPU is present.
bool cuda_available();
const char* version();

}  // namespace linattn
