// GPU tests of the recurrent decode kernels (linattn::decode on CUDA tensors) against the float64
// CPU decode (tests/decode_cases.hpp): every family and option, poisoned outputs, pools untouched
// outside the written slots, device-side status flags for indices only the device can see, a
// device-only cu_seqlens, determinism, and CUDA graph capture with replays on new inputs.
// Skips itself without a GPU. Names with "Small" are for compute-sanitizer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "decode_cases.hpp"

namespace linattn::test {
namespace {

#define SKIP_WITHOUT_GPU()                                    \
  do {                                                        \
    if (!linattn::cuda_available()) GTEST_SKIP() << "no GPU"; \
  } while (0)

// Device copies of a DecodeCase's tensors; views point at them.
struct DeviceCase {
  std::vector<void*> bufs;
  DecodeInputs in;
  DecodeOutputs out;
  ~DeviceCase() {
    for (void* p : bufs) cudaFree(p);
  }
  TensorView up(const HostTensor& h) {
    if (!h.present()) return {};
    void* p = nullptr;
    const size_t n = std::max<size_t>(h.bytes.size(), 16);
    if (cudaMalloc(&p, n) != cudaSuccess) return {};
    bufs.push_back(p);
    cudaMemcpy(p, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice);
    TensorView v = h.view;
    v.data = p;
    v.device = Device{DeviceType::kCUDA, 0};
    return v;
  }
  static void down(const TensorView& d, HostTensor& h) {
    if (h.present()) cudaMemcpy(h.bytes.data(), d.data, h.bytes.size(), cudaMemcpyDeviceToHost);
  }
  // host_cu: also pass cu_seqlens_host (else the kernel reads the device copy only)
  explicit DeviceCase(const DecodeCase& c, bool host_cu = false) {
    in = c.inputs();
    in.q = up(c.q);
    in.k = up(c.k);
    in.v = up(c.v);
    in.g = up(c.g);
    in.g_gamma = up(c.g_gamma);
    in.beta = up(c.beta);
    in.A_log = up(c.A_log);
    in.dt_bias = up(c.dt_bias);
    in.state = up(c.state);
    in.ssm_state_indices = up(c.indices);
    in.num_accepted_tokens = up(c.accepted);
    in.cu_seqlens = up(c.cu);
    if (host_cu && c.cu.present()) in.cu_seqlens_host = c.cu.view;
    out.o = up(c.o);
    out.final_state = up(c.final_state);
    HostTensor st(DType::kInt32, {1});
    out.status = up(st);
  }
  void fetch(DecodeCase& c) const {
    down(out.o, c.o);
    down(out.final_state, c.final_state);
    down(in.state, c.state);
  }
  int status() const {
    int s = -1;
    cudaMemcpy(&s, out.status.data, 4, cudaMemcpyDeviceToHost);
    return s;
  }
};

void expect_matches(const DecodeConfig& cfg, bool host_cu) {
  DecodeCase c = make_decode_case(cfg);
  const HostTensor pool0 = c.state;
  Status s;
  const DecodeCase e = expected_decode(c, &s);
  ASSERT_TRUE(s.ok()) << cfg.name() << ": " << s.message;
  DeviceCase d(c, host_cu);
  s = decode(cfg.family, d.in, d.out, c.options());
  ASSERT_TRUE(s.ok()) << cfg.name() << ": " << s.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cfg.name();
  d.fetch(c);
  EXPECT_EQ(d.status(), 0) << cfg.name();
  const double tol = tolerance_for(cfg.dtype);
  const double eo = rel_err(c.o, e.o);
  EXPECT_LT(eo, tol) << cfg.name();
  double ef = 0;
  if (cfg.final_out) {
    ef = rel_err(c.final_state, e.final_state);
    EXPECT_LT(ef, tol) << cfg.name();
  }
  const PoolCheck pc = check_pool(c.state, e.state, pool0, c.written_slots);
  EXPECT_LT(pc.err, tol) << cfg.name();
  EXPECT_TRUE(pc.others_unchanged) << cfg.name() << ": a slot outside the written ones changed";
  std::printf("[decode] %-70s o %.2e  final %.2e  pool %.2e\n", cfg.name().c_str(), eo, ef, pc.err);
}

TEST(CudaDecode, SmallMatchesFloat64) {
  SKIP_WITHOUT_GPU();
  for (const DecodeConfig& cfg : decode_configs()) expect_matches(cfg, /*host_cu=*/true);
}

TEST(CudaDecode, SmallDeviceOnlyCuSeqlens) {
  SKIP_WITHOUT_GPU();
  for (const DecodeConfig& cfg : decode_configs())
    if (cfg.varlen) expect_matches(cfg, /*host_cu=*/false);
}

// Indices only the device sees: out of the pool, bad accepted counts, a sequence longer than
// T_max (device cu_seqlens), a bad device cu_seqlens. The sequence is skipped and flagged; no
// out-of-bounds access (memcheck), every other sequence as expected.
// Every kernel form: K = 64 (32-column tiles), K = V = 128 with a float32 pool (the whole-head
// kernel on Hopper) and with a bfloat16 pool (64-column tiles).
TEST(CudaDecode, SmallFlagsWhatOnlyTheDeviceSees) {
  SKIP_WITHOUT_GPU();
  struct Form {
    int64_t K;
    DType st;
  };
  for (const Form form : {Form{64, DType::kFloat32}, Form{128, DType::kFloat32}, Form{128, DType::kBFloat16}}) {
  DecodeConfig cfg;
  cfg.lens = {2, 1, 2, 2};
  cfg.varlen = true;
  cfg.pool = Pool::kIndices2D;
  cfg.t_max = 2;
  cfg.accepted = true;
  cfg.K = form.K;
  cfg.V = form.K;
  cfg.state_dtype = form.st;
  struct Bad {
    const char* what;
    int flag;
    std::function<void(DecodeCase&)> corrupt;  // on the device copy's host image
    int seq;                                    // the sequence that is skipped (-1: none known)
  };
  const std::vector<Bad> bads = {
      {"read slot past the pool", kDecodeIndexOutOfRange, [](DecodeCase& c) { c.indices.set(0 * c.t_max + int64_t(c.accepted.get(0)) - 1, double(c.P + 5)); }, 0},
      // read from column 0, the state after token 1 to a slot past the pool: flagged, not skipped
      {"write slot past the pool", kDecodeIndexOutOfRange, [](DecodeCase& c) { c.accepted.set(0, 1); c.indices.set(0 * c.t_max + 1, double(c.P + 5)); }, -1},
      {"accepted 0", kDecodeBadAcceptedTokens, [](DecodeCase& c) { c.accepted.set(1, 0); }, 1},
      {"accepted past T_max", kDecodeBadAcceptedTokens, [](DecodeCase& c) { c.accepted.set(2, 7); }, 2},
      {"sequence longer than T_max", kDecodeSequenceTooLong, [](DecodeCase& c) { c.cu.set(1, 0); }, -1},
      {"cu_seqlens past the tokens", kDecodeBadCuSeqlens, [](DecodeCase& c) { c.cu.set(4, 1000); }, -1},
  };
  for (const Bad& b : bads) {
    DecodeCase c = make_decode_case(cfg);
    DecodeCase bad = c;
    b.corrupt(bad);  // "longer than T_max": sequence 0 empty, sequence 1 gets 3 tokens > T_max = 2
    DeviceCase d(bad, /*host_cu=*/false);
    const Status s = decode(cfg.family, d.in, d.out, c.options());
    ASSERT_TRUE(s.ok()) << cfg.name() << " " << b.what << ": " << s.message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cfg.name() << " " << b.what;
    EXPECT_EQ(d.status() & b.flag, b.flag) << cfg.name() << " " << b.what;
    if (b.seq >= 0) {  // the flagged sequence's o rows are zero
      d.fetch(bad);
      int64_t bos = 0;
      for (int64_t n = 0; n < b.seq; ++n) bos += cfg.lens[n];
      for (int64_t t = 0; t < cfg.lens[b.seq]; ++t)
        for (int64_t i = 0; i < cfg.HV * cfg.V; ++i) ASSERT_EQ(bad.o.get((bos + t) * cfg.HV * cfg.V + i), 0.0) << b.what;
    }
  }
  }
}

// The same for one token per sequence at K = V = 128 (the whole-head kernel on Hopper): a slot past
// the pool is flagged, the sequence's o rows are zero, every other sequence as expected.
TEST(CudaDecode, SmallOneTokenFlagsSlotPastThePool) {
  SKIP_WITHOUT_GPU();
  for (DType st : {DType::kFloat32, DType::kBFloat16}) {
    DecodeConfig cfg;
    cfg.lens = {1, 1, 1, 1};
    cfg.pool = Pool::kIndices1D;
    cfg.state_dtype = st;
    cfg.K = 128;
    cfg.V = 128;
    DecodeCase c = make_decode_case(cfg);
    Status s;
    const DecodeCase e = expected_decode(c, &s);  // before the corruption: the other sequences
    ASSERT_TRUE(s.ok()) << s.message;
    DecodeCase bad = c;
    bad.indices.set(1, double(c.P + 5));
    DeviceCase d(bad);
    s = decode(cfg.family, d.in, d.out, c.options());
    ASSERT_TRUE(s.ok()) << s.message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d.status() & kDecodeIndexOutOfRange, kDecodeIndexOutOfRange) << cfg.name();
    d.fetch(bad);
    const int64_t row = cfg.HV * cfg.V;
    for (int64_t i = 0; i < row; ++i) ASSERT_EQ(bad.o.get(1 * row + i), 0.0) << cfg.name();
    HostTensor o_want = e.o;
    for (int64_t i = 0; i < row; ++i) o_want.set(1 * row + i, 0.0);
    EXPECT_LT(rel_err(bad.o, o_want), tolerance_for(cfg.dtype)) << cfg.name();
  }
}

TEST(CudaDecode, SmallDeterministic) {
  SKIP_WITHOUT_GPU();
  DecodeConfig cfg;
  cfg.lens = {3, 3, 3};
  cfg.K = cfg.V = 128;
  cfg.pool = Pool::kIndices1D;
  DecodeCase c = make_decode_case(cfg);
  DecodeCase r1 = c, r2 = c;
  {
    DeviceCase d(c);
    ASSERT_TRUE(decode(cfg.family, d.in, d.out, c.options()).ok());
    cudaDeviceSynchronize();
    d.fetch(r1);
  }
  {
    DeviceCase d(c);
    ASSERT_TRUE(decode(cfg.family, d.in, d.out, c.options()).ok());
    cudaDeviceSynchronize();
    d.fetch(r2);
  }
  EXPECT_EQ(r1.o.bytes, r2.o.bytes);
  EXPECT_EQ(r1.state.bytes, r2.state.bytes);
}

// The decode step captured in a CUDA graph (no host sync, no allocation in the call), replayed
// with new inputs copied into the same device buffers: each replay matches the float64 CPU decode.
TEST(CudaDecode, SmallGraphCaptureReplaysOnNewInputs) {
  SKIP_WITHOUT_GPU();
  DecodeConfig cfg;
  cfg.lens = {1, 1, 1, 1, 1, 1};
  cfg.varlen = true;
  cfg.K = cfg.V = 128;
  cfg.HV = 4;
  cfg.pool = Pool::kIndices1D;
  cfg.gate = DecodeGate::kSoftplus;
  DecodeCase c0 = make_decode_case(cfg);
  DeviceCase d(c0);
  cudaStream_t st;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status s = decode(cfg.family, d.in, d.out, c0.options(), st);
  ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
  ASSERT_TRUE(s.ok()) << s.message;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    DecodeCase c = make_decode_case(cfg);  // new values, same shapes
    c.indices = c0.indices;                // the captured call's slots
    c.written_slots = c0.written_slots;
    auto put = [&](const TensorView& dv, const HostTensor& h) {
      if (h.present()) cudaMemcpyAsync(dv.data, h.bytes.data(), h.bytes.size(), cudaMemcpyHostToDevice, st);
    };
    put(d.in.q, c.q);
    put(d.in.k, c.k);
    put(d.in.v, c.v);
    put(d.in.g, c.g);
    put(d.in.beta, c.beta);
    put(d.in.A_log, c.A_log);
    put(d.in.dt_bias, c.dt_bias);
    put(d.in.state, c.state);
    put(d.out.o, c.o);  // poisoned
    ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    const HostTensor pool0 = c.state;
    Status es;
    const DecodeCase e = expected_decode(c, &es);
    ASSERT_TRUE(es.ok()) << es.message;
    d.fetch(c);
    EXPECT_LT(rel_err(c.o, e.o), tolerance_for(cfg.dtype)) << "replay " << rep;
    const PoolCheck pc = check_pool(c.state, e.state, pool0, c.written_slots);
    EXPECT_LT(pc.err, tolerance_for(cfg.dtype)) << "replay " << rep;
    EXPECT_TRUE(pc.others_unchanged) << "replay " << rep;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace linattn::test
