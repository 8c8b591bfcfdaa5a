// Kernel 1 of the chunked forward: everything local to one chunk (see chunk_fwd.hpp).
// Instantiated per family by kda/, gdn/, gla/ and simple_gla/ (VEC: the vector gate of KDA and
// GLA; DELTA: the delta rule of KDA and GDN, PrepParams::delta). Without the delta rule the K Kᵀ
// product, the triangular inverse and W are skipped and U is V itself (V_new = V); DELTA is a
// template argument so that the delta-rule families' kernels keep their code and registers.
#pragma once

#include <type_traits>

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/copy.cuh"
#include "cuda/common/prep_gate.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/common/tri_inverse.cuh"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {

constexpr int kC = config::kChunk;          // chunk size
constexpr int kPrepThreads = 256;

template <class T>
__host__ __device__ constexpr int pad_elems() { return 16 / static_cast<int>(sizeof(T)); }

// Shared-memory carve-up of chunk_prep (offsets in bytes, each 16-byte aligned). The scalar gate
// (vec = false) keeps one cumulative gate per token instead of [64][K], and, for 16-bit types,
// always keeps q in shared memory (its products read q̂ and k̂ directly, no staging buffers).
struct PrepSmem {
  int gam, ks, qs, akk, tinv, mbuf, beta, rk, rq, wide, total;
  __host__ __device__ PrepSmem(int K, int esize, bool q_in_smem, bool vec = true) {
    const int ldg = K + 4, ldk = K + 16 / esize;
    if (!vec && esize == 2) q_in_smem = true;
    int o = 0;
    gam = o; o += vec ? kC * ldg * 4 : kC * 4;
    ks = o; o += kC * ldk * esize;
    qs = o; o += q_in_smem ? kC * ldk * esize : 0;
    // 16-bit vector gate: tinv doubles as the B staging buffer of the decayed K Kᵀ / Q Kᵀ products
    // ([64][ldk]), mbuf as their A staging buffer ([32][ldk]). akk holds β V for U afterwards.
    // mbuf is also the inverse's per-warp 16x16 scratch.
    const bool st = esize == 2 && vec;
    const int tsz = kC * kLdA * 4, msz = 16 * kLdA * 4;
    akk = o; o += kC * kLdA * 4;
    tinv = o; o += (st && kC * ldk * esize > tsz) ? kC * ldk * esize : tsz;
    mbuf = o; o += (st && 32 * ldk * esize > msz) ? 32 * ldk * esize : msz;
    beta = o; o += kC * 4;
    rk = o; o += kC * 4;
    rq = o; o += kC * 4;
    wide = o; o += 16;
    total = o;
  }
};

// CTAs per SM: 2 (vector gate: ~113 KB shared memory); the 16-bit scalar gate fits 3 (75 KB, <= 80 registers).
template <class T, bool VEC>
constexpr int prep_min_blocks() { return (!VEC && kIs16<T>) ? 3 : 2; }

// In: the element type of q, k, v in global memory: T, or for the float32 form (T = float) the
// caller's 16-bit type (PrepParams::in_dt), converted as the rows are read.
template <class T, bool VEC, bool DELTA, class In = T>
__global__ void __launch_bounds__(kPrepThreads, prep_min_blocks<T, VEC>()) chunk_prep_kernel(const PrepParams p) {
  static_assert(std::is_same_v<In, T> || std::is_same_v<T, float>, "16-bit compute reads its own type");
  constexpr bool kSame = std::is_same_v<In, T>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int K = p.K, V = p.V, HV = p.HV, H = p.H;
  const auto bc = ChunkParallelScheduler<>::block_coord();
  const int c = bc.c, hv = bc.hv, h = hv / p.G;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const ChunkInfo ci = p.chunks[c];
  const int t0 = ci.t0, Lc = ci.len;
  // 16-bit scalar gate: q always in shared memory (PrepSmem reserves it). The caller's 16-bit q
  // under float32 compute is read from global memory where the products need it (the host does
  // not set q_in_smem then), so that the products' loaders have one source, known at compile time.
  const bool qsm = kSame && (p.q_in_smem != 0 || (!VEC && kIs16<T>));
  const PrepSmem L(K, sizeof(T), qsm, VEC);
  const int ldg = VEC ? K + 4 : 1, ldk = K + pad_elems<T>();
  float* gam = reinterpret_cast<float*>(smem + L.gam);  // γ: [64][K+4] (vector gate) or [64]
  T* ks = reinterpret_cast<T*>(smem + L.ks);
  T* qs = reinterpret_cast<T*>(smem + L.qs);
  float* Akk = reinterpret_cast<float*>(smem + L.akk);
  float* Ti = reinterpret_cast<float*>(smem + L.tinv);
  float* Mb = reinterpret_cast<float*>(smem + L.mbuf);
  float* bet = reinterpret_cast<float*>(smem + L.beta);
  float* rk = reinterpret_cast<float*>(smem + L.rk);
  float* rq = reinterpret_cast<float*>(smem + L.rq);
  int* wide = reinterpret_cast<int*>(smem + L.wide);
  // γ of token i, channel d
  auto gm = [&](int i, int d) -> float { return VEC ? gam[i * ldg + d] : gam[i]; };

  const In* qg = static_cast<const In*>(p.q);
  const In* kg = static_cast<const In*>(p.k);
  const In* vg = static_cast<const In*>(p.v);
  const int64_t blk = static_cast<int64_t>(c) * HV + hv;

  // ---- 1a. gates: transform + chunk-local cumsum. Vector gate: thread = (key channel d, segment
  // of K/4 consecutive tokens); the segment is scanned in registers and the segment offsets are
  // added in 1c. Scalar gate: 64 threads, warp-shuffle scans (warp 1 adds warp 0's total in 1c).
  // simple GLA's per-head constant gate, added to every token's g (0 for the other families)
  const gate::HeadGate hg = prep_head_gate(p, hv, (!VEC && p.g_gamma) ? load_any(p.g_gamma, p.gg_dt, hv) : 0.f);
  // The transform, then the gate floor (gate.cuh): g = -inf is a full forget, never NaN. The fast
  // transforms on 16-bit inputs (In: also in the float32 form's recompute, so that the backward's
  // γ is the forward's), the precise ones on float32 / float64 inputs.
  const bool use_dtb = p.gate_kind != 0 && p.has_dtb;
  const int lk = 31 - __clz(K);               // log2 K (K in {64, 128, 256})
  const int nseg = kPrepThreads >> lk;        // 4, 2, 1 token segments
  const int seglen = kC / nseg;               // 16, 32, 64 (a multiple of 16)
  const int gd = tid & (K - 1), gseg = tid >> lk;
  if constexpr (VEC) {
    const float dtb = use_dtb ? load_any(p.dt_bias, p.dtb_dt, static_cast<int64_t>(hv) * K + gd) : 0.f;
    const int i0 = gseg * seglen;
    const int64_t gstride = static_cast<int64_t>(HV) * K;
    const int64_t gbase = (static_cast<int64_t>(t0 + i0) * HV + hv) * K + gd;
    // float32 g: one 64-bit base, then 32-bit token offsets (the 64-bit products per load were
    // 6% of chunk_prep's instructions; HV K < 2^31: HV is a grid dimension, K <= 256)
    const float* gf0 = p.g_dt == 2 ? static_cast<const float*>(p.g) + gbase : nullptr;
    const int gs = HV * K;
    gate::with_head_gate(hg, [&](auto kind, auto regular) {
      float run = 0.f;
      for (int i8 = 0; i8 < seglen; i8 += 8) {
        float raw[8];
        if (p.g_dt == 2) {
          const float* gf = gf0 + i8 * gs;
#pragma unroll
          for (int m = 0; m < 8; ++m) raw[m] = i0 + i8 + m < Lc ? __ldg(gf + m * gs) : 0.f;
        } else {
#pragma unroll
          for (int m = 0; m < 8; ++m)
            raw[m] = i0 + i8 + m < Lc ? load_any(p.g, p.g_dt, gbase + (i8 + m) * gstride) : 0.f;
        }
        // raw is 0 past the chunk (its transform discarded by the sum)
        gate::head_gate_each<decltype(kind)::value, decltype(regular)::value, kIs16<In>>(hg, raw, dtb);
        gate::running_sum_below(raw, i0 + i8, Lc, run, [&](int m, float r) { gam[(i0 + i8 + m) * ldg + gd] = r; });
      }
    });
  } else {
    if (tid < kC) {
      float x = 0.f;
      if (tid < Lc) {
        const float dtb = use_dtb ? load_any(p.dt_bias, p.dtb_dt, hv) : 0.f;
        // simple GLA may have g_gamma alone (no g)
        const float raw = p.g ? load_any(p.g, p.g_dt, static_cast<int64_t>(t0 + tid) * HV + hv) : 0.f;
        gate::with_head_gate(hg, [&](auto kind, auto regular) {
          x = gate::head_gate<decltype(kind)::value, decltype(regular)::value, kIs16<In>>(hg, raw, dtb);
        });
      }
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      gam[tid] = x;
    }
  }
  // ---- 2a. k (and q) rows, raw, 16-byte vector copies, with the l2 norms of the rows (the
  // pieces of one row lie on consecutive lanes); beta
  constexpr int per = 16 / static_cast<int>(sizeof(In));
  const int pieces = K / per;            // 16-byte pieces of In per row (8..64)
  const bool fuse_norm = pieces <= 32;   // a row within one warp
  {
    const int lp = 31 - __clz(pieces);
    const int total = kC * pieces;       // a multiple of kPrepThreads
    for (int e0 = 0; e0 < total; e0 += 4 * kPrepThreads) {
      uint4 kv[4], qv[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int e = e0 + u * kPrepThreads + tid;
        const int i = e >> lp, d = (e & (pieces - 1)) * per;
        kv[u] = qv[u] = make_uint4(0, 0, 0, 0);
        if (e < total && i < Lc) {
          const int64_t off = (static_cast<int64_t>(t0 + i) * H + h) * K + d;
          kv[u] = __ldg(reinterpret_cast<const uint4*>(kg + off));
          if (qsm || fuse_norm) qv[u] = __ldg(reinterpret_cast<const uint4*>(qg + off));
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int e = e0 + u * kPrepThreads + tid;
        if (e0 + u * kPrepThreads >= total) break;  // uniform
        const int i = e >> lp, d = (e & (pieces - 1)) * per;
        if constexpr (kSame) {
          *reinterpret_cast<uint4*>(ks + i * ldk + d) = kv[u];
          if (qsm) *reinterpret_cast<uint4*>(qs + i * ldk + d) = qv[u];
        } else {
          store_widened<In>(ks + i * ldk + d, kv[u]);
          if (qsm) store_widened<In>(qs + i * ldk + d, qv[u]);
        }
        if (fuse_norm) {
          float sk = 0.f, sq = 0.f;
          const In* ke = reinterpret_cast<const In*>(&kv[u]);
          const In* qe = reinterpret_cast<const In*>(&qv[u]);
#pragma unroll
          for (int m = 0; m < per; ++m) {
            const float a = to_f(ke[m]), b = to_f(qe[m]);
            sk = fmaf(a, a, sk);
            sq = fmaf(b, b, sq);
          }
          for (int o = pieces >> 1; o > 0; o >>= 1) {
            sk += __shfl_xor_sync(0xffffffffu, sk, o);
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
          }
          if ((e & (pieces - 1)) == 0) {
            rk[i] = p.l2norm ? gate::l2_rnorm(sk) : 1.f;
            rq[i] = p.l2norm ? gate::l2_rnorm(sq) : 1.f;
          }
        }
      }
    }
    if (tid < kC) {
      float b = 0.f;
      if (tid < Lc && DELTA) {
        b = load_any(p.beta, p.beta_dt, static_cast<int64_t>(t0 + tid) * HV + hv);
        if (p.beta_mode != 0) b = (p.beta_mode == 2 ? 2.f : 1.f) * gate::sigmoid_precise(b);
      }
      bet[tid] = b;
    }
  }
  __syncthreads();
  // ---- 1b. segment offsets (read before 1c writes); diagonal-block spreads.
  // Diagonal 16x16 blocks go to the tensor cores when the block's decay spread
  // max_d (γ_16b - γ_16b+15) keeps exp(spread) |k| inside the operand type's range (always with
  // safe_gate, L >= -5: spread <= 75); otherwise ("wide" blocks) they take exact per-element exps.
  // A 16-row block never straddles a segment, so the spread is read off the local scans.
  float goff = 0.f;
  if constexpr (VEC) {
    for (int s2 = 0; s2 < gseg; ++s2) goff += gam[((s2 + 1) * seglen - 1) * ldg + gd];
    if (warp < 4) {
      const float thr = std::is_same_v<T, __half> ? 4.f : 80.f;
      float spread = 0.f;
      for (int d = lane; d < K; d += 32) spread = fmaxf(spread, gam[(16 * warp) * ldg + d] - gam[(16 * warp + 15) * ldg + d]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) spread = fmaxf(spread, __shfl_xor_sync(0xffffffffu, spread, o));
      if (lane == 0) wide[warp] = !(spread <= thr);
    }
  } else {
    if (tid < 4) wide[tid] = 0;
  }
  // ---- 2b. l2 norms, rows wider than a warp (warp per row)
  if (!fuse_norm) {
    for (int i = warp; i < kC; i += kPrepThreads / 32) {
      float sk = 0.f, sq = 0.f;
      for (int d = lane; d < K; d += 32) {
        const float kx = to_f(ks[i * ldk + d]);
        sk += kx * kx;
        float qx = 0.f;
        if (qsm) qx = to_f(qs[i * ldk + d]);
        else if (i < Lc) qx = to_f(qg[(static_cast<int64_t>(t0 + i) * H + h) * K + d]);
        sq += qx * qx;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        sk += __shfl_xor_sync(0xffffffffu, sk, o);
        sq += __shfl_xor_sync(0xffffffffu, sq, o);
      }
      if (lane == 0) {
        rk[i] = p.l2norm ? gate::l2_rnorm(sk) : 1.f;
        rq[i] = p.l2norm ? gate::l2_rnorm(sq) : 1.f;
      }
    }
  }
  __syncthreads();
  // ---- 1c. finish the cumsum; exp(γ_C)
  if constexpr (VEC) {
    if (gseg > 0) {
      for (int i = gseg * seglen; i < (gseg + 1) * seglen; ++i) gam[i * ldg + gd] += goff;
    }
    if (gseg == nseg - 1) p.gexp[blk * K + gd] = expf(gam[(kC - 1) * ldg + gd]);
  } else {
    if (tid >= 32 && tid < kC) gam[tid] += gam[31];  // gam[31] is not written here
  }
  __syncthreads();
  if constexpr (!VEC) {
    if (tid < K) p.gexp[blk * K + tid] = expf(gam[kC - 1]);
  }

  // q element (raw) of row i, channel d: from shared memory or the caller's rows
  const In* qrow0 = qg + static_cast<int64_t>(t0) * H * K + static_cast<int64_t>(h) * K;
  const T* qsrc = nullptr;  // kSame: either source as one pointer (the 16-bit paths read it directly)
  if constexpr (kSame) qsrc = qsm ? qs : qrow0;
  const int ldq = qsm ? ldk : H * K;
  const int qrows = qsm ? kC : Lc;
  auto qraw = [&](int i, int d) -> float {
    if constexpr (kSame) return i < qrows ? to_f(qsrc[static_cast<int64_t>(i) * ldq + d]) : 0.f;
    else return i < Lc ? to_f(qrow0[static_cast<int64_t>(i) * H * K + d]) : 0.f;
  };

  T* Aout = static_cast<T*>(p.Aqk) + blk * kC * kC;  // Aqk written straight to global
  // ---- 3a. 16x16 blocks of K Kᵀ and Q Kᵀ (with decay) on tensor cores, row block I against
  // column blocks 0..I. Row block I uses the reference token r = 16 I: row factor exp(γ_i - γ_r) <= 1
  // (i >= r); column factor exp(γ_r - γ_j) <= 1 for j < r (no overflow for any g <= 0) and
  // <= exp(spread) on the diagonal block (checked above).
  if constexpr (kIs16<T> && !VEC) {
    // 16-bit scalar gate: plain k Kᵀ and q Kᵀ from the raw rows (ldmatrix), the norms, β, scale and
    // the decay exp(γ_i - γ_j) (<= 1) applied to the products. Warp = one 16x16 block (I, J <= I)
    // of both products (shared B fragments); 10 blocks.
    const int g = lane >> 2, t = lane & 3;
    for (int b = warp; b < 10; b += kPrepThreads / 32) {
      const int I = b < 1 ? 0 : (b < 3 ? 1 : (b < 6 ? 2 : 3));
      const int J = b - I * (I + 1) / 2;
      float ak[2][4], aq[2][4];
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) ak[ni][e] = aq[ni][e] = 0.f;
#pragma unroll 2
      for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a_k[4], a_q[4], bb[2][2];
        ldsm_a(a_q, qs, ldk, 16 * I, k0);
        ldsm_b_n(bb, ks, ldk, k0, 16 * J);
        if constexpr (DELTA) {  // K Kᵀ: the delta rule's only
          ldsm_a(a_k, ks, ldk, 16 * I, k0);
          mma16<T>(ak[0], a_k, bb[0]);
          mma16<T>(ak[1], a_k, bb[1]);
        }
        mma16<T>(aq[0], a_q, bb[0]);
        mma16<T>(aq[1], a_q, bb[1]);
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = 16 * I + g + 8 * hh;
        const float gi = gam[i], bi = bet[i] * rk[i], si = p.scale * rq[i];
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
          const int j = 16 * J + 8 * ni + 2 * t;
          const float d0 = j <= i ? __expf(gi - gam[j]) * rk[j] : 0.f;
          const float d1 = j + 1 <= i ? __expf(gi - gam[j + 1]) * rk[j + 1] : 0.f;
          if (j < i) Akk[i * kLdA + j] = bi * d0 * ak[ni][2 * hh];
          if (j + 1 < i) Akk[i * kLdA + j + 1] = bi * d1 * ak[ni][2 * hh + 1];
          store2<T>(Aout + i * kC + j, si * d0 * aq[ni][2 * hh], si * d1 * aq[ni][2 * hh + 1]);
        }
      }
    }
  } else if constexpr (kIs16<T>) {
    // 16-bit vector gate: per row block, the decayed operands are computed once (one exp per
    // element) into shared memory and the products read them with ldmatrix.
    T* Ast = reinterpret_cast<T*>(smem + L.mbuf);  // [32][ldk]: k̂_i e^{γ_i-γ_r}, then q̂_i e^{γ_i-γ_r}
    T* Bst = reinterpret_cast<T*>(smem + L.tinv);  // [64][ldk]: k̂_j e^{γ_r-γ_j}, j < r + 16
    const int lq = lk - 2;                         // log2 (K / 4)
    for (int I = 0; I < 4; ++I) {
      const int r = 16 * I, nb = r + 16;
      const float* gr = gam + r * ldg;
      // A thread keeps one 4-wide column slot d for every row it stages (kPrepThreads is a multiple
      // of K / 4), so the reference row's gates are loaded once per row block, and the B rows and
      // the A rows run as two loops without a per-element branch.
      const int d = (tid & ((1 << lq) - 1)) << 2;
      const int rstep = kPrepThreads >> lq;
      const float4 gref = *reinterpret_cast<const float4*>(gr + d);
      for (int j = tid >> lq; j < nb; j += rstep) {  // B rows: k̂_j e^{γ_r-γ_j}
        float x[4];
        load4(ks + j * ldk + d, x);
        const float s = rk[j];
        const float4 b = *reinterpret_cast<const float4*>(gam + j * ldg + d);
        x[0] *= s * __expf(gref.x - b.x);
        x[1] *= s * __expf(gref.y - b.y);
        x[2] *= s * __expf(gref.z - b.z);
        x[3] *= s * __expf(gref.w - b.w);
        store4(Bst + j * ldk + d, x);
      }
      for (int ii = tid >> lq; ii < 32; ii += rstep) {  // A rows: k̂_i e^{γ_i-γ_r} (ii < 16), then q̂_i
        const int i = r + (ii & 15);
        float x[4];
        float s;
        if (ii < 16) {
          load4(ks + i * ldk + d, x);
          s = rk[i];
        } else {
          if (i < qrows) load4(qsrc + static_cast<int64_t>(i) * ldq + d, x);
          else x[0] = x[1] = x[2] = x[3] = 0.f;
          s = rq[i];
        }
        const float4 a = *reinterpret_cast<const float4*>(gam + i * ldg + d);
        x[0] *= s * __expf(a.x - gref.x);
        x[1] *= s * __expf(a.y - gref.y);
        x[2] *= s * __expf(a.z - gref.z);
        x[3] *= s * __expf(a.w - gref.w);
        store4(Ast + ii * ldk + d, x);
      }
      __syncthreads();
      for (int job = warp; job < 2 * (I + 1); job += kPrepThreads / 32) {
        const int mat = job & 1, cb = job >> 1;
        if (cb == I && wide[I]) continue;
        if (mat == 0 && !DELTA) continue;  // K Kᵀ: the delta rule's only
        float acc[2][4];
#pragma unroll
        for (int ni = 0; ni < 2; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[ni][e] = 0.f;
        const T* Ap = Ast + mat * 16 * ldk;
#pragma unroll 2
        for (int k0 = 0; k0 < K; k0 += 16) {
          uint32_t a[4], b[2][2];
          ldsm_a(a, Ap, ldk, 0, k0);
          ldsm_b_n(b, Bst, ldk, k0, 16 * cb);
          mma16<T>(acc[0], a, b[0]);
          mma16<T>(acc[1], a, b[1]);
        }
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int ni = 0; ni < 2; ++ni)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int i = r + g + 8 * hh, j = 16 * cb + 8 * ni + 2 * t;
            const float v0 = acc[ni][2 * hh], v1 = acc[ni][2 * hh + 1];
            if (mat == 0) {
              if (j < i) Akk[i * kLdA + j] = bet[i] * v0;
              if (j + 1 < i) Akk[i * kLdA + j + 1] = bet[i] * v1;
            } else {  // the whole block, zeros above the diagonal
              store2<T>(Aout + i * kC + j, j <= i ? p.scale * v0 : 0.f, j + 1 <= i ? p.scale * v1 : 0.f);
            }
          }
      }
      __syncthreads();  // staging buffers reused by the next row block
    }
  } else {
  for (int job = warp; job < 40; job += kPrepThreads / 32) {
    const int I = job < 4 ? 0 : (job < 12 ? 1 : (job < 24 ? 2 : 3));
    const int rem = job - (I == 0 ? 0 : (I == 1 ? 4 : (I == 2 ? 12 : 24)));
    const int mat = rem & 1, nt = rem >> 1;
    const bool diag = nt >= 2 * I;
    if (diag && wide[I]) continue;
    if (mat == 0 && !DELTA) continue;  // K Kᵀ: the delta rule's only
    const int r = 16 * I;
    float acc[1][1][4];
    zero_acc(acc);
    if constexpr (!VEC) {  // scalar gate: plain products, decay exp(γ_i - γ_j) (<= 1) applied after
      auto kraw = [&](int d, int j) -> float { return to_f(ks[j * ldk + d]) * rk[j]; };
      if (mat == 0) {
        auto afun = [&](int i, int d) -> float { return to_f(ks[i * ldk + d]) * rk[i]; };
        warp_mma<T, 1, 1>(acc, fn_op<T>(afun), fn_opk<T>(kraw), r, 8 * nt, 0, K);
      } else {
        auto afun = [&](int i, int d) -> float { return qraw(i, d) * rq[i]; };
        warp_mma<T, 1, 1>(acc, fn_op<T>(afun), fn_opk<T>(kraw), r, 8 * nt, 0, K);
      }
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = r + g + (e >= 2 ? 8 : 0), j = 8 * nt + 2 * t + (e & 1);
        if (j <= i) acc[0][0][e] *= __expf(gam[i] - gam[j]);
      }
    } else {
      const float* gr = gam + r * ldg;
      auto bfun = [&](int d, int j) -> float {
        return to_f(ks[j * ldk + d]) * rk[j] * __expf(gr[d] - gam[j * ldg + d]);
      };
      if (mat == 0) {
        auto afun = [&](int i, int d) -> float {
          return to_f(ks[i * ldk + d]) * rk[i] * __expf(gam[i * ldg + d] - gr[d]);
        };
        warp_mma<T, 1, 1>(acc, fn_op<T>(afun), fn_opk<T>(bfun), r, 8 * nt, 0, K);
      } else {
        auto afun = [&](int i, int d) -> float { return qraw(i, d) * rq[i] * __expf(gam[i * ldg + d] - gr[d]); };
        warp_mma<T, 1, 1>(acc, fn_op<T>(afun), fn_opk<T>(bfun), r, 8 * nt, 0, K);
      }
    }
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = r + g + (e >= 2 ? 8 : 0), j = 8 * nt + 2 * t + (e & 1);
      if (mat == 0) {
        if (j < i) Akk[i * kLdA + j] = bet[i] * acc[0][0][e];
      } else if (j <= i) {
        Aout[i * kC + j] = from_f<T>(p.scale * acc[0][0][e]);
      }
    }
  }
  }
  // ---- 3b. "wide" diagonal blocks (vector gate): exact per-element decay exp(γ_i - γ_j), j <= i;
  // zeros above their diagonal in Aqk
  if constexpr (VEC) {
    for (int e = tid; e < 4 * 136; e += kPrepThreads) {
      const int b = e / 136, x = e - b * 136;
      if (!wide[b]) continue;
      int ii = static_cast<int>((sqrtf(8.f * x + 1.f) - 1.f) * 0.5f);
      while ((ii + 1) * (ii + 2) / 2 <= x) ++ii;
      while (ii * (ii + 1) / 2 > x) --ii;
      const int jj = x - ii * (ii + 1) / 2;
      const int i = 16 * b + ii, j = 16 * b + jj;
      float skk = 0.f, sqk = 0.f;
      const float* gi = gam + i * ldg;
      const float* gj = gam + j * ldg;
      const int rot = (tid * 4) & (K - 1);
      for (int dd = 0; dd < K; ++dd) {
        const int d = (dd + rot) & (K - 1);
        const float kj = to_f(ks[j * ldk + d]) * __expf(gi[d] - gj[d]);
        skk += to_f(ks[i * ldk + d]) * kj;
        sqk += qraw(i, d) * kj;
      }
      Akk[i * kLdA + j] = (j < i) ? bet[i] * rk[i] * rk[j] * skk : 0.f;
      Aout[i * kC + j] = from_f<T>(p.scale * rq[i] * rk[j] * sqk);
    }
    for (int e = tid; e < 4 * 256; e += kPrepThreads) {
      const int b = e >> 8, ii = (e >> 4) & 15, jj = e & 15;
      if (wide[b] && jj > ii) Aout[(16 * b + ii) * kC + 16 * b + jj] = from_f<T>(0.f);
    }
  }
  if constexpr (kIs16<T>) {  // Aqk blocks above the diagonal blocks: zeros, 16-byte stores
    for (int e = tid; e < kC * 8; e += kPrepThreads) {
      const int i = e >> 3, s8 = e & 7;
      if (8 * s8 >= 16 * ((i >> 4) + 1)) *reinterpret_cast<uint4*>(Aout + i * kC + 8 * s8) = make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int e = tid; e < kC * kC; e += kPrepThreads) {  // strictly upper part of Aqk
      const int i = e >> 6, j = e & 63;
      if (j > i) Aout[e] = from_f<T>(0.f);
    }
  }
  __syncthreads();

  // ---- 4. T = (I + Akk)^-1, unit lower triangular.
  // 4a. diagonal 16x16 blocks by forward substitution, one thread per (block, column), the column
  //     in registers (warps 0-1; they also write the zeros above the diagonal: the blocks above
  //     the diagonal blocks are never read); warps 2-7 write Qg and Kgᵀ meanwhile.
  // 4b. off-diagonal blocks by levels on the TF32 tensor cores (one warp per block):
  //     T_IJ = -T_II sum_{J <= K' < I} A_IK' T_K'J; level I-J = 1, 2, 3 (3, 2, 1 blocks).
  // β v (16-bit, V <= 128) is loaded into registers first and staged in the Akk area after the inverse.
  const In* vbase = vg + static_cast<int64_t>(t0) * HV * V + static_cast<int64_t>(hv) * V;
  const int ldv = V + pad_elems<T>();
  const bool vstage = kIs16<T> && kC * ldv * static_cast<int>(sizeof(T)) <= kC * kLdA * 4;
  const int vpieces = V / per;
  uint4 vreg[4];
  if (vstage && DELTA) {
    const int lvp = 31 - __clz(vpieces);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int e = u * kPrepThreads + tid, j = e >> lvp, d = (e & (vpieces - 1)) * per;
      vreg[u] = make_uint4(0, 0, 0, 0);
      if (e < kC * vpieces && j < Lc) vreg[u] = __ldg(reinterpret_cast<const uint4*>(vbase + static_cast<int64_t>(j) * HV * V + d));
    }
  }
  if (tid < 64) {
    if constexpr (DELTA) {
    const int b = tid >> 4, cc = tid & 15, base = 16 * b;
    float tcol[16];
    tri_diag_column<kLdA>(Akk + base * kLdA + base, cc, tcol);
#pragma unroll
    for (int ii = 0; ii < 16; ++ii) Ti[(base + ii) * kLdA + base + cc] = tcol[ii];
    }
  } else {
    const int tq = tid - 64, nq = kPrepThreads - 64;
    if (!VEC && p.Qg == nullptr) {
      // scalar gate, raw-row state pass: only the row factors of Qg and KgT (see PrepParams::rowfac)
      float* rf = p.rowfac + blk * 2 * kC;
      for (int i = tq; i < kC; i += nq) {
        rf[i] = i < Lc ? p.scale * rq[i] * __expf(gam[i]) : 0.f;
        rf[kC + i] = i < Lc ? rk[i] * __expf(gam[kC - 1] - gam[i]) : 0.f;
      }
    } else {
    if constexpr (kIs16<T>) {
      // Qg = scale q exp(γ) [64][K]: a thread writes 8 consecutive channels of a row (16-byte
      // loads and stores, the row's gates as two float4)
      {
        T* out = static_cast<T*>(p.Qg) + blk * kC * K;
        const int l8 = lk - 3;  // log2 (K / 8)
        for (int e = tq; e < (kC << l8); e += nq) {
          const int i = e >> l8, d = (e & ((1 << l8) - 1)) << 3;
          const float sc = p.scale * rq[i];
          uint4 qv = make_uint4(0u, 0u, 0u, 0u);
          if (i < qrows) qv = *reinterpret_cast<const uint4*>(qsrc + static_cast<int64_t>(i) * ldq + d);
          const T* qe = reinterpret_cast<const T*>(&qv);
          float ex[8];
          if constexpr (VEC) {
            const float4 a = *reinterpret_cast<const float4*>(gam + i * ldg + d);
            const float4 b = *reinterpret_cast<const float4*>(gam + i * ldg + d + 4);
            ex[0] = __expf(a.x); ex[1] = __expf(a.y); ex[2] = __expf(a.z); ex[3] = __expf(a.w);
            ex[4] = __expf(b.x); ex[5] = __expf(b.y); ex[6] = __expf(b.z); ex[7] = __expf(b.w);
          } else {
            const float x = __expf(gam[i]);
#pragma unroll
            for (int m = 0; m < 8; ++m) ex[m] = x;
          }
          uint4 ov;
          uint32_t* ow = reinterpret_cast<uint32_t*>(&ov);
#pragma unroll
          for (int m = 0; m < 4; ++m) ow[m] = pack2<T>(sc * to_f(qe[2 * m]) * ex[2 * m], sc * to_f(qe[2 * m + 1]) * ex[2 * m + 1]);
          *reinterpret_cast<uint4*>(out + i * K + d) = ov;
        }
      }
      // KgT = (k exp(γ_C - γ))ᵀ [K][64]: the transpose by ldmatrix.trans. A warp job is 8
      // channels x 32 tokens (four 8x8 tiles); lane (a = l % 4, b = l / 4) receives tokens
      // 8j + 2a, 8j + 2a + 1 of channel b from tile j, so its gate loads hit 32 distinct banks and
      // each store is one token pair.
      {
        T* out = static_cast<T*>(p.KgT) + blk * K * kC;
        T* out_lo = p.KgT_lo ? static_cast<T*>(p.KgT_lo) + blk * K * kC : nullptr;
        const int jobs = (K / 8) * 2;
        for (int job = (tq >> 5); job < jobs; job += nq >> 5) {
          const int d0 = (job >> 1) * 8, i0 = (job & 1) * 32;
          uint32_t r[4];
          ldsm_x4_t(r, ks + (i0 + 8 * (lane >> 3) + (lane & 7)) * ldk + d0);
          const int d = d0 + (lane >> 2);
          const float gC = gm(kC - 1, d);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int i = i0 + 8 * j + 2 * (lane & 3);
            const T* kp = reinterpret_cast<const T*>(&r[j]);
            const float x0 = rk[i] * to_f(kp[0]) * __expf(gC - gm(i, d));
            const float x1 = rk[i + 1] * to_f(kp[1]) * __expf(gC - gm(i + 1, d));
            store2<T>(out + d * kC + i, x0, x1);
            if (out_lo) store2<T>(out_lo + d * kC + i, x0 - to_f(from_f<T>(x0)), x1 - to_f(from_f<T>(x1)));
          }
        }
      }
    } else {
      // float32: Qg = scale q exp(γ) [64][K]
      {
        T* out = static_cast<T*>(p.Qg) + blk * kC * K;
        const int lh = lk - 1;  // log2 (K / 2)
        for (int e = tq; e < (kC << lh); e += nq) {
          const int i = e >> lh, d = 2 * (e & ((1 << lh) - 1));
          const float sc = p.scale * rq[i];
          const float e0 = __expf(gm(i, d)), e1 = VEC ? __expf(gm(i, d + 1)) : e0;
          store2<T>(out + i * K + d, sc * qraw(i, d) * e0, sc * qraw(i, d + 1) * e1);
        }
      }
      // KgT = (k exp(γ_C - γ))ᵀ [K][64]; γ_C = γ of the last valid token (rows past Lc repeat it)
      {
        T* out = static_cast<T*>(p.KgT) + blk * K * kC;
        for (int e = tq; e < K * (kC / 2); e += nq) {
          const int d = e >> 5, i = 2 * (e & 31);
          const float gC = gm(kC - 1, d);
          const float x0 = rk[i] * to_f(ks[i * ldk + d]) * __expf(gC - gm(i, d));
          const float x1 = rk[i + 1] * to_f(ks[(i + 1) * ldk + d]) * __expf(gC - gm(i + 1, d));
          store2<T>(out + d * kC + i, x0, x1);
        }
      }
    }
    }
  }
  // No delta rule: no inverse, no W; U = V (rows past the chunk's end zero, as the delta rule's U),
  // unless the state pass reads the v rows itself (U null: StateParams::v_raw).
  if constexpr (!DELTA) {
    if (p.U == nullptr) return;
    const int lvp = 31 - __clz(vpieces);
    T* Uout = static_cast<T*>(p.U) + blk * kC * V;
    for (int e = tid; e < kC * vpieces; e += kPrepThreads) {
      const int j = e >> lvp, d = (e & (vpieces - 1)) * per;
      uint4 u = make_uint4(0, 0, 0, 0);
      if (j < Lc) u = __ldg(reinterpret_cast<const uint4*>(vbase + static_cast<int64_t>(j) * HV * V + d));
      if constexpr (kSame) *reinterpret_cast<uint4*>(Uout + j * V + d) = u;
      else store_widened<In>(Uout + j * V + d, u);
      if (p.U_lo) *reinterpret_cast<uint4*>(static_cast<T*>(p.U_lo) + blk * kC * V + j * V + d) = make_uint4(0, 0, 0, 0);
    }
    return;  // (the rest is the delta rule's)
  }
  __syncthreads();
  // level 1 (warps 0-2); 16-bit: the B operand of W, β k̂ exp(γ), replaces k in shared memory
  // meanwhile (warps 3-7; k is no longer read)
  if (warp < 3) {
    inv_offdiag_block<!kIs16<T>>(Ti, Akk, Mb + 16 * warp, warp + 1, warp);
  } else if constexpr (kIs16<T>) {
    const int lq = lk - 2;
    for (int e = tid - 96; e < (kC << lq); e += kPrepThreads - 96) {
      const int j = e >> lq, d = (e & ((1 << lq) - 1)) << 2;
      float x[4];
      load4(ks + j * ldk + d, x);
      const float s = bet[j] * rk[j];
      if constexpr (VEC) {
        const float4 a = *reinterpret_cast<const float4*>(gam + j * ldg + d);
        x[0] *= s * __expf(a.x); x[1] *= s * __expf(a.y);
        x[2] *= s * __expf(a.z); x[3] *= s * __expf(a.w);
      } else {
        const float f = s * __expf(gam[j]);
#pragma unroll
        for (int m = 0; m < 4; ++m) x[m] *= f;
      }
      store4(ks + j * ldk + d, x);
    }
  }
  __syncthreads();
  if (warp < 2) inv_offdiag_block<!kIs16<T>>(Ti, Akk, Mb + 16 * warp, warp + 2, warp);  // level 2
  __syncthreads();
  if (warp == 0) inv_offdiag_block<!kIs16<T>>(Ti, Akk, Mb, 3, 0);                       // level 3
  __syncthreads();

  // [backward] optional export of T = M^-1 (complete here; zeros above the diagonal)
  if (p.Ainv) {
    T* out = static_cast<T*>(p.Ainv) + blk * kC * kC;
    for (int e = tid; e < kC * kC / 2; e += kPrepThreads) {
      const int i = e >> 5, j = 2 * (e & 31);
      store2<T>(out + i * kC + j, j <= i ? Ti[i * kLdA + j] : 0.f, j + 1 <= i ? Ti[i * kLdA + j + 1] : 0.f);
    }
  }
  // ---- 5. W = T (β exp(γ) k), U = T (β v): warp = (row tile mt, column half)
  if constexpr (kIs16<T>) {
    // β v staged in the (now free) Akk area when it fits (V <= 128), from the registers. With
    // p.U_lo the product runs twice, on round(β v) and then on β v − round(β v) (the same
    // accumulators), and U leaves as hi + lo halves.
    T* Vst = reinterpret_cast<T*>(smem + L.akk);
    const bool split_u = p.U_lo != nullptr;
    auto stage_bv = [&](bool low) {
      const int lvp = 31 - __clz(vpieces);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int e = u * kPrepThreads + tid, j = e >> lvp, d = (e & (vpieces - 1)) * per;
        if (e < kC * vpieces) {
          uint4 w = vreg[u];
          T* x = reinterpret_cast<T*>(&w);
          const float b = bet[j];
#pragma unroll
          for (int m = 0; m < per; ++m) {
            const float bv = b * to_f(x[m]);
            x[m] = from_f<T>(low ? bv - to_f(from_f<T>(bv)) : bv);
          }
          *reinterpret_cast<uint4*>(Vst + j * ldv + d) = w;
        }
      }
    };
    if (vstage) {
      stage_bv(false);
      __syncthreads();
    }
    const int mt = warp & 3, half = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    const int kend = 16 * (mt + 1);  // T is lower triangular
    auto afrag = [&](uint32_t (&a)[4], int k0) {
      const float* r0 = Ti + (16 * mt + g) * kLdA + k0 + 2 * t;
      const float2 x0 = *reinterpret_cast<const float2*>(r0);
      const float2 x1 = *reinterpret_cast<const float2*>(r0 + 8 * kLdA);
      const float2 x2 = *reinterpret_cast<const float2*>(r0 + 8);
      const float2 x3 = *reinterpret_cast<const float2*>(r0 + 8 * kLdA + 8);
      a[0] = pack2<T>(x0.x, x0.y);
      a[1] = pack2<T>(x1.x, x1.y);
      a[2] = pack2<T>(x2.x, x2.y);
      a[3] = pack2<T>(x3.x, x3.y);
    };
    auto out_tile = [&](T* dst, int ld, int n0, float (&acc)[4][4]) {
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = n0 + 8 * ni + 2 * t;
        store2<T>(dst + (16 * mt + g) * ld + col, acc[ni][0], acc[ni][1]);
        store2<T>(dst + (16 * mt + g + 8) * ld + col, acc[ni][2], acc[ni][3]);
      }
    };
    // the low half x − round(x) of a tile (U_lo)
    auto out_tile_lo = [&](T* dst, int ld, int n0, float (&acc)[4][4]) {
      auto lo = [](float x) { return x - to_f(from_f<T>(x)); };
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = n0 + 8 * ni + 2 * t;
        store2<T>(dst + (16 * mt + g) * ld + col, lo(acc[ni][0]), lo(acc[ni][1]));
        store2<T>(dst + (16 * mt + g + 8) * ld + col, lo(acc[ni][2]), lo(acc[ni][3]));
      }
    };
    auto mma_staged = [&](float (&acc)[4][4], const T* B, int ldb, int n0) {
      for (int k0 = 0; k0 < kend; k0 += 16) {
        uint32_t a[4], b0[2][2], b1[2][2];
        afrag(a, k0);
        ldsm_b_k(b0, B, ldb, k0, n0);
        ldsm_b_k(b1, B, ldb, k0, n0 + 16);
        mma16<T>(acc[0], a, b0[0]);
        mma16<T>(acc[1], a, b0[1]);
        mma16<T>(acc[2], a, b1[0]);
        mma16<T>(acc[3], a, b1[1]);
      }
    };
    T* Wout = static_cast<T*>(p.W) + blk * kC * K;
    for (int n0 = half * (K / 2); n0 < (half + 1) * (K / 2); n0 += 32) {
      float acc[4][4];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[ni][e] = 0.f;
      mma_staged(acc, ks, ldk, n0);
      out_tile(Wout, K, n0, acc);
    }
    T* Uout = static_cast<T*>(p.U) + blk * kC * V;
    T* Ulo = split_u ? static_cast<T*>(p.U_lo) + blk * kC * V : nullptr;
    if (vstage) {
      // V <= 128: at most two 32-column tiles per warp, both kept in registers across the restage
      constexpr int kMaxTiles = 2;
      float acc[kMaxTiles][4][4];
#pragma unroll
      for (int u = 0; u < kMaxTiles; ++u)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[u][ni][e] = 0.f;
      const int ntile = (V / 2) / 32;
#pragma unroll
      for (int u = 0; u < kMaxTiles; ++u)
        if (u < ntile) mma_staged(acc[u], Vst, ldv, half * (V / 2) + 32 * u);
      if (split_u) {
        __syncthreads();  // every warp is done with round(β v)
        stage_bv(true);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < kMaxTiles; ++u)
          if (u < ntile) mma_staged(acc[u], Vst, ldv, half * (V / 2) + 32 * u);
      }
#pragma unroll
      for (int u = 0; u < kMaxTiles; ++u)
        if (u < ntile) {
          out_tile(Uout, V, half * (V / 2) + 32 * u, acc[u]);
          if (split_u) out_tile_lo(Ulo, V, half * (V / 2) + 32 * u, acc[u]);
        }
    } else {
      for (int n0 = half * (V / 2); n0 < (half + 1) * (V / 2); n0 += 32) {
        auto tfun = [&](int i, int j) -> float { return Ti[i * kLdA + j]; };
        auto bu = [&](int j, int vv) -> float {
          return j < Lc ? bet[j] * to_f(vbase[static_cast<int64_t>(j) * HV * V + vv]) : 0.f;
        };
        auto bu_lo = [&](int j, int vv) -> float {
          const float x = bu(j, vv);
          return x - to_f(from_f<T>(x));
        };
        float acc3[1][4][4];
        zero_acc(acc3);
        warp_mma<T, 1, 4>(acc3, fn_op<T>(tfun), fn_opk<T>(bu), 16 * mt, n0, 0, kend);
        if (split_u) warp_mma<T, 1, 4>(acc3, fn_op<T>(tfun), fn_opk<T>(bu_lo), 16 * mt, n0, 0, kend);
        out_tile(Uout, V, n0, acc3[0]);
        if (split_u) out_tile_lo(Ulo, V, n0, acc3[0]);
      }
    }
  } else {
    const int mt = warp & 3, half = warp >> 2;
    const int g = lane >> 2, t = lane & 3;
    auto tfun = [&](int i, int j) -> float { return Ti[i * kLdA + j]; };
    const int kend = 16 * (mt + 1);  // T is lower triangular
    T* Wout = static_cast<T*>(p.W) + blk * kC * K;
    for (int n0 = half * (K / 2); n0 < (half + 1) * (K / 2); n0 += 32) {
      auto bw = [&](int j, int d) -> float {
        return bet[j] * rk[j] * to_f(ks[j * ldk + d]) * __expf(gm(j, d));
      };
      float acc[1][4][4];
      zero_acc(acc);
      warp_mma<T, 1, 4>(acc, fn_op<T>(tfun), fn_opk<T>(bw), 16 * mt, n0, 0, kend);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = n0 + 8 * ni + 2 * t;
        store2<T>(Wout + (16 * mt + g) * K + col, acc[0][ni][0], acc[0][ni][1]);
        store2<T>(Wout + (16 * mt + g + 8) * K + col, acc[0][ni][2], acc[0][ni][3]);
      }
    }
    T* Uout = static_cast<T*>(p.U) + blk * kC * V;
    for (int n0 = half * (V / 2); n0 < (half + 1) * (V / 2); n0 += 32) {
      auto bu = [&](int j, int vv) -> float {
        return j < Lc ? bet[j] * to_f(vbase[static_cast<int64_t>(j) * HV * V + vv]) : 0.f;
      };
      float acc[1][4][4];
      zero_acc(acc);
      warp_mma<T, 1, 4>(acc, fn_op<T>(tfun), fn_opk<T>(bu), 16 * mt, n0, 0, kend);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = n0 + 8 * ni + 2 * t;
        store2<T>(Uout + (16 * mt + g) * V + col, acc[0][ni][0], acc[0][ni][1]);
        store2<T>(Uout + (16 * mt + g + 8) * V + col, acc[0][ni][2], acc[0][ni][3]);
      }
    }
  }
}

template <class T, bool VEC, bool DELTA, class In = T>
cudaError_t launch_prep_t(const PrepParams& p, int smem, cudaStream_t s) {
  auto kernel = chunk_prep_kernel<T, VEC, DELTA, In>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid = ChunkParallelScheduler<>::grid_shape(p.num_chunks, p.HV);
  kernel<<<grid, kPrepThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <bool VEC, bool DELTA>
cudaError_t launch_prep_dispatch(int dtype, const PrepParams& p, int smem, cudaStream_t s) {
  switch (dtype) {
    case 0: return launch_prep_t<__half, VEC, DELTA>(p, smem, s);
    case 1: return launch_prep_t<__nv_bfloat16, VEC, DELTA>(p, smem, s);
    default:  // float32 compute on float32 rows, or on the caller's 16-bit rows (p.in_dt)
      if (p.in_dt == 0) return launch_prep_t<float, VEC, DELTA, __half>(p, smem, s);
      if (p.in_dt == 1) return launch_prep_t<float, VEC, DELTA, __nv_bfloat16>(p, smem, s);
      return launch_prep_t<float, VEC, DELTA>(p, smem, s);
  }
}

}  // namespace linattn::cuda::kern
