// The CUDA backward's workspace plans: byte offsets of every buffer of the chunked backward
// (ChunkPlan) and of a forward that fills a saved buffer (SavedForwardPlan), and which kind of
// saved buffer a backward reads (SavedKind). Host only; chunk_bwd.cu runs the kernels over them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.hpp"
#include "cuda/config/backward_form.hpp"
#include "cuda/host/saved_buffer.hpp"

namespace linattn::cuda::host {

using config::Compute;

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
// With a chunk-local saved buffer (SavedKind::kChunkLocal, GLA and simple GLA: Options::keep_chunk_local) Qg,
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
  ChunkPlan(const detail::Problem& p, Compute compute, SavedKind kind);
};

// Workspace of a forward that fills a saved buffer: the maps and, where the state pass does not
// compute O itself (kern::saved_forward_o_in_pass), the chunk-start states in the compute type for
// the output kernel (hs). U and its low half are written where V_new and its low half go (the
// state pass reads each element before it writes it, same thread).
struct SavedForwardPlan {
  std::size_t seqs = 0, chunks = 0, hs = kNone, total = 0;
  static constexpr std::size_t kNone = ~std::size_t{0};
  SavedForwardPlan(const detail::Problem& p, Compute compute);
};

// p.has_saved: the backward is given a saved buffer (the token replay does not read it); a
// chunk-local one where keep_chunk_local applies (elsewhere the API refuses it).
SavedKind saved_kind(const detail::Problem& p);

}  // namespace linattn::cuda::host
