// The 16-bit float conversions of the library (src/common/half.h) against the independent
// reference in support/half_reference.h: every pattern, ties, random floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "common/half.h"
#include "support/half_reference.h"

namespace ronde {
namespace {

using namespace ronde::testing;

TEST(HalfTest, EveryHalfDecodesAndRoundTrips) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = halfToFloat(h);
    if (isHalfNan(h)) {
      EXPECT_TRUE(std::isnan(f)) << bits;
      EXPECT_TRUE(isHalfNan(floatToHalf(f))) << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), decodeHalf(h)) << bits;
    ASSERT_EQ(floatToHalf(f), h) << bits;
  }
}

TEST(HalfTest, RoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65519.99f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);   // the tie goes to the even pattern: infinity
  EXPECT_EQ(floatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(floatToHalf(1e30f), 0x7c00);
  EXPECT_EQ(floatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(floatToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);          // smallest subnormal
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);          // tie between 0 and 1: even
  EXPECT_EQ(floatToHalf(0x1.8p-25f), 0x0001);
  EXPECT_EQ(floatToHalf(0x1.8p-24f), 0x0002);        // tie between 1 and 2: even
  EXPECT_EQ(floatToHalf(0x1.ff8p-15f), 0x03ff);      // largest subnormal
  EXPECT_EQ(floatToHalf(0x1.ffcp-15f), 0x0400);      // tie: up into the smallest normal
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00);   // tie: even mantissa 0
  EXPECT_EQ(floatToHalf(1.0f + 0x1.8p-10f), 0x3c02); // tie: even mantissa 2
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_TRUE(isHalfNan(floatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(isHalfNan(floatToHalf(bitsToFloat(0x7f800001u))));  // NaN whose payload is low
  EXPECT_TRUE(isHalfNan(floatToHalf(bitsToFloat(0xff800001u))));
}

TEST(HalfTest, RandomFloatsMatchTheReference) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300000; ++i) {
    // Exponents around the half range, so overflow, subnormals and underflow all occur.
    const uint32_t bits = (rng() & 0x807fffffu) | ((96u + rng() % 50) << 23);
    const float f = bitsToFloat(bits);
    ASSERT_EQ(floatToHalf(f), roundHalf(f)) << std::hex << bits;
  }
}

TEST(Bfloat16Test, EveryValueDecodesAndRoundTrips) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const float f = bfloat16ToFloat(b);
    if (isBfloat16Nan(b)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(isBfloat16Nan(floatToBfloat16(f))) << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), decodeBfloat16(b)) << bits;
    ASSERT_EQ(floatToBfloat16(f), b) << bits;
  }
}

TEST(Bfloat16Test, RoundsToNearestEven) {
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x3f808000u)), 0x3f80);  // tie: even
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x3f818000u)), 0x3f82);  // tie: even
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x3f808001u)), 0x3f81);
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x7f7f8000u)), 0x7f80);  // overflows to infinity
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x00008000u)), 0x0000);  // subnormal tie: even
  EXPECT_EQ(floatToBfloat16(bitsToFloat(0x00018000u)), 0x0002);
  EXPECT_EQ(floatToBfloat16(-INFINITY), 0xff80);
  EXPECT_TRUE(isBfloat16Nan(floatToBfloat16(bitsToFloat(0x7f800001u))));
  EXPECT_TRUE(isBfloat16Nan(floatToBfloat16(bitsToFloat(0xffffffffu))));
  std::mt19937 rng(11);
  for (int i = 0; i < 300000; ++i) {
    const uint32_t bits = rng();
    if ((bits & 0x7f800000u) == 0x7f800000u) continue;
    ASSERT_EQ(floatToBfloat16(bitsToFloat(bits)), roundBfloat16(bitsToFloat(bits)))
        << std::hex << bits;
  }
}

}  // namespace
}  // namespace ronde
