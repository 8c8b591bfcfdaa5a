// libFuzzer target over the C ABI (include/linattn/linattn.h): the forward, backward,
// workspace-size and saved-bytes entry points of every family, on a CPU-only build of the library
// with AddressSanitizer and UndefinedBehaviorSanitizer (scripts/fuzz.sh builds and runs it).
//
// The input bytes decode into one call: family (valid or not), entry point, sizes, dtypes, and
// for every tensor either a well-formed view or one mutation (absent, wrong rank, a wrong
// dimension, wrong dtype or an invalid dtype code, non-contiguous or negative strides, a null
// pointer, a misaligned start, another device, a rank past the maximum), aliasing between
// tensors (an output placed inside an input or another output, the workspace inside a tensor),
// short and null workspaces, cu_seqlens (valid, decreasing, wrong start/end, huge, a host copy
// that disagrees), options with bad values (scale, lower_bound), and a saved buffer written by
// a real forward, optionally corrupted.
//
// Every buffer is its own heap allocation of exactly the bytes its declared shape and strides
// span (aliases point inside a larger allocation that holds them), so that any read or write
// outside what the caller declared is an ASan report. Besides the sanitizers, the oracles are:
//   - a failing call writes nothing: every output buffer keeps its fill pattern;
//   - no call writes an input: every input buffer keeps its bytes (silent corruption);
//   - a successful query's size, used as the workspace, is accepted by the call that follows;
//   - a successful call on finite, well-conditioned inputs (gates <= 0, -inf and huge negative
//     gates included) gives finite outputs.
// A violation calls __builtin_trap(), which libFuzzer reports as a crash with the input saved.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "linattn/linattn.h"

namespace {

// ---------------------------------------------------------------- byte reader
// Past the end of the input every choice takes its first, "well-formed" value (range: lo;
// chance: false), so that short inputs decode to valid calls and each added byte departs from one.
class Reader {
 public:
  Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool more() const { return i_ < n_; }
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= static_cast<uint32_t>(u8()) << (8 * b);
    return v;
  }
  // in [lo, hi]
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(u8() % static_cast<uint64_t>(hi - lo + 1)); }
  bool chance(int in256) { return more() && u8() < in256; }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

[[noreturn]] void fail(const char* what, const char* detail) {
  std::fprintf(stderr, "linattn fuzz oracle violated: %s (%s)\n", what, detail);
  __builtin_trap();
}

size_t dsize(int32_t dt) {
  switch (dt) {
    case LINATTN_FLOAT16:
    case LINATTN_BFLOAT16: return 2;
    case LINATTN_FLOAT32:
    case LINATTN_INT32: return 4;
    case LINATTN_FLOAT64:
    case LINATTN_INT64: return 8;
    case LINATTN_UINT8: return 1;
    default: return 1;  // invalid codes: allocate bytes; the library must refuse them
  }
}

bool is_float(int32_t dt) {
  return dt == LINATTN_FLOAT16 || dt == LINATTN_BFLOAT16 || dt == LINATTN_FLOAT32 || dt == LINATTN_FLOAT64;
}

// Element access by memcpy: buffers may be deliberately misaligned.
template <class E>
void put(void* p, size_t i, E v) {
  std::memcpy(static_cast<uint8_t*>(p) + i * sizeof(E), &v, sizeof(E));
}
template <class E>
E get(const void* p, size_t i) {
  E v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + i * sizeof(E), sizeof(E));
  return v;
}

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

void store(void* p, int32_t dt, size_t i, double x) {
  switch (dt) {
    case LINATTN_FLOAT32: put<float>(p, i, static_cast<float>(x)); break;
    case LINATTN_FLOAT64: put<double>(p, i, x); break;
    case LINATTN_FLOAT16: {  // truncating conversion: any nearby half will do
      const float f = static_cast<float>(x);
      const uint32_t b = float_bits(f);
      const uint32_t sign = (b >> 16) & 0x8000u;
      const int32_t e = static_cast<int32_t>((b >> 23) & 0xff) - 127 + 15;
      uint16_t h;
      if (std::isinf(f)) h = static_cast<uint16_t>(sign | 0x7c00u);
      else if (e <= 0) h = static_cast<uint16_t>(sign);
      else if (e >= 31) h = static_cast<uint16_t>(sign | 0x7bffu);
      else h = static_cast<uint16_t>(sign | (static_cast<uint32_t>(e) << 10) | ((b >> 13) & 0x3ffu));
      put<uint16_t>(p, i, h);
      break;
    }
    case LINATTN_BFLOAT16: put<uint16_t>(p, i, static_cast<uint16_t>(float_bits(static_cast<float>(x)) >> 16)); break;
    default: break;  // integer tensors are filled separately
  }
}

double load(const void* p, int32_t dt, size_t i) {
  switch (dt) {
    case LINATTN_FLOAT32: return get<float>(p, i);
    case LINATTN_FLOAT64: return get<double>(p, i);
    case LINATTN_BFLOAT16: {
      const uint32_t b = static_cast<uint32_t>(get<uint16_t>(p, i)) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case LINATTN_FLOAT16: {
      const uint16_t h = get<uint16_t>(p, i);
      const int e = (h >> 10) & 0x1f;
      if (e == 31) return (h & 0x3ff) ? NAN : ((h & 0x8000) ? -INFINITY : INFINITY);
      const double m = e == 0 ? (h & 0x3ff) / 1024.0 * std::ldexp(1.0, -14)
                              : (1 + (h & 0x3ff) / 1024.0) * std::ldexp(1.0, e - 15);
      return (h & 0x8000) ? -m : m;
    }
    default: return 0;
  }
}

// ---------------------------------------------------------------- tensors
enum class Role { kInput, kOutput };

struct Spec {
  const char* name = "";
  Role role = Role::kInput;
  bool present = false;
  int32_t dtype = LINATTN_FLOAT32;
  int32_t ndim = 0;
  int64_t shape[LINATTN_MAX_DIMS] = {};
  int64_t strides[LINATTN_MAX_DIMS] = {};
  int32_t device_type = LINATTN_CPU;
  int32_t device_index = 0;
  bool null_data = false;
  size_t misalign = 0;     // bytes added to the start
  int alias_of = -1;       // index of the tensor whose allocation holds this one
  size_t alias_offset = 0;
  bool well_formed = true;

  // elements addressed by the view (0 when empty); the span in bytes from data
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < std::min<int32_t>(ndim, LINATTN_MAX_DIMS); ++i) n *= shape[i];
    return n;
  }
  // bytes from the lowest to one past the highest addressed byte, and the offset of data in them
  void span(size_t* bytes, size_t* lead) const {
    int64_t lo = 0, hi = 0;
    bool empty = false;
    for (int i = 0; i < std::min<int32_t>(ndim, LINATTN_MAX_DIMS); ++i) {
      if (shape[i] <= 0) empty = true;
    }
    if (!empty) {
      for (int i = 0; i < std::min<int32_t>(ndim, LINATTN_MAX_DIMS); ++i) {
        const int64_t ext = (shape[i] - 1) * strides[i];
        if (ext < 0) lo += ext; else hi += ext;
      }
    }
    const size_t es = dsize(dtype);
    *lead = static_cast<size_t>(-lo) * es;
    *bytes = empty ? 0 : static_cast<size_t>(hi - lo + 1) * es;
  }
};

void set_dense(Spec& s, std::initializer_list<int64_t> dims) {
  s.present = true;
  s.ndim = static_cast<int32_t>(dims.size());
  int i = 0;
  for (int64_t d : dims) s.shape[i++] = d;
  int64_t st = 1;
  for (int j = s.ndim - 1; j >= 0; --j) {
    s.strides[j] = st;
    st *= s.shape[j] > 0 ? s.shape[j] : 1;
  }
}

// One mutation of a well-formed spec (or none), chosen by the reader.
void mutate(Reader& r, Spec& s, int rate) {
  if (!r.chance(rate)) return;
  s.well_formed = false;
  switch (r.range(0, 12)) {
    case 0: s.present = false; break;
    case 1: if (s.ndim > 0) s.shape[r.range(0, s.ndim - 1)] += r.chance(128) ? 1 : -1; break;
    case 2: {  // another rank, dims 0..3
      s.ndim = static_cast<int32_t>(r.range(0, 5));
      int64_t st = 1;
      for (int j = s.ndim - 1; j >= 0; --j) {
        s.shape[j] = r.range(0, 3);
        s.strides[j] = st;
        st *= s.shape[j] > 0 ? s.shape[j] : 1;
      }
      break;
    }
    case 3: s.dtype = static_cast<int32_t>(r.range(0, 6)); break;
    case 4: s.dtype = r.chance(128) ? 7 : -3; break;  // not a dtype
    case 5: if (s.ndim > 0) s.strides[r.range(0, s.ndim - 1)] += r.range(1, 3); break;  // gaps
    case 6: if (s.ndim > 0) { const int i = static_cast<int>(r.range(0, s.ndim - 1)); s.strides[i] = -s.strides[i]; } break;
    case 7: if (s.ndim > 0) s.strides[r.range(0, s.ndim - 1)] = 0; break;  // broadcast: overlapping elements
    case 8: s.null_data = true; break;
    case 9: s.misalign = static_cast<size_t>(r.range(1, 3)); break;
    case 10: s.device_type = r.chance(128) ? LINATTN_CUDA : static_cast<int32_t>(r.range(3, 20)); s.device_index = static_cast<int32_t>(r.range(-1, 1)); break;
    case 11: s.ndim = r.chance(128) ? LINATTN_MAX_DIMS + static_cast<int32_t>(r.range(1, 100)) : -static_cast<int32_t>(r.range(2, 9)); break;
    case 12: if (s.ndim > 0) s.shape[r.range(0, s.ndim - 1)] = r.chance(128) ? 0 : -1; break;
  }
}

struct Buffer {
  std::unique_ptr<uint8_t[]> mem;  // exactly `bytes` (plus 1 so that a 0-byte buffer has an address)
  size_t bytes = 0;
};

// ---------------------------------------------------------------- the call
enum Slot {
  kQ, kK, kV, kG, kGGamma, kBeta, kALog, kDtBias, kH0, kCu, kCuHost,  // forward inputs
  kO, kFs, kH, kSavedOut,                                             // forward outputs
  kDo, kDht, kSavedIn,                                                // backward inputs
  kDq, kDk, kDv, kDg, kDgGamma, kDbeta, kDALog, kDdtBias, kDh0,        // backward outputs
  kNumSlots
};
const char* const kNames[kNumSlots] = {"q", "k", "v", "g", "g_gamma", "beta", "A_log", "dt_bias",
                                      "initial_state", "cu_seqlens", "cu_seqlens_host", "o",
                                      "final_state", "h", "saved(out)", "d_o", "dht", "saved(in)",
                                      "dq", "dk", "dv", "dg", "dg_gamma", "dbeta", "dA_log",
                                      "ddt_bias", "dh0"};

linattn_tensor to_c(const Spec& s, void* data) {
  linattn_tensor t = linattn_absent_tensor();
  if (!s.present) return t;
  t.data = s.null_data ? nullptr : data;
  t.dtype = s.dtype;
  t.ndim = s.ndim;
  for (int i = 0; i < LINATTN_MAX_DIMS; ++i) {
    t.shape[i] = s.shape[i];
    t.strides[i] = s.strides[i];
  }
  t.device_type = s.device_type;
  t.device_index = s.device_index;
  return t;
}

struct Call {
  Spec spec[kNumSlots];
  Buffer buf[kNumSlots];
  void* data[kNumSlots] = {};  // what the views point at
  size_t lead[kNumSlots] = {};
  size_t span[kNumSlots] = {};
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  Reader r(bytes, size);
  // ---- what to call
  // 0 fwd ws, 1 bwd ws, 2 saved bytes, 3 forward, 4/5 backward (forward when the input is empty)
  const int entry = static_cast<int>((3 + r.range(0, 5)) % 6);
  // The choices that matter most come first, so that short inputs (libFuzzer grows lengths
  // slowly) already reach them: hard gate values, the mutation rate, the workspace's form.
  const int special_gates = r.chance(100) ? static_cast<int>(r.range(1, 6)) : 0;
  const int rate = r.chance(100) ? static_cast<int>(r.range(4, 24)) : 0;  // per-tensor mutation odds /256
  const int wmode = static_cast<int>(r.range(0, 15));
  int family = static_cast<int>(r.range(0, 3));
  if (r.chance(6)) family = r.chance(128) ? 4 : -1;
  const bool delta = family == LINATTN_GDN || family == LINATTN_KDA;
  const bool vgate = family == LINATTN_KDA || family == LINATTN_GLA;

  // ---- sizes (small: a call must take well under a millisecond or two)
  static const int64_t kHead[] = {1, 2, 3, 4, 7, 8, 16, 17, 32};
  int64_t B = r.range(1, 2), T = r.more() ? r.range(1, 140) : 70, H = r.range(1, 2), G = r.range(1, 2);
  int64_t K = kHead[r.range(0, 8)], V = kHead[r.range(0, 8)];
  if (r.chance(8)) K = r.chance(128) ? 0 : 257;
  if (r.chance(8)) V = r.chance(128) ? 0 : 300;
  if (r.chance(6)) T = 0;
  const int64_t HV = H * G;
  const bool varlen = r.chance(80);
  if (varlen) B = 1;
  static const int32_t kDtypes[] = {LINATTN_FLOAT32, LINATTN_BFLOAT16, LINATTN_FLOAT64, LINATTN_FLOAT16};
  int32_t dt = kDtypes[r.range(0, 3)];  // q/k/v dtype
  const int32_t side = dt == LINATTN_FLOAT64 ? LINATTN_FLOAT64 : LINATTN_FLOAT32;

  // ---- options
  linattn_options opt = linattn_default_options();
  opt.use_qk_l2norm_in_kernel = delta ? !r.chance(40) : r.chance(64);
  opt.use_beta_sigmoid_in_kernel = r.chance(40);
  opt.allow_neg_eigval = opt.use_beta_sigmoid_in_kernel && r.chance(64);
  opt.use_gate_in_kernel = delta && r.chance(64);
  opt.state_v_first = r.chance(40);
  opt.disable_recompute = r.chance(64);
  opt.keep_chunk_local = !opt.disable_recompute && r.chance(64);  // nothing kept off Hopper: a plain forward
  bool safe_opts = true;
  if (opt.use_gate_in_kernel && family == LINATTN_KDA && r.chance(80)) {
    opt.has_lower_bound = 1;
    opt.lower_bound = -static_cast<float>(r.range(1, 5));
    opt.safe_gate = r.chance(128);
  }
  if (r.chance(20)) {  // options a user may get wrong
    safe_opts = false;
    switch (r.range(0, 6)) {
      case 0: opt.has_scale = 1; opt.scale = 1e39; break;
      case 1: opt.has_scale = 1; opt.scale = std::numeric_limits<double>::quiet_NaN(); break;
      case 2: opt.has_scale = 1; opt.scale = 1e-41; break;
      case 3: opt.has_lower_bound = 1; opt.lower_bound = r.chance(128) ? 0.5f : std::numeric_limits<float>::quiet_NaN(); break;
      case 4: opt.safe_gate = 1; break;
      case 5: opt.allow_neg_eigval = 1; opt.use_beta_sigmoid_in_kernel = 0; break;
      case 6: opt.use_gate_in_kernel = 1; break;
    }
  } else if (r.chance(30)) {
    opt.has_scale = 1;
    opt.scale = r.chance(128) ? 0.0 : 0.25;
  }

  // ---- sequences
  std::vector<int64_t> cu;
  bool cu_valid = true;
  if (varlen) {
    const int64_t n = r.range(1, 5);
    cu.push_back(0);
    for (int64_t i = 1; i < n; ++i) cu.push_back(r.range(0, T));
    cu.push_back(T);
    for (size_t i = 1; i + 1 < cu.size(); ++i) {  // sort the interior
      for (size_t j = i + 1; j + 1 < cu.size(); ++j) {
        if (cu[j] < cu[i]) std::swap(cu[i], cu[j]);
      }
    }
    if (r.chance(30)) {
      cu_valid = false;
      const size_t i = static_cast<size_t>(r.range(0, static_cast<int64_t>(cu.size()) - 1));
      switch (r.range(0, 3)) {
        case 0: cu[i] -= r.range(1, 50); break;
        case 1: cu[i] += r.range(1, 50); break;
        case 2: cu[i] = std::numeric_limits<int64_t>::max() - r.range(0, 3); break;
        case 3: cu[i] = std::numeric_limits<int32_t>::min(); break;
      }
    }
  }
  const int64_t N = varlen ? static_cast<int64_t>(cu.size()) - 1 : B;

  // ---- well-formed specs
  Call c;
  for (int i = 0; i < kNumSlots; ++i) c.spec[i].name = kNames[i];
  for (int i = kO; i <= kSavedOut; ++i) c.spec[i].role = Role::kOutput;
  for (int i = kDq; i <= kDh0; ++i) c.spec[i].role = Role::kOutput;
  auto S = [&](int i) -> Spec& { return c.spec[i]; };
  set_dense(S(kQ), {B, T, H, K});
  S(kQ).dtype = dt;
  S(kK) = S(kQ);
  S(kK).name = kNames[kK];
  set_dense(S(kV), {B, T, HV, V});
  S(kV).dtype = dt;
  const bool g_gamma = family == LINATTN_SIMPLE_GLA && r.chance(100);
  if (!(g_gamma && r.chance(100))) {
    if (vgate) set_dense(S(kG), {B, T, HV, K}); else set_dense(S(kG), {B, T, HV});
    S(kG).dtype = r.chance(30) ? LINATTN_BFLOAT16 : side;
  }
  if (g_gamma) { set_dense(S(kGGamma), {HV}); S(kGGamma).dtype = side; }
  if (delta) { set_dense(S(kBeta), {B, T, HV}); S(kBeta).dtype = dt; }
  if (opt.use_gate_in_kernel) {
    if (!opt.has_lower_bound || r.chance(128)) { set_dense(S(kALog), {HV}); S(kALog).dtype = side; }
    if (r.chance(160)) {
      if (family == LINATTN_KDA) set_dense(S(kDtBias), {HV * K}); else set_dense(S(kDtBias), {HV});
      S(kDtBias).dtype = side;
    }
  }
  auto state = [&](Spec& s) {
    if (opt.state_v_first) set_dense(s, {N, HV, V, K}); else set_dense(s, {N, HV, K, V});
    s.dtype = side;
  };
  if (r.chance(100)) state(S(kH0));
  if (varlen) {
    set_dense(S(kCu), {static_cast<int64_t>(cu.size())});
    S(kCu).dtype = r.chance(128) ? LINATTN_INT64 : LINATTN_INT32;
    if (S(kCu).dtype == LINATTN_INT32) {
      for (int64_t& x : cu) {
        if (x > std::numeric_limits<int32_t>::max() || x < std::numeric_limits<int32_t>::min()) {
          x = std::numeric_limits<int32_t>::max();
          cu_valid = false;
        }
      }
    }
    if (r.chance(30)) { S(kCuHost) = S(kCu); S(kCuHost).name = kNames[kCuHost]; }
  }
  // outputs
  set_dense(S(kO), {B, T, HV, V});
  S(kO).dtype = dt;
  if (r.chance(128)) state(S(kFs));
  int64_t nt = 0;
  {
    int64_t n = 0;
    if (varlen) {
      if (cu_valid) {
        for (size_t i = 0; i + 1 < cu.size(); ++i) n += (cu[i + 1] - cu[i] + 63) / 64;
      }
      nt = cu_valid ? n : 1;
    } else {
      nt = (T + 63) / 64;
    }
  }
  if (entry == 3 && r.chance(50) && nt < 64) {
    if (opt.state_v_first) set_dense(S(kH), {varlen ? 1 : B, nt, HV, V, K}); else set_dense(S(kH), {varlen ? 1 : B, nt, HV, K, V});
    S(kH).dtype = side;
  }
  // backward
  const bool bwd = entry == 1 || entry >= 4;
  if (bwd) {
    set_dense(S(kDo), {B, T, HV, V});
    S(kDo).dtype = dt;
    if (S(kFs).present || r.chance(60)) state(S(kDht));
    auto like = [&](int dst, int src) {
      if (!S(src).present) return;
      const char* nm = S(dst).name;
      S(dst) = S(src);
      S(dst).name = nm;
      S(dst).role = Role::kOutput;
    };
    like(kDq, kQ);
    like(kDk, kK);
    like(kDv, kV);
    if (r.chance(200)) like(kDg, kG);
    if (r.chance(200)) like(kDgGamma, kGGamma);
    if (r.chance(200)) like(kDbeta, kBeta);
    if (r.chance(200)) like(kDALog, kALog);
    if (r.chance(200)) like(kDdtBias, kDtBias);
    if (r.chance(200)) like(kDh0, kH0);
  }

  // ---- mutations: a few tensors get one each
  for (int i = 0; i < kNumSlots; ++i) {
    if (i == kSavedOut || i == kSavedIn) continue;
    if (c.spec[i].present || r.chance(4)) {
      if (!c.spec[i].present) {  // an argument that does not belong to the call
        c.spec[i].present = true;
        set_dense(c.spec[i], {HV});
        c.spec[i].dtype = side;
        c.spec[i].well_formed = false;
      }
      mutate(r, c.spec[i], rate);
    }
  }
  // aliasing: an output (or any tensor) placed inside another tensor's allocation
  if (r.chance(40)) {
    const int a = static_cast<int>(r.range(0, kNumSlots - 1));
    const int b = static_cast<int>(r.range(0, kNumSlots - 1));
    if (a != b && c.spec[a].present && c.spec[b].present && c.spec[b].alias_of < 0 && c.spec[a].alias_of < 0) {
      bool b_is_target = false;  // a may not already hold aliases
      for (int i = 0; i < kNumSlots; ++i) b_is_target |= c.spec[i].alias_of == a;
      if (!b_is_target) {
        c.spec[a].alias_of = b;
        c.spec[a].alias_offset = static_cast<size_t>(r.range(0, 64)) * 4;
      }
    }
  }

  // ---- allocate: every tensor its exact span; alias targets grown to hold their aliases
  for (int i = 0; i < kNumSlots; ++i) {
    Spec& s = c.spec[i];
    if (!s.present || s.ndim < 0 || s.ndim > LINATTN_MAX_DIMS) continue;
    s.span(&c.span[i], &c.lead[i]);
    if (c.span[i] > (size_t{1} << 24)) {  // a mutated shape too large to allocate honestly
      s.ndim = -1;
      s.present = false;
      c.span[i] = 0;
    }
  }
  for (int i = 0; i < kNumSlots; ++i) {
    const Spec& s = c.spec[i];
    if (!s.present || s.alias_of >= 0) continue;
    size_t need = c.span[i] + s.misalign;
    for (int j = 0; j < kNumSlots; ++j) {
      if (c.spec[j].present && c.spec[j].alias_of == i) need = std::max(need, c.spec[j].alias_offset + c.span[j] + c.spec[j].misalign);
    }
    c.buf[i].mem.reset(new uint8_t[need + 1]);
    c.buf[i].bytes = need;
    c.data[i] = c.buf[i].mem.get() + s.misalign + c.lead[i];
  }
  for (int i = 0; i < kNumSlots; ++i) {
    const Spec& s = c.spec[i];
    if (!s.present || s.alias_of < 0) continue;
    const int t = s.alias_of;
    c.data[i] = c.buf[t].mem.get() + s.alias_offset + s.misalign + c.lead[i];
  }

  // ---- values: inputs from a generator seeded by the input; outputs a fill pattern
  std::mt19937_64 gen(r.u32());
  std::normal_distribution<double> nd(0.0, 1.0);
  std::uniform_real_distribution<double> ud(0.0, 1.0);
  bool finite_inputs = true;
  for (int i = 0; i < kNumSlots; ++i) {
    Spec& s = c.spec[i];
    if (!s.present || s.alias_of >= 0) continue;
    uint8_t* base = c.buf[i].mem.get();
    if (s.role == Role::kOutput) {
      std::memset(base, 0xA5, c.buf[i].bytes);
      continue;
    }
    std::memset(base, 0, c.buf[i].bytes);
    if (i == kCu || i == kCuHost) continue;
    if (!is_float(s.dtype) || s.ndim < 0 || s.ndim > LINATTN_MAX_DIMS) {
      for (size_t b = 0; b < c.buf[i].bytes; ++b) base[b] = static_cast<uint8_t>(gen());
      continue;
    }
    // fill the whole span element by element (strides may skip some; those stay 0)
    const size_t es = dsize(s.dtype);
    void* p = base + s.misalign;
    const size_t n = c.span[i] / es;
    for (size_t e = 0; e < n; ++e) {
      double x = nd(gen);
      if (i == kG && !opt.use_gate_in_kernel) x = -std::fabs(x) / 8;  // log decays <= 0
      if (i == kGGamma) x = -std::fabs(x) / 8;
      if (i == kBeta && !opt.use_beta_sigmoid_in_kernel) x = ud(gen);
      if (i == kK && !opt.use_qk_l2norm_in_kernel) x /= std::sqrt(static_cast<double>(std::max<int64_t>(K, 1)));
      if (i == kH0 || i == kDht) x *= 0.5;
      if (i == kALog) x = -std::fabs(x) / 2;
      store(p, s.dtype, e, x);
    }
    if ((i == kG || i == kGGamma) && special_gates && n > 0) {
      static const double kSpecial[] = {-INFINITY, -1e30, -1e5, -3.0e38, -200.0, -88.0};
      for (int m = 0; m < special_gates; ++m) {
        const size_t at = static_cast<size_t>(gen() % n);
        const double x = kSpecial[gen() % 6];
        store(p, s.dtype, at, x);
        if (std::getenv("LINATTN_FUZZ_VERBOSE")) std::fprintf(stderr, "  special gate %g at element %zu of %s\n", x, at, kNames[i]);
      }
    }
  }
  // cu_seqlens values (the host copy may disagree)
  if (varlen) {
    for (int which : {kCu, kCuHost}) {
      const Spec& s = c.spec[which];
      if (!s.present || s.alias_of >= 0 || (s.dtype != LINATTN_INT32 && s.dtype != LINATTN_INT64)) continue;
      uint8_t* p = c.buf[which].mem.get() + s.misalign;
      const size_t n = std::min(cu.size(), c.span[which] / dsize(s.dtype));
      for (size_t e = 0; e < n; ++e) {
        int64_t x = cu[e];
        if (which == kCuHost && r.chance(20)) x ^= 1;  // the host copy disagrees
        if (s.dtype == LINATTN_INT32) {
          const int32_t v = static_cast<int32_t>(x);
          std::memcpy(p + e * 4, &v, 4);
        } else {
          std::memcpy(p + e * 8, &x, 8);
        }
      }
    }
  }

  // ---- C structs
  linattn_forward_inputs fin;
  linattn_forward_outputs fout;
  linattn_backward_inputs bin;
  linattn_backward_outputs bout;
  linattn_forward_inputs_init(&fin);
  linattn_forward_outputs_init(&fout);
  linattn_backward_inputs_init(&bin);
  linattn_backward_outputs_init(&bout);
  auto build = [&]() {
    auto T_ = [&](int i) { return to_c(c.spec[i], c.data[i]); };
    fin.q = T_(kQ); fin.k = T_(kK); fin.v = T_(kV); fin.g = T_(kG); fin.g_gamma = T_(kGGamma);
    fin.beta = T_(kBeta); fin.A_log = T_(kALog); fin.dt_bias = T_(kDtBias); fin.initial_state = T_(kH0);
    fin.cu_seqlens = T_(kCu); fin.cu_seqlens_host = T_(kCuHost);
    fout.o = T_(kO); fout.final_state = T_(kFs); fout.h = T_(kH);
    bin.fwd = fin; bin.d_o = T_(kDo); bin.dht = T_(kDht);
    bout.dq = T_(kDq); bout.dk = T_(kDk); bout.dv = T_(kDv); bout.dg = T_(kDg); bout.dg_gamma = T_(kDgGamma);
    bout.dbeta = T_(kDbeta); bout.dA_log = T_(kDALog); bout.ddt_bias = T_(kDdtBias); bout.dh0 = T_(kDh0);
  };
  build();

  // A workspace overlapping a tensor (the probe: a large user buffer that also holds q or
  // o): the tensor's allocation grows by the workspace's size, so the overlapping workspace is
  // large enough and only the overlap rule can refuse it.
  int inside = -1;
  size_t inside_off = 0;
  if (entry >= 3 && wmode == 4) {
    const int slot = static_cast<int>(r.range(0, kNumSlots - 1));
    size_t need = 0;
    char e2[64];
    const int qrc = entry == 3 ? linattn_forward_workspace_size(family, &fin, &opt, &need, e2, sizeof e2)
                               : linattn_backward_workspace_size(family, &bin, &opt, &need, e2, sizeof e2);
    if (qrc == LINATTN_OK && need < (size_t{1} << 24) && c.buf[slot].mem && c.buf[slot].bytes > 0) {
      const size_t old_bytes = c.buf[slot].bytes, grown = old_bytes + need + 64;
      uint8_t* old_base = c.buf[slot].mem.get();
      std::unique_ptr<uint8_t[]> big(new uint8_t[grown + 1]);
      std::memcpy(big.get(), old_base, old_bytes);
      std::memset(big.get() + old_bytes, c.spec[slot].role == Role::kOutput ? 0xA5 : 0, grown - old_bytes);
      for (int j = 0; j < kNumSlots; ++j) {
        if ((j == slot || c.spec[j].alias_of == slot) && c.data[j]) {
          c.data[j] = big.get() + (static_cast<uint8_t*>(c.data[j]) - old_base);
        }
      }
      c.buf[slot].mem = std::move(big);
      c.buf[slot].bytes = grown;
      inside = slot;
      inside_off = static_cast<size_t>(r.range(0, 15)) % old_bytes;
      build();
    }
  }

  bool all_well_formed = cu_valid && safe_opts && family >= 0 && family <= 3 && K >= 1 && K <= 256 &&
                         V >= 1 && V <= 256 && T >= 1;
  for (int i = 0; i < kNumSlots; ++i) {
    const Spec& s = c.spec[i];
    if (s.present && (!s.well_formed || s.alias_of >= 0 || s.null_data || s.misalign)) all_well_formed = false;
  }
  // Inputs whose exact result is finite and representable: gates <= 0 (with -inf and huge
  // negative ones), betas in [0, 1] (or sigmoid), unit keys for the delta rule, no float16 output.
  bool stable = finite_inputs && all_well_formed && !opt.use_gate_in_kernel && dt != LINATTN_FLOAT16 &&
                (!delta || opt.use_qk_l2norm_in_kernel);

  if (std::getenv("LINATTN_FUZZ_VERBOSE")) {
    std::fprintf(stderr,
                 "fuzz call: entry %d family %d B %lld T %lld H %lld G %lld K %lld V %lld dtype %d varlen %d "
                 "l2 %d bsig %d neg %d gik %d lb %d/%g safe %d vfirst %d dr %d keep %d scale %d/%g specials %d stable %d\n",
                 entry, family, (long long)B, (long long)T, (long long)H, (long long)G, (long long)K, (long long)V, dt,
                 varlen, opt.use_qk_l2norm_in_kernel, opt.use_beta_sigmoid_in_kernel, opt.allow_neg_eigval,
                 opt.use_gate_in_kernel, opt.has_lower_bound, opt.lower_bound, opt.safe_gate, opt.state_v_first,
                 opt.disable_recompute, opt.keep_chunk_local, opt.has_scale, opt.scale, special_gates, stable);
    for (int i = 0; i < kNumSlots; ++i) {
      const Spec& sp = c.spec[i];
      if (!sp.present) continue;
      std::fprintf(stderr, "  %-16s dtype %d ndim %d shape", kNames[i], sp.dtype, sp.ndim);
      for (int d = 0; d < std::min<int32_t>(sp.ndim, LINATTN_MAX_DIMS); ++d) std::fprintf(stderr, " %lld", (long long)sp.shape[d]);
      std::fprintf(stderr, " well_formed %d alias_of %d\n", sp.well_formed, sp.alias_of);
    }
  }

  if (const char* dir = std::getenv("LINATTN_FUZZ_DUMP")) {  // the inputs as raw files, to replay elsewhere
    for (int i = 0; i < kNumSlots; ++i) {
      if (!c.buf[i].mem || c.spec[i].role != Role::kInput) continue;
      const std::string path = std::string(dir) + "/" + kNames[i] + ".bin";
      if (FILE* f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(c.data[i], 1, c.span[i], f);
        std::fclose(f);
      }
    }
  }

  // ---- a saved buffer written by a real forward (backward with disable_recompute)
  std::unique_ptr<uint8_t[]> saved_mem;
  size_t saved_len = 0;
  char err[512];
  if (opt.disable_recompute && (entry == 3 || entry >= 4)) {
    size_t sb = 0;
    if (linattn_saved_bytes(family, &fin, &opt, &sb, err, sizeof err) == LINATTN_OK && sb > 0 && sb < (size_t{1} << 24)) {
      saved_len = r.chance(30) ? sb - static_cast<size_t>(r.range(1, 8)) % sb : sb;
      saved_mem.reset(new uint8_t[saved_len + 1]);
      std::memset(saved_mem.get(), 0, saved_len);
      linattn_tensor t = linattn_absent_tensor();
      t.data = saved_mem.get();
      t.dtype = LINATTN_UINT8;
      t.ndim = 1;
      t.shape[0] = static_cast<int64_t>(saved_len);
      t.strides[0] = 1;
      if (entry >= 4) {
        // the forward that fills it (its own outputs in fresh buffers)
        std::vector<uint8_t> o(c.span[kO] + 1), fs(c.span[kFs] + 1);
        linattn_forward_outputs fo;
        linattn_forward_outputs_init(&fo);
        fo.o = fout.o;
        fo.o.data = o.data();
        if (fout.final_state.ndim >= 0) { fo.final_state = fout.final_state; fo.final_state.data = fs.data(); }
        fo.saved = t;
        size_t wb = 0;
        if (linattn_forward_workspace_size(family, &fin, &opt, &wb, err, sizeof err) == LINATTN_OK && wb < (size_t{1} << 26)) {
          std::unique_ptr<uint8_t[]> w(new uint8_t[wb + 1]);
          (void)linattn_forward(family, &fin, &fo, &opt, w.get(), wb, nullptr, err, sizeof err);
        }
        if (saved_len > 0 && r.chance(40)) {
          saved_mem[static_cast<size_t>(r.u32()) % saved_len] ^= static_cast<uint8_t>(1 + r.u8() % 255);
          stable = false;  // the states it holds may now be anything
        }
        bin.saved = t;
      } else {
        std::memset(saved_mem.get(), 0xA5, saved_len);
        fout.saved = t;
      }
    }
  }

  // ---- snapshots for the oracles
  std::vector<std::vector<uint8_t>> before(kNumSlots);
  for (int i = 0; i < kNumSlots; ++i) {
    if (c.buf[i].mem) before[i].assign(c.buf[i].mem.get(), c.buf[i].mem.get() + c.buf[i].bytes);
  }
  std::vector<uint8_t> saved_before;
  if (saved_mem && entry >= 4) saved_before.assign(saved_mem.get(), saved_mem.get() + saved_len);

  // ---- the call
  size_t query = 0;
  int rc = LINATTN_OK;
  const linattn_options* optp = r.chance(8) ? nullptr : &opt;  // null: the default options
  if (!optp) stable = false;  // the inputs were drawn for `opt`
  switch (entry) {
    case 0: rc = linattn_forward_workspace_size(family, &fin, optp, &query, err, sizeof err); break;
    case 1: rc = linattn_backward_workspace_size(family, &bin, optp, &query, err, sizeof err); break;
    case 2: rc = linattn_saved_bytes(family, &fin, optp, &query, err, sizeof err); break;
    default: break;
  }
  if (entry == 3 || entry >= 4) {
    size_t need = 0;
    const int qrc = entry == 3 ? linattn_forward_workspace_size(family, &fin, optp, &need, err, sizeof err)
                               : linattn_backward_workspace_size(family, &bin, optp, &need, err, sizeof err);
    if (qrc != LINATTN_OK) need = 4096;
    if (need > (size_t{1} << 26)) return 0;  // an honest workspace this large is not worth the time
    // the workspace: exact, short, null, misaligned, or inside a tensor
    size_t ws_bytes = need;
    bool ws_bad = false;
    std::unique_ptr<uint8_t[]> wmem;
    void* ws = nullptr;
    if (wmode == 1 && need > 0) { ws_bytes = need - 1 - static_cast<size_t>(r.range(0, 7)) % need; ws_bad = true; }
    if (wmode == 2) ws_bytes = need + static_cast<size_t>(r.range(1, 4096));
    if (wmode == 3) { ws_bad = need > 0; }  // null pointer below
    if (inside >= 0) {
      ws = c.buf[inside].mem.get() + inside_off;
      ws_bytes = c.buf[inside].bytes - inside_off;
      ws_bad = true;
    } else if (wmode != 3) {
      const size_t mis = wmode == 5 ? static_cast<size_t>(r.range(1, 15)) : 0;
      wmem.reset(new uint8_t[ws_bytes + mis + 1]);
      std::memset(wmem.get(), 0x3C, ws_bytes + mis + 1);
      ws = wmem.get() + mis;
    }
    void* stream = r.chance(8) ? reinterpret_cast<void*>(uintptr_t{0x1000}) : nullptr;  // ignored on CPU
    if (entry == 3) rc = linattn_forward(family, &fin, &fout, optp, ws, ws_bytes, stream, err, r.chance(8) ? 0 : sizeof err);
    else rc = linattn_backward(family, &bin, &bout, optp, ws, ws_bytes, stream, err, r.chance(8) ? 0 : sizeof err);
    if (qrc == LINATTN_OK && !ws_bad && rc == LINATTN_WORKSPACE_TOO_SMALL) fail("the queried workspace size was refused", err);
    // (only a tensor the call reads or writes, with bytes to overlap, makes the overlap an error)
    const bool in_call = entry == 3 ? inside < kDo : (inside < kO || inside >= kDo);
    if (rc == LINATTN_OK && inside >= 0 && in_call && c.spec[inside].present && c.span[inside] > 0) {
      fail("a workspace overlapping a tensor was accepted", kNames[inside]);
    }
  }
  if (rc < LINATTN_OK || rc > LINATTN_BACKEND_ERROR) fail("unknown status code", "");

  // ---- oracles
  for (int i = 0; i < kNumSlots; ++i) {
    if (!c.buf[i].mem || c.buf[i].bytes == 0) continue;
    const bool changed = std::memcmp(before[i].data(), c.buf[i].mem.get(), c.buf[i].bytes) != 0;
    if (!changed) continue;
    bool holds_output = c.spec[i].role == Role::kOutput;  // written only by a successful call
    for (int j = 0; j < kNumSlots; ++j) {
      if (c.spec[j].alias_of == i && c.spec[j].role == Role::kOutput) holds_output = true;
    }
    if (rc != LINATTN_OK) fail("a failing call wrote a buffer", kNames[i]);
    // (a successful call writes its workspace: inside the buffer of a tensor it does not use, fine)
    if (!holds_output && i != inside) fail("a call wrote an input buffer", kNames[i]);
  }
  if (rc != LINATTN_OK && saved_mem && entry == 3) {
    for (size_t b = 0; b < saved_len; ++b) {
      if (saved_mem[b] != 0xA5) fail("a failing forward wrote the saved buffer", "");
    }
  }
  if (!saved_before.empty() && std::memcmp(saved_before.data(), saved_mem.get(), saved_len) != 0) {
    fail("the backward wrote its saved input", "");
  }
  // an accepted call whose output shares bytes with another tensor
  if (rc == LINATTN_OK && entry >= 3) {
    for (int i = 0; i < kNumSlots; ++i) {
      const int t = c.spec[i].alias_of;
      if (t < 0 || !c.spec[i].present || !c.spec[t].present || c.span[i] == 0 || c.span[t] == 0) continue;
      const bool involved = (entry == 3) ? (i >= kO && i <= kSavedOut) || (t >= kO && t <= kSavedOut)
                                         : (i >= kDq) || (t >= kDq);
      auto in_call = [&](int x) { return entry == 3 ? x < kDo : (x < kO || x >= kDo); };
      const bool used = in_call(i) && in_call(t);
      if (!involved || !used) continue;
      const auto a0 = reinterpret_cast<uintptr_t>(c.data[i]) - c.lead[i];
      const auto b0 = reinterpret_cast<uintptr_t>(c.data[t]) - c.lead[t];
      if (a0 < b0 + c.span[t] && b0 < a0 + c.span[i]) fail("an output overlapping another tensor was accepted", kNames[i]);
    }
  }
  if (rc == LINATTN_OK && stable && entry >= 3) {
    const int outs_f[] = {kO, kFs, kH};
    const int outs_b[] = {kDq, kDk, kDv, kDg, kDgGamma, kDbeta, kDh0};
    const int* outs = entry == 3 ? outs_f : outs_b;
    const int nouts = entry == 3 ? 3 : 7;
    for (int m = 0; m < nouts; ++m) {
      const int i = outs[m];
      const Spec& s = c.spec[i];
      if (!s.present || !c.buf[i].mem) continue;
      const size_t n = static_cast<size_t>(s.numel());
      for (size_t e = 0; e < n; ++e) {
        if (!std::isfinite(load(c.data[i], s.dtype, e))) {
          if (std::getenv("LINATTN_FUZZ_VERBOSE")) std::fprintf(stderr, "  %s[%zu] = %g\n", kNames[i], e, load(c.data[i], s.dtype, e));
          fail("a non-finite output from finite inputs", kNames[i]);
        }
      }
    }
  }
  return 0;
}
