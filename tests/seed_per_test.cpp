// Every test (CPU and CUDA binaries) starts from a generator seeded by its own name (test_util.hpp's seed_rng), so the
// values a test draws do not depend on which tests ran before it: a failure reproduces alone
// (--gtest_filter) and in any order (--gtest_shuffle). make_data reseeds per config on top.
#include <gtest/gtest.h>

#include <string>

#include "test_util.hpp"

namespace {

class SeedPerTest : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override {
    linattn::test::seed_rng(std::string(info.test_suite_name()) + "." + info.name());
  }
};

const bool kRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SeedPerTest);
  return true;
}();

}  // namespace
