/* linattn C ABI: a thin, stable layer over the C++ API (linattn.hpp) for other languages and
 * inference engines. Same semantics: caller-allocated outputs and workspace, validation first,
 * nothing written on error. Every call returns a linattn_status_code; on failure the message is
 * copied into `err` (when err_len > 0). */
#ifndef LINATTN_LINATTN_H_
#define LINATTN_LINATTN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum linattn_dtype {
  LINATTN_FLOAT16 = 0,
  LINATTN_BFLOAT16 = 1,
  LINATTN_FLOAT32 = 2,
  LINATTN_FLOAT64 = 3,
  LINATTN_INT32 = 4,
  LINATTN_INT64 = 5,
  LINATTN_UINT8 = 6
};
enum linattn_device_type { LINATTN_CPU = 1, LINATTN_CUDA = 2 };
enum linattn_family { LINATTN_SIMPLE_GLA = 0, LINATTN_GLA = 1, LINATTN_GDN = 2, LINATTN_KDA = 3 };
enum linattn_status_code {
  LINATTN_OK = 0,
  LINATTN_INVALID_ARGUMENT = 1,
  LINATTN_NOT_SUPPORTED = 2,
  LINATTN_WORKSPACE_TOO_SMALL = 3,
  LINATTN_BACKEND_ERROR = 4
};

#define LINATTN_MAX_DIMS 6

/* ndim < 0: absent (optional argument not given). Strides in elements. */
typedef struct linattn_tensor {
  void* data;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[LINATTN_MAX_DIMS];
  int64_t strides[LINATTN_MAX_DIMS];
  int32_t device_type;
  int32_t device_index;
} linattn_tensor;

/* linattn::BackwardPrecision (linattn.hpp): how the CUDA backward of KDA / GDN computes. */
enum linattn_backward_precision {
  LINATTN_BACKWARD_AUTO = 0,   /* default: split for 16-bit inputs, float32 with A_log / dt_bias or K = 256 */
  LINATTN_BACKWARD_SPLIT = 1,  /* 16-bit with hi + lo halves where accuracy needs them */
  LINATTN_BACKWARD_FAST16 = 2, /* 16-bit alone: fastest, dbeta / gate gradients can miss SPEC */
  LINATTN_BACKWARD_FLOAT32 = 3 /* float32 compute (see linattn.hpp) */
};

typedef struct linattn_options {
  int32_t has_scale; /* 0: scale = K ** -0.5 */
  double scale;
  int32_t use_qk_l2norm_in_kernel;
  int32_t use_beta_sigmoid_in_kernel;
  int32_t allow_neg_eigval;
  int32_t use_gate_in_kernel;
  int32_t safe_gate;
  int32_t has_lower_bound;
  float lower_bound;
  int32_t state_v_first;
  int32_t disable_recompute; /* forward_workspace_size: sized for a forward that fills `saved` (alone) */
  int32_t backward_precision; /* a linattn_backward_precision; forward (saved buffer) and backward alike */
  int32_t keep_chunk_local; /* GLA / simple GLA on CUDA: `saved` holds the chunk-local intermediates and the chunk states (linattn.hpp) */
} linattn_options;

typedef struct linattn_forward_inputs {
  linattn_tensor q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_host;
} linattn_forward_inputs;

typedef struct linattn_forward_outputs {
  linattn_tensor o, final_state, h, saved;
} linattn_forward_outputs;

typedef struct linattn_backward_inputs {
  linattn_forward_inputs fwd;
  linattn_tensor d_o, dht, saved;
} linattn_backward_inputs;

typedef struct linattn_backward_outputs {
  linattn_tensor dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0;
} linattn_backward_outputs;

/* An absent tensor / default options, to start from. */
linattn_tensor linattn_absent_tensor(void);
linattn_options linattn_default_options(void);
void linattn_forward_inputs_init(linattn_forward_inputs* in);
void linattn_forward_outputs_init(linattn_forward_outputs* out);
void linattn_backward_inputs_init(linattn_backward_inputs* in);
void linattn_backward_outputs_init(linattn_backward_outputs* out);

int linattn_forward_workspace_size(int family, const linattn_forward_inputs* in,
                                   const linattn_options* opt, size_t* bytes, char* err, size_t err_len);
int linattn_backward_workspace_size(int family, const linattn_backward_inputs* in,
                                    const linattn_options* opt, size_t* bytes, char* err, size_t err_len);
int linattn_saved_bytes(int family, const linattn_forward_inputs* in, const linattn_options* opt,
                        size_t* bytes, char* err, size_t err_len);
int linattn_forward(int family, const linattn_forward_inputs* in, const linattn_forward_outputs* out,
                    const linattn_options* opt, void* workspace, size_t workspace_bytes, void* stream,
                    char* err, size_t err_len);
int linattn_backward(int family, const linattn_backward_inputs* in, const linattn_backward_outputs* out,
                     const linattn_options* opt, void* workspace, size_t workspace_bytes, void* stream,
                     char* err, size_t err_len);

/* ---- decode (serving): the recurrent form for short per-sequence lengths, state pools and
 * speculative decoding; no workspace, no host synchronisation (CUDA-graph capturable). Semantics:
 * linattn.hpp, "decode". `state` is the pool [P, HV, K, V] (float32 or bfloat16) or the initial
 * states [N, HV, K, V]; `status` (optional int32 [1] in the inputs' memory) receives the
 * LINATTN_DECODE_* flags of sequences only the device could see were bad (they are skipped). */
enum linattn_decode_status {
  LINATTN_DECODE_OK = 0,
  LINATTN_DECODE_INDEX_OUT_OF_RANGE = 1,
  LINATTN_DECODE_BAD_ACCEPTED_TOKENS = 2,
  LINATTN_DECODE_SEQUENCE_TOO_LONG = 4,
  LINATTN_DECODE_BAD_CU_SEQLENS = 8
};

typedef struct linattn_decode_inputs {
  linattn_tensor q, k, v, g, g_gamma, beta, A_log, dt_bias, state, ssm_state_indices, num_accepted_tokens,
      cu_seqlens, cu_seqlens_host;
  int32_t inplace_final_state;
} linattn_decode_inputs;

typedef struct linattn_decode_outputs {
  linattn_tensor o, final_state, status;
} linattn_decode_outputs;

void linattn_decode_inputs_init(linattn_decode_inputs* in);
void linattn_decode_outputs_init(linattn_decode_outputs* out);
int linattn_decode(int family, const linattn_decode_inputs* in, const linattn_decode_outputs* out,
                   const linattn_options* opt, void* stream, char* err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* LINATTN_LINATTN_H_ */
