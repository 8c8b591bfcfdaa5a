#include "cpu/common/sequence.hpp"

#include <cstring>

#include "common/dtype.hpp"
#include "cpu/common/chunk.hpp"
#include "cpu/common/inputs.hpp"
#include "cpu/common/simd.hpp"

namespace linattn::cpu {

using detail::Problem;

template <class T>
void sequence_forward(const FamilyTraits& tr, const Problem& p, const ForwardInputs& in,
                      const ForwardOutputs* out, bool want_o, int64_t n, int64_t hv, const FwdScratch<T>& s, T* hstore) {
  const int64_t K = p.K, V = p.V, KV = K * V;
  const HeadParams<T> hp = load_head_params<T>(p, in, hv);
  load_state(p, in.initial_state, n, hv, s.S);
  const int64_t len = p.seq_len(n);
  const int64_t nc = (len + kC - 1) / kC;
  const bool write_h = out && out->h.present();
  const bool write_saved = out && out->saved.present();
  const bool write_o = out && want_o;
  for (int64_t c = 0; c < nc; ++c) {
    const int64_t t0 = c * kC;
    const int64_t L = len - t0 < kC ? len - t0 : kC;
    const int64_t gc = p.chunk_offsets[n] + c;
    if (hstore) copy(s.S, hstore + c * KV, KV);
    if (write_h) store_state(p, out->h, gc * p.HV + hv, s.S);
    if (write_saved) {
      std::memcpy(static_cast<char*>(out->saved.data) + saved_offset(p, gc, hv, sizeof(T)), s.S,
                  static_cast<std::size_t>(KV) * sizeof(T));
    }
    const ChunkIn<T>& ci = s.in;
    load_chunk(p, in, hp, n, hv, t0, L, /*with_raw=*/false, ci);
    gate_cumsum(ci.g, s.gam, L, K);
    decay_products(ci.q, ci.k, s.gam, L, K, tr.vector_gate, s.Aqk, s.Akk);
    const T* vnew = ci.v;
    if (tr.delta) {
      wy_solve(s.Akk, ci.beta, ci.k, s.gam, ci.v, L, K, V, s.W, s.U, s.rowC);
      delta_vnew(s.W, s.S, L, K, V, s.U);
      vnew = s.U;
    }
    if (write_o) {
      chunk_output(ci.q, s.gam, s.S, s.Aqk, vnew, static_cast<T>(p.scale), L, K, V, s.tmpK, s.o);
      for (int64_t i = 0; i < L; ++i) {
        detail::store_row(out->o.data, out->o.dtype, p.v_offset(p.cu[n] + t0 + i, hv), V, s.o + i * V);
      }
    }
    state_update(s.S, ci.k, s.gam, vnew, L, K, V, s.tmpK, s.rowK);
  }
  if (out && out->final_state.present()) store_state(p, out->final_state, n * p.HV + hv, s.S);
}

template void sequence_forward<float>(const FamilyTraits&, const Problem&, const ForwardInputs&, const ForwardOutputs*,
                                      bool, int64_t, int64_t, const FwdScratch<float>&, float*);
template void sequence_forward<double>(const FamilyTraits&, const Problem&, const ForwardInputs&, const ForwardOutputs*,
                                       bool, int64_t, int64_t, const FwdScratch<double>&, double*);

}  // namespace linattn::cpu
