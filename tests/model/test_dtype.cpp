#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "src/model/dtype.h"
#include "src/model/errors.h"

using namespace attn;

TEST(DType, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
      continue;
    }
    EXPECT_EQ(float_to_half(f), uint16_t(h)) << "bits " << h;
  }
}

TEST(DType, HalfRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00); // rounds to inf
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001); // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000); // tie to even: zero
  EXPECT_EQ(float_to_half(0x1.8p-25f), 0x0001);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);     // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); // tie -> even (up)
  EXPECT_EQ(float_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);   // above the tie
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const float f = bf16_to_float(uint16_t(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), uint16_t(h));
    }
  }
}

TEST(DType, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("float32"), DType::f32);
  EXPECT_THROW((void)parse_dtype("int8"), InputError);
}
