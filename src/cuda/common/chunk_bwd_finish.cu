// The CUDA backward's finish stage (chunk_bwd_stages.hpp): dq, dk from the partials of pass 2 or
// the token replay (summed over the GVA group and V splits in a fixed order, then the l2norm
// backward), dg and dβ through the gate and β transforms, and the per-head column sums (ddt_bias,
// dA_log, dg_gamma), each in an order fixed by the shape alone (bitwise reproducible).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/chunk_bwd_stages.hpp"
#include "cuda/common/gate.cuh"
#include "cuda/common/host_util.hpp"
#include "cuda/common/mma.cuh"
#include "cuda/host/stage_timer.hpp"

namespace linattn::cuda::bwd {
namespace {

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
      const float rstd = gate::l2_rnorm(warp_sum(ss));
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

}  // namespace

// Finish: sums over the GVA group (and V splits), the transforms backwards, the column sums.
Status run_finish(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                  const Partials& parts, cudaStream_t st, StageTimer* timer) {
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

}  // namespace linattn::cuda::bwd
