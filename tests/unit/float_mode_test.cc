// tests/unit/float_mode_test.cc — the per-thread flush-to-zero mode (runtime/core/float_mode.h):
// what it does to a subnormal result and a subnormal input, that switching it off restores
// IEEE gradual underflow, and that a thread started afterwards inherits it (which is how the
// communicators' progress threads get it).
// links: tessera_core
#include <bit>
#include <cfloat>
#include <cstdint>
#include <thread>

#include <gtest/gtest.h>

#include "runtime/core/float_mode.h"

namespace tessera {
namespace {

// volatile: the products must happen at run time, in the thread's mode, not in the compiler.
volatile float g_tiny = 1e-30f;
volatile float g_small = 1e-10f;
volatile float g_one = 1.0f;
volatile float g_subnormal = 1e-40f;  // a subnormal constant: encoded exactly, never computed

// From the bits: std::fpclassify compares floats, which a flushing thread reads as zero.
bool IsSubnormal(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return (bits & 0x7f800000u) == 0 && (bits & 0x007fffffu) != 0;
}

// Restores IEEE mode whatever a test leaves behind (gtest runs tests of a file in one thread).
class FloatMode : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(CanFlushSubnormals()) << "this CPU cannot flush subnormals"; }
  void TearDown() override { SetFlushSubnormals(false); }
};

TEST_F(FloatMode, IeeeModeKeepsSubnormalResultsAndInputs) {
  SetFlushSubnormals(false);
  EXPECT_FALSE(FlushesSubnormals());
  EXPECT_TRUE(IsSubnormal(g_tiny * g_small));  // 1e-40: gradual underflow
  EXPECT_TRUE(IsSubnormal(g_subnormal * g_one));
}

TEST_F(FloatMode, FlushingMakesTinyResultsAndSubnormalInputsZero) {
  SetFlushSubnormals(true);
  EXPECT_TRUE(FlushesSubnormals());
  EXPECT_EQ(g_tiny * g_small, 0.0f);       // FTZ: a result below FLT_MIN is 0
  EXPECT_EQ(g_subnormal * g_one, 0.0f);    // DAZ: a subnormal operand reads as 0
  EXPECT_EQ(g_subnormal + g_one, 1.0f);
  // Results at and above FLT_MIN are untouched: the mode only ever changes subnormals.
  volatile float min_normal = FLT_MIN;
  EXPECT_EQ(min_normal * g_one, FLT_MIN);
  EXPECT_EQ(g_tiny * g_one, 1e-30f);
}

TEST_F(FloatMode, SwitchingOffRestoresGradualUnderflow) {
  SetFlushSubnormals(true);
  SetFlushSubnormals(false);
  EXPECT_FALSE(FlushesSubnormals());
  EXPECT_TRUE(IsSubnormal(g_tiny * g_small));
}

TEST_F(FloatMode, SettingItTwiceIsTheSameAsOnce) {
  SetFlushSubnormals(true);
  SetFlushSubnormals(true);
  EXPECT_TRUE(FlushesSubnormals());
  EXPECT_EQ(g_tiny * g_small, 0.0f);
}

TEST_F(FloatMode, IsPerThreadAndInheritedByAThreadStartedLater) {
  SetFlushSubnormals(true);
  bool child_flushes = false;
  float child_product = -1.0f;
  std::thread child([&] {
    child_flushes = FlushesSubnormals();
    child_product = g_tiny * g_small;
    SetFlushSubnormals(false);  // the child's own register: the parent keeps its mode
  });
  child.join();
  EXPECT_TRUE(child_flushes) << "a new thread did not start in its creator's mode";
  EXPECT_EQ(child_product, 0.0f);
  EXPECT_TRUE(FlushesSubnormals());

  SetFlushSubnormals(false);
  std::thread ieee_child([&] { child_flushes = FlushesSubnormals(); });
  ieee_child.join();
  EXPECT_FALSE(child_flushes);
}

}  // namespace
}  // namespace tessera
