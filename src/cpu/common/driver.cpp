#include "cpu/common/driver.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/dtype.hpp"
#include "common/transforms.hpp"
#include "cpu/common/chunk.hpp"
#include "cpu/common/chunk_bwd.hpp"
#include "cpu/common/inputs.hpp"
#include "cpu/common/sequence.hpp"
#include "cpu/common/simd.hpp"
#include "cpu/common/token.hpp"

namespace linattn::cpu {

using detail::Problem;

namespace {

bool use_f64(const Problem& p) { return p.dtype == DType::kFloat64; }

char* align64(void* ptr) {
  const auto u = reinterpret_cast<std::uintptr_t>(ptr);
  return reinterpret_cast<char*>((u + 63) & ~static_cast<std::uintptr_t>(63));
}

template <class S>
std::size_t scratch_bytes(const Problem& p) {
  return thread_bytes<S>(p);
}

// Reduction partials of the backward: per (sequence, value head) [gw] d dt_bias, dA_log, dg_gamma.
int64_t partial_stride(const Problem& p) { return p.gate_width() + 2; }

template <class T>
std::size_t partial_bytes(const Problem& p) {
  return static_cast<std::size_t>(p.N * p.HV * partial_stride(p)) * sizeof(T) + 64;
}

// Below about this many state-element updates (tokens x HV x K x V) a call finishes in well under
// a millisecond, and waking OpenMP threads costs more than it saves (on a loaded machine the
// waiting threads spin for milliseconds), so small calls run on the calling thread.
constexpr int64_t kMinWorkForThreads = int64_t(1) << 21;

int max_threads(const Problem& p, int64_t tasks) {
  const int64_t work = p.cu.back() * p.HV * p.K * p.V;
  if (work < kMinWorkForThreads) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), tasks)));
}

// Threads the workspace can feed: at most max_threads(tasks), at least 1.
int usable_threads(const Problem& p, int64_t tasks, std::size_t avail, std::size_t per_thread) {
  const int64_t fit = per_thread ? static_cast<int64_t>(avail / per_thread) : tasks;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_threads(p, tasks), fit)));
}

template <class T>
Status forward_t(const FamilyTraits& tr, const Problem& p, const ForwardInputs& in,
                 const ForwardOutputs& out, Workspace ws) {
  const std::size_t per = scratch_bytes<FwdScratch<T>>(p);
  const int64_t tasks = p.N * p.HV;
  const int nthreads = usable_threads(p, tasks, ws.bytes, per);
  char* base = static_cast<char*>(ws.data);
#pragma omp parallel num_threads(nthreads)
  {
    Arena a{align64(base + per * omp_get_thread_num())};
    FwdScratch<T> s;
    layout(a, p, &s);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      sequence_forward<T>(tr, p, in, &out, /*want_o=*/true, task / p.HV, task % p.HV, s, nullptr);
    }
  }
  return Status::Ok();
}

// Pushes dg (gradient of the per-channel log decay of one token) through the gate transform:
// writes d raw g and accumulates the per-head partials. `gate` is the token's gate as the
// forward used it (after the transform and the floor): a floored gate has gradient 0.
template <class T>
void gate_grad(const FamilyTraits& tr, const Problem& p, const BackwardOutputs& out,
               const HeadParams<T>& hp, const T* graw, const T* gate, T* dg, int64_t tok,
               int64_t hv, T* part) {
  const int64_t K = p.K, gw = p.gate_width();
  for (int64_t c = 0; c < K; ++c) {
    if (gate[c] <= T(detail::kGateFloor)) dg[c] = 0;
  }
  T* pddt = part;
  T* pdA = part + gw;
  T* pdgg = part + gw + 1;
  if (tr.vector_gate) {
    for (int64_t c = 0; c < K; ++c) {
      dg[c] = p.gate_tf.backward(graw[c], hp.dt_bias[c], hp.a_log, p.has_A_log, dg[c], pdA);
      pddt[c] += dg[c];
    }
    if (out.dg.present()) detail::store_row(out.dg.data, out.dg.dtype, p.g_offset(tok, hv), K, dg);
    return;
  }
  T dgs = 0;
  for (int64_t c = 0; c < K; ++c) dgs += dg[c];
  *pdgg += dgs;  // simple GLA's g_gamma enters every token's gate
  if (!p.has_g) return;
  dgs = p.gate_tf.backward(graw[0], hp.dt_bias[0], hp.a_log, p.has_A_log, dgs, pdA);
  pddt[0] += dgs;
  if (out.dg.present()) {
    detail::store_from_double(out.dg.data, out.dg.dtype, p.g_offset(tok, hv), static_cast<double>(dgs));
  }
}

// The chunk start state of chunk c: the forward's saved buffer when given (copied into hstore
// when misaligned), else the recomputed hstore.
template <class T>
const T* chunk_start_state(const Problem& p, const BackwardInputs& in, int64_t n, int64_t hv,
                           int64_t c, T* hstore) {
  const int64_t KV = p.K * p.V;
  if (!in.saved.present()) return hstore + c * KV;
  const char* src = static_cast<const char*>(in.saved.data) +
                    saved_offset(p, p.chunk_offsets[n] + c, hv, sizeof(T));
  if (reinterpret_cast<std::uintptr_t>(src) % alignof(T) == 0) return reinterpret_cast<const T*>(src);
  std::memcpy(hstore + c * KV, src, static_cast<std::size_t>(KV) * sizeof(T));
  return hstore + c * KV;
}

// Value head hv of task (n, h) by the chunked WY backward. On the CPU the two passes run fused
// chunk by chunk (last to first): pass 2 of chunk c needs only what pass 1 has just produced
// for it (its dS after the chunk and dV_new), so no per-chunk buffer of them is needed.
template <class T>
void backward_head_wy(const FamilyTraits& tr, const Problem& p, const BackwardInputs& in,
                      const BackwardOutputs& out, int64_t n, int64_t hv, const BwdScratch<T>& s,
                      T* part) {
  const ForwardInputs& fin = in.fwd;
  const int64_t K = p.K, V = p.V;
  const int64_t len = p.seq_len(n);
  const int64_t nc = (len + kC - 1) / kC;
  const T scale = static_cast<T>(p.scale);
  const HeadParams<T> hp = load_head_params<T>(p, fin, hv);
  const ChunkIn<T>& ci = s.f.in;
  const FwdScratch<T>& f = s.f;
  if (!in.saved.present()) sequence_forward(tr, p, fin, nullptr, false, n, hv, s.f, s.hstore);
  T* dSn = s.dS;   // dL/dS after the chunk
  T* dSp = s.dS2;  // dL/dS before it
  load_state(p, in.dht, n, hv, dSn);
  for (int64_t c = nc - 1; c >= 0; --c) {
    const int64_t t0 = c * kC;
    const int64_t L = std::min(kC, len - t0);
    const T* S0 = chunk_start_state(p, in, n, hv, c, s.hstore);
    // The chunk's forward intermediates, by the same blocks as the forward.
    load_chunk(p, fin, hp, n, hv, t0, L, /*with_raw=*/true, ci);
    gate_cumsum(ci.g, f.gam, L, K);
    decay_products(ci.q, ci.k, f.gam, L, K, tr.vector_gate, f.Aqk, f.Akk);
    const T* vnew = ci.v;
    if (tr.delta) {
      wy_solve(f.Akk, ci.beta, ci.k, f.gam, ci.v, L, K, V, f.W, f.U, f.rowC);
      copy(f.U, s.vnew, L * V);
      delta_vnew(f.W, S0, L, K, V, s.vnew);
      vnew = s.vnew;
    }
    for (int64_t i = 0; i < L; ++i) {
      detail::load_row(in.d_o.data, in.d_o.dtype, p.v_offset(p.cu[n] + t0 + i, hv), V, s.dO + i * V);
    }
    const ChunkFwd<T> cf{ci.q, ci.k, ci.v, ci.beta, f.gam, f.Aqk, f.Akk, f.W, f.U, vnew,
                         L,    K,    V,    tr.delta};
    chunk_bwd_pass1(cf, S0, s.dO, dSn, scale, s.dvnew, dSp, s.wy);
    T* dv = s.f.o;  // [C][V], free in the backward
    chunk_bwd_pass2(cf, S0, s.dO, dSn, s.dvnew, scale, s.dqL, s.dkL, dv, s.dbL, s.dgL, s.wy);
    std::swap(dSn, dSp);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t ts = t0 + i;
      const int64_t tok = p.cu[n] + ts;
      axpy(T(1), s.dqL + i * K, s.dq + ts * K, K);
      axpy(T(1), s.dkL + i * K, s.dk + ts * K, K);
      detail::store_row(out.dv.data, out.dv.dtype, p.v_offset(tok, hv), V, dv + i * V);
      if (tr.delta && out.dbeta.present()) {
        const T db = s.dbL[i] * p.beta_tf.derivative(ci.beta_raw[i]);
        detail::store_from_double(out.dbeta.data, out.dbeta.dtype, p.beta_offset(tok, hv),
                                  static_cast<double>(db));
      }
      gate_grad(tr, p, out, hp, ci.graw + i * p.gate_width(), ci.g + i * K, s.dgL + i * K, tok, hv, part);
    }
  }
  if (out.dh0.present()) store_state(p, out.dh0, n * p.HV + hv, dSn);
}

// Backward of task (sequence n, q/k head h): its G value heads one after the other, dq and dk
// summed over them in the thread's scratch.
template <class T>
void backward_task(const FamilyTraits& tr, const Problem& p, const BackwardInputs& in,
                   const BackwardOutputs& out, int64_t n, int64_t h, const BwdScratch<T>& s,
                   T* partials) {
  const ForwardInputs& fin = in.fwd;
  const int64_t K = p.K, V = p.V, KV = K * V;
  const int64_t len = p.seq_len(n);
  const int64_t nc = (len + kC - 1) / kC;
  const T scale = static_cast<T>(p.scale);
  fill(s.dq, T(0), len * K);
  fill(s.dk, T(0), len * K);
  const ChunkIn<T>& ci = s.f.in;
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t hv = h * p.G + g;
    const HeadParams<T> hp = load_head_params<T>(p, fin, hv);
    T* part = partials + (n * p.HV + hv) * partial_stride(p);
    fill(part, T(0), partial_stride(p));
    if (!p.token_replay) {  // the chunked WY backward; the token replay is the tests' oracle
      backward_head_wy(tr, p, in, out, n, hv, s, part);
      continue;
    }
    if (!in.saved.present()) sequence_forward(tr, p, fin, nullptr, false, n, hv, s.f, s.hstore);
    load_state(p, in.dht, n, hv, s.dS);
    for (int64_t c = nc - 1; c >= 0; --c) {
      const int64_t t0 = c * kC;
      const int64_t L = std::min(kC, len - t0);
      const T* S0 = s.hstore + c * KV;
      if (in.saved.present()) {  // the forward's states (copied when the buffer is misaligned)
        const char* src = static_cast<const char*>(in.saved.data) +
                          saved_offset(p, p.chunk_offsets[n] + c, hv, sizeof(T));
        if (reinterpret_cast<std::uintptr_t>(src) % alignof(T) == 0) {
          S0 = reinterpret_cast<const T*>(src);
        } else {
          std::memcpy(s.hstore + c * KV, src, static_cast<std::size_t>(KV) * sizeof(T));
        }
      }
      load_chunk(p, fin, hp, n, hv, t0, L, /*with_raw=*/true, ci);
      exp_array(ci.g, s.e, L * K);
      for (int64_t i = 0; i < L; ++i) {
        detail::load_row(in.d_o.data, in.d_o.dtype, p.v_offset(p.cu[n] + t0 + i, hv), V, s.dO + i * V);
      }
      const T* beta = tr.delta ? ci.beta : nullptr;
      auto beta_at = [&](int64_t i) { return beta ? beta[i] : T(0); };
      // States at the sub-block starts, by replaying the token recurrence from S0.
      const int64_t nsb = (L + kSub - 1) / kSub;
      for (int64_t b = 1; b < nsb; ++b) {
        T* cb = s.ckpt + b * KV;
        copy(b == 1 ? S0 : s.ckpt + (b - 1) * KV, cb, KV);
        for (int64_t i = (b - 1) * kSub; i < b * kSub; ++i) {
          token_step(cb, cb, s.e + i * K, ci.k + i * K, ci.v + i * V, beta_at(i), tr.delta, K, V, s.u, s.tmpK);
        }
      }
      for (int64_t b = nsb - 1; b >= 0; --b) {
        const int64_t i0 = b * kSub;
        const int64_t nb = std::min(kSub, L - i0);
        const T* start = b == 0 ? S0 : s.ckpt + b * KV;
        auto state = [&](int64_t i) -> const T* { return i == 0 ? start : s.states + i * KV; };
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t ti = i0 + i;
          token_step(state(i), s.states + (i + 1) * KV, s.e + ti * K, ci.k + ti * K, ci.v + ti * V,
                     beta_at(ti), tr.delta, K, V, s.u + i * V, s.tmpK);
        }
        for (int64_t i = nb - 1; i >= 0; --i) {
          const int64_t ti = i0 + i;
          const int64_t ts = t0 + ti;  // token within the sequence
          const int64_t tok = p.cu[n] + ts;
          T dbeta = 0;
          token_backward(state(i), s.e + ti * K, ci.q + ti * K, ci.k + ti * K, ci.v + ti * V,
                         s.u + i * V, beta_at(ti), s.dO + ti * V, scale, tr.delta, K, V, s.dS,
                         s.dq + ts * K, s.dk + ts * K, s.dv, s.dg, &dbeta, s.du);
          detail::store_row(out.dv.data, out.dv.dtype, p.v_offset(tok, hv), V, s.dv);
          if (tr.delta && out.dbeta.present()) {
            const T db = dbeta * p.beta_tf.derivative(ci.beta_raw[ti]);
            detail::store_from_double(out.dbeta.data, out.dbeta.dtype, p.beta_offset(tok, hv),
                                      static_cast<double>(db));
          }
          gate_grad(tr, p, out, hp, ci.graw + ti * p.gate_width(), ci.g + ti * K, s.dg, tok, hv, part);
        }
      }
    }
    if (out.dh0.present()) store_state(p, out.dh0, n * p.HV + hv, s.dS);
  }
  // dq, dk: through the l2norm (if any), then out in their dtype.
  const bool l2 = p.opt.use_qk_l2norm_in_kernel;
  T* y = s.tmpK;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t off = p.qk_offset(p.cu[n] + t, h);
    T* dq = s.dq + t * K;
    T* dk = s.dk + t * K;
    if (l2) {
      detail::load_row(fin.q.data, fin.q.dtype, off, K, y);
      T rstd = detail::l2norm_forward(y, y, K);
      detail::l2norm_backward(y, rstd, dq, dq, K);
      detail::load_row(fin.k.data, fin.k.dtype, off, K, y);
      rstd = detail::l2norm_forward(y, y, K);
      detail::l2norm_backward(y, rstd, dk, dk, K);
    }
    detail::store_row(out.dq.data, out.dq.dtype, off, K, dq);
    detail::store_row(out.dk.data, out.dk.dtype, off, K, dk);
  }
}

template <class T>
Status backward_t(const FamilyTraits& tr, const Problem& p, const BackwardInputs& in,
                  const BackwardOutputs& out, Workspace ws) {
  const std::size_t per = scratch_bytes<BwdScratch<T>>(p);
  const std::size_t pb = partial_bytes<T>(p);
  const int64_t tasks = p.N * p.H;
  const int nthreads = usable_threads(p, tasks, ws.bytes - pb, per);
  T* partials = reinterpret_cast<T*>(align64(ws.data));
  char* base = static_cast<char*>(ws.data) + pb;
#pragma omp parallel num_threads(nthreads)
  {
    Arena a{align64(base + per * omp_get_thread_num())};
    BwdScratch<T> s;
    layout(a, p, &s);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      backward_task(tr, p, in, out, task / p.H, task % p.H, s, partials);
    }
  }
  // Sums over sequences, in a fixed order.
  const int64_t gw = p.gate_width(), ps = partial_stride(p);
  for (int64_t hv = 0; hv < p.HV; ++hv) {
    T dA = 0, dgg = 0;
    for (int64_t n = 0; n < p.N; ++n) {
      dA += partials[(n * p.HV + hv) * ps + gw];
      dgg += partials[(n * p.HV + hv) * ps + gw + 1];
    }
    if (out.dA_log.present()) detail::store_from_double(out.dA_log.data, out.dA_log.dtype, hv, static_cast<double>(dA));
    if (out.dg_gamma.present()) detail::store_from_double(out.dg_gamma.data, out.dg_gamma.dtype, hv, static_cast<double>(dgg));
    if (out.ddt_bias.present()) {
      for (int64_t c = 0; c < gw; ++c) {
        T d = 0;
        for (int64_t n = 0; n < p.N; ++n) d += partials[(n * p.HV + hv) * ps + c];
        detail::store_from_double(out.ddt_bias.data, out.ddt_bias.dtype, hv * gw + c, static_cast<double>(d));
      }
    }
  }
  return Status::Ok();
}

Status check_traits(const FamilyTraits& tr, const Problem& p) {
  if (tr.delta != p.delta || tr.vector_gate != p.vector_gate) {
    return {StatusCode::kBackendError, std::string("cpu backend: family traits do not match ") + family_name(p.family)};
  }
  return Status::Ok();
}

}  // namespace

std::size_t forward_workspace(const Problem& p) {
  const std::size_t per = use_f64(p) ? scratch_bytes<FwdScratch<double>>(p) : scratch_bytes<FwdScratch<float>>(p);
  return per * static_cast<std::size_t>(max_threads(p, p.N * p.HV));
}

std::size_t backward_workspace(const Problem& p) {
  if (use_f64(p)) {
    return partial_bytes<double>(p) + scratch_bytes<BwdScratch<double>>(p) * static_cast<std::size_t>(max_threads(p, p.N * p.H));
  }
  return partial_bytes<float>(p) + scratch_bytes<BwdScratch<float>>(p) * static_cast<std::size_t>(max_threads(p, p.N * p.H));
}

std::size_t saved_state_bytes(const Problem& p) {
  return kSavedHeaderBytes +
         static_cast<std::size_t>(p.num_chunks * p.HV * p.K * p.V) * (use_f64(p) ? sizeof(double) : sizeof(float));
}

namespace {

// What a saved buffer must match to be reused: the family, the compute type, the sizes, the
// sequence layout and the input transforms (the states depend on them). It cannot tell two
// calls with equal shapes but different values apart; that remains the caller's contract.
struct SavedHeader {
  char magic[8];
  int32_t family, f64;
  int64_t tokens, N, HV, K, V, num_chunks;
  uint64_t layout;  // detail::saved_problem_hash
};
static_assert(sizeof(SavedHeader) <= kSavedHeaderBytes, "saved header too large");

SavedHeader saved_header(const Problem& p) {
  SavedHeader h{};
  std::memcpy(h.magic, "LINATTN1", 8);
  h.family = static_cast<int32_t>(p.family);
  h.f64 = use_f64(p) ? 1 : 0;
  h.tokens = p.cu.back();
  h.N = p.N;
  h.HV = p.HV;
  h.K = p.K;
  h.V = p.V;
  h.num_chunks = p.num_chunks;
  h.layout = saved_problem_hash(p);
  return h;
}

}  // namespace

Status run_forward(const FamilyTraits& tr, const Problem& p, const ForwardInputs& in,
                   const ForwardOutputs& out, Workspace ws) {
  Status st = check_traits(tr, p);
  if (!st.ok()) return st;
  st = use_f64(p) ? forward_t<double>(tr, p, in, out, ws) : forward_t<float>(tr, p, in, out, ws);
  if (st.ok() && out.saved.present()) {
    const SavedHeader h = saved_header(p);
    std::memcpy(out.saved.data, &h, sizeof(h));
  }
  return st;
}

Status run_backward(const FamilyTraits& tr, const Problem& p, const BackwardInputs& in,
                    const BackwardOutputs& out, Workspace ws) {
  Status st = check_traits(tr, p);
  if (!st.ok()) return st;
  if (in.saved.present()) {
    const SavedHeader want = saved_header(p);
    SavedHeader got;
    std::memcpy(&got, in.saved.data, sizeof(got));
    if (std::memcmp(&want, &got, sizeof(want)) != 0) {
      return Status::Invalid("saved was not written by a forward of this problem (family, sizes, "
                             "sequences, dtype or input transforms differ)");
    }
  }
  return use_f64(p) ? backward_t<double>(tr, p, in, out, ws) : backward_t<float>(tr, p, in, out, ws);
}

}  // namespace linattn::cpu
