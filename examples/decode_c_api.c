/* A serving step through the C ABI: KDA decode, one token for each of 3 sequences, states in a
 * pool of 5 slots updated in place (sequence 1 is padding: slot -1). Checks o and the pool against
 * the recurrence written out below. Runs on the CPU; with the argument "cuda" (and a CUDA build
 * with a GPU) the same step on device memory and the default stream.
 *
 *   S' = Diag(exp(g)) S;  u = beta (v - S'^T k);  S = S' + k u^T;  o = scale S^T q   */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linattn/linattn.h"
#ifdef LINATTN_EXAMPLE_CUDA
#include <cuda_runtime.h>
#endif

enum { N = 3, H = 2, K = 16, V = 16, P = 5 };

static float frand(unsigned* s) {
  *s = *s * 1664525u + 1013904223u;
  return ((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

static linattn_tensor tensor(void* data, int dtype, int ndim, const int64_t* shape, int device_type) {
  linattn_tensor t = linattn_absent_tensor();
  int64_t stride = 1;
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  for (int i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  t.device_type = device_type;
  return t;
}

int main(int argc, char** argv) {
  const int on_cuda = argc > 1 && strcmp(argv[1], "cuda") == 0;
  static float q[N * H * K], k[N * H * K], v[N * H * V], g[N * H * K], beta[N * H], pool[P * H * K * V];
  static float o[N * H * V], pool_ref[P * H * K * V], o_ref[N * H * V];
  const int32_t slots[N] = {3, -1, 0};
  unsigned seed = 7;
  for (int i = 0; i < N * H * K; ++i) q[i] = frand(&seed), k[i] = frand(&seed), g[i] = -0.05f + 0.04f * frand(&seed);
  for (int i = 0; i < N * H * V; ++i) v[i] = frand(&seed), o[i] = NAN;
  for (int i = 0; i < N * H; ++i) beta[i] = 0.5f + frand(&seed);
  for (int i = 0; i < P * H * K * V; ++i) pool[i] = frand(&seed);
  memcpy(pool_ref, pool, sizeof pool);

  /* the expected result, token by token */
  const float scale = 1.0f / sqrtf((float)K);
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < H; ++h) {
      float* S = pool_ref + ((size_t)(slots[n] < 0 ? 0 : slots[n]) * H + h) * K * V;
      const float* qn = q + (n * H + h) * K;
      const float* kn = k + (n * H + h) * K;
      float* on = o_ref + (n * H + h) * V;
      if (slots[n] < 0) { for (int j = 0; j < V; ++j) on[j] = 0.0f; continue; }
      for (int i = 0; i < K; ++i)
        for (int j = 0; j < V; ++j) S[i * V + j] *= expf(g[(n * H + h) * K + i]);
      for (int j = 0; j < V; ++j) {
        float ks = 0.0f;
        for (int i = 0; i < K; ++i) ks += kn[i] * S[i * V + j];
        const float u = beta[n * H + h] * (v[(n * H + h) * V + j] - ks);
        for (int i = 0; i < K; ++i) S[i * V + j] += kn[i] * u;
      }
      for (int j = 0; j < V; ++j) {
        float acc = 0.0f;
        for (int i = 0; i < K; ++i) acc += scale * qn[i] * S[i * V + j];
        on[j] = acc;
      }
    }
  }

  /* the same step through linattn */
  void *dq = q, *dk = k, *dv = v, *dg = g, *db = beta, *dpool = pool, *dslots = (void*)slots, *dout = o;
  int dev = LINATTN_CPU;
#ifdef LINATTN_EXAMPLE_CUDA
  if (on_cuda) {
    void** bufs[] = {&dq, &dk, &dv, &dg, &db, &dpool, &dslots, &dout};
    const size_t sizes[] = {sizeof q, sizeof k, sizeof v, sizeof g, sizeof beta, sizeof pool, sizeof slots, sizeof o};
    for (int i = 0; i < 8; ++i) {
      const void* host = *bufs[i];
      if (cudaMalloc(bufs[i], sizes[i]) != cudaSuccess) { printf("no GPU: skipped\n"); return 0; }
      cudaMemcpy(*bufs[i], host, sizes[i], cudaMemcpyHostToDevice);
    }
    dev = LINATTN_CUDA;
  }
#else
  if (on_cuda) { printf("built without CUDA: skipped\n"); return 0; }
#endif
  const int64_t s_qk[] = {N, 1, H, K}, s_v[] = {N, 1, H, V}, s_b[] = {N, 1, H}, s_pool[] = {P, H, K, V}, s_n[] = {N};
  linattn_decode_inputs in;
  linattn_decode_outputs out;
  linattn_decode_inputs_init(&in);
  linattn_decode_outputs_init(&out);
  in.q = tensor(dq, LINATTN_FLOAT32, 4, s_qk, dev);
  in.k = tensor(dk, LINATTN_FLOAT32, 4, s_qk, dev);
  in.v = tensor(dv, LINATTN_FLOAT32, 4, s_v, dev);
  in.g = tensor(dg, LINATTN_FLOAT32, 4, s_qk, dev);
  in.beta = tensor(db, LINATTN_FLOAT32, 3, s_b, dev);
  in.state = tensor(dpool, LINATTN_FLOAT32, 4, s_pool, dev);
  in.ssm_state_indices = tensor(dslots, LINATTN_INT32, 1, s_n, dev);
  in.inplace_final_state = 1;
  out.o = tensor(dout, LINATTN_FLOAT32, 4, s_v, dev);
  linattn_options opt = linattn_default_options();
  char err[512];
  const int rc = linattn_decode(LINATTN_KDA, &in, &out, &opt, NULL, err, sizeof err);
  if (rc != LINATTN_OK) { fprintf(stderr, "linattn_decode failed (%d): %s\n", rc, err); return 1; }
#ifdef LINATTN_EXAMPLE_CUDA
  if (on_cuda) {
    cudaMemcpy(o, dout, sizeof o, cudaMemcpyDeviceToHost);
    cudaMemcpy(pool, dpool, sizeof pool, cudaMemcpyDeviceToHost);
  }
#endif
  double eo = 0, ro = 0, ep = 0, rp = 0;
  for (int i = 0; i < N * H * V; ++i) eo += (o[i] - o_ref[i]) * (o[i] - o_ref[i]), ro += o_ref[i] * o_ref[i];
  for (int i = 0; i < P * H * K * V; ++i) ep += (pool[i] - pool_ref[i]) * (pool[i] - pool_ref[i]), rp += pool_ref[i] * pool_ref[i];
  const double err_o = sqrt(eo / ro), err_p = sqrt(ep / rp);
  printf("decode (%s): o rel err %.2e, pool rel err %.2e\n", on_cuda ? "cuda" : "cpu", err_o, err_p);
  return err_o < 2e-3 && err_p < 2e-3 && !isnan(err_o) ? 0 : 1;
}
