#include <gtest/gtest.h>
#include "linattn/linattn.hpp"
TEST(Smoke, Version) { EXPECT_STREQ(linattn::version(), "0.1.0"); }
