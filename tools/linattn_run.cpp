// linattn-run: run one operator forward (+ backward) on random inputs of a given shape on the
// best device present, print time, throughput and checksums, and optionally check the result
// against the float64 reference.
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <exception>
#include <new>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/dtype.hpp"
#include "linattn/linattn.hpp"

#ifdef LINATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using namespace linattn;

const char* kUsage = R"(usage: linattn-run [options]

Runs one linattn operator forward and backward on random inputs and reports time,
throughput and checksums.

operator and shape
  --family NAME        kda | gdn | gla | simple_gla            (default kda)
  --B N --T N          batch and sequence length                (default 1, 4096)
  --H N --HV N         query/key heads and value heads (HV = G*H; default HV = H = 8)
  --K N --V N          head sizes                               (default 128, 128)
  --dtype NAME         bf16 | fp16 | fp32 | fp64                (default bf16)
  --cu-seqlens LIST    comma-separated offsets (implies B = 1 and T = last entry)
  --num-seqs N         split T into N random-length sequences (varlen, B = 1)

options (SPEC.md)
  --l2norm             use_qk_l2norm_in_kernel
  --gate-in-kernel     use_gate_in_kernel (KDA/GDN; A_log and dt_bias are generated)
  --lower-bound L      KDA lower-bound gate L*sigmoid(...) (with --gate-in-kernel)
  --safe-gate          safe_gate (KDA; with --gate-in-kernel needs --lower-bound, else L = -5)
  --beta-sigmoid       use_beta_sigmoid_in_kernel
  --neg-eigval         allow_neg_eigval (with --beta-sigmoid)
  --state-v-first      states stored [.., V, K]
  --initial-state      pass a random initial state (and get dh0)
  --final-state        request the final state (and pass a random dht)
  --g-gamma            simple GLA: use a per-head constant decay g_gamma instead of g
  --scale X            attention scale (default K^-0.5)
  --backward-precision auto | split | fast16 | float32: the CUDA backward's compute form
                       (Options::backward_precision; default auto; the CPU ignores it)
  --disable-recompute  training: the forward fills a saved buffer (saved_bytes) that the
                       backward reads instead of recomputing (Options::disable_recompute)
  --keep-chunk-local   training, GLA / simple GLA on CUDA (Hopper, 16-bit, K = 128): the forward
                       keeps its chunk-local intermediates and chunk states for the backward
                       (Options::keep_chunk_local; refused where nothing would be kept)

run
  --device NAME        auto | cpu | cuda                        (default auto: cuda if present)
  --no-backward        forward only
  --repeat N           timed repetitions, the median is reported (default 3)
  --check              compare with the float64 reference (slow for large shapes)
  --seed N             RNG seed (default 0)
  --help               this text
)";

struct Args {
  Family family = Family::kKDA;
  int64_t B = 1, T = 4096, H = 8, HV = -1, K = 128, V = 128;
  DType dtype = DType::kBFloat16;
  std::vector<int64_t> cu;
  int64_t num_seqs = 0;
  Options opt;
  bool gate_in_kernel = false, initial_state = false, final_state = false, g_gamma = false;
  std::string device = "auto";
  bool backward = true, check = false;
  int repeat = 3;
  uint64_t seed = 0;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "linattn-run: %s\n(see --help)\n", msg.c_str());
  std::exit(2);
}

// Checked conversions: the whole string must be a number in range (no trailing characters, no
// overflow), or the run stops with a message.
int64_t to_int(const std::string& s, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end == s.c_str() || *end != '\0') die(what + ": not an integer: '" + s + "'");
  if (errno == ERANGE) die(what + ": out of range: " + s);
  return v;
}

double to_double(const std::string& s, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end == s.c_str() || *end != '\0') die(what + ": not a number: '" + s + "'");
  if (errno == ERANGE || !std::isfinite(v)) die(what + ": out of range or not finite: " + s);
  return v;
}

// "0,10,20": every entry a checked integer, no empty entries.
std::vector<int64_t> to_int_list(const std::string& s, const std::string& what) {
  std::vector<int64_t> out;
  if (s.empty()) die(what + ": empty list");
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(to_int(item, what + " entry " + std::to_string(out.size())));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) die(std::string("missing value after ") + argv[i]);
    return argv[++i];
  };
  auto num = [&](int& i) -> int64_t {
    const std::string flag = argv[i];
    return to_int(need(i), flag);
  };
  auto real = [&](int& i) -> double {
    const std::string flag = argv[i];
    return to_double(need(i), flag);
  };
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (f == "--help" || f == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (f == "--family") {
      std::string s = need(i);
      if (s == "kda") a.family = Family::kKDA;
      else if (s == "gdn") a.family = Family::kGDN;
      else if (s == "gla") a.family = Family::kGLA;
      else if (s == "simple_gla") a.family = Family::kSimpleGLA;
      else die("unknown family " + s);
    } else if (f == "--B") a.B = num(i);
    else if (f == "--T") a.T = num(i);
    else if (f == "--H") a.H = num(i);
    else if (f == "--HV") a.HV = num(i);
    else if (f == "--K") a.K = num(i);
    else if (f == "--V") a.V = num(i);
    else if (f == "--dtype") {
      std::string s = need(i);
      if (s == "bf16") a.dtype = DType::kBFloat16;
      else if (s == "fp16") a.dtype = DType::kFloat16;
      else if (s == "fp32") a.dtype = DType::kFloat32;
      else if (s == "fp64") a.dtype = DType::kFloat64;
      else die("unknown dtype " + s);
    } else if (f == "--cu-seqlens") {
      a.cu = to_int_list(need(i), "--cu-seqlens");
    } else if (f == "--num-seqs") a.num_seqs = num(i);
    else if (f == "--l2norm") a.opt.use_qk_l2norm_in_kernel = true;
    else if (f == "--gate-in-kernel") a.gate_in_kernel = a.opt.use_gate_in_kernel = true;
    else if (f == "--lower-bound") {
      const double lb = real(i);  // validation refuses values outside [-5, 0); keep the cast defined
      a.opt.lower_bound = static_cast<float>(std::max(-1e30, std::min(1e30, lb)));
    }
    else if (f == "--safe-gate") a.opt.safe_gate = true;
    else if (f == "--beta-sigmoid") a.opt.use_beta_sigmoid_in_kernel = true;
    else if (f == "--neg-eigval") a.opt.allow_neg_eigval = true;
    else if (f == "--state-v-first") a.opt.state_v_first = true;
    else if (f == "--initial-state") a.initial_state = true;
    else if (f == "--final-state") a.final_state = true;
    else if (f == "--g-gamma") a.g_gamma = true;
    else if (f == "--scale") a.opt.scale = real(i);
    else if (f == "--backward-precision") {
      const std::string s = need(i);
      if (s == "auto") a.opt.backward_precision = BackwardPrecision::kAuto;
      else if (s == "split") a.opt.backward_precision = BackwardPrecision::kSplit;
      else if (s == "fast16") a.opt.backward_precision = BackwardPrecision::kFast16;
      else if (s == "float32") a.opt.backward_precision = BackwardPrecision::kFloat32;
      else die("unknown backward precision " + s + " (auto, split, fast16, float32)");
    }
    else if (f == "--disable-recompute") a.opt.disable_recompute = true;
    else if (f == "--keep-chunk-local") a.opt.keep_chunk_local = true;
    else if (f == "--device") a.device = need(i);
    else if (f == "--no-backward") a.backward = false;
    else if (f == "--repeat") {
      const int64_t r = num(i);
      if (r < 1 || r > 1000000) die("--repeat must lie in 1..1000000, got " + std::to_string(r));
      a.repeat = static_cast<int>(r);
    }
    else if (f == "--check") a.check = true;
    else if (f == "--seed") a.seed = static_cast<uint64_t>(num(i));
    else die("unknown option " + f);
  }
  if (a.HV < 0) a.HV = a.H;
  if (!a.cu.empty()) {
    a.B = 1;
    a.T = a.cu.back();
  }
  if (a.num_seqs < 0) die("--num-seqs must be >= 0, got " + std::to_string(a.num_seqs));
  if (a.num_seqs > 0 && a.cu.empty() && a.num_seqs > std::max<int64_t>(a.T, 1)) {
    die("--num-seqs " + std::to_string(a.num_seqs) + " exceeds T = " + std::to_string(a.T));
  }
  if (a.device != "auto" && a.device != "cpu" && a.device != "cuda") die("unknown device " + a.device);
  return a;
}

// ---------------------------------------------------------------- host buffers
struct Buffer {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> host;
  void* device_ptr = nullptr;  // CUDA copy when running on the GPU
  bool present = false;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  void alloc(DType dt, std::vector<int64_t> s) {
    dtype = dt;
    shape = std::move(s);
    host.assign(static_cast<size_t>(numel()) * dtype_size(dt), 0);
    present = true;
  }
  double get(int64_t i) const { return detail::load_as_double(host.data(), dtype, i); }
  void set(int64_t i, double x) { detail::store_from_double(host.data(), dtype, i, x); }
  TensorView view(bool on_device) const {
    if (!present) return TensorView{};
    TensorView t;
    t.data = on_device ? device_ptr : const_cast<unsigned char*>(host.data());
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      t.shape[i] = shape[i];
      t.strides[i] = stride;
      stride *= shape[i];
    }
    if (on_device) t.device = Device{DeviceType::kCUDA, 0};
    return t;
  }
  double checksum() const {
    double s = 0;
    for (int64_t i = 0; i < numel(); ++i) s += get(i);
    return s;
  }
  // FNV-1a over the raw bytes: equal across two builds or runs exactly when the tensors are
  // bitwise equal (up to hash collisions), for A/B checks of kernel changes meant to keep results
  uint64_t bits() const {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : host) h = (h ^ c) * 1099511628211ull;
    return h;
  }
};

bool g_cuda = false;

void check_cuda(int err, const char* what) {
#ifdef LINATTN_WITH_CUDA
  if (err != 0) die(std::string(what) + ": " + cudaGetErrorString(static_cast<cudaError_t>(err)));
#else
  (void)err;
  (void)what;
#endif
}

void to_device(Buffer& b) {
#ifdef LINATTN_WITH_CUDA
  if (!g_cuda || !b.present) return;
  if (!b.device_ptr) check_cuda(cudaMalloc(&b.device_ptr, std::max<size_t>(b.host.size(), 1)), "cudaMalloc");
  check_cuda(cudaMemcpy(b.device_ptr, b.host.data(), b.host.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
#else
  (void)b;
#endif
}

void to_host(Buffer& b) {
#ifdef LINATTN_WITH_CUDA
  if (!g_cuda || !b.present) return;
  check_cuda(cudaMemcpy(b.host.data(), b.device_ptr, b.host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
#else
  (void)b;
#endif
}

void sync() {
#ifdef LINATTN_WITH_CUDA
  if (g_cuda) check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

struct Scratch {
  std::vector<unsigned char> host;
  void* device_ptr = nullptr;
  size_t bytes = 0;
  Workspace get(size_t need) {
    if (need > bytes) {
      bytes = need;
      if (g_cuda) {
#ifdef LINATTN_WITH_CUDA
        if (device_ptr) cudaFree(device_ptr);
        check_cuda(cudaMalloc(&device_ptr, need), "cudaMalloc");
#endif
      } else {
        host.assign(need, 0);
      }
    }
    return Workspace{g_cuda ? device_ptr : static_cast<void*>(host.data()), bytes};
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double rel_err(const Buffer& x, const Buffer& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double a = x.get(i), b = ref.get(i);
    if (!std::isfinite(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void require(const Status& s, const char* what) {
  if (!s.ok()) die(std::string(what) + " failed: " + s.message);
}

// Runs the library's validation on the requested shapes and options before any buffer exists
// (shape-only views over a placeholder that validation never reads; the real calls validate again
// with the real buffers), then refuses a run whose host buffers would not fit in this machine's
// memory, so that bad or absurd sizes end in a message instead of an abort or the OOM killer.
void validate_before_allocating(const Args& a) {
  alignas(64) static unsigned char placeholder[64];
  const bool delta = a.family == Family::kGDN || a.family == Family::kKDA;
  const bool vector_gate = a.family == Family::kKDA || a.family == Family::kGLA;
  const DType gate_dtype = a.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  const DType state_dtype = gate_dtype;
  // With --num-seqs the offsets are drawn later; validate as one sequence (same shapes but N).
  std::vector<int64_t> cu = a.cu;
  if (cu.empty() && a.num_seqs > 0) cu = {0, a.T};
  const int64_t N = cu.empty() ? a.B : static_cast<int64_t>(cu.size()) - 1;
  auto view = [&](DType dt, std::initializer_list<int64_t> shape) { return make_view(placeholder, dt, shape); };
  ForwardInputs in;
  in.q = view(a.dtype, {a.B, a.T, a.H, a.K});
  in.k = in.q;
  in.v = view(a.dtype, {a.B, a.T, a.HV, a.V});
  if (a.family == Family::kSimpleGLA && a.g_gamma) {
    in.g_gamma = view(gate_dtype, {a.HV});
  } else if (vector_gate) {
    in.g = view(gate_dtype, {a.B, a.T, a.HV, a.K});
  } else {
    in.g = view(gate_dtype, {a.B, a.T, a.HV});
  }
  if (a.gate_in_kernel) {
    in.A_log = view(gate_dtype, {a.HV});
    // dt_bias: [HV * K] for KDA (an overflowing product is refused by the shape rules of q first)
    int64_t dtn = a.HV;
    if (a.family == Family::kKDA && __builtin_mul_overflow(a.HV, a.K, &dtn)) dtn = -1;
    in.dt_bias = view(gate_dtype, {dtn});
  }
  if (delta) in.beta = view(a.dtype, {a.B, a.T, a.HV});
  if (a.initial_state) {
    in.initial_state = a.opt.state_v_first ? view(state_dtype, {N, a.HV, a.V, a.K})
                                           : view(state_dtype, {N, a.HV, a.K, a.V});
  }
  if (!cu.empty()) in.cu_seqlens = make_view(cu.data(), DType::kInt64, {static_cast<int64_t>(cu.size())});
  // Host bytes: q, k, v, o, d_o and their gradients, gates, states; the reference (--check)
  // doubles it. Doubles throughout: the sizes may be anything here. Estimated once before the
  // library's validation (which allocates the sequence offsets: N + 1 of them) and once after,
  // with the workspaces.
  const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  auto host_bytes = [&](double fws, double bws) {
    const double es = static_cast<double>(dtype_size(a.dtype));
    const double tok = static_cast<double>(a.B) * static_cast<double>(a.T);
    const double qk = tok * static_cast<double>(a.H) * static_cast<double>(a.K) * es;
    const double vv = tok * static_cast<double>(a.HV) * static_cast<double>(a.V) * es;
    const double gg = tok * static_cast<double>(a.HV) * static_cast<double>(vector_gate ? a.K : 1) * 8.0;
    const double st = static_cast<double>(N) * static_cast<double>(a.HV) * static_cast<double>(a.K) * static_cast<double>(a.V) * 8.0;
    double total = 2 * qk + 3 * vv + gg + 2 * st + fws + static_cast<double>(N + 1) * 16.0;
    if (a.backward) total += 2 * qk + vv + gg + 2 * st + bws;
    return a.check ? 2 * total : total;
  };
  auto refuse_if_too_large = [&](double total) {
    if (phys > 0 && std::fabs(total) > phys) {
      char msg[256];
      std::snprintf(msg, sizeof msg, "this run needs about %.1f GiB of host memory; the machine has %.1f GiB",
                    std::fabs(total) / (1 << 30), phys / (1 << 30));
      die(msg);
    }
  };
  if (a.B >= 1 && a.T >= 1 && a.H >= 1 && a.HV >= 1 && a.K >= 1 && a.V >= 1) refuse_if_too_large(host_bytes(0, 0));
  std::size_t fbytes = 0, bbytes = 0;
  Status s = forward_workspace_size(a.family, in, a.opt, &fbytes);
  if (!s.ok()) die("invalid arguments: " + s.message);
  if (a.backward) {
    BackwardInputs bin;
    bin.fwd = in;
    s = backward_workspace_size(a.family, bin, a.opt, &bbytes);
    if (!s.ok()) die("invalid arguments: " + s.message);
  }
  refuse_if_too_large(host_bytes(static_cast<double>(fbytes), static_cast<double>(bbytes)));
}

int run(int argc, char** argv) {
  Args a = parse(argc, argv);
  validate_before_allocating(a);
  g_cuda = a.device == "cuda" || (a.device == "auto" && cuda_available());
  if (a.device == "cuda" && !cuda_available()) die("--device cuda: no CUDA backend or device");

  const bool delta = a.family == Family::kGDN || a.family == Family::kKDA;
  const bool vector_gate = a.family == Family::kKDA || a.family == Family::kGLA;
  std::mt19937_64 gen(a.seed);
  std::normal_distribution<double> normal(0.0, 1.0);

  // sequences
  if (a.num_seqs > 0 && a.cu.empty()) {
    if (a.B != 1) die("--num-seqs needs B = 1");
    std::vector<int64_t> cuts;
    std::uniform_int_distribution<int64_t> pick(1, std::max<int64_t>(1, a.T - 1));
    for (int64_t i = 1; i < a.num_seqs; ++i) cuts.push_back(pick(gen));
    std::sort(cuts.begin(), cuts.end());
    a.cu.push_back(0);
    for (int64_t c : cuts) a.cu.push_back(c);
    a.cu.push_back(a.T);
  }
  const int64_t N = a.cu.empty() ? a.B : static_cast<int64_t>(a.cu.size()) - 1;

  Buffer q, k, v, g, g_gamma, beta, A_log, dt_bias, h0, cu, o, ht, d_o, dht;
  q.alloc(a.dtype, {a.B, a.T, a.H, a.K});
  k.alloc(a.dtype, {a.B, a.T, a.H, a.K});
  v.alloc(a.dtype, {a.B, a.T, a.HV, a.V});
  auto fill = [&](Buffer& b, double scale) {
    for (int64_t i = 0; i < b.numel(); ++i) b.set(i, scale * normal(gen));
  };
  auto logsigmoid_gate = [&](Buffer& b) {
    for (int64_t i = 0; i < b.numel(); ++i) {
      const double x = normal(gen);
      b.set(i, (x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x))) / 16.0);
    }
  };
  // keys scaled so that beta * |k|^2 stays O(1) without l2norm, as in real models
  const double key_scale = a.opt.use_qk_l2norm_in_kernel ? 1.0 : 1.0 / std::sqrt(static_cast<double>(a.K));
  fill(q, 1.0);
  fill(k, key_scale);
  fill(v, 1.0);
  const DType gate_dtype = a.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  if (a.family == Family::kSimpleGLA && a.g_gamma) {
    g_gamma.alloc(gate_dtype, {a.HV});
    for (int64_t i = 0; i < a.HV; ++i) g_gamma.set(i, -std::ldexp(1.0, -5 - static_cast<int>(i % 4)));
  } else {
    if (vector_gate) g.alloc(gate_dtype, {a.B, a.T, a.HV, a.K});
    else g.alloc(gate_dtype, {a.B, a.T, a.HV});
    if (a.gate_in_kernel) fill(g, 1.0);
    else logsigmoid_gate(g);
  }
  if (a.gate_in_kernel) {
    A_log.alloc(gate_dtype, {a.HV});
    for (int64_t i = 0; i < a.HV; ++i) A_log.set(i, std::log(0.5 + 0.5 * (i % 3)) - 2.0);
    dt_bias.alloc(gate_dtype, {a.family == Family::kKDA ? a.HV * a.K : a.HV});
    fill(dt_bias, 0.5);
  }
  if (delta) {
    beta.alloc(a.dtype, {a.B, a.T, a.HV});
    std::uniform_real_distribution<double> u01(0.05, 0.95);
    for (int64_t i = 0; i < beta.numel(); ++i) beta.set(i, a.opt.use_beta_sigmoid_in_kernel ? normal(gen) : u01(gen));
  }
  std::vector<int64_t> state_shape = a.opt.state_v_first ? std::vector<int64_t>{N, a.HV, a.V, a.K}
                                                         : std::vector<int64_t>{N, a.HV, a.K, a.V};
  const DType state_dtype = a.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  if (a.initial_state) {
    h0.alloc(state_dtype, state_shape);
    fill(h0, 0.1);
  }
  if (!a.cu.empty()) {
    cu.alloc(DType::kInt64, {static_cast<int64_t>(a.cu.size())});
    for (size_t i = 0; i < a.cu.size(); ++i) cu.set(static_cast<int64_t>(i), static_cast<double>(a.cu[i]));
  }
  o.alloc(a.dtype, {a.B, a.T, a.HV, a.V});
  if (a.final_state) ht.alloc(state_dtype, state_shape);
  d_o.alloc(a.dtype, {a.B, a.T, a.HV, a.V});
  fill(d_o, 1.0);
  if (a.final_state) {
    dht.alloc(state_dtype, state_shape);
    fill(dht, 0.1);
  }

  Buffer* all_inputs[] = {&q, &k, &v, &g, &g_gamma, &beta, &A_log, &dt_bias, &h0, &cu, &o, &ht, &d_o, &dht};
  for (Buffer* b : all_inputs) to_device(*b);

  ForwardInputs in;
  in.q = q.view(g_cuda);
  in.k = k.view(g_cuda);
  in.v = v.view(g_cuda);
  in.g = g.view(g_cuda);
  in.g_gamma = g_gamma.view(g_cuda);
  in.beta = beta.view(g_cuda);
  in.A_log = A_log.view(g_cuda);
  in.dt_bias = dt_bias.view(g_cuda);
  in.initial_state = h0.view(g_cuda);
  in.cu_seqlens = cu.view(g_cuda);
  if (cu.present && g_cuda) in.cu_seqlens_host = cu.view(false);
  ForwardOutputs out;
  out.o = o.view(g_cuda);
  out.final_state = ht.view(g_cuda);

  std::printf("linattn-run %s: family=%s B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld dtype=%s sequences=%lld device=%s\n",
              version(), family_name(a.family), (long long)a.B, (long long)a.T, (long long)a.H,
              (long long)a.HV, (long long)a.K, (long long)a.V, dtype_name(a.dtype), (long long)N,
              g_cuda ? "cuda" : "cpu");

  Scratch fws, bws, saved;
  size_t fbytes = 0;
  require(forward_workspace_size(a.family, in, a.opt, &fbytes), "forward_workspace_size");
  const Workspace fw = fws.get(fbytes);
  // disable_recompute / keep_chunk_local: the buffer the forward fills and the backward reads
  TensorView saved_view;
  if (a.opt.disable_recompute || a.opt.keep_chunk_local) {
    size_t sbytes = 0;
    require(saved_bytes(a.family, in, a.opt, &sbytes), "saved_bytes");
    if (sbytes == 0)
      die(a.opt.keep_chunk_local ? "--keep-chunk-local: nothing is kept for this problem on this device (saved_bytes is 0: "
                                   "GLA or simple GLA on CUDA, Hopper, 16-bit inputs and compute, K = 128)"
                                 : "--disable-recompute: saved_bytes is 0 for this problem on this device");
    const Workspace sw = saved.get(sbytes);
    saved_view.data = sw.data;
    saved_view.dtype = DType::kUInt8;
    saved_view.ndim = 1;
    saved_view.shape[0] = static_cast<int64_t>(sbytes);
    saved_view.strides[0] = 1;
    if (g_cuda) saved_view.device = Device{DeviceType::kCUDA, 0};
    out.saved = saved_view;
  }

  auto now = [] { return std::chrono::steady_clock::now(); };
  auto ms_since = [&](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(now() - t0).count();
  };

  // warm-up + timed forward
  require(forward(a.family, in, out, a.opt, fw), "forward");
  sync();
  std::vector<double> fwd_ms;
  for (int r = 0; r < a.repeat; ++r) {
    auto t0 = now();
    require(forward(a.family, in, out, a.opt, fw), "forward");
    sync();
    fwd_ms.push_back(ms_since(t0));
  }
  to_host(o);
  to_host(ht);
  const double tokens = static_cast<double>(a.B * a.T);
  const double f_ms = median(fwd_ms);
  std::printf("forward : %10.3f ms  %10.3f Mtok/s  checksum(o)=%.6e", f_ms, tokens / f_ms / 1e3, o.checksum());
  if (ht.present) std::printf("  checksum(final_state)=%.6e", ht.checksum());
  std::printf("\n");

  Buffer dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0;
  bool backward_ran = false;
  BackwardInputs bin;
  BackwardOutputs bout;
  if (a.backward) {
    dq.alloc(a.dtype, q.shape);
    dk.alloc(a.dtype, k.shape);
    dv.alloc(a.dtype, v.shape);
    if (g.present) dg.alloc(g.dtype, g.shape);
    if (g_gamma.present) dg_gamma.alloc(g_gamma.dtype, g_gamma.shape);
    if (beta.present) dbeta.alloc(beta.dtype, beta.shape);
    if (A_log.present) dA_log.alloc(A_log.dtype, A_log.shape);
    if (dt_bias.present) ddt_bias.alloc(dt_bias.dtype, dt_bias.shape);
    if (h0.present) dh0.alloc(h0.dtype, h0.shape);
    Buffer* grads[] = {&dq, &dk, &dv, &dg, &dg_gamma, &dbeta, &dA_log, &ddt_bias, &dh0};
    for (Buffer* b : grads) to_device(*b);
    bin.fwd = in;
    bin.saved = saved_view;  // (empty without disable_recompute / keep_chunk_local)
    bin.d_o = d_o.view(g_cuda);
    bin.dht = dht.view(g_cuda);
    bout.dq = dq.view(g_cuda);
    bout.dk = dk.view(g_cuda);
    bout.dv = dv.view(g_cuda);
    bout.dg = dg.view(g_cuda);
    bout.dg_gamma = dg_gamma.view(g_cuda);
    bout.dbeta = dbeta.view(g_cuda);
    bout.dA_log = dA_log.view(g_cuda);
    bout.ddt_bias = ddt_bias.view(g_cuda);
    bout.dh0 = dh0.view(g_cuda);
    size_t bbytes = 0;
    require(backward_workspace_size(a.family, bin, a.opt, &bbytes), "backward_workspace_size");
    const Workspace bw = bws.get(bbytes);
    Status s = backward(a.family, bin, bout, a.opt, bw);
    if (s.code == StatusCode::kNotSupported) {
      std::printf("backward: not run (%s)\n", s.message.c_str());
    } else {
      require(s, "backward");
      sync();
      std::vector<double> bwd_ms;
      for (int r = 0; r < a.repeat; ++r) {
        auto t0 = now();
        require(backward(a.family, bin, bout, a.opt, bw), "backward");
        sync();
        bwd_ms.push_back(ms_since(t0));
      }
      for (Buffer* b : grads) to_host(*b);
      const double b_ms = median(bwd_ms);
      std::printf("backward: %10.3f ms  %10.3f Mtok/s  checksum(dq,dk,dv)=%.6e %.6e %.6e\n", b_ms,
                  tokens / b_ms / 1e3, dq.checksum(), dk.checksum(), dv.checksum());
      std::printf("fwd+bwd : %10.3f ms\n", f_ms + b_ms);
      std::printf("bits    : o=%016llx", static_cast<unsigned long long>(o.bits()));
      const char* names[] = {"dq", "dk", "dv", "dg", "dg_gamma", "dbeta", "dA_log", "ddt_bias", "dh0"};
      for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
        if (grads[i]->present) std::printf(" %s=%016llx", names[i], static_cast<unsigned long long>(grads[i]->bits()));
      std::printf("\n");
      backward_ran = true;
    }
  }

  int failures = 0;
  if (a.check) {
    // Reference on host copies; outputs in float64.
    ForwardInputs rin = in;
    rin.q = q.view(false);
    rin.k = k.view(false);
    rin.v = v.view(false);
    rin.g = g.view(false);
    rin.g_gamma = g_gamma.view(false);
    rin.beta = beta.view(false);
    rin.A_log = A_log.view(false);
    rin.dt_bias = dt_bias.view(false);
    rin.initial_state = h0.view(false);
    rin.cu_seqlens = cu.view(false);
    rin.cu_seqlens_host = TensorView{};
    Buffer ro, rht;
    ro.alloc(a.dtype, o.shape);  // reference_forward writes o in v's dtype
    if (ht.present) rht.alloc(ht.dtype, ht.shape);
    ForwardOutputs rout;
    rout.o = ro.view(false);
    rout.final_state = rht.view(false);
    Options ropt = a.opt;  // the reference keeps no buffer
    ropt.disable_recompute = ropt.keep_chunk_local = false;
    require(reference_forward(a.family, rin, rout, ropt), "reference_forward");
    const double tol = a.dtype == DType::kFloat64 ? 1e-5 : a.dtype == DType::kFloat32 ? 2e-3 : 1e-2;
    auto report = [&](const char* name, const Buffer& x, const Buffer& ref) {
      if (!x.present) return;
      const double e = rel_err(x, ref);
      const bool ok = e <= tol;
      failures += !ok;
      std::printf("check %-12s rel_err=%.3e  %s (tol %.0e)\n", name, e, ok ? "ok" : "FAIL", tol);
    };
    report("o", o, ro);
    report("final_state", ht, rht);
    if (backward_ran) {
      BackwardInputs rbin;
      rbin.fwd = rin;
      rbin.d_o = d_o.view(false);
      rbin.dht = dht.view(false);
      Buffer r_dq, r_dk, r_dv, r_dg, r_dgg, r_db, r_dA, r_ddt, r_dh0;
      r_dq.alloc(dq.dtype, dq.shape);
      r_dk.alloc(dk.dtype, dk.shape);
      r_dv.alloc(dv.dtype, dv.shape);
      if (dg.present) r_dg.alloc(dg.dtype, dg.shape);
      if (dg_gamma.present) r_dgg.alloc(dg_gamma.dtype, dg_gamma.shape);
      if (dbeta.present) r_db.alloc(dbeta.dtype, dbeta.shape);
      if (dA_log.present) r_dA.alloc(dA_log.dtype, dA_log.shape);
      if (ddt_bias.present) r_ddt.alloc(ddt_bias.dtype, ddt_bias.shape);
      if (dh0.present) r_dh0.alloc(dh0.dtype, dh0.shape);
      BackwardOutputs rb;
      rb.dq = r_dq.view(false);
      rb.dk = r_dk.view(false);
      rb.dv = r_dv.view(false);
      rb.dg = r_dg.view(false);
      rb.dg_gamma = r_dgg.view(false);
      rb.dbeta = r_db.view(false);
      rb.dA_log = r_dA.view(false);
      rb.ddt_bias = r_ddt.view(false);
      rb.dh0 = r_dh0.view(false);
      require(reference_backward(a.family, rbin, rb, ropt), "reference_backward");
      report("dq", dq, r_dq);
      report("dk", dk, r_dk);
      report("dv", dv, r_dv);
      report("dg", dg, r_dg);
      report("dg_gamma", dg_gamma, r_dgg);
      report("dbeta", dbeta, r_db);
      report("dA_log", dA_log, r_dA);
      report("ddt_bias", ddt_bias, r_ddt);
      report("dh0", dh0, r_dh0);
    }
    std::printf("check: %s\n", failures ? "FAILED" : "passed");
  }
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    die("out of host memory");
  } catch (const std::exception& e) {
    die(std::string("internal error: ") + e.what());
  }
}
