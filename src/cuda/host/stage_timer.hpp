// Per-stage GPU times of one call, for benchmarks (bench/cuda_stage_bench.cpp): the code under
// measurement marks where each stage starts; the owner reads the times after the call. Marks
// record CUDA events on the call's stream; reading them waits for the last one. A null
// StageTimer* costs nothing, which is what the product passes.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

namespace linattn::cuda {

class StageTimer {
 public:
  StageTimer() = default;
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer() { clear(); }

  // The stage `next` starts here (it ends at the following mark; the last mark's stage is not timed).
  void mark(const char* next, cudaStream_t stream) {
    cudaEvent_t ev;
    if (cudaEventCreate(&ev) != cudaSuccess) return;
    cudaEventRecord(ev, stream);
    events_.push_back(ev);
    names_.emplace_back(next);
  }

  // (stage, milliseconds) of every timed stage, in order; waits for the last mark.
  std::vector<std::pair<std::string, float>> stages() const {
    std::vector<std::pair<std::string, float>> r;
    if (events_.empty()) return r;
    cudaEventSynchronize(events_.back());
    for (std::size_t i = 1; i < events_.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, events_[i - 1], events_[i]);
      r.emplace_back(names_[i - 1], ms);
    }
    return r;
  }

  // One line per stage: "<prefix> <stage> <ms> ms".
  void print(std::FILE* f, const char* prefix = "[bwd profile]") const {
    for (const auto& [name, ms] : stages()) std::fprintf(f, "%s %s %.3f ms\n", prefix, name.c_str(), ms);
  }

  // Forgets the marks (a timer can then measure another call).
  void clear() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    events_.clear();
    names_.clear();
  }

 private:
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> names_;
};

}  // namespace linattn::cuda
