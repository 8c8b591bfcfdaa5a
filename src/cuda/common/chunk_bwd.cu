// Host side of the CUDA delta-rule backward (KDA, GDN) and its token-parallel kernels: the path
// choice (Options::backward_precision, Problem::token_replay), input preparation (float32 copies of 16-bit inputs; l2norm, gate, beta),
// the final fixed-order reductions and the transforms' backward. The token-recurrence kernels are
// in chunk_bwd_token.cu; design in chunk_bwd.cuh.
#include "cuda/common/chunk_bwd.hpp"
#include "cuda/common/host_util.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/gate.cuh"
#include "cuda/common/chunk_map.hpp"
#include "cuda/common/mma.cuh"
#include "cuda/config/backward_form.hpp"
#include "cuda/config/heuristics.hpp"
#include "cuda/config/limits.hpp"
#include "cuda/host/saved_buffer.hpp"
#include "cuda/host/stage_timer.hpp"

namespace linattn::cuda {
namespace bwd {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxKPerLane = 8;  // K <= 256

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(kFull, x, o);
  return x;  // identical in every lane (commutative pairwise sums)
}

struct GateArgs {
  int kind;  // 0 identity, 1 softplus, 2 lower bound
  float lower_bound;
  int has_alog, has_dtb;
  const void* A_log;
  int alog_dt;
  const void* dt_bias;
  int dtb_dt;
};

// The gate transform (forward and backward: gate.cuh) with this call's arguments.
__device__ __forceinline__ float gate_fwd(const GateArgs& ga, float raw, float dtb, float alog) {
  return gate::floor_gate(gate::transform_raw(ga.kind, ga.has_alog, ga.lower_bound, raw, dtb, alog));
}

// ---- 1a. q̂, k̂ (float32, l2-normalised when asked): one warp per (token, q/k head)
__global__ void prep_qk_kernel(const void* q, const void* k, int dt, float* qn, float* kn, int64_t rows, int K,
                               int l2) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t base = row * K;
  float xq[kMaxKPerLane], xk[kMaxKPerLane], sq = 0.f, sk = 0.f;
#pragma unroll
  for (int m = 0; m < kMaxKPerLane; ++m) {
    const int c = lane + 32 * m;
    xq[m] = c < K ? kern::load_any(q, dt, base + c) : 0.f;
    xk[m] = c < K ? kern::load_any(k, dt, base + c) : 0.f;
    sq += xq[m] * xq[m];
    sk += xk[m] * xk[m];
  }
  float rq = 1.f, rk = 1.f;
  if (l2) {
    rq = rsqrtf(warp_sum(sq) + 1e-6f);
    rk = rsqrtf(warp_sum(sk) + 1e-6f);
  }
#pragma unroll
  for (int m = 0; m < kMaxKPerLane; ++m) {
    const int c = lane + 32 * m;
    if (c < K) {
      qn[base + c] = xq[m] * rq;
      kn[base + c] = xk[m] * rk;
    }
  }
}

// ---- 1b. e = exp(g̃) and β̃: one warp per (token, value head)
__global__ void prep_gate_kernel(const void* g, int g_dt, int has_g, const void* beta, int beta_dt, int beta_mode,
                                 GateArgs ga, float* e, float* bt, int64_t rows, int HV, int KG) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int hv = static_cast<int>(row % HV);
  const float alog = (ga.kind != 0 && ga.has_alog) ? kern::load_any(ga.A_log, ga.alog_dt, hv) : 0.f;
  for (int c = lane; c < KG; c += 32) {
    float val = 1.f;
    if (has_g) {
      const float raw = kern::load_any(g, g_dt, row * KG + c);
      const float dtb = (ga.kind != 0 && ga.has_dtb) ? kern::load_any(ga.dt_bias, ga.dtb_dt, static_cast<int64_t>(hv) * KG + c) : 0.f;
      val = expf(gate_fwd(ga, raw, dtb, alog));
    }
    e[row * KG + c] = val;
  }
  if (lane == 0) {
    float b = kern::load_any(beta, beta_dt, row);
    if (beta_mode != 0) b = (beta_mode == 2 ? 2.f : 1.f) * gate::sigmoid_precise(b);
    bt[row] = b;
  }
}

// ---- 4a. dq, dk: sum partials over splits and the G value heads in a fixed order, then the
// l2norm backward. One warp per (token, q/k head), four consecutive channels a lane (float4
// partials, 8- or 16-byte q, k, dq, dk accesses: K in {64, 128, 256}, tensors 16-byte aligned).
// q's and k's loads are issued together (one memory round trip for both, not one each). P: the
// partials' element type (bfloat16 from pass 2 on bfloat16 inputs, PartialQK; float from the
// other inputs and the token replay).
template <class T, class P>
__global__ void finish_qk_kernel(const P* pq, const P* pk, const T* q, const T* k, T* dq, T* dk,
                                     int64_t tokens, int H, int G, int HV, int K, int NS, int l2) {
  constexpr int kIt = kMaxKPerLane / 4;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= tokens * H) return;
  const int64_t t = row / H;
  const int h = static_cast<int>(row % H);
  float acc[2][kIt][4], xv[2][kIt][4];
#pragma unroll
  for (int w = 0; w < 2; ++w)
#pragma unroll
    for (int it = 0; it < kIt; ++it) {
      const int c = 4 * lane + 128 * it;
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[w][it][e] = xv[w][it][e] = 0.f;
      if (l2 && c < K) kern::load4<T>((w == 0 ? q : k) + row * K + c, xv[w][it]);
    }
  for (int gg = 0; gg < G; ++gg)
    for (int s = 0; s < NS; ++s) {
      const int64_t off = ((static_cast<int64_t>(s) * tokens + t) * HV + h * G + gg) * K;
#pragma unroll
      for (int w = 0; w < 2; ++w)
#pragma unroll
        for (int it = 0; it < kIt; ++it) {
          const int c = 4 * lane + 128 * it;
          if (c < K) {
            float v[4];
            kern::load4<P>((w == 0 ? pq : pk) + off + c, v);
            acc[w][it][0] += v[0]; acc[w][it][1] += v[1]; acc[w][it][2] += v[2]; acc[w][it][3] += v[3];
          }
        }
    }
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    if (l2) {
      float ss = 0.f;
#pragma unroll
      for (int it = 0; it < kIt; ++it)
#pragma unroll
        for (int e = 0; e < 4; ++e) ss += xv[w][it][e] * xv[w][it][e];
      const float rstd = rsqrtf(warp_sum(ss) + 1e-6f);
      float dot = 0.f;
#pragma unroll
      for (int it = 0; it < kIt; ++it)
#pragma unroll
        for (int e = 0; e < 4; ++e) dot += xv[w][it][e] * rstd * acc[w][it][e];
      dot = warp_sum(dot);
#pragma unroll
      for (int it = 0; it < kIt; ++it)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[w][it][e] = rstd * (acc[w][it][e] - xv[w][it][e] * rstd * dot);
    }
    T* out = w == 0 ? dq : dk;
#pragma unroll
    for (int it = 0; it < kIt; ++it) {
      const int c = 4 * lane + 128 * it;
      if (c < K) kern::store4<T>(out + row * K + c, acc[w][it]);
    }
  }
}

// ---- 4b. dg (through the gate transform), dβ (through the sigmoid), and the dA_log / d(raw g)
// contributions for the column sums, summed over each block of 8 tokens in token order (the rows
// the column sums read: an eighth of per-token ones).
// Vector gate (finish_gb_kernel): one warp per (token, value head), a CTA 8 consecutive tokens of
// one value head: grid (ceil(tokens / 8), HV).
// Scalar gate (finish_gb_scalar_kernel): one thread per (8-token block, value head), its 8
// tokens in turn. (A warp per token, as the vector gate's, spent 0.3 ms at the reference shape on
// 65 536 CTAs of one useful lane a warp.)
constexpr int kGbTokens = 8;
struct FinishGB {
  const float *pg, *pb;
  const void* g;
  int g_dt;
  void* dg;          // optional output, g's dtype
  float* draw;       // optional [ceil(tokens / 8)][HV][KG] (for ddt_bias)
  float* da;         // optional [ceil(tokens / 8)][HV] (for dA_log)
  const void* beta;
  int beta_dt, beta_mode;
  void* dbeta;       // optional output
  int64_t tokens;
  int HV, K, KG, NS;
  int pg_ld;  // floats per pg row (Partials::pg_ld): K, or 1 (KG = 1 only)
  int has_g;
  GateArgs ga;
  // simple GLA: g_gamma [HV] (gate = floor(g + g_gamma)) and, when its gradient is asked for, the
  // rows [ceil(tokens / 8)][HV] of dL/dg_gamma for the column sum (dgg_rows, null otherwise)
  const void* g_gamma = nullptr;
  int gg_dt = 2;
  float* dgg_rows = nullptr;
};

// g's element type in finish_gb: typed loads and stores (a dtype switch per element made ~40% of
// the kernel's instructions and pushed it past its 40 registers into local memory).
template <class GT>
__device__ __forceinline__ float gate_load(const GT* p) {
  if constexpr (std::is_same_v<GT, double>) return static_cast<float>(*p);
  else return kern::to_f(*p);
}
template <class GT>
__device__ __forceinline__ void gate_store(GT* p, float x) {
  if constexpr (std::is_same_v<GT, double>) *p = static_cast<double>(x);
  else *p = kern::from_f<GT>(x);
}

// FAST16: 16-bit inputs (their forward's gate transform is the fast one: gate::head_gate_bwd).
// NPL: channels a lane, ceil(K / 32) rounded up to 4 or 8 (the per-lane arrays' registers set the
// CTAs an SM, and this kernel runs at the pace of its resident warps). GT: g's (and dg's) type.
template <bool FAST16, int NPL, class GT>
__global__ void __launch_bounds__(32 * kGbTokens, NPL == 4 ? 6 : 1) finish_gb_kernel(const FinishGB p) {
  __shared__ float part[kGbTokens][NPL * 32 + 1];  // this block's rows: d(raw g), then da
  __shared__ float dtb_s[NPL * 32];                // the head's dt_bias, loaded once for 8 tokens
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hv = blockIdx.y;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * kGbTokens + warp;
  const bool live = token < p.tokens;
  const int64_t row = token * p.HV + hv;
  const int K = p.K;
  const int64_t prow = static_cast<int64_t>(blockIdx.x) * p.HV + hv;  // the block's partial row
  const bool sums = p.draw || p.da;
  const GateArgs& ga = p.ga;
  float d_row[NPL], da_row = 0.f;  // this warp's contributions (0 past the last token)
  float dgv[NPL], raw[NPL];
#pragma unroll
  for (int m = 0; m < NPL; ++m) d_row[m] = dgv[m] = raw[m] = 0.f;
  if (live && p.has_g) {  // every load of the row issued before any is used
    const GT* gsrc = static_cast<const GT*>(p.g) + row * K;
#pragma unroll
    for (int m = 0; m < NPL; ++m)
      if (lane + 32 * m < K) raw[m] = gate_load(gsrc + lane + 32 * m);
    for (int s = 0; s < p.NS; ++s) {  // channels innermost: the warp's loads in flight together
      const float* src = p.pg + (static_cast<int64_t>(s) * p.tokens * p.HV + row) * K;
#pragma unroll
      for (int m = 0; m < NPL; ++m)
        if (lane + 32 * m < K) dgv[m] += src[lane + 32 * m];
    }
  }
  if (p.has_g) {  // (uniform)
    for (int c = threadIdx.x; c < K; c += blockDim.x)
      dtb_s[c] = ga.has_dtb ? kern::load_any(ga.dt_bias, ga.dtb_dt, static_cast<int64_t>(hv) * K + c) : 0.f;
    __syncthreads();
  }
  if (live && p.has_g) {
    const float alog = (ga.kind != 0 && ga.has_alog) ? kern::load_any(ga.A_log, ga.alog_dt, hv) : 0.f;
    float da = 0.f;
    // the head's gate decided once (one branch a warp), the element loop without branches
    gate::HeadGate hg;
    hg.kind = ga.kind;
    hg.has_alog = ga.kind != 0 && ga.has_alog;
    hg.alog = alog;
    hg.ea = expf(alog);
    hg.lower_bound = ga.lower_bound;
    hg.gamma = 0.f;
    GT* dg = static_cast<GT*>(p.dg);
    gate::with_head_gate(hg, [&](auto kind, auto regular) {
#pragma unroll
      for (int m = 0; m < NPL; ++m) {
        const int c = lane + 32 * m;
        if (c < K) {
          const float d = gate::head_gate_bwd<decltype(kind)::value, decltype(regular)::value, FAST16>(
              hg, raw[m], dtb_s[c], dgv[m], &da);
          if (dg) gate_store(dg + row * K + c, d);
          d_row[m] = d;
        }
      }
    });
    da = warp_sum(da);
    da_row = da;
  }
  if (sums) {  // the block's 8 rows summed in warp order: its partial row
#pragma unroll
    for (int m = 0; m < NPL; ++m) part[warp][lane + 32 * m] = d_row[m];
    __syncthreads();
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kGbTokens; ++w) s += part[w][c];
      if (p.draw) p.draw[prow * K + c] = s;
    }
    __syncthreads();
    if (lane == 0) part[warp][0] = da_row;
    __syncthreads();
    if (p.da && threadIdx.x == 0) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kGbTokens; ++w) s += part[w][0];
      p.da[prow] = s;
    }
  }
  if (live && p.dbeta && lane == 0) {
    float s = 0.f;
    for (int sp = 0; sp < p.NS; ++sp) s += p.pb[static_cast<int64_t>(sp) * p.tokens * p.HV + row];
    float der = 1.f;
    if (p.beta_mode != 0) der = gate::beta_sigmoid_grad(p.beta_mode, kern::load_any(p.beta, p.beta_dt, row));
    stf(p.dbeta, p.beta_dt, row, s * der);
  }
}

__global__ void __launch_bounds__(256) finish_gb_scalar_kernel(const FinishGB p) {
  const int64_t HV = p.HV;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // = prow
  if (idx >= (p.tokens + kGbTokens - 1) / kGbTokens * HV) return;
  const int hv = static_cast<int>(idx % HV);
  const int64_t t0 = idx / HV * kGbTokens;
  const int n = static_cast<int>(p.tokens - t0 < kGbTokens ? p.tokens - t0 : kGbTokens);
  const GateArgs& ga = p.ga;
  gate::HeadGate hg;
  hg.kind = ga.kind;
  hg.has_alog = ga.kind != 0 && ga.has_alog;
  hg.alog = hg.has_alog ? kern::load_any(ga.A_log, ga.alog_dt, hv) : 0.f;
  hg.ea = expf(hg.alog);
  hg.lower_bound = ga.lower_bound;
  hg.gamma = p.g_gamma ? kern::load_any(p.g_gamma, p.gg_dt, hv) : 0.f;
  const float dtb = ga.has_dtb ? kern::load_any(ga.dt_bias, ga.dtb_dt, hv) : 0.f;
  const bool gate = p.has_g || p.g_gamma;
  float sd = 0.f, sa = 0.f;  // the block's row sums, token order
  gate::with_head_gate(hg, [&](auto kind, auto regular) {
    for (int i = 0; i < n; ++i) {
      const int64_t row = (t0 + i) * HV + hv;
      if (gate) {
        float dsum = 0.f;  // pg_ld = K: the token replay's per-channel terms
        for (int s = 0; s < p.NS; ++s) {
          const float* src = p.pg + (static_cast<int64_t>(s) * p.tokens * HV + row) * p.pg_ld;
          for (int c = 0; c < p.pg_ld; ++c) dsum += src[c];
        }
        const float raw = p.has_g ? kern::load_any(p.g, p.g_dt, row) : 0.f;
        float da = 0.f;
        const float d = gate::head_gate_bwd<decltype(kind)::value, decltype(regular)::value>(hg, raw, dtb, dsum, &da);
        if (p.dg) stf(p.dg, p.g_dt, row, d);
        sd += d;  // for ddt_bias and for dg_gamma (g_gamma enters every token's gate like g)
        sa += da;
      }
      if (p.dbeta) {
        float s = 0.f;
        for (int sp = 0; sp < p.NS; ++sp) s += p.pb[static_cast<int64_t>(sp) * p.tokens * HV + row];
        float der = 1.f;
        if (p.beta_mode != 0) der = gate::beta_sigmoid_grad(p.beta_mode, kern::load_any(p.beta, p.beta_dt, row));
        stf(p.dbeta, p.beta_dt, row, s * der);
      }
    }
  });
  if (p.draw) p.draw[idx] = sd;
  if (p.dgg_rows) p.dgg_rows[idx] = sd;
  if (p.da) p.da[idx] = sa;
}

// ---- 4c. out[col] = sum over rows of buf[row][col] (the per-token rows of ddt_bias, dA_log,
// dg_gamma), in an order fixed by the shape alone: rows in blocks of kColRows, one CTA per (32
// columns, row block) summing 8 row groups in order into part[row block][col], then each column's
// partials in order. (One CTA per 32 columns over every row was latency-bound: dA_log's 32
// columns on one SM.)
constexpr int kColRows = 128;
// Grid: row blocks in x (up to 2^31 - 1), column blocks of 32 in y (strided past 65535).
__global__ void colsum_part_kernel(const float* buf, int64_t rows, int C, float* part) {
  __shared__ float sm[8][33];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kColRows, r1 = min(rows, r0 + kColRows);
  for (int cb = blockIdx.y; cb * 32 < C; cb += gridDim.y) {
    const int col = cb * 32 + tx;
    float acc = 0.f;
    if (col < C)
#pragma unroll 4
      for (int64_t r = r0 + ty; r < r1; r += 8) acc += buf[r * C + col];
    sm[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && col < C) {
      float s = 0.f;
      for (int y = 0; y < 8; ++y) s += sm[y][tx];
      part[static_cast<int64_t>(blockIdx.x) * C + col] = s;
    }
    __syncthreads();
  }
}
__global__ void colsum_final_kernel(const float* part, int nb, int C, void* out, int out_dt) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  float s = 0.f;
  for (int b = 0; b < nb; ++b) s += part[static_cast<int64_t>(b) * C + col];
  stf(out, out_dt, col, s);
}
// scratch: ceil(rows / kColRows) x C floats, not overlapping buf
cudaError_t colsum(const float* buf, int64_t rows, int C, float* scratch, void* out, int out_dt, cudaStream_t st) {
  const int nb = static_cast<int>((rows + kColRows - 1) / kColRows);
  if (nb > 0) colsum_part_kernel<<<dim3(nb, std::min((C + 31) / 32, 65535)), 256, 0, st>>>(buf, rows, C, scratch);
  colsum_final_kernel<<<(C + 255) / 256, 256, 0, st>>>(scratch, nb, C, out, out_dt);
  return cudaGetLastError();
}


using config::align_up;
using config::kAlign;
using config::kMaxSmem;

struct Plan {
  int NV = 0, NS = 1, tps = 1, KG = 1;
  int64_t tokens = 0;
  std::size_t seqs = 0, qn = 0, kn = 0, e = 0, bt = 0, h = 0, pq = 0, pk = 0, pg = 0, pb = 0, draw = 0, da = 0,
              total = 0;
  explicit Plan(const detail::Problem& p) {
    NV = static_cast<int>(p.V / kVT);
    KG = p.vector_gate ? static_cast<int>(p.K) : 1;
    tokens = p.B * p.T;
    config::token_v_splits(NV, p.N * p.HV, &NS, &tps);
    const std::size_t T = static_cast<std::size_t>(tokens);
    const std::size_t qk = T * p.H * p.K * 4, tv = T * p.HV * p.K * 4, th = T * p.HV * 4;
    std::size_t o = 0;
    seqs = o; o = align_up(o + sizeof(SeqInfo) * std::max<int64_t>(p.N, 1));
    qn = o; o = align_up(o + qk);
    kn = o; o = align_up(o + qk);
    e = o; o = align_up(o + T * p.HV * KG * 4);
    bt = o; o = align_up(o + th);
    h = o; o = align_up(o + static_cast<std::size_t>(p.num_chunks) * p.HV * p.K * p.V * 4);
    pq = o; o = align_up(o + NS * tv);
    pk = o; o = align_up(o + NS * tv);
    pg = o; o = align_up(o + NS * tv);
    pb = o; o = align_up(o + NS * th);
    draw = o; o = align_up(o + T * p.HV * KG * 4);
    da = o; o = align_up(o + th);
    total = o;
  }
};

// The compute form (Compute, ComputeForm, compute_of): config/backward_form.hpp.
using config::Compute;
using config::compute_of;
using config::compute_name;

// What the compute form means for problem p's buffers.
struct ComputeForm : config::ComputeForm {
  ComputeForm(const detail::Problem& p, Compute compute) : config::ComputeForm(p.dtype, compute) {}
};

// The saved buffer (disable_recompute) and the front half's offsets: host/saved_buffer.hpp.
using host::FrontOffsets;
using host::kSavedHeaderBytes;
using host::SavedLayout;

// h in the caller's float64 (return_intermediate_states next to a saved buffer): from saved's float32.
__global__ void widen_states_kernel(const float* src, double* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// Workspace of the chunked (WY) backward, byte offsets. f32: computed in float32 (the kernels read
// 16-bit q, k, v, dO in place and convert them as they load: exact); otherwise in
// the 16-bit input type, with split's four low-half buffers. Dead buffers are reused: U is dead
// after chunk_state, so dY (pass 2 scratch) takes its place, and V_new's low half is written over
// U_lo as chunk_state reads it; W, Qg, KgT and Aqk are dead after pass 1, so the partials pq, pk,
// pg, pb take their places (the region is the larger of the two sets); draw (ddt_bias rows) and
// da (dA_log rows) take h's and dh's places after pass 2 (h >= draw: 64 V >= 64 tokens per
// block).
// With a saved buffer (`from_saved`) the front half's buffers (W .. V_new, SavedLayout) are the
// caller's and read-only: the workspace holds the rest, without the reuse of W's region; draw and
// da then take dh's and dN's places.
// At issue 5's reference shape (KDA, B=2, T=8192, H=HV=32, K=V=128: 8192 (chunk, head) blocks,
// 16384 tokens), MiB:
//   float32 compute: W/pq, U/dY, Qg/pk, KgT/pg 4 x 256 (pq, pk 128 each with bf16 inputs:
//     PartialQK); Aqk/pb, Ainv 2 x 128; gexp 4;
//     h/draw, dh/da 2 x 512; vnew, dN 2 x 256: 2820 MiB (2.75 GiB), whatever the input type
//     (16-bit inputs were widened into float32 copies until session 19: 1 GiB more).
//   chunked16: W, U/dY, Qg, KgT 4 x 128; Aqk, Ainv 2 x 64; gexp 4; h 512, dh 256; vnew, dN 2 x 128;
//     pq, pk 2 x 128 (bfloat16 inputs: PartialQK), pg 256, pb 2 in the place of W .. Aqk (448), the
//     larger: 514 (770 with float32 pq, pk until session 36); split adds U_lo, KgT_lo, dN_lo,
//     dY_lo 4 x 128, and its front region (576 with KgT_lo) then holds the partials.
//   split from saved: pq, pk 2 x 128, pg 256; pb 2; dY, dN, dN_lo, dY_lo 4 x 128; dh 512: 256 MiB
//     less than the 1794 of float32 pq, pk, beside the saved buffer's 1412 MiB.
// (These counts have every partial. pq, pk are absent where pass 2 writes dq, dk itself, pg where
// it writes dg: KDA with its plain gate has no pg, GLA none of the three; see below.)
// Without the delta rule on Hopper in 16 bits (ChunkPlan::no_delta_rows) there is no U / dY and
// no dN either (the state pass reads the v rows, pass 1 writes dv), and h is 16-bit: GLA's
// backward workspace at that shape is Qg, KgT 2 x 128, Aqk 64, gexp 4, h, dh 2 x 256 (the partials,
// where any, in the front region).
// With a chunk-local saved buffer (SavedKind::kChunkLocal, GLA: Options::keep_chunk_local) Qg,
// KgT, Aqk, gexp and h are the caller's and read-only (its forward's chunk_prep and state pass
// wrote them): neither chunk_prep nor the state recompute runs, and pass 1 runs alone.
enum class SavedKind { kNone, kAll, kChunkLocal };
struct ChunkPlan {
  static constexpr std::size_t kNone = ~std::size_t{0};
  FrontOffsets front;  // in the workspace; all absent from_saved
  std::size_t seqs = 0, chunks = 0, dh = 0, dN = kNone, dY = kNone, pq = 0, pk = 0, pg = 0, pb = 0, draw = 0,
              da = 0, total = 0;
  // split (16-bit hi + lo halves): dN_lo, dY_lo (and in front: U_lo, then V_new's low half in its
  // place, and KgT_lo)
  std::size_t dN_lo = kNone, dY_lo = kNone;
  bool f32 = false, split = false, from_saved = false;
  bool dqk_direct = false, dg_direct = false;  // no pq / pk, no pg (pass 2 writes dq, dk / dg)
  // h in the compute type (StateParams::h_dt): without the delta rule, 16-bit compute and v_first
  // 0, pass 2 reads h only as its 16-bit S operand (WyParams::h16), so the Hopper recompute writes
  // that (the other state kernels store states in float32 or float64 only).
  bool h16 = false;
  // no delta rule, 16-bit compute, Hopper: V from the v rows and dv from pass 1 (no dY, no dN)
  bool no_delta_rows = false;
  int KG = 1;
  int64_t tokens = 0;
  ChunkPlan(const detail::Problem& p, Compute compute, SavedKind kind) {
    const ComputeForm cf(p, compute);
    const bool saved = kind == SavedKind::kAll;      // the whole front half is the caller's
    const bool local = kind == SavedKind::kChunkLocal;  // its chunk-local part is
    f32 = cf.f32;
    split = cf.split;
    from_saved = saved;
    KG = p.vector_gate ? static_cast<int>(p.K) : 1;
    tokens = p.B * p.T;
    const std::size_t es = f32 ? 4 : 2;
    const std::size_t nb = static_cast<std::size_t>(p.num_chunks) * p.HV;
    const std::size_t T = static_cast<std::size_t>(tokens);
    const std::size_t K = static_cast<std::size_t>(p.K), V = static_cast<std::size_t>(p.V);
    std::size_t o = 0;
    seqs = o; o = align_up(o + sizeof(SeqInfo) * std::max<int64_t>(p.N, 1));
    chunks = o; o = align_up(o + sizeof(kern::ChunkInfo) * std::max<int64_t>(p.num_chunks, 1));
    FrontOffsets& f = front;
    const std::size_t reuse = o;
    const std::size_t wy = p.delta ? 1 : 0;  // no W and no M⁻¹ without the delta rule
    if (!saved) {
      f.W = o; o = align_up(o + wy * nb * kC * K * es);
      if (!local) {
        f.Qg = o; o = align_up(o + nb * kC * K * es);
        f.KgT = o; o = align_up(o + nb * kC * K * es);
        f.Aqk = o; o = align_up(o + nb * kC * kC * es);
      }
      if (split) { f.KgT_lo = o; o = align_up(o + nb * kC * K * es); }
    }
    // Partials only where a finish kernel reads them: pass 2 writes dq, dk itself without the
    // l2norm backward and the GVA sum (WyParams::dq), and dg itself with the identity gate
    // transform and no gate-parameter gradients (WyParams::dg_direct; dA_log / ddt_bias need
    // A_log / dt_bias). Both follow from the problem alone, as the workspace query must; the
    // launch checks that pass 2 agrees. At the reference shape this drops GLA's pq, pk, pg (768 MiB)
    // and KDA's pg (256 MiB).
    dqk_direct = !p.opt.use_qk_l2norm_in_kernel && p.G == 1;
    dg_direct = p.has_g && gate_kind_code(p) == 0 && !p.has_g_gamma && !p.has_A_log && !p.has_dt_bias;
    std::size_t r = reuse;
    // dq̂, dk̂ partials in pass 2's PartialQK: bfloat16 for bfloat16 inputs, in either form
    const std::size_t pqk = dqk_direct ? 0 : T * p.HV * K * partial_qk_bytes(dtype_code(p.dtype));
    pq = r; r = align_up(r + pqk);
    pk = r; r = align_up(r + pqk);
    pg = r; r = align_up(r + (dg_direct ? 0 : T * p.HV * KG * 4));  // one float a row with the scalar gate
    pb = r; r = align_up(r + T * p.HV * 4);
    o = std::max(o, r);
    // Without the delta rule, in a 16-bit compute type on Hopper, the state pass reads V from the
    // v rows (no U) and pass 1 writes dv itself (no dN): run_front's and pass 1's own tests
    // (recurrence_wgmma_applies with v_raw, dh_wgmma_applies) reduce to this for such a problem.
    // Then dY (U's home; pass 2's scratch only with the delta rule) and dN are not allocated:
    // 2 x 128 MiB at GLA's reference shape. Their offsets stay kNone and the launches refuse
    // rather than write through them (run_front, run_chunked).
    no_delta_rows = !p.delta && !f32 &&
                    kern::recurrence_wgmma_supported(dtype_code(p.dtype), static_cast<int>(K), static_cast<int>(V));
    if (!no_delta_rows) { dY = o; o = align_up(o + nb * kC * V * es); }
    if (!saved) {
      if (!no_delta_rows) f.U = dY;
      f.Ainv = o; o = align_up(o + wy * nb * kC * kC * es);
      if (!local) { f.gexp = o; o = align_up(o + nb * K * 4); }
      f.h_dt = host::state_dtype_code(p, compute);
      h16 = f.h_dt != 2;
      if (!local) {
        // (at least 32 bytes a channel: draw's rows take this region after pass 2, 8 a 64-token block)
        f.h = o; o = align_up(o + nb * K * std::max<std::size_t>(V * (h16 ? es : 4), 32));
      } else {  // h is the saved buffer's (read-only): draw's rows (ddt_bias only) get their own
        draw = o; o = align_up(o + (p.has_dt_bias ? nb * K * 32 : 0));
      }
      // V_new: the delta rule's (without it pass 2 reads V from the v rows; the float32 form's
      // Hopper state pass writes it regardless)
      if (p.delta || f32) { f.vnew = o; o = align_up(o + nb * kC * V * es); }
    }
    dh = o; o = align_up(o + nb * K * V * es);  // the compute type (DhParams::dh)
    // (a saved buffer's run keeps dN: the column sums' rows take its region after pass 2)
    if (!no_delta_rows || saved) { dN = o; o = align_up(o + nb * kC * V * es); }
    if (split) {
      if (!saved) { f.U_lo = o; o = align_up(o + nb * kC * V * es); f.vnew_lo = f.U_lo; }
      dN_lo = o; o = align_up(o + nb * kC * V * es);
      dY_lo = o; o = align_up(o + nb * kC * V * es);
    }
    // h and dh (dh and dN from saved) are dead after pass 2; pq .. pb are not
    if (!local) draw = saved ? dh : f.h;
    da = saved ? dN : dh;
    total = o;
  }
};

// Workspace of a forward that fills a saved buffer: the maps and, where the state pass does not
// compute O itself (kern::saved_forward_o_in_pass), the chunk-start states in the compute type for
// the output kernel (hs). U and its low half are written where V_new and its low half go (the
// state pass reads each element before it writes it, same thread).
struct SavedForwardPlan {
  std::size_t seqs = 0, chunks = 0, hs = kNone, total = 0;
  static constexpr std::size_t kNone = ~std::size_t{0};
  SavedForwardPlan(const detail::Problem& p, Compute compute) {
    const ComputeForm cf(p, compute);
    const std::size_t es = cf.f32 ? 4 : 2;
    const std::size_t nb = static_cast<std::size_t>(p.num_chunks) * p.HV;
    std::size_t o = 0;
    seqs = o; o = align_up(o + sizeof(SeqInfo) * std::max<int64_t>(p.N, 1));
    chunks = o; o = align_up(o + sizeof(kern::ChunkInfo) * std::max<int64_t>(p.num_chunks, 1));
    const int cdt = cf.f32 ? 2 : dtype_code(p.dtype);
    if (!kern::saved_forward_o_in_pass(cdt, static_cast<int>(p.K), static_cast<int>(p.V))) {
      hs = o; o = align_up(o + nb * p.K * p.V * es);
    }
    total = o;
  }
};

// p.has_saved: the backward is given a saved buffer (the token replay does not read it); a
// chunk-local one where keep_chunk_local applies (elsewhere the API refuses it).
SavedKind saved_kind(const detail::Problem& p) {
  if (!p.has_saved) return SavedKind::kNone;
  if (!p.opt.keep_chunk_local) return SavedKind::kAll;
  return chunk_local_saved_applies(p) ? SavedKind::kChunkLocal : SavedKind::kNone;
}

std::size_t workspace_of(const detail::Problem& p) {
  return p.token_replay ? Plan(p).total : ChunkPlan(p, compute_of(p), saved_kind(p)).total;
}

unsigned blocks_for(int64_t rows) { return static_cast<unsigned>((rows + 7) / 8); }

GateArgs gate_args(const detail::Problem& p, const ForwardInputs& f) {
  GateArgs ga{};
  ga.kind = gate_kind_code(p);
  ga.lower_bound = static_cast<float>(p.gate_tf.lower_bound);
  ga.has_alog = p.has_A_log ? 1 : 0;
  ga.has_dtb = p.has_dt_bias ? 1 : 0;
  ga.A_log = p.has_A_log ? f.A_log.data : nullptr;
  ga.alog_dt = p.has_A_log ? dtype_code(f.A_log.dtype) : 2;
  ga.dt_bias = p.has_dt_bias ? f.dt_bias.data : nullptr;
  ga.dtb_dt = p.has_dt_bias ? dtype_code(f.dt_bias.dtype) : 2;
  return ga;
}

// From the validated host offsets p.cu; the device cu_seqlens is not read (chunk_map.hpp).
cudaError_t build_maps(const detail::Problem& p, unsigned char* seqs, unsigned char* chunks, cudaStream_t st) {
  kern::MapParams mp{};
  mp.cu = p.cu.data();
  mp.N = static_cast<int>(p.N);
  mp.num_chunks = static_cast<int>(p.num_chunks);
  mp.seqs = reinterpret_cast<kern::SeqInfo*>(seqs);
  mp.chunks = reinterpret_cast<kern::ChunkInfo*>(chunks);
  return kern::launch_chunk_maps(mp, st);
}


// The buffers of the chunked backward's front half (chunk_prep, then the state pass).
struct FrontBufs {
  const kern::SeqInfo* seqs = nullptr;
  const kern::ChunkInfo* chunks = nullptr;
  void *W = nullptr, *U = nullptr, *Qg = nullptr, *KgT = nullptr, *Aqk = nullptr, *Ainv = nullptr;
  float* gexp = nullptr;
  void* h = nullptr;  // the chunk-start states, float32 or (h_dt) the compute type
  int h_dt = 2;
  void* vnew = nullptr;
  void *U_lo = nullptr, *KgT_lo = nullptr, *vnew_lo = nullptr;  // split form
};
FrontBufs front_bufs(unsigned char* region, const FrontOffsets& o, const unsigned char* maps, std::size_t seqs,
                     std::size_t chunks) {
  auto at = [&](std::size_t off) -> void* { return off == FrontOffsets::kNone ? nullptr : region + off; };
  FrontBufs b;
  b.seqs = reinterpret_cast<const kern::SeqInfo*>(maps + seqs);
  b.chunks = reinterpret_cast<const kern::ChunkInfo*>(maps + chunks);
  b.W = at(o.W);
  b.U = at(o.U);
  b.Qg = at(o.Qg);
  b.KgT = at(o.KgT);
  b.Aqk = at(o.Aqk);
  b.Ainv = at(o.Ainv);
  b.gexp = static_cast<float*>(at(o.gexp));
  b.h = at(o.h);
  b.h_dt = o.h_dt;
  b.vnew = at(o.vnew);
  b.U_lo = at(o.U_lo);
  b.KgT_lo = at(o.KgT_lo);
  b.vnew_lo = at(o.vnew_lo);
  return b;
}

// What a forward adds to the front half: the final state and O (through hs, the chunk-start
// states in the compute type, and the chunk-parallel output kernel).
struct FrontOutputs {
  void* ht = nullptr;
  int ht_dt = 2;
  void* o = nullptr;
  int o_dt = 2;
  void* hs = nullptr;
};

// The dtype code of the caller's q, k, v, dO where the kernels compute in another type: the float32
// form on 16-bit inputs reads them in place, converting as it loads (exact); -1 otherwise.
int in_dt_of(const detail::Problem& p, int cdt) {
  return cdt == 2 && p.dtype != DType::kFloat32 ? dtype_code(p.dtype) : -1;
}

// chunk_prep in its backward form (M⁻¹, the split form's low halves) and the state pass: the
// intermediates the backward reads, recomputed by the backward or kept by a forward with a saved
// buffer (the same kernels with the same inputs: bitwise the same values). A timer (benchmarks)
// gets a "state" mark between the two.
// deferred (the backward): where the state pass is the one bwd_chains_apply may fuse with pass 1
// (the recompute reading the v rows), its parameters and shared memory go there and it does not
// launch; the caller launches it, alone or with pass 1.
struct DeferredState {
  bool set = false;
  kern::StateParams sp{};
  int smem = 0;
};
Status run_front(const detail::Problem& p, const ForwardInputs& f, int cdt, bool split, const FrontBufs& b,
                 const FrontOutputs& fo, cudaStream_t st, StageTimer* timer = nullptr,
                 DeferredState* deferred = nullptr) {
  const int K = static_cast<int>(p.K), V = static_cast<int>(p.V);
  cudaError_t e = cudaSuccess;
  kern::StateParams sp{};
  sp.W = p.delta ? b.W : nullptr;
  sp.delta = p.delta ? 1 : 0;
  sp.U = b.U;
  sp.Qg = b.Qg;
  sp.KgT = b.KgT;
  sp.Aqk = b.Aqk;
  sp.gexp = b.gexp;
  sp.seqs = b.seqs;
  sp.h0 = p.has_h0 ? f.initial_state.data : nullptr;
  sp.h0_dt = p.has_h0 ? dtype_code(f.initial_state.dtype) : 2;
  sp.ht = fo.ht;
  sp.ht_dt = fo.ht_dt;
  sp.h = b.h;
  sp.h_dt = b.h_dt;
  sp.o = fo.o;
  sp.o_dt = fo.o_dt;
  sp.hs = fo.hs;
  sp.chunks = b.chunks;
  sp.num_chunks = static_cast<int>(p.num_chunks);
  sp.vnew = b.vnew;
  sp.N = static_cast<int>(p.N);
  sp.HV = static_cast<int>(p.HV);
  sp.K = K;
  sp.V = V;
  sp.v_first = p.opt.state_v_first ? 1 : 0;
  sp.wide16 = cdt == 2 && p.dtype != DType::kFloat32 ? 1 : 0;
  const config::Staged sg = config::state_stages(cdt, K);
  sp.stages = sg.stages;
  if (split) {
    if (sg.stages == 0 && p.N > 0) return {StatusCode::kBackendError, "CUDA backward: the state pass does not fit shared memory"};
    sp.U_lo = b.U_lo;
    sp.vnew_lo = b.vnew_lo;  // may be U_lo: each element is read before it is written, same thread
  }
  // Without the delta rule V_new = V: where the Hopper state pass runs it reads the v rows, and
  // chunk_prep writes no U (its copy of V: 128 MiB written and read at the reference shape).
  if (!p.delta && in_dt_of(p, cdt) < 0) {
    kern::StateParams rows = sp;
    rows.U = nullptr;
    rows.v_raw = f.v.data;
    if (kern::recurrence_wgmma_applies(cdt, rows)) sp = rows;
  }
  if (!p.delta && sp.U == nullptr && sp.v_raw == nullptr)  // (ChunkPlan::no_delta_rows disagrees with the launch)
    return {StatusCode::kBackendError, "CUDA backward: the state pass would read U, which the workspace plan left out"};
  if (p.num_chunks > 0) {
    kern::PrepParams pp = prep_params(p, f);
    // the caller's q, k, v (prep_params), converted as they load when the compute type is float32
    pp.in_dt = in_dt_of(p, cdt);
    pp.chunks = b.chunks;
    const config::PrepSmem smem = config::prep_smem(cdt, K, /*vec_gate=*/true);  // the vector-gate size fits GDN too
    pp.q_in_smem = smem.q_in_smem && pp.in_dt < 0;  // 16-bit q under float32 compute: from global memory
    pp.W = p.delta ? b.W : nullptr;  // no delta rule: no W, no M⁻¹
    pp.U = sp.U ? b.U : nullptr;  // null where the state pass reads the v rows
    pp.Qg = b.Qg;
    pp.KgT = b.KgT;
    pp.Aqk = b.Aqk;
    pp.gexp = b.gexp;
    pp.Ainv = p.delta ? b.Ainv : nullptr;
    if (split) {
      pp.U_lo = b.U_lo;
      pp.KgT_lo = b.KgT_lo;
    }
    e = kern::prep_wgmma_applies(cdt, p.vector_gate, pp) ? kern::launch_prep_wgmma(cdt, p.vector_gate, pp, st)
                                                         : kern::launch_prep(cdt, p.vector_gate, pp, static_cast<int>(smem.bytes), st);
    if (e != cudaSuccess) return cuda_error("chunk_prep launch (backward form)", e);
    if (timer) timer->mark("state", st);
  }
  if (p.N > 0) {
    if (deferred && !p.delta && sp.U == nullptr && sp.v_raw != nullptr) {
      deferred->set = true;
      deferred->sp = sp;
      deferred->smem = static_cast<int>(sg.smem);
      return Status::Ok();
    }
    e = kern::launch_state(cdt, sp, static_cast<int>(sg.smem), st);
    if (e != cudaSuccess) return cuda_error("chunk_state launch (backward form)", e);
  }
  return Status::Ok();
}

// What the finish kernels read: float32 partials [NS][tokens][HV][K] (pb [NS][tokens][HV]) and
// the per-token rows of the column sums; KG = K (vector gate) or 1.
struct Partials {
  float *pq = nullptr, *pk = nullptr, *pg = nullptr, *pb = nullptr, *draw = nullptr, *da = nullptr;
  int NS = 1, KG = 1;
  // floats per pg row: K, or 1 where pass 2 writes the scalar gate's dg_t alone (the token replay
  // writes a scalar gate's per-channel terms, summed by finish_gb)
  int pg_ld = 1;
  // dg / dβ already written by the chunked pass 2 (WyParams::dg_direct, dbeta): finish_gb skips them
  bool dg_written = false, dbeta_written = false;
  // dq, dk already written by the chunked pass 2 (WyParams::dq): finish_qk does not run
  bool dqk_written = false;
  // pq, pk hold bfloat16 (pass 2 on bfloat16 inputs: PartialQK); else float
  bool pqk16 = false;
};

// The token replay (Problem::token_replay, a test hook): q̂, k̂, e, β̃ token-parallel, the float32
// chunk-boundary states, then the token recurrence backward; the partials in *parts.
Status run_token_replay(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        unsigned char* base, cudaStream_t st, Partials* parts) {
  const ForwardInputs& f = in.fwd;
  cudaError_t e = cudaSuccess;
  const int dt = dtype_code(p.dtype);
  const int64_t tokens = p.B * p.T;
  const GateArgs ga = gate_args(p, f);
  const int beta_mode = beta_mode_code(p);
  const int l2 = p.opt.use_qk_l2norm_in_kernel ? 1 : 0;
  float *&pq = parts->pq, *&pk = parts->pk, *&pg = parts->pg, *&pb = parts->pb, *&draw = parts->draw, *&da = parts->da;
  int &NS = parts->NS, &KG = parts->KG;
  const Plan pl(p);
  NS = pl.NS;
  KG = pl.KG;
  parts->pg_ld = static_cast<int>(p.K);
  if ((e = build_maps(p, base + pl.seqs, nullptr, st)) != cudaSuccess) return cuda_error("sequence map launch", e);
  float* qn = reinterpret_cast<float*>(base + pl.qn);
  float* kn = reinterpret_cast<float*>(base + pl.kn);
  float* ev = reinterpret_cast<float*>(base + pl.e);
  float* bt = reinterpret_cast<float*>(base + pl.bt);
  if (tokens > 0) {
    prep_qk_kernel<<<blocks_for(tokens * p.H), 256, 0, st>>>(f.q.data, f.k.data, dt, qn, kn, tokens * p.H,
                                                              static_cast<int>(p.K), l2);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_error("prep_qk launch", e);
    prep_gate_kernel<<<blocks_for(tokens * p.HV), 256, 0, st>>>(
        p.has_g ? f.g.data : nullptr, p.has_g ? dtype_code(f.g.dtype) : 2, p.has_g ? 1 : 0, f.beta.data,
        dtype_code(f.beta.dtype), beta_mode, ga, ev, bt, tokens * p.HV, static_cast<int>(p.HV), pl.KG);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_error("prep_gate launch", e);
  }
  TokenParams tp{};
  tp.seqs = reinterpret_cast<const SeqInfo*>(base + pl.seqs);
  tp.qn = qn;
  tp.kn = kn;
  tp.e = ev;
  tp.bt = bt;
  tp.v = f.v.data;
  tp.d_o = in.d_o.data;
  tp.v_dt = dt;
  tp.h0 = p.has_h0 ? f.initial_state.data : nullptr;
  tp.h0_dt = p.has_h0 ? dtype_code(f.initial_state.dtype) : 2;
  tp.dht = in.dht.present() ? in.dht.data : nullptr;
  tp.dht_dt = in.dht.present() ? dtype_code(in.dht.dtype) : 2;
  tp.h = reinterpret_cast<float*>(base + pl.h);
  tp.dv = out.dv.data;
  tp.dh0 = out.dh0.present() ? out.dh0.data : nullptr;
  tp.dh0_dt = out.dh0.present() ? dtype_code(out.dh0.dtype) : 2;
  tp.pq = reinterpret_cast<float*>(base + pl.pq);
  tp.pk = reinterpret_cast<float*>(base + pl.pk);
  tp.pg = reinterpret_cast<float*>(base + pl.pg);
  tp.pb = reinterpret_cast<float*>(base + pl.pb);
  tp.tokens = tokens;
  tp.N = static_cast<int>(p.N);
  tp.H = static_cast<int>(p.H);
  tp.HV = static_cast<int>(p.HV);
  tp.G = static_cast<int>(p.G);
  tp.K = static_cast<int>(p.K);
  tp.V = static_cast<int>(p.V);
  tp.KG = pl.KG;
  tp.NS = pl.NS;
  tp.tiles_per_split = pl.tps;
  tp.v_first = p.opt.state_v_first ? 1 : 0;
  tp.scale = static_cast<float>(p.scale);
  if (p.N > 0) {
    if (tokens > 0 && (e = launch_state_fwd(tp, st)) != cudaSuccess) return cuda_error("state_fwd launch", e);
    if ((e = launch_token_bwd(tp, st)) != cudaSuccess) return cuda_error("token_bwd launch", e);
  }
  pq = tp.pq;
  pk = tp.pk;
  pg = tp.pg;
  pb = tp.pb;
  draw = reinterpret_cast<float*>(base + pl.draw);
  da = reinterpret_cast<float*>(base + pl.da);
  return Status::Ok();
}

// The chunked (WY) backward in `compute`'s form: the front half (or the saved buffer's),
// pass 1 (dh), pass 2 (wy); the partials in *parts. timer: stage marks for benchmarks.
Status run_chunked(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                   unsigned char* base, Compute compute, SavedKind kind, cudaStream_t st, StageTimer* timer,
                   Partials* parts) {
  const bool from_saved = kind == SavedKind::kAll;
  const ForwardInputs& f = in.fwd;
  cudaError_t e = cudaSuccess;
  const int dt = dtype_code(p.dtype);
  const GateArgs ga = gate_args(p, f);
  const int beta_mode = beta_mode_code(p);
  const int l2 = p.opt.use_qk_l2norm_in_kernel ? 1 : 0;
  float *&pq = parts->pq, *&pk = parts->pk, *&pg = parts->pg, *&pb = parts->pb, *&draw = parts->draw, *&da = parts->da;
  int& KG = parts->KG;  // NS stays 1: no V splits
  const ChunkPlan pl(p, compute, kind);
  KG = pl.KG;
  // where pass 2 writes dg and dq, dk itself (below); the plan, from the problem alone, must not
  // have left out partials it would write
  const bool dg_direct = p.has_g && ga.kind == 0 && !p.has_g_gamma && !out.ddt_bias.present() && !out.dA_log.present();
  const bool dqk_direct = !l2 && p.G == 1 && out.dq.present() && out.dk.present();
  if ((pl.dqk_direct && !dqk_direct) || (pl.dg_direct && !dg_direct))
    return {StatusCode::kBackendError, "CUDA backward: the workspace plan has no partials that pass 2 would write"};
  parts->pg_ld = pl.KG;
  if ((e = build_maps(p, base + pl.seqs, base + pl.chunks, st)) != cudaSuccess)
    return cuda_error("chunk map launch", e);
  const int K = static_cast<int>(p.K), V = static_cast<int>(p.V);
  const int cdt = pl.f32 ? 2 : dt;  // compute type of the kernels below
  // The front half's buffers: in the workspace, or the saved buffer's (read-only).
  FrontBufs fb = from_saved ? front_bufs(static_cast<unsigned char*>(in.saved.data), SavedLayout(p, compute).front,
                                         base, pl.seqs, pl.chunks)
                            : front_bufs(base, pl.front, base, pl.seqs, pl.chunks);
  if (kind == SavedKind::kChunkLocal) {  // chunk_prep's outputs and the states from the forward (read-only)
    const FrontBufs sv = front_bufs(static_cast<unsigned char*>(in.saved.data), SavedLayout(p, compute).front, base,
                                    pl.seqs, pl.chunks);
    fb.Qg = sv.Qg;
    fb.KgT = sv.KgT;
    fb.Aqk = sv.Aqk;
    fb.gexp = sv.gexp;
    fb.h = sv.h;
    fb.h_dt = sv.h_dt;
  }
  // Every kernel reads the caller's q, k, v, dO (in_dt: their type where the compute type is
  // float32 and they are 16-bit; converted as loaded). The finish kernels write dq, dk, dv in the
  // caller's dtype.
  const int in_dt = in_dt_of(p, cdt);
  // Benchmarks: stage boundaries on the caller's timer (none in the product).
  auto mark = [&](const char* next) {
    if (timer) timer->mark(next, st);
  };
  const bool local = kind == SavedKind::kChunkLocal;
  DeferredState deferred;  // the state pass, where it may run in one kernel with pass 1
  mark(from_saved || local ? "pass1" : "prep");
  if (!from_saved && !local) {
    // ---- recompute the forward's chunk intermediates, plus M⁻¹, h and V_new (no output)
    if (Status fs = run_front(p, f, cdt, pl.split, fb, FrontOutputs{}, st, timer, &deferred); !fs.ok()) return fs;
    mark("pass1");
  }
  bool dv_from_pass1 = false;
  if (p.N > 0) {
    // ---- pass 1: dh, dN (sequential over chunks), dh0
    DhParams dp{};
    dp.Aqk = fb.Aqk;
    dp.KgT = fb.KgT;
    dp.Qg = fb.Qg;
    dp.W = p.delta ? fb.W : nullptr;
    dp.delta = p.delta ? 1 : 0;
    dp.gexp = fb.gexp;
    dp.d_o = in.d_o.data;
    dp.d_o_dt = in_dt;
    dp.seqs = fb.seqs;
    dp.dht = in.dht.present() ? in.dht.data : nullptr;
    dp.dht_dt = in.dht.present() ? dtype_code(in.dht.dtype) : 2;
    dp.dh0 = out.dh0.present() ? out.dh0.data : nullptr;
    dp.dh0_dt = out.dh0.present() ? dtype_code(out.dh0.dtype) : 2;
    dp.dh = base + pl.dh;
    dp.dN = pl.dN == ChunkPlan::kNone ? nullptr : base + pl.dN;  // none: pass 1 writes dv (no_delta_rows)
    dp.N = static_cast<int>(p.N);
    dp.HV = static_cast<int>(p.HV);
    dp.K = K;
    dp.V = V;
    dp.v_first = p.opt.state_v_first ? 1 : 0;
    if (pl.split) {
      dp.KgT_lo = fb.KgT_lo;
      dp.dN_lo = base + pl.dN_lo;
    }
    const bool chains = deferred.set && !p.separate_chains && bwd_chains_apply(cdt, deferred.sp, dp);
    if (deferred.set && !chains) {  // the state pass alone first
      e = kern::launch_state(cdt, deferred.sp, deferred.smem, st);
      if (e != cudaSuccess) return cuda_error("chunk_state launch (backward form)", e);
    }
    const bool dh_hopper = dh_wgmma_applies(cdt, dp);
    // no delta rule, 16-bit compute (the caller's dtype): the Hopper pass 1 writes dv itself (dN is dv)
    if (dh_hopper && !p.delta && cdt == dt && out.dv.present()) dp.dv = out.dv.data;
    if (dp.dN == nullptr && dp.dv == nullptr)  // the plan and the launch disagree (never expected)
      return {StatusCode::kBackendError, "CUDA backward: pass 1 would write dN, which the workspace plan left out"};
    if (dh_hopper) {
      e = chains ? launch_bwd_chains(cdt, deferred.sp, dp, st) : launch_dh_wgmma(cdt, dp, st);
    } else {
      const config::Staged sg = config::dh_stages(cdt, K, pl.split);
      if (sg.stages == 0 && cdt != 2) return {StatusCode::kBackendError, "CUDA backward: pass 1 does not fit shared memory"};
      dp.stages = sg.stages;
      e = launch_dh(cdt, dp, static_cast<int>(sg.smem), st);
    }
    if (e != cudaSuccess) return cuda_error("dh launch", e);
    dv_from_pass1 = dp.dv != nullptr;
    mark("pass2");
  }
  if (p.num_chunks > 0) {
    // ---- pass 2: chunk-parallel gradients
    WyParams wp{};
    wp.chunks = fb.chunks;
    wp.q = f.q.data;
    wp.k = f.k.data;
    wp.v = f.v.data;
    wp.d_o = in.d_o.data;
    wp.in_dt = in_dt;
    wp.delta = p.delta ? 1 : 0;
    wp.beta = p.delta ? f.beta.data : nullptr;
    wp.beta_dt = p.delta ? dtype_code(f.beta.dtype) : 2;
    wp.beta_mode = beta_mode;
    wp.gate.g = p.has_g ? f.g.data : nullptr;
    wp.gate.g_dt = p.has_g ? dtype_code(f.g.dtype) : 2;
    wp.gate.g_gamma = p.has_g_gamma ? f.g_gamma.data : nullptr;
    wp.gate.gg_dt = p.has_g_gamma ? dtype_code(f.g_gamma.dtype) : 2;
    wp.gate.kind = ga.kind;
    wp.gate.lower_bound = ga.lower_bound;
    wp.gate.has_alog = ga.has_alog;
    wp.gate.has_dtb = ga.has_dtb;
    wp.gate.A_log = ga.A_log;
    wp.gate.alog_dt = ga.alog_dt;
    wp.gate.dt_bias = ga.dt_bias;
    wp.gate.dtb_dt = ga.dtb_dt;
    wp.Ainv = p.delta ? fb.Ainv : nullptr;
    wp.vnew = fb.vnew;
    wp.h = fb.h;
    wp.h_vfirst = p.opt.state_v_first ? 1 : 0;
    wp.h16 = fb.h_dt != 2 ? 1 : 0;
    wp.dh = base + pl.dh;
    wp.dN = pl.dN == ChunkPlan::kNone ? nullptr : base + pl.dN;  // not read where pass 1 wrote dv
    wp.dY = pl.dY == ChunkPlan::kNone ? nullptr : base + pl.dY;  // the delta rule's scratch
    wp.dv = out.dv.data;
    wp.dv_dt = dt;
    wp.dv_written = dv_from_pass1 ? 1 : 0;
    wp.pq = base + pl.pq;
    wp.pk = base + pl.pk;
    parts->pqk16 = partial_qk_bytes(dt) == 2;  // bfloat16 partials (PartialQK of the input type)
    wp.pg = reinterpret_cast<float*>(base + pl.pg);
    wp.pb = reinterpret_cast<float*>(base + pl.pb);
    wp.num_chunks = static_cast<int>(p.num_chunks);
    wp.H = static_cast<int>(p.H);
    wp.HV = static_cast<int>(p.HV);
    wp.G = static_cast<int>(p.G);
    wp.K = K;
    wp.V = V;
    wp.scale = static_cast<float>(p.scale);
    wp.l2norm = l2;
    if (pl.split) {
      wp.dN_lo = base + pl.dN_lo;
      wp.dY_lo = base + pl.dY_lo;
      wp.vnew_lo = fb.vnew_lo;
    }
    // dg and dβ written by pass 2 itself where nothing else needs the partials: the identity gate
    // transform without gate-parameter gradients or g_gamma (dg is then the partial), and dβ
    // always (one row a token). Saves finish_gb its pass over pg (a copy, 268 MB each way at
    // issue 5's reference shape) and, for the scalar gate, pass 2 its zero-padded pg rows.
    wp.dg_direct = dg_direct;
    wp.dg = wp.dg_direct && out.dg.present() ? out.dg.data : nullptr;
    wp.dg_dt = p.has_g ? dtype_code(f.g.dtype) : 2;
    wp.dbeta = p.delta && out.dbeta.present() ? out.dbeta.data : nullptr;
    parts->dg_written = wp.dg_direct != 0;
    parts->dbeta_written = wp.dbeta != nullptr;
    // dq, dk straight out where finish_qk would only copy the partial: no l2norm backward and no
    // GVA sum (G = 1). Saves its pass over pq, pk (2 x 268 MB read and 2 x 134 MB written at issue
    // 17's GLA shape) and halves pass 2's dq, dk stores.
    if (dqk_direct) {
      wp.dq = out.dq.data;
      wp.dk = out.dk.data;
    }
    parts->dqk_written = wp.dq != nullptr;
    e = pass2_scalar_wgmma_applies(cdt, p.vector_gate, wp) ? launch_pass2_scalar_wgmma(cdt, wp, st)
                                                             : launch_wy(cdt, p.vector_gate, wp, st);
    if (e != cudaSuccess) return cuda_error("pass 2 launch", e);
    mark("finish_qk");
  }
  pq = reinterpret_cast<float*>(base + pl.pq);
  pk = reinterpret_cast<float*>(base + pl.pk);
  pg = reinterpret_cast<float*>(base + pl.pg);
  pb = reinterpret_cast<float*>(base + pl.pb);
  draw = reinterpret_cast<float*>(base + pl.draw);
  da = reinterpret_cast<float*>(base + pl.da);
  return Status::Ok();
}

// Finish: sums over the GVA group (and V splits), the transforms backwards, the column sums.
Status run_finish(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                  const Partials& parts, cudaStream_t st, StageTimer* timer = nullptr) {
  const ForwardInputs& f = in.fwd;
  cudaError_t e = cudaSuccess;
  const int dt = dtype_code(p.dtype);
  const int64_t tokens = p.B * p.T;
  const GateArgs ga = gate_args(p, f);
  const int beta_mode = beta_mode_code(p);
  const int l2 = p.opt.use_qk_l2norm_in_kernel ? 1 : 0;
  float *pq = parts.pq, *pk = parts.pk, *pg = parts.pg, *pb = parts.pb, *draw = parts.draw, *da = parts.da;
  const int NS = parts.NS, KG = parts.KG;
  if (tokens > 0 && !parts.dqk_written) {
    const int H = static_cast<int>(p.H), G = static_cast<int>(p.G), HV = static_cast<int>(p.HV);
    const int K = static_cast<int>(p.K);
    const unsigned nb = blocks_for(tokens * p.H);
    auto launch = [&](auto tag, auto ptag) {  // q, k, dq, dk are 16-byte aligned (check_aligned above)
      using T = decltype(tag);
      using P = decltype(ptag);
      finish_qk_kernel<T, P><<<nb, 256, 0, st>>>(reinterpret_cast<const P*>(pq), reinterpret_cast<const P*>(pk),
                                                 static_cast<const T*>(f.q.data), static_cast<const T*>(f.k.data),
                                                 static_cast<T*>(out.dq.data), static_cast<T*>(out.dk.data), tokens,
                                                 H, G, HV, K, NS, l2);
    };
    if (dt == 0) launch(__half{}, float{});
    else if (dt == 1) parts.pqk16 ? launch(__nv_bfloat16{}, __nv_bfloat16{}) : launch(__nv_bfloat16{}, float{});
    else launch(float{}, float{});
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_error("finish_qk launch", e);
  }

  const bool want_dtb = out.ddt_bias.present() && p.has_g;
  const bool want_da = out.dA_log.present() && p.has_g;
  const int64_t gb_rows = (tokens + kGbTokens - 1) / kGbTokens;  // finish_gb's partial rows
  FinishGB fg{};
  fg.pg = pg;
  fg.pb = pb;
  fg.g = p.has_g ? f.g.data : nullptr;
  fg.g_dt = p.has_g ? dtype_code(f.g.dtype) : 2;
  fg.dg = out.dg.present() && !parts.dg_written ? out.dg.data : nullptr;
  fg.draw = want_dtb ? draw : nullptr;
  fg.da = want_da ? da : nullptr;
  fg.beta = f.beta.data;
  fg.beta_dt = dtype_code(f.beta.dtype);
  fg.beta_mode = beta_mode;
  fg.dbeta = out.dbeta.present() && !parts.dbeta_written ? out.dbeta.data : nullptr;
  fg.tokens = tokens;
  fg.HV = static_cast<int>(p.HV);
  fg.K = static_cast<int>(p.K);
  fg.KG = KG;
  fg.pg_ld = parts.pg_ld;
  fg.NS = NS;
  fg.has_g = p.has_g ? 1 : 0;
  fg.ga = ga;
  fg.g_gamma = p.has_g_gamma ? f.g_gamma.data : nullptr;
  fg.gg_dt = p.has_g_gamma ? dtype_code(f.g_gamma.dtype) : 2;
  // dg_gamma: per-token rows in da's place (simple GLA has no A_log), then their column sums
  const bool want_dgg = out.dg_gamma.present() && p.has_g_gamma;
  fg.dgg_rows = want_dgg ? da : nullptr;
  if (timer) timer->mark("finish_gb", st);
  if (tokens > 0 && (fg.dg || fg.draw || fg.da || fg.dbeta || fg.dgg_rows)) {
    if (KG > 1) {
      const dim3 grid(static_cast<unsigned>((tokens + kGbTokens - 1) / kGbTokens), static_cast<unsigned>(p.HV));
      auto launch = [&](auto fast16, auto npl) {
        auto go = [&](auto gt) {
          finish_gb_kernel<decltype(fast16)::value, decltype(npl)::value, decltype(gt)><<<grid, 32 * kGbTokens, 0, st>>>(fg);
        };
        switch (fg.g_dt) {
          case 0: go(__half{}); break;
          case 1: go(__nv_bfloat16{}); break;
          case 2: go(float{}); break;
          default: go(double{}); break;
        }
      };
      const bool fast16 = dt == 0 || dt == 1, narrow = p.K <= 128;
      if (fast16 && narrow) launch(std::true_type{}, std::integral_constant<int, 4>{});
      else if (fast16) launch(std::true_type{}, std::integral_constant<int, kMaxKPerLane>{});
      else if (narrow) launch(std::false_type{}, std::integral_constant<int, 4>{});
      else launch(std::false_type{}, std::integral_constant<int, kMaxKPerLane>{});
    } else {
      finish_gb_scalar_kernel<<<static_cast<unsigned>((gb_rows * p.HV + 255) / 256), 256, 0, st>>>(fg);
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_error("finish_gb launch", e);
  }
  if (timer) timer->mark("colsum", st);
  // the column sums' partials in pq's place and on into pk's (both read by finish_qk above, dead
  // now; ceil(tokens / 128) x HV K floats fit their 2 x tokens x HV x K of 2 or 4 bytes)
  float* scratch = pq;
  if (out.ddt_bias.present()) {
    const int C = static_cast<int>(p.HV * KG);
    if ((e = colsum(fg.draw, want_dtb ? gb_rows : 0, C, scratch, out.ddt_bias.data, dtype_code(out.ddt_bias.dtype), st)) !=
        cudaSuccess)
      return cuda_error("colsum launch", e);
  }
  if (out.dA_log.present()) {
    const int C = static_cast<int>(p.HV);
    if ((e = colsum(fg.da, want_da ? gb_rows : 0, C, scratch, out.dA_log.data, dtype_code(out.dA_log.dtype), st)) !=
        cudaSuccess)
      return cuda_error("colsum launch", e);
  }
  if (out.dg_gamma.present()) {
    const int C = static_cast<int>(p.HV);
    if ((e = colsum(da, want_dgg ? gb_rows : 0, C, scratch, out.dg_gamma.data, dtype_code(out.dg_gamma.dtype), st)) !=
        cudaSuccess)
      return cuda_error("colsum launch (dg_gamma)", e);
  }
  return Status::Ok();
}

}  // namespace
}  // namespace bwd

std::size_t backward_kda_gdn_workspace_bytes(const detail::Problem& p) {
  if (!config::can_implement(p, "backward").ok()) return 0;
  return bwd::workspace_of(p);
}

Status backward_kda_gdn(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        Workspace ws, cudaStream_t st, StageTimer* timer) {
  using namespace bwd;
  Status s = config::can_implement(p, "backward");
  if (!s.ok()) return s;
  const ForwardInputs& f = in.fwd;
  s = check_aligned({{"q", &f.q}, {"k", &f.k}, {"v", &f.v}, {"g", &f.g}, {"beta", &f.beta},
                     {"A_log", &f.A_log}, {"dt_bias", &f.dt_bias}, {"initial_state", &f.initial_state},
                     {"d_o", &in.d_o}, {"dht", &in.dht}, {"dq", &out.dq}, {"dk", &out.dk}, {"dv", &out.dv},
                     {"dg", &out.dg}, {"dbeta", &out.dbeta}, {"dA_log", &out.dA_log},
                     {"ddt_bias", &out.ddt_bias}, {"dh0", &out.dh0}});
  if (!s.ok()) return s;
  const bool token = p.token_replay;
  if (token && !p.delta)  // a test hook: its token kernels run the delta rule's recurrence
    return Status::Unsupported("the CUDA token replay (a test oracle) covers the delta-rule families only");
  const bool from_saved = !token && in.saved.present();
  const SavedKind kind = token ? SavedKind::kNone : saved_kind(p);
  if (from_saved && kind == SavedKind::kNone)  // (the API refuses it first: saved_bytes is 0)
    return Status::Unsupported("keep_chunk_local does not apply to this problem: pass no saved buffer");
  const Compute compute = compute_of(p);  // the chunked path's (and a saved buffer's) form
  const std::size_t need = token ? Plan(p).total : ChunkPlan(p, compute, kind).total;
  if (ws.bytes < need || (need > 0 && ws.data == nullptr))
    return {StatusCode::kWorkspaceTooSmall, "CUDA backward workspace too small"};
  // The saved buffer's shape checks need no device; its header is read after the switch to it.
  const Compute saved_form = compute;
  const std::size_t saved_have = from_saved ? static_cast<std::size_t>(in.saved.numel()) : 0;
  const std::size_t saved_want = from_saved ? SavedLayout(p, saved_form).total : 0;
  auto saved_size_error = [&] {
    return Status::Invalid("saved has " + std::to_string(saved_have) + " bytes, needs " +
                           std::to_string(saved_want) + " (see saved_bytes)");
  };
  if (from_saved) {
    if (reinterpret_cast<std::uintptr_t>(in.saved.data) % kAlign != 0)
      return Status::Invalid("saved must be 256-byte aligned on CUDA (as allocations are)");
    if (saved_have < kSavedHeaderBytes) return saved_size_error();
  }
  DeviceGuard device;
  if (Status ds = device.enter(p.device.index); !ds.ok()) return ds;
  if (from_saved) {
    // header first: a buffer written under another backward form has another size, the header says which
    if (!in.saved_as_filled)  // the caller's word that saved is the forward's, unchanged: no stream sync
      if (Status hs = host::check_saved_header(p, saved_form, in.saved.data, st); !hs.ok()) return hs;
    if (saved_have < saved_want) return saved_size_error();
  }
  // the token replay or the chunked form, then the shared finish
  unsigned char* base = static_cast<unsigned char*>(ws.data);
  Partials parts;
  s = token ? run_token_replay(p, in, out, base, st, &parts)
            : run_chunked(p, in, out, base, compute, kind, st, timer, &parts);
  if (!s.ok()) return s;
  if (Status fs = run_finish(p, in, out, parts, st, token ? nullptr : timer); !fs.ok()) return fs;
  if (timer && !token) timer->mark("end", st);
  return Status::Ok();
}


bool chunk_local_saved_applies(const detail::Problem& p) {
  return p.opt.keep_chunk_local && !p.delta && p.dtype != DType::kFloat32 &&
         !config::ComputeForm(p.dtype, config::compute_of(p)).f32 &&
         kern::recurrence_wgmma_supported(dtype_code(p.dtype), static_cast<int>(p.K), static_cast<int>(p.V)) &&
         config::can_implement(p, "backward").ok();
}

std::size_t saved_kda_gdn_bytes(const detail::Problem& p) {
  if (!config::can_implement(p, "backward").ok()) return 0;
  if (p.opt.keep_chunk_local && !chunk_local_saved_applies(p)) return 0;
  return bwd::SavedLayout(p, bwd::compute_of(p)).total;
}

std::size_t forward_saved_workspace_bytes(const detail::Problem& p) {
  if (!config::can_implement(p, "backward").ok()) return 0;
  return bwd::SavedForwardPlan(p, bwd::compute_of(p)).total;
}

Status forward_saved_kda_gdn(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
                             Workspace ws, cudaStream_t st) {
  using namespace bwd;
  Status s = config::can_implement(p, "backward");
  if (!s.ok()) return s;
  const Compute compute = compute_of(p);
  const SavedLayout sl(p, compute);
  const SavedForwardPlan pl(p, compute);
  if (static_cast<std::size_t>(out.saved.numel()) < sl.total)
    return Status::Invalid("saved has " + std::to_string(out.saved.numel()) + " bytes, needs " +
                           std::to_string(sl.total) + " (see saved_bytes)");
  if (reinterpret_cast<std::uintptr_t>(out.saved.data) % kAlign != 0)
    return Status::Invalid("saved must be 256-byte aligned on CUDA (as allocations are)");
  if (ws.bytes < pl.total || (pl.total > 0 && ws.data == nullptr))
    return {StatusCode::kWorkspaceTooSmall,
            "CUDA forward with a saved buffer: workspace too small (query forward_workspace_size with "
            "Options::disable_recompute set)"};
  DeviceGuard device;
  if (Status ds = device.enter(p.device.index); !ds.ok()) return ds;
  cudaError_t e = cudaSuccess;
  const ComputeForm cf(p, compute);
  const int dt = dtype_code(p.dtype);
  const int cdt = cf.f32 ? 2 : dt;
  unsigned char* base = static_cast<unsigned char*>(ws.data);
  unsigned char* sv = static_cast<unsigned char*>(out.saved.data);

  if ((e = build_maps(p, base + pl.seqs, base + pl.chunks, st)) != cudaSuccess)
    return cuda_error("chunk map launch", e);
  const FrontBufs fb = front_bufs(sv, sl.front, base, pl.seqs, pl.chunks);
  FrontOutputs fo;
  fo.ht = out.final_state.present() ? out.final_state.data : nullptr;
  fo.ht_dt = out.final_state.present() ? dtype_code(out.final_state.dtype) : 2;
  fo.o = out.o.data;
  fo.o_dt = dt;
  fo.hs = pl.hs == SavedForwardPlan::kNone ? nullptr : base + pl.hs;
  if (Status fs = run_front(p, in, cdt, cf.split, fb, fo, st); !fs.ok()) return fs;
  if (out.h.present() && p.num_chunks > 0) {  // return_intermediate_states: the saved float32 states
    const int64_t n = p.num_chunks * p.HV * p.K * p.V;
    if (out.h.dtype == DType::kFloat32) {
      e = cudaMemcpyAsync(out.h.data, fb.h, static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, st);
    } else {
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
      widen_states_kernel<<<blocks, 256, 0, st>>>(static_cast<const float*>(fb.h), static_cast<double*>(out.h.data), n);
      e = cudaGetLastError();
    }
    if (e != cudaSuccess) return cuda_error("copying h", e);
  }
  return host::write_saved_header(p, compute, sv, st);
}

}  // namespace linattn::cuda
