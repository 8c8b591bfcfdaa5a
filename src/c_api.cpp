// The C ABI (include/linattn/linattn.h): converts the C structs to the C++ ones and calls the
// C++ API. No logic of its own beyond the conversion.
#include "linattn/linattn.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>

#include "linattn/linattn.hpp"

namespace {

using namespace linattn;

static_assert(LINATTN_MAX_DIMS == kMaxDims, "C and C++ tensor ranks must agree");
static_assert(int{LINATTN_DECODE_INDEX_OUT_OF_RANGE} == int{kDecodeIndexOutOfRange} &&
                  int{LINATTN_DECODE_BAD_ACCEPTED_TOKENS} == int{kDecodeBadAcceptedTokens} &&
                  int{LINATTN_DECODE_SEQUENCE_TOO_LONG} == int{kDecodeSequenceTooLong} &&
                  int{LINATTN_DECODE_BAD_CU_SEQLENS} == int{kDecodeBadCuSeqlens},
              "C and C++ decode status flags must agree");
static_assert(LINATTN_BACKWARD_AUTO == static_cast<int>(BackwardPrecision::kAuto) &&
                  LINATTN_BACKWARD_SPLIT == static_cast<int>(BackwardPrecision::kSplit) &&
                  LINATTN_BACKWARD_FAST16 == static_cast<int>(BackwardPrecision::kFast16) &&
                  LINATTN_BACKWARD_FLOAT32 == static_cast<int>(BackwardPrecision::kFloat32),
              "C and C++ backward precisions must agree");

int to_c(const Status& s, char* err, size_t err_len) {
  if (err && err_len > 0) {
    const size_t n = std::min(err_len - 1, s.message.size());
    std::memcpy(err, s.message.data(), n);
    err[n] = '\0';
  }
  return static_cast<int>(s.code);
}

TensorView view(const linattn_tensor& t) {
  TensorView v;
  if (t.ndim < 0) return v;
  v.data = t.data;
  v.dtype = static_cast<DType>(t.dtype);
  // A rank above kMaxDims becomes a rank-kMaxDims view, which no argument accepts (max rank 5).
  v.ndim = std::min<int32_t>(t.ndim, kMaxDims);
  for (int i = 0; i < kMaxDims; ++i) {
    v.shape[i] = t.shape[i];
    v.strides[i] = t.strides[i];
  }
  v.device = Device{static_cast<DeviceType>(t.device_type), t.device_index};
  return v;
}

Options options(const linattn_options* o) {
  Options r;
  if (!o) return r;
  if (o->has_scale) r.scale = o->scale;
  r.use_qk_l2norm_in_kernel = o->use_qk_l2norm_in_kernel != 0;
  r.use_beta_sigmoid_in_kernel = o->use_beta_sigmoid_in_kernel != 0;
  r.allow_neg_eigval = o->allow_neg_eigval != 0;
  r.use_gate_in_kernel = o->use_gate_in_kernel != 0;
  r.safe_gate = o->safe_gate != 0;
  if (o->has_lower_bound) r.lower_bound = o->lower_bound;
  r.state_v_first = o->state_v_first != 0;
  r.disable_recompute = o->disable_recompute != 0;
  r.keep_chunk_local = o->keep_chunk_local != 0;
  r.backward_precision = static_cast<BackwardPrecision>(o->backward_precision);  // range: validation
  return r;
}

// The token inputs forward and decode share (same names in the C and C++ structs).
template <class R, class C>
void token_inputs(R& r, const C& in) {
  r.q = view(in.q);
  r.k = view(in.k);
  r.v = view(in.v);
  r.g = view(in.g);
  r.g_gamma = view(in.g_gamma);
  r.beta = view(in.beta);
  r.A_log = view(in.A_log);
  r.dt_bias = view(in.dt_bias);
  r.cu_seqlens = view(in.cu_seqlens);
  r.cu_seqlens_host = view(in.cu_seqlens_host);
}

ForwardInputs inputs(const linattn_forward_inputs& in) {
  ForwardInputs r;
  token_inputs(r, in);
  r.initial_state = view(in.initial_state);
  return r;
}

DecodeInputs inputs(const linattn_decode_inputs& in) {
  DecodeInputs r;
  token_inputs(r, in);
  r.state = view(in.state);
  r.ssm_state_indices = view(in.ssm_state_indices);
  r.num_accepted_tokens = view(in.num_accepted_tokens);
  r.inplace_final_state = in.inplace_final_state != 0;
  return r;
}

BackwardInputs inputs(const linattn_backward_inputs& in) {
  BackwardInputs r;
  r.fwd = inputs(in.fwd);
  r.d_o = view(in.d_o);
  r.dht = view(in.dht);
  r.saved = view(in.saved);
  return r;
}

template <typename F>
int guarded(char* err, size_t err_len, F&& f) {
  try {
    return to_c(f(), err, err_len);
  } catch (const std::exception& e) {
    return to_c(Status{StatusCode::kBackendError, e.what()}, err, err_len);
  } catch (...) {
    return to_c(Status{StatusCode::kBackendError, "unknown exception"}, err, err_len);
  }
}

Status null_arg(const char* what) { return Status::Invalid(std::string(what) + " is a null pointer"); }

bool valid_family(int family) { return family >= 0 && family <= 3; }

}  // namespace

extern "C" {

linattn_tensor linattn_absent_tensor(void) {
  linattn_tensor t;
  std::memset(&t, 0, sizeof(t));
  t.ndim = -1;
  t.device_type = LINATTN_CPU;
  return t;
}

linattn_options linattn_default_options(void) {
  linattn_options o;
  std::memset(&o, 0, sizeof(o));
  return o;
}

void linattn_forward_inputs_init(linattn_forward_inputs* in) {
  linattn_tensor* t = &in->q;
  for (size_t i = 0; i < sizeof(*in) / sizeof(linattn_tensor); ++i) t[i] = linattn_absent_tensor();
}
void linattn_forward_outputs_init(linattn_forward_outputs* out) {
  linattn_tensor* t = &out->o;
  for (size_t i = 0; i < sizeof(*out) / sizeof(linattn_tensor); ++i) t[i] = linattn_absent_tensor();
}
void linattn_backward_inputs_init(linattn_backward_inputs* in) {
  linattn_forward_inputs_init(&in->fwd);
  in->d_o = in->dht = in->saved = linattn_absent_tensor();
}
void linattn_backward_outputs_init(linattn_backward_outputs* out) {
  linattn_tensor* t = &out->dq;
  for (size_t i = 0; i < sizeof(*out) / sizeof(linattn_tensor); ++i) t[i] = linattn_absent_tensor();
}

int linattn_forward_workspace_size(int family, const linattn_forward_inputs* in,
                                   const linattn_options* opt, size_t* bytes, char* err, size_t err_len) {
  return guarded(err, err_len, [&]() -> Status {
    if (!in || !bytes) return null_arg("inputs or bytes");
    if (!valid_family(family)) return Status::Invalid("unknown family");
    return forward_workspace_size(static_cast<Family>(family), inputs(*in), options(opt), bytes);
  });
}

int linattn_backward_workspace_size(int family, const linattn_backward_inputs* in,
                                    const linattn_options* opt, size_t* bytes, char* err, size_t err_len) {
  return guarded(err, err_len, [&]() -> Status {
    if (!in || !bytes) return null_arg("inputs or bytes");
    if (!valid_family(family)) return Status::Invalid("unknown family");
    return backward_workspace_size(static_cast<Family>(family), inputs(*in), options(opt), bytes);
  });
}

int linattn_saved_bytes(int family, const linattn_forward_inputs* in, const linattn_options* opt,
                        size_t* bytes, char* err, size_t err_len) {
  return guarded(err, err_len, [&]() -> Status {
    if (!in || !bytes) return null_arg("inputs or bytes");
    if (!valid_family(family)) return Status::Invalid("unknown family");
    return saved_bytes(static_cast<Family>(family), inputs(*in), options(opt), bytes);
  });
}

int linattn_forward(int family, const linattn_forward_inputs* in, const linattn_forward_outputs* out,
                    const linattn_options* opt, void* workspace, size_t workspace_bytes, void* stream,
                    char* err, size_t err_len) {
  return guarded(err, err_len, [&]() -> Status {
    if (!in || !out) return null_arg("inputs or outputs");
    if (!valid_family(family)) return Status::Invalid("unknown family");
    ForwardOutputs o;
    o.o = view(out->o);
    o.final_state = view(out->final_state);
    o.h = view(out->h);
    o.saved = view(out->saved);
    return forward(static_cast<Family>(family), inputs(*in), o, options(opt),
                   Workspace{workspace, workspace_bytes, std::nullopt}, stream);
  });
}

int linattn_backward(int family, const linattn_backward_inputs* in, const linattn_backward_outputs* out,
                     const linattn_options* opt, void* workspace, size_t workspace_bytes, void* stream,
                     char* err, size_t err_len) {
  return guarded(err, err_len, [&]() -> Status {
    if (!in || !out) return null_arg("inputs or outputs");
    if (!valid_family(family)) return Status::Invalid("unknown family");
    BackwardOutputs o;
    o.dq = view(out->dq);
    o.dk = view(out->dk);
    o.dv = view(out->dv);
    o.dg = view(out->dg);
    o.dg_gamma = view(out->dg_gamma);
    o.dbeta = view(out->dbeta);
    o.dA_log = view(out->dA_log);
    o.ddt_bias = view(out->ddt_bias);
    o.dh0 = view(out->dh0);
    return backward(static_cast<Family>(family), inputs(*in), o, options(opt),
                    Workspace{workspace, workspace_bytes, std::nullopt}, stream);
  });
}

void linattn_decode_inputs_init(linattn_decode_inputs* in) {
  linattn_tensor* t = &in->q;
  for (size_t i = 0; i < offsetof(linattn_decode_inputs, inplace_final_state) / sizeof(linattn_tensor); ++i)
    t[i] = linattn_absent_tensor();
  in->inplace_final_state = 0;
}
void linattn_decode_outputs_init(linattn_decode_outputs* out) {
  out->o = out->final_state = out->status = linattn_absent_tensor();
}

int linattn_decode(int family, const linattn_decode_inputs* in, const linattn_decode_outputs* out,
                   const linattn_options* opt, void* stream, char* err, size_t err_len) {
  return guarded(err, err_len, [&]() -> Status {
    if (!in || !out) return null_arg("inputs or outputs");
    if (!valid_family(family)) return Status::Invalid("unknown family");
    DecodeOutputs o;
    o.o = view(out->o);
    o.final_state = view(out->final_state);
    o.status = view(out->status);
    return decode(static_cast<Family>(family), inputs(*in), o, options(opt), stream);
  });
}

}  // extern "C"
