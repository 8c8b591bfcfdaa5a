// Per-thread scratch of the CPU backend, carved out of the caller's Workspace. The same layout
// functions size the workspace (Arena without a base pointer) and hand out the pointers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.hpp"

namespace linattn::cpu {

constexpr int64_t kC = kChunkSize;  // chunk length of the chunked forward (64)
constexpr int64_t kSub = 16;        // backward replay: states kept per sub-block of a chunk

// Family traits: what a family composes out of the common blocks.
struct FamilyTraits {
  bool delta;        // delta-rule update with beta (GDN, KDA)
  bool vector_gate;  // per-channel gate [.., K] (KDA, GLA); otherwise scalar per token and head
};

// Bump allocator over a byte range; with base == nullptr it only counts bytes.
struct Arena {
  char* base = nullptr;
  std::size_t off = 0;
  template <class T>
  T* take(int64_t n) {
    off = (off + 63) & ~static_cast<std::size_t>(63);
    T* ptr = base ? reinterpret_cast<T*>(base + off) : nullptr;
    off += static_cast<std::size_t>(n > 0 ? n : 0) * sizeof(T);
    return ptr;
  }
};

// One chunk of inputs of one (sequence, value head), after the transforms.
template <class T>
struct ChunkIn {
  T* q = nullptr;         // [C][K]  (l2-normalised when use_qk_l2norm_in_kernel)
  T* k = nullptr;         // [C][K]
  T* v = nullptr;         // [C][V]
  T* g = nullptr;         // [C][K]  per-token log decay after the gate transform (scalar: broadcast)
  T* graw = nullptr;      // [C][gw] raw gate as passed (backward only)
  T* beta = nullptr;      // [C]     beta after the transform (delta families)
  T* beta_raw = nullptr;  // [C]     (backward only)
};

// Forward scratch of one thread.
template <class T>
struct FwdScratch {
  ChunkIn<T> in;
  T* S = nullptr;    // [K][V] running state
  T* gam = nullptr;  // [C][K] chunk-local cumsum of g
  T* Aqk = nullptr;  // [C][C] tril(Q K^T o decay), diagonal included
  T* Akk = nullptr;  // [C][C] strict tril(K K^T o decay)
  T* W = nullptr;    // [C][K]
  T* U = nullptr;    // [C][V] U, then V_new
  T* tmpK = nullptr; // [C][K] Q o exp(gam) / K o exp(gam_last - gam)
  T* o = nullptr;    // [C][V]
  T* rowK = nullptr; // [K]
  T* rowC = nullptr; // [C]
};

template <class T>
inline void layout(Arena& a, const detail::Problem& p, FwdScratch<T>* s, bool with_raw = false) {
  const int64_t K = p.K, V = p.V;
  s->in.q = a.take<T>(kC * K);
  s->in.k = a.take<T>(kC * K);
  s->in.v = a.take<T>(kC * V);
  s->in.g = a.take<T>(kC * K);
  s->in.beta = a.take<T>(kC);
  if (with_raw) {
    s->in.graw = a.take<T>(kC * K);
    s->in.beta_raw = a.take<T>(kC);
  }
  s->S = a.take<T>(K * V);
  s->gam = a.take<T>(kC * K);
  s->Aqk = a.take<T>(kC * kC);
  s->Akk = a.take<T>(kC * kC);
  s->W = a.take<T>(kC * K);
  s->U = a.take<T>(kC * V);
  s->tmpK = a.take<T>(kC * K);
  s->o = a.take<T>(kC * V);
  s->rowK = a.take<T>(K);
  s->rowC = a.take<T>(kC);
}

// Scratch of the chunked (WY) backward of one chunk (chunk_bwd.hpp).
template <class T>
struct ChunkBwdWork {
  T* St = nullptr;     // [V][K] S^T (products with S^T as row combinations)
  T* dSnT = nullptr;   // [V][K] dSn^T
  T* tKt = nullptr;    // [K][C] a transposed [C][K] operand
  T* dAqk = nullptr;   // [C][C]
  T* dAkk = nullptr;   // [C][C]
  T* dX = nullptr;     // [C][K] dW, then M^-T dW
  T* dY = nullptr;     // [C][V] dU, then M^-T dU
  T* dkp = nullptr;    // [C][K] dk, "plus" side (k with exp(+gam))
  T* dkm = nullptr;    // [C][K] dk, "minus" side (k with exp(-gam))
  T* dgam = nullptr;   // [C][K]
  T* rowK = nullptr;   // [K]
  T* rowK2 = nullptr;  // [K]
  T* rowK3 = nullptr;  // [K]
  T* dglast = nullptr; // [K] the chunk-end gate gradient term
  T* colC = nullptr;   // [C]
};

template <class T>
inline void layout(Arena& a, const detail::Problem& p, ChunkBwdWork<T>* w) {
  const int64_t K = p.K, V = p.V;
  w->St = a.take<T>(V * K);
  w->dSnT = a.take<T>(V * K);
  w->tKt = a.take<T>(K * kC);
  w->dAqk = a.take<T>(kC * kC);
  w->dAkk = a.take<T>(kC * kC);
  w->dX = a.take<T>(kC * K);
  w->dY = a.take<T>(kC * V);
  w->dkp = a.take<T>(kC * K);
  w->dkm = a.take<T>(kC * K);
  w->dgam = a.take<T>(kC * K);
  w->rowK = a.take<T>(K);
  w->rowK2 = a.take<T>(K);
  w->rowK3 = a.take<T>(K);
  w->dglast = a.take<T>(K);
  w->colC = a.take<T>(kC);
}

// Backward scratch of one thread (one (sequence, q/k head) task at a time).
template <class T>
struct BwdScratch {
  FwdScratch<T> f;
  T* hstore = nullptr;  // [max chunks per sequence][K][V] recomputed chunk-boundary states
  T* dS = nullptr;      // [K][V]
  T* ckpt = nullptr;    // [C / kSub][K][V] states at the sub-block starts of a chunk
  T* states = nullptr;  // [kSub + 1][K][V] states before each token of a sub-block
  T* u = nullptr;       // [kSub][V] delta-rule u = v - S'^T k of each token
  T* e = nullptr;       // [C][K] exp(g)
  T* dO = nullptr;      // [C][V]
  T* dq = nullptr;      // [max seq len][K] dq summed over the G value heads
  T* dk = nullptr;      // [max seq len][K]
  T* dv = nullptr;      // [V]
  T* du = nullptr;      // [V]
  T* dg = nullptr;      // [K]
  T* tmpK = nullptr;    // [2][K]
  // chunked (WY) backward
  ChunkBwdWork<T> wy;
  T* vnew = nullptr;    // [C][V] V_new of the chunk (U stays in f.U)
  T* dvnew = nullptr;   // [C][V]
  T* dS2 = nullptr;     // [K][V] the state gradient before the chunk
  T* dqL = nullptr;     // [C][K] this value head's dq of the chunk
  T* dkL = nullptr;     // [C][K]
  T* dgL = nullptr;     // [C][K]
  T* dbL = nullptr;     // [C]
};

inline int64_t max_seq_len(const detail::Problem& p) {
  int64_t m = 0;
  for (int64_t n = 0; n < p.N; ++n) m = p.seq_len(n) > m ? p.seq_len(n) : m;
  return m;
}

inline int64_t max_seq_chunks(const detail::Problem& p) {
  int64_t m = 0;
  for (int64_t n = 0; n < p.N; ++n) {
    const int64_t c = p.chunk_offsets[n + 1] - p.chunk_offsets[n];
    m = c > m ? c : m;
  }
  return m;
}

template <class T>
inline void layout(Arena& a, const detail::Problem& p, BwdScratch<T>* s) {
  const int64_t K = p.K, V = p.V, KV = K * V;
  layout(a, p, &s->f, /*with_raw=*/true);
  s->hstore = a.take<T>(max_seq_chunks(p) * KV);
  s->dS = a.take<T>(KV);
  s->ckpt = a.take<T>((kC / kSub) * KV);
  s->states = a.take<T>((kSub + 1) * KV);
  s->u = a.take<T>(kSub * V);
  s->e = a.take<T>(kC * K);
  s->dO = a.take<T>(kC * V);
  s->dq = a.take<T>(max_seq_len(p) * K);
  s->dk = a.take<T>(max_seq_len(p) * K);
  s->dv = a.take<T>(V);
  s->du = a.take<T>(V);
  s->dg = a.take<T>(K);
  s->tmpK = a.take<T>(2 * K);
  layout(a, p, &s->wy);
  s->vnew = a.take<T>(kC * V);
  s->dvnew = a.take<T>(kC * V);
  s->dS2 = a.take<T>(KV);
  s->dqL = a.take<T>(kC * K);
  s->dkL = a.take<T>(kC * K);
  s->dgL = a.take<T>(kC * K);
  s->dbL = a.take<T>(kC);
}

template <class S>
inline std::size_t thread_bytes(const detail::Problem& p) {
  Arena a;
  S probe;
  layout(a, p, &probe);
  return a.off + 64;  // + alignment slack of the thread's base
}

}  // namespace linattn::cpu
