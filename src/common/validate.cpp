// Input validation shared by every backend: each rule returns a Status naming the argument.
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "common/dtype.hpp"
#include "common/problem.hpp"

namespace linattn::detail {
namespace {

std::string shape_str(const TensorView& t) {
  // A view claims ndim entries but holds at most kMaxDims: never read past them.
  if (t.ndim > kMaxDims) return "a rank-" + std::to_string(t.ndim) + " view (at most " + std::to_string(kMaxDims) + " dimensions)";
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < t.ndim; ++i) s << (i ? ", " : "") << t.shape[i];
  s << "]";
  return s.str();
}

std::string shape_str(std::initializer_list<int64_t> dims) {
  std::ostringstream s;
  s << "[";
  int i = 0;
  for (int64_t d : dims) s << (i++ ? ", " : "") << d;
  s << "]";
  return s.str();
}

bool is_float(DType d) {
  return d == DType::kFloat16 || d == DType::kBFloat16 || d == DType::kFloat32 ||
         d == DType::kFloat64;
}

bool same_device(const Device& a, const Device& b) {
  return a.type == b.type && (a.type == DeviceType::kCPU || a.index == b.index);
}

#define LINATTN_TRY(expr)            \
  do {                               \
    Status _s = (expr);              \
    if (!_s.ok()) return _s;         \
  } while (0)

// Every tensor starts at a multiple of its element size (a view at a byte offset inside an
// element would be read with misaligned loads: undefined behaviour on the CPU, a fault on CUDA).
Status check_element_aligned(const char* name, const TensorView& t) {
  const std::size_t es = dtype_size(t.dtype);
  if (es > 1 && t.data != nullptr && reinterpret_cast<std::uintptr_t>(t.data) % es != 0) {
    return Status::Invalid(std::string(name) + " starts at an address that is not a multiple of its element size (" +
                           std::to_string(es) + " bytes for " + dtype_name(t.dtype) + ")");
  }
  return Status::Ok();
}

// What every tensor argument must be beyond its shape and dtype: dense row-major, with data where
// it has elements, aligned to its element size, on q's device.
Status check_storage(const char* name, const TensorView& t, const Device& device) {
  if (!t.is_contiguous()) {
    return Status::Invalid(std::string(name) + " must be contiguous (row-major, dense)");
  }
  if (t.numel() > 0 && t.data == nullptr) {
    return Status::Invalid(std::string(name) + " has a null data pointer");
  }
  LINATTN_TRY(check_element_aligned(name, t));
  if (!same_device(t.device, device)) {
    return Status::Invalid(std::string(name) + " is on a different device than q");
  }
  return Status::Ok();
}

// Structural checks on one tensor: rank, shape, then its storage (check_storage).
Status check_tensor(const char* name, const TensorView& t, std::initializer_list<int64_t> dims,
                    const Device& device) {
  if (t.ndim != static_cast<int32_t>(dims.size()) || t.ndim > kMaxDims) {
    return Status::Invalid(std::string(name) + " must have shape " + shape_str(dims) + ", got " +
                           (t.ndim < 0 ? std::string("nothing") : shape_str(t)));
  }
  int i = 0;
  for (int64_t d : dims) {
    if (t.shape[i++] != d) {
      return Status::Invalid(std::string(name) + " must have shape " + shape_str(dims) +
                             ", got " + shape_str(t));
    }
  }
  return check_storage(name, t, device);
}

// FLA's bound for a safe gate when none is given (its gate functions' default, seed 002).
constexpr float kDefaultSafeGateLowerBound = -5.0f;

// A per-head (or per-head-and-channel) parameter: any shape holding `count` elements, read as a
// flat vector. FLA reads A_log and dt_bias with .view(HV, -1), so [HV], [1, 1, HV, 1] and
// [HV, K] are all the same parameter there; linattn accepts what FLA accepts.
Status check_param_vector(const char* name, const TensorView& t, int64_t count, const char* count_name,
                          const Device& device) {
  if (t.ndim < 0 || t.ndim > kMaxDims || t.numel() != count) {
    return Status::Invalid(std::string(name) + " must hold " + count_name + " = " + std::to_string(count) +
                           " elements (any shape, e.g. [" + std::to_string(count) + "]), got " +
                           (t.ndim < 0 ? std::string("nothing") : shape_str(t)));
  }
  if (t.ndim == 0) return check_tensor(name, t, {}, device);
  TensorView flat = t;  // same data, checked as the 1-D vector the backends read
  flat.ndim = 1;
  flat.shape[0] = count;
  flat.strides[0] = 1;
  if (!t.is_contiguous()) {
    return Status::Invalid(std::string(name) + " must be contiguous (row-major, dense)");
  }
  return check_tensor(name, flat, {count}, device);
}

Status check_float(const char* name, const TensorView& t) {
  if (!is_float(t.dtype)) {
    return Status::Invalid(std::string(name) + " must be float16, bfloat16, float32 or float64, got " +
                           dtype_name(t.dtype));
  }
  return Status::Ok();
}

Status check_state_dtype(const char* name, const TensorView& t) {
  if (t.dtype != DType::kFloat32 && t.dtype != DType::kFloat64) {
    const bool half = t.dtype == DType::kFloat16 || t.dtype == DType::kBFloat16;
    return Status::Invalid(std::string(name) + " must be float32 (or float64), got " +
                           dtype_name(t.dtype) +
                           (half ? " (convert it to float32; linattn's PyTorch functions do so for "
                                   "a 16-bit initial_state, as FLA's kernels read it)"
                                 : ""));
  }
  return Status::Ok();
}

Status check_same_as(const char* name, const TensorView& t, const char* ref_name,
                     const TensorView& ref, const Device& device) {
  if (!t.present()) return Status::Invalid(std::string(name) + " is required");
  if (t.ndim != ref.ndim) {
    return Status::Invalid(std::string(name) + " must have the shape of " + ref_name + " " +
                           shape_str(ref) + ", got " + shape_str(t));
  }
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] != ref.shape[i]) {
      return Status::Invalid(std::string(name) + " must have the shape of " + ref_name + " " +
                             shape_str(ref) + ", got " + shape_str(t));
    }
  }
  if (t.dtype != ref.dtype) {
    return Status::Invalid(std::string(name) + " must have the dtype of " + ref_name + " (" +
                           dtype_name(ref.dtype) + "), got " + dtype_name(t.dtype));
  }
  return check_storage(name, t, device);
}

// Reads and checks host cu_seqlens values into p->cu.
Status read_cu_seqlens(const TensorView& cu, const char* name, int64_t T, std::vector<int64_t>* out) {
  if (cu.ndim != 1) return Status::Invalid(std::string(name) + " must be 1-D [N + 1], got " + shape_str(cu));
  if (cu.dtype != DType::kInt32 && cu.dtype != DType::kInt64) {
    return Status::Invalid(std::string(name) + " must be int32 or int64, got " + dtype_name(cu.dtype));
  }
  if (cu.shape[0] < 2) return Status::Invalid(std::string(name) + " needs at least 2 entries (one sequence)");
  if (!cu.is_contiguous()) return Status::Invalid(std::string(name) + " must be contiguous");
  if (cu.data == nullptr) return Status::Invalid(std::string(name) + " has a null data pointer");
  LINATTN_TRY(check_element_aligned(name, cu));
  const int64_t n1 = cu.shape[0];
  out->resize(n1);
  for (int64_t i = 0; i < n1; ++i) {
    (*out)[i] = cu.dtype == DType::kInt32 ? static_cast<const int32_t*>(cu.data)[i]
                                          : static_cast<const int64_t*>(cu.data)[i];
  }
  if ((*out)[0] != 0) return Status::Invalid(std::string(name) + " must start at 0, got " + std::to_string((*out)[0]));
  for (int64_t i = 1; i < n1; ++i) {
    if ((*out)[i] < (*out)[i - 1]) {
      return Status::Invalid(std::string(name) + " must be non-decreasing (entry " + std::to_string(i) +
                             " is " + std::to_string((*out)[i]) + " < " + std::to_string((*out)[i - 1]) + ")");
    }
  }
  if ((*out)[n1 - 1] != T) {
    return Status::Invalid(std::string(name) + " must end at T = " + std::to_string(T) + ", got " +
                           std::to_string((*out)[n1 - 1]));
  }
  return Status::Ok();
}

}  // namespace

Status resolve_inputs(Family family, const ForwardInputs& in, const Options& opt, Problem* p) {
  *p = Problem{};
  p->family = family;
  p->opt = opt;
  p->delta = family == Family::kGDN || family == Family::kKDA;
  p->vector_gate = family == Family::kKDA || family == Family::kGLA;
  if (static_cast<int32_t>(family) < 0 || static_cast<int32_t>(family) > 3) {
    return Status::Invalid("unknown family");
  }
  const char* fam = family_name(family);

  // ---- q, k, v
  if (!in.q.present()) return Status::Invalid("q is required");
  if (!in.k.present()) return Status::Invalid("k is required");
  if (!in.v.present()) return Status::Invalid("v is required");
  if (in.q.ndim != 4) return Status::Invalid("q must be 4-D [B, T, H, K], got " + shape_str(in.q));
  if (in.v.ndim != 4) return Status::Invalid("v must be 4-D [B, T, HV, V], got " + shape_str(in.v));
  const Device dev = in.q.device;
  if (dev.type != DeviceType::kCPU && dev.type != DeviceType::kCUDA) {
    return Status::Invalid("q is on an unsupported device type " + std::to_string(static_cast<int>(dev.type)) +
                           " (CPU = 1, CUDA = 2)");
  }
  if (dev.type == DeviceType::kCUDA && dev.index < 0) {
    return Status::Invalid("q has a negative CUDA device index " + std::to_string(dev.index));
  }
  p->device = dev;
  p->dtype = in.q.dtype;
  p->B = in.q.shape[0];
  p->T = in.q.shape[1];
  p->H = in.q.shape[2];
  p->K = in.q.shape[3];
  p->HV = in.v.shape[2];
  p->V = in.v.shape[3];
  const int64_t B = p->B, T = p->T, H = p->H, K = p->K, HV = p->HV, V = p->V;
  if (B < 1 || T < 1) return Status::Invalid("q must have B >= 1 and T >= 1, got " + shape_str(in.q));
  if (H < 1 || HV < 1) {
    return Status::Invalid("head counts must be >= 1: q has H = " + std::to_string(H) + ", v has HV = " +
                           std::to_string(HV));
  }
  // Head sizes before any stride or contiguity rule (a zero-size dimension makes every stride
  // valid and would otherwise be reported as a layout problem).
  if (K < 1) return Status::Invalid("head size K (the last dimension of q) must be >= 1, got " + shape_str(in.q));
  if (V < 1) return Status::Invalid("head size V (the last dimension of v) must be >= 1, got " + shape_str(in.v));
  // Every size the backends compute (elements and bytes of the largest tensor: q/k, v, a
  // per-channel g, the states and h, at most 8 bytes an element) must fit in int64.
  {
    const int64_t heads = H > HV ? H : HV;
    int64_t width = 0;  // K * max(K, V) >= K, V: covers [.., K], [.., V] and [K, V]
    int64_t n = 0;
    if ((__builtin_mul_overflow(K, V > K ? V : K, &width) ||
        __builtin_mul_overflow(B, T, &n) || __builtin_mul_overflow(n, heads, &n) ||
        __builtin_mul_overflow(n, width, &n) || __builtin_mul_overflow(n, int64_t{8}, &n))) {
      return Status::Invalid("the problem is too large: sizes of q " + shape_str(in.q) + " and v " +
                             shape_str(in.v) + " overflow 64-bit byte counts");
    }
  }
  LINATTN_TRY(check_float("q", in.q));
  LINATTN_TRY(check_tensor("q", in.q, {B, T, H, K}, dev));
  LINATTN_TRY(check_same_as("k", in.k, "q", in.q, dev));
  if (in.v.shape[0] != B || in.v.shape[1] != T) {
    return Status::Invalid("v must have shape [B, T, HV, V] with B, T of q " + shape_str(in.q) +
                           ", got " + shape_str(in.v));
  }
  LINATTN_TRY(check_tensor("v", in.v, {B, T, HV, V}, dev));
  if (in.v.dtype != in.q.dtype) {
    return Status::Invalid(std::string("v must have the dtype of q (") + dtype_name(in.q.dtype) + "), got " +
                           dtype_name(in.v.dtype) +
                           " (this interface takes one dtype: convert v; linattn's PyTorch functions "
                           "accept mixed float dtypes as FLA does)");
  }
  if (HV % H != 0) {
    return Status::Invalid("the value head count HV = " + std::to_string(HV) +
                           " must be a multiple of the query/key head count H = " + std::to_string(H));
  }
  p->G = HV / H;
  if (K > 256) return Status::Unsupported("head size K = " + std::to_string(K) + " is not supported (1..256)");
  if (V > 256) return Status::Unsupported("head size V = " + std::to_string(V) + " is not supported (1..256)");

  // ---- sequences
  if (in.cu_seqlens_host.present() && !in.cu_seqlens.present()) {
    return Status::Invalid("cu_seqlens_host is given without cu_seqlens");
  }
  if (in.cu_seqlens_host.present() && in.cu_seqlens_host.device.type != DeviceType::kCPU) {
    // Read on the host by every backend (CPU included), so it must be host memory.
    return Status::Invalid("cu_seqlens_host must be in host (CPU) memory");
  }
  if (in.cu_seqlens.present()) {
    if (B != 1) {
      return Status::Invalid("with cu_seqlens the batch size must be 1 (sequences are packed along T), got B = " +
                             std::to_string(B));
    }
    p->varlen = true;
    if (!same_device(in.cu_seqlens.device, dev)) {
      return Status::Invalid("cu_seqlens must be on the device of q");
    }
    if (dev.type == DeviceType::kCPU) {
      LINATTN_TRY(read_cu_seqlens(in.cu_seqlens, "cu_seqlens", T, &p->cu));
      if (in.cu_seqlens_host.present()) {
        std::vector<int64_t> other;
        LINATTN_TRY(read_cu_seqlens(in.cu_seqlens_host, "cu_seqlens_host", T, &other));
        if (other != p->cu) return Status::Invalid("cu_seqlens_host differs from cu_seqlens");
      }
    } else {
      if (!in.cu_seqlens_host.present()) {
        return Status::Invalid("with CUDA tensors, cu_seqlens needs its host copy cu_seqlens_host "
                               "(read for validation and chunk indexing without a device sync)");
      }
      if (in.cu_seqlens.ndim != 1 || in.cu_seqlens_host.ndim != 1 ||
          in.cu_seqlens.shape[0] != in.cu_seqlens_host.shape[0] ||
          in.cu_seqlens.dtype != in.cu_seqlens_host.dtype || !in.cu_seqlens.is_contiguous() ||
          in.cu_seqlens.data == nullptr) {
        return Status::Invalid("cu_seqlens must be a contiguous 1-D int32/int64 tensor with the length "
                               "and dtype of cu_seqlens_host");
      }
      LINATTN_TRY(check_element_aligned("cu_seqlens", in.cu_seqlens));
      LINATTN_TRY(read_cu_seqlens(in.cu_seqlens_host, "cu_seqlens_host", T, &p->cu));
    }
    p->N = static_cast<int64_t>(p->cu.size()) - 1;
  } else {
    p->N = B;
    p->cu.resize(B + 1);
    for (int64_t n = 0; n <= B; ++n) p->cu[n] = n * T;
  }
  p->chunk_offsets.resize(p->N + 1);
  p->chunk_offsets[0] = 0;
  for (int64_t n = 0; n < p->N; ++n) {
    p->chunk_offsets[n + 1] = p->chunk_offsets[n] + (p->seq_len(n) + kChunkSize - 1) / kChunkSize;
  }
  p->num_chunks = p->chunk_offsets[p->N];

  // ---- scale
  if (opt.scale.has_value()) {
    // Every backend multiplies in float32 (float64 inputs aside): a scale outside float32's
    // range would overflow to Inf, or (below its normal range) lose its precision.
    const double sc = *opt.scale;
    if (!std::isfinite(sc)) return Status::Invalid("scale must be finite, got " + std::to_string(sc));
    if (std::fabs(sc) > static_cast<double>(std::numeric_limits<float>::max()) ||
        (sc != 0 && std::fabs(sc) < static_cast<double>(std::numeric_limits<float>::min()))) {
      std::ostringstream m;
      m << "scale must be 0 or of a magnitude float32 represents in full precision (1.18e-38 .. 3.4e38), got " << sc;
      return Status::Invalid(m.str());
    }
    p->scale = sc;
  } else {
    p->scale = 1.0 / std::sqrt(static_cast<double>(K));
  }

  // ---- backward precision (an enum the C ABI and bindings pass as an integer)
  switch (opt.backward_precision) {
    case BackwardPrecision::kAuto:
    case BackwardPrecision::kSplit:
    case BackwardPrecision::kFast16:
    case BackwardPrecision::kFloat32: break;
    default:
      return Status::Invalid("backward_precision " + std::to_string(static_cast<int>(opt.backward_precision)) +
                             " is not one of auto (0), split (1), fast16 (2), float32 (3)");
  }
  if (opt.keep_chunk_local && opt.disable_recompute) {
    return Status::Invalid("keep_chunk_local and disable_recompute are exclusive (disable_recompute keeps the chunk "
                           "states as well)");
  }

  // ---- gates
  const int64_t gw = p->vector_gate ? K : 1;
  p->has_g = in.g.present();
  if (p->has_g) {
    LINATTN_TRY(check_float("g", in.g));
    if (p->vector_gate) {
      LINATTN_TRY(check_tensor("g", in.g, {B, T, HV, K}, dev));
    } else {
      LINATTN_TRY(check_tensor("g", in.g, {B, T, HV}, dev));
    }
  } else if (family != Family::kSimpleGLA) {
    return Status::Invalid(std::string("g is required for ") + fam);
  }
  (void)gw;
  p->has_g_gamma = in.g_gamma.present();
  if (p->has_g_gamma) {
    if (family != Family::kSimpleGLA) return Status::Invalid(std::string("g_gamma is only for simple GLA, not ") + fam);
    LINATTN_TRY(check_float("g_gamma", in.g_gamma));
    LINATTN_TRY(check_tensor("g_gamma", in.g_gamma, {HV}, dev));
  }

  // ---- in-kernel gate. As in FLA: with use_gate_in_kernel, a lower_bound selects the
  // lower-bound activation L * sigmoid(exp(A_log) * (g + dt_bias)) (A_log optional); without
  // one the activation is -exp(A_log) * softplus(g + dt_bias). safe_gate promises g in [L, 0)
  // (computed in-kernel or passed) so backends may take the faster tensor-core path.
  p->has_A_log = in.A_log.present();
  p->has_dt_bias = in.dt_bias.present();
  if (opt.lower_bound.has_value() && family != Family::kKDA) {
    return Status::Unsupported(std::string("lower_bound / safe_gate is for KDA only, not ") + fam);
  }
  if (opt.safe_gate) {
    if (family != Family::kKDA) return Status::Unsupported(std::string("safe_gate is for KDA only, not ") + fam);
    // As in FLA: the in-kernel gate needs the bound it applies; a caller-computed g is promised
    // to lie in FLA's safe range, whose default bound is -5.
    if (opt.use_gate_in_kernel && !opt.lower_bound.has_value()) {
      return Status::Invalid("safe_gate with use_gate_in_kernel needs lower_bound (in [-5, 0), e.g. -5)");
    }
  }
  const std::optional<float> lower_bound =
      opt.lower_bound.has_value() ? opt.lower_bound
                                  : (opt.safe_gate ? std::optional<float>(kDefaultSafeGateLowerBound) : std::nullopt);
  if (lower_bound.has_value()) {
    const float L = *lower_bound;
    if (!(L >= -5.0f && L < 0.0f)) {
      return Status::Invalid("lower_bound must lie in [-5, 0), got " + std::to_string(L));
    }
    if (!opt.use_gate_in_kernel && !opt.safe_gate) {
      return Status::Invalid("lower_bound has no effect without use_gate_in_kernel or safe_gate");
    }
    p->gate_tf.lower_bound = L;
  }
  if (opt.use_gate_in_kernel) {
    if (!p->delta) return Status::Unsupported(std::string("use_gate_in_kernel is for KDA and GDN, not ") + fam);
    if (opt.lower_bound.has_value()) {
      p->gate_tf.kind = GateTransform::Kind::kLowerBound;
    } else {
      if (!p->has_A_log) return Status::Invalid("use_gate_in_kernel needs A_log (or a lower_bound)");
      p->gate_tf.kind = GateTransform::Kind::kSoftplus;
    }
    if (p->has_A_log) {
      LINATTN_TRY(check_float("A_log", in.A_log));
      LINATTN_TRY(check_param_vector("A_log", in.A_log, HV, "HV", dev));
    }
    if (p->has_dt_bias) {
      LINATTN_TRY(check_float("dt_bias", in.dt_bias));
      if (family == Family::kKDA) {
        LINATTN_TRY(check_param_vector("dt_bias", in.dt_bias, HV * K, "HV * K", dev));
      } else {
        LINATTN_TRY(check_param_vector("dt_bias", in.dt_bias, HV, "HV", dev));
      }
    }
  } else {
    if (p->has_A_log) return Status::Invalid("A_log is given but use_gate_in_kernel is false");
    if (p->has_dt_bias) return Status::Invalid("dt_bias is given but use_gate_in_kernel is false");
  }

  // ---- beta
  if (p->delta) {
    if (!in.beta.present()) return Status::Invalid(std::string("beta is required for ") + fam);
    LINATTN_TRY(check_float("beta", in.beta));
    LINATTN_TRY(check_tensor("beta", in.beta, {B, T, HV}, dev));
  } else {
    if (in.beta.present()) return Status::Invalid(std::string("beta is only for the delta rule (GDN, KDA), not ") + fam);
    if (opt.use_beta_sigmoid_in_kernel) return Status::Invalid(std::string("use_beta_sigmoid_in_kernel needs beta, which ") + fam + " has not");
  }
  if (opt.allow_neg_eigval && !opt.use_beta_sigmoid_in_kernel) {
    return Status::Invalid("allow_neg_eigval needs use_beta_sigmoid_in_kernel (it makes beta = 2 sigmoid(beta))");
  }
  p->beta_tf.sigmoid = opt.use_beta_sigmoid_in_kernel;
  p->beta_tf.neg_eigval = opt.allow_neg_eigval;

  // ---- initial state
  p->has_h0 = in.initial_state.present();
  if (p->has_h0) {
    LINATTN_TRY(check_state_dtype("initial_state", in.initial_state));
    if (opt.state_v_first) {
      LINATTN_TRY(check_tensor("initial_state", in.initial_state, {p->N, HV, V, K}, dev));
    } else {
      LINATTN_TRY(check_tensor("initial_state", in.initial_state, {p->N, HV, K, V}, dev));
    }
  }
  return Status::Ok();
}

namespace {
Status check_state_like(const char* name, const TensorView& t, const Problem& p) {
  LINATTN_TRY(check_state_dtype(name, t));
  if (p.opt.state_v_first) return check_tensor(name, t, {p.N, p.HV, p.V, p.K}, p.device);
  return check_tensor(name, t, {p.N, p.HV, p.K, p.V}, p.device);
}

using Named = NamedView;

// Byte range [lo, hi) a strided view spans (negative strides included).
void byte_range(const TensorView& t, std::uintptr_t* lo, std::uintptr_t* hi) {
  int64_t mn = 0, mx = 0;
  for (int i = 0; i < t.ndim; ++i) {
    const int64_t ext = (t.shape[i] - 1) * t.strides[i];
    (ext < 0 ? mn : mx) += ext;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  const auto es = static_cast<int64_t>(dtype_size(t.dtype));
  *lo = base + static_cast<std::uintptr_t>(mn * es);
  *hi = base + static_cast<std::uintptr_t>((mx + 1) * es);
}

}  // namespace

// Whether two present, non-empty views in one address space share a byte (strided views by the
// range they span).
bool views_overlap(const TensorView& a, const TensorView& b) {
  if (!a.present() || !b.present() || a.numel() <= 0 || b.numel() <= 0) return false;
  if (!same_device(a.device, b.device)) return false;
  std::uintptr_t a0, a1, b0, b1;
  byte_range(a, &a0, &a1);
  byte_range(b, &b0, &b1);
  return a0 < b1 && b0 < a1;
}

// Outputs are written while inputs are still being read (by other threads, or by other CUDA
// blocks), so no output may share memory with an input or with another output.
Status check_no_alias(std::initializer_list<NamedView> outputs, std::initializer_list<NamedView> inputs) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    for (const NamedView& i : inputs) {
      if (views_overlap(*o->t, *i.t)) {
        return Status::Invalid(std::string(o->name) + " overlaps the input " + i.name +
                               " in memory; outputs must not alias inputs");
      }
    }
    for (auto o2 = outputs.begin(); o2 != o; ++o2) {
      if (views_overlap(*o->t, *o2->t)) {
        return Status::Invalid(std::string(o->name) + " overlaps the output " + o2->name +
                               " in memory; outputs must not alias each other");
      }
    }
  }
  return Status::Ok();
}

namespace {
// Whether the byte range [a, a + an) shares a byte with the present, non-empty view b.
bool overlap_range(const Device& dev, const void* a, std::size_t an, const TensorView& b) {
  if (a == nullptr || an == 0 || !b.present() || b.numel() <= 0) return false;
  if (!same_device(dev, b.device)) return false;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a);
  const auto b0 = reinterpret_cast<std::uintptr_t>(b.data);
  const auto a1 = a0 + an;
  const auto b1 = b0 + static_cast<std::uintptr_t>(b.numel()) * dtype_size(b.dtype);
  return a0 < b1 && b0 < a1;
}

Status check_workspace(const Problem& p, Workspace ws, std::size_t need,
                       std::initializer_list<Named> buffers) {
  if (ws.bytes < need) {
    return {StatusCode::kWorkspaceTooSmall, "workspace has " + std::to_string(ws.bytes) +
                                                " bytes, this call needs " + std::to_string(need) +
                                                " (see *_workspace_size)"};
  }
  if (ws.bytes == 0) return Status::Ok();  // nothing will be written
  if (ws.data == nullptr) {
    if (need > 0) return Status::Invalid("workspace data pointer is null");
    return Status::Ok();
  }
  if (ws.device.has_value() && !same_device(*ws.device, p.device)) {
    return Status::Invalid("workspace is on a different device than q");
  }
  const auto w0 = reinterpret_cast<std::uintptr_t>(ws.data);
  if (ws.bytes > std::numeric_limits<std::uintptr_t>::max() - w0) {
    return Status::Invalid("workspace of " + std::to_string(ws.bytes) + " bytes at this address wraps the address space");
  }
  if (p.device.type == DeviceType::kCUDA && w0 % 16 != 0) {
    return Status::Unsupported("the CUDA kernels need a 16-byte aligned workspace; it starts at a misaligned address");
  }
  for (const Named& b : buffers) {
    if (overlap_range(p.device, ws.data, ws.bytes, *b.t)) {
      return Status::Invalid(std::string("workspace overlaps ") + b.name +
                             " in memory; the workspace must not alias any input or output");
    }
  }
  return Status::Ok();
}

Status check_saved(const char* name, const TensorView& t, const Problem& p) {
  if (t.dtype != DType::kUInt8) return Status::Invalid(std::string(name) + " must be a uint8 buffer");
  if (t.ndim != 1) return Status::Invalid(std::string(name) + " must be 1-D");
  if (!t.is_contiguous() || t.data == nullptr) return Status::Invalid(std::string(name) + " must be a contiguous, non-null buffer");
  if (!same_device(t.device, p.device)) return Status::Invalid(std::string(name) + " is on a different device than q");
  return Status::Ok();
}
}  // namespace

Status resolve_forward(Family family, const ForwardInputs& in, const ForwardOutputs& out,
                       const Options& opt, Problem* p) {
  LINATTN_TRY(resolve_inputs(family, in, opt, p));
  if (!out.o.present()) return Status::Invalid("o (the output) is required");
  LINATTN_TRY(check_same_as("o", out.o, "v", in.v, p->device));
  if (out.final_state.present()) LINATTN_TRY(check_state_like("final_state", out.final_state, *p));
  if (out.h.present()) {
    LINATTN_TRY(check_state_dtype("h", out.h));
    const int64_t b = p->varlen ? 1 : p->B;
    const int64_t nt = p->varlen ? p->num_chunks : p->num_chunks / p->B;
    if (p->opt.state_v_first) {
      LINATTN_TRY(check_tensor("h", out.h, {b, nt, p->HV, p->V, p->K}, p->device));
    } else {
      LINATTN_TRY(check_tensor("h", out.h, {b, nt, p->HV, p->K, p->V}, p->device));
    }
  }
  if (out.saved.present()) LINATTN_TRY(check_saved("saved", out.saved, *p));
  p->has_saved = out.saved.present();
  if (out.state_map_o.present() != out.state_map_final.present()) {
    return Status::Invalid("state_map_o and state_map_final are given together or not at all");
  }
  if (out.state_map_o.present()) {
    if (!p->delta) return Status::Invalid("state_map_o / state_map_final are for the delta-rule families (KDA, GDN)");
    if (out.state_map_o.dtype != out.o.dtype) return Status::Invalid("state_map_o must have o's (v's) dtype");
    LINATTN_TRY(check_tensor("state_map_o", out.state_map_o, {p->varlen ? 1 : p->B, p->T, p->HV, p->K}, p->device));
    if (out.state_map_final.dtype != DType::kFloat32) return Status::Invalid("state_map_final must be float32");
    LINATTN_TRY(check_tensor("state_map_final", out.state_map_final, {p->N, p->HV, p->K, p->K}, p->device));
  }
  LINATTN_TRY(check_no_alias(
      {{"o", &out.o}, {"final_state", &out.final_state}, {"h", &out.h}, {"saved", &out.saved},
       {"state_map_o", &out.state_map_o}, {"state_map_final", &out.state_map_final}},
      {{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"g", &in.g}, {"g_gamma", &in.g_gamma},
       {"beta", &in.beta}, {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias},
       {"initial_state", &in.initial_state}, {"cu_seqlens", &in.cu_seqlens},
       {"cu_seqlens_host", &in.cu_seqlens_host}}));
  return Status::Ok();
}

Status resolve_backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                        const Options& opt, Problem* p) {
  LINATTN_TRY(resolve_inputs(family, in.fwd, opt, p));
  const Device dev = p->device;
  if (!in.d_o.present()) return Status::Invalid("d_o (the output gradient) is required");
  LINATTN_TRY(check_same_as("d_o", in.d_o, "v", in.fwd.v, dev));
  if (in.dht.present()) LINATTN_TRY(check_state_like("dht", in.dht, *p));
  if (in.saved.present()) LINATTN_TRY(check_saved("saved", in.saved, *p));
  p->has_saved = in.saved.present();

  LINATTN_TRY(check_same_as("dq", out.dq, "q", in.fwd.q, dev));
  LINATTN_TRY(check_same_as("dk", out.dk, "k", in.fwd.k, dev));
  LINATTN_TRY(check_same_as("dv", out.dv, "v", in.fwd.v, dev));
  if (out.dg.present()) {
    if (!p->has_g) return Status::Invalid("dg is given but g is not");
    LINATTN_TRY(check_same_as("dg", out.dg, "g", in.fwd.g, dev));
  }
  if (out.dg_gamma.present()) {
    if (!p->has_g_gamma) return Status::Invalid("dg_gamma is given but g_gamma is not");
    LINATTN_TRY(check_same_as("dg_gamma", out.dg_gamma, "g_gamma", in.fwd.g_gamma, dev));
  }
  if (out.dbeta.present()) {
    if (!in.fwd.beta.present()) return Status::Invalid("dbeta is given but beta is not");
    LINATTN_TRY(check_same_as("dbeta", out.dbeta, "beta", in.fwd.beta, dev));
  }
  if (out.dA_log.present()) {
    if (!p->has_A_log) return Status::Invalid("dA_log is given but A_log is not");
    LINATTN_TRY(check_same_as("dA_log", out.dA_log, "A_log", in.fwd.A_log, dev));
  }
  if (out.ddt_bias.present()) {
    if (!p->has_dt_bias) return Status::Invalid("ddt_bias is given but dt_bias is not");
    LINATTN_TRY(check_same_as("ddt_bias", out.ddt_bias, "dt_bias", in.fwd.dt_bias, dev));
  }
  if (out.dh0.present()) {
    if (!p->has_h0) return Status::Invalid("dh0 is given but initial_state is not");
    LINATTN_TRY(check_same_as("dh0", out.dh0, "initial_state", in.fwd.initial_state, dev));
  }
  const ForwardInputs& f = in.fwd;
  LINATTN_TRY(check_no_alias(
      {{"dq", &out.dq}, {"dk", &out.dk}, {"dv", &out.dv}, {"dg", &out.dg},
       {"dg_gamma", &out.dg_gamma}, {"dbeta", &out.dbeta}, {"dA_log", &out.dA_log},
       {"ddt_bias", &out.ddt_bias}, {"dh0", &out.dh0}},
      {{"q", &f.q}, {"k", &f.k}, {"v", &f.v}, {"g", &f.g}, {"g_gamma", &f.g_gamma},
       {"beta", &f.beta}, {"A_log", &f.A_log}, {"dt_bias", &f.dt_bias},
       {"initial_state", &f.initial_state}, {"cu_seqlens", &f.cu_seqlens},
       {"cu_seqlens_host", &f.cu_seqlens_host}, {"d_o", &in.d_o}, {"dht", &in.dht},
       {"saved", &in.saved}}));
  return Status::Ok();
}

Status check_forward_workspace(const Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
                               Workspace ws, std::size_t need) {
  return check_workspace(
      p, ws, need,
      {{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"g", &in.g}, {"g_gamma", &in.g_gamma},
       {"beta", &in.beta}, {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias},
       {"initial_state", &in.initial_state}, {"cu_seqlens", &in.cu_seqlens},
       {"cu_seqlens_host", &in.cu_seqlens_host}, {"o", &out.o}, {"final_state", &out.final_state},
       {"h", &out.h}, {"saved", &out.saved}, {"state_map_o", &out.state_map_o},
       {"state_map_final", &out.state_map_final}});
}

Status check_backward_workspace(const Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                                Workspace ws, std::size_t need) {
  const ForwardInputs& f = in.fwd;
  return check_workspace(
      p, ws, need,
      {{"q", &f.q}, {"k", &f.k}, {"v", &f.v}, {"g", &f.g}, {"g_gamma", &f.g_gamma},
       {"beta", &f.beta}, {"A_log", &f.A_log}, {"dt_bias", &f.dt_bias},
       {"initial_state", &f.initial_state}, {"cu_seqlens", &f.cu_seqlens},
       {"cu_seqlens_host", &f.cu_seqlens_host}, {"d_o", &in.d_o}, {"dht", &in.dht},
       {"saved", &in.saved}, {"dq", &out.dq}, {"dk", &out.dk}, {"dv", &out.dv}, {"dg", &out.dg},
       {"dg_gamma", &out.dg_gamma}, {"dbeta", &out.dbeta}, {"dA_log", &out.dA_log},
       {"ddt_bias", &out.ddt_bias}, {"dh0", &out.dh0}});
}

Status workspace_view(const TensorView& t, Workspace* ws) {
  *ws = Workspace{};
  if (!t.present()) return Status::Ok();
  if (t.dtype != DType::kUInt8) {
    return Status::Invalid(std::string("workspace must be a uint8 buffer, got ") + dtype_name(t.dtype));
  }
  if (t.ndim != 1) return Status::Invalid("workspace must be 1-D, got " + shape_str(t));
  if (t.shape[0] < 0) return Status::Invalid("workspace has a negative size");
  if (!t.is_contiguous()) {
    return Status::Invalid("workspace must be contiguous (stride 1), got stride " + std::to_string(t.strides[0]));
  }
  if (t.shape[0] > 0 && t.data == nullptr) return Status::Invalid("workspace has a null data pointer");
  if (t.device.type != DeviceType::kCPU && t.device.type != DeviceType::kCUDA) {
    return Status::Invalid("workspace is on an unsupported device type");
  }
  ws->data = t.data;
  ws->bytes = static_cast<std::size_t>(t.shape[0]);
  ws->device = t.device;
  return Status::Ok();
}

}  // namespace linattn::detail
