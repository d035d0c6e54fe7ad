#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "src/model/dtype.h"
#include "src/model/errors.h"
#include "src/model/rng.h"

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

// The bulk conversion test data is stored with (F16C where the processor has it) gives
// float_to_half's bits: every float pattern's neighbourhood of the rounding edges, random
// patterns, doubles between two floats, and a NaN in a group of eight, at every length mod 8.
TEST(DType, DoublesToHalvesGiveFloatToHalfsBits) {
  std::vector<double> v;
  for (const float f : {0.0f, -0.0f, 0x1p-25f, 0x1.8p-25f, 0x1p-24f, 0x1p-14f, 0x1.ffcp-15f,
                        1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.996f, 65520.0f,
                        -65520.0f, std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), 1e-45f, 3.4e38f}) {
    v.push_back(f);
    v.push_back(std::nextafter(f, 1e30f));
    v.push_back(std::nextafter(f, -1e30f));
  }
  Rng rng(7);
  for (int i = 0; i < 1 << 16; ++i) {
    float f;
    const auto bits = uint32_t(rng.next_u64());
    std::memcpy(&f, &bits, sizeof f);
    v.push_back(std::isnan(f) ? 1.5 : double(f));
    v.push_back(rng.normal() * 1e-3); // doubles: rounded to float, then to half
  }
  for (std::size_t n = v.size() - 8; n <= v.size(); ++n) {
    std::vector<uint16_t> got(n);
    doubles_to_halves(v.data(), got.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], float_to_half(float(v[i]))) << "value " << v[i] << " at " << i;
    }
  }
  // A NaN in the second group: that group and the rest element by element, with the same bits.
  std::vector<double> w(24, 0.75);
  w[11] = std::numeric_limits<double>::quiet_NaN();
  w[20] = -3.0;
  std::vector<uint16_t> got(w.size());
  doubles_to_halves(w.data(), got.data(), w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(got[i], float_to_half(float(w[i]))) << i;
  }
}

// The bulk conversion the output checker reads 16-bit outputs with (F16C where the processor has
// it) gives half_to_float's bits for every half pattern, NaNs with their payloads included, at
// every length mod 8.
TEST(DType, HalvesToFloatsGiveHalfToFloatsBits) {
  std::vector<uint16_t> all(1 << 16);
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i] = uint16_t(i);
  }
  std::vector<float> got(all.size());
  halves_to_floats(all.data(), got.data(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(half_to_float(all[i])))
        << "half 0x" << std::hex << i;
  }
  // A signalling NaN in the second group of eight, then ordinary values after it.
  std::vector<uint16_t> w(27, 0x3c00);
  w[9] = 0x7c01;
  w[20] = 0xc200;
  for (std::size_t n = 16; n <= w.size(); ++n) {
    std::vector<float> g(n);
    halves_to_floats(w.data(), g.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(half_to_float(w[i])))
          << n << " " << i;
    }
  }
}

// Normals drawn in bulk (four pairs at a time through AVX2 where the processor has it) are the
// stream of single draws, bit for bit, from any starting point of it.
TEST(Rng, BulkNormalsAreTheStreamOfSingleDraws) {
  for (const std::size_t skip : {0, 1, 2, 7}) {
    for (const uint64_t seed : {1ull, 42ull, 0xdeadbeefull}) {
      Rng one(seed), bulk(seed);
      for (std::size_t i = 0; i < skip; ++i) {
        (void)one.normal();
        (void)bulk.normal();
      }
      std::vector<double> got(100003);
      bulk.normals(got.data(), got.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double want = one.normal();
        ASSERT_EQ(std::memcmp(&got[i], &want, sizeof want), 0)
            << "seed " << seed << " skip " << skip << " draw " << i << ": " << got[i] << " vs "
            << want;
      }
    }
  }
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
