// fp8 KV caches (SPEC.md "fp8 KV caches"): the two formats decoded and encoded exactly (every bit
// pattern, every rounding midpoint, saturation, NaN), the dtype names, problems with fp8 caches
// and their scales, the reference's dequantisation, and backends that refuse what they cannot
// read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/reference.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/model/dtype.h"
#include "src/model/errors.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "tests/support/problems.h"

using namespace attn;

using test::expect_input_error;
using test::gen;
using test::params;

namespace {

constexpr float kInfF = std::numeric_limits<float>::infinity();

TEST(Fp8, DecodesTheFormatsLandmarks) {
  const Fp8Format e4 = Fp8Format::e4m3;
  const Fp8Format e5 = Fp8Format::e5m2;
  // E4M3FN: bias 7, smallest subnormal 2^-9, smallest normal 2^-6, max 448, NaN S.1111.111.
  EXPECT_EQ(fp8_to_float(e4, 0x00), 0.0f);
  EXPECT_TRUE(std::signbit(fp8_to_float(e4, 0x80)));
  EXPECT_EQ(fp8_to_float(e4, 0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_to_float(e4, 0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_to_float(e4, 0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_to_float(e4, 0x38), 1.0f);
  EXPECT_EQ(fp8_to_float(e4, 0x3c), 1.5f);
  EXPECT_EQ(fp8_to_float(e4, 0x7e), 448.0f);
  EXPECT_EQ(fp8_to_float(e4, 0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_to_float(e4, 0x7f)));
  EXPECT_TRUE(std::isnan(fp8_to_float(e4, 0xff)));
  EXPECT_EQ(fp8_to_float(e4, 0x78), 256.0f); // exponent 15 is finite: no infinity
  // E5M2: bias 15, smallest subnormal 2^-16, max 57344, infinities and NaNs as IEEE.
  EXPECT_EQ(fp8_to_float(e5, 0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(fp8_to_float(e5, 0x04), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp8_to_float(e5, 0x3c), 1.0f);
  EXPECT_EQ(fp8_to_float(e5, 0x7b), 57344.0f);
  EXPECT_EQ(fp8_to_float(e5, 0x7c), kInfF);
  EXPECT_EQ(fp8_to_float(e5, 0xfc), -kInfF);
  for (uint8_t b : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) {
    EXPECT_TRUE(std::isnan(fp8_to_float(e5, b))) << int(b);
  }
  // Every pattern against the fields, independently of the table (value = mantissa * 2^k).
  for (int b = 0; b < 256; ++b) {
    const int e4exp = (b >> 3) & 15;
    const int e4man = b & 7;
    if (!(e4exp == 15 && e4man == 7)) {
      const double v = e4exp == 0 ? std::ldexp(e4man, -9) : std::ldexp(8 + e4man, e4exp - 10);
      EXPECT_EQ(double(fp8_to_float(e4, uint8_t(b))), (b & 0x80) ? -v : v) << b;
    }
    const int e5exp = (b >> 2) & 31;
    const int e5man = b & 3;
    if (e5exp != 31) {
      const double v = e5exp == 0 ? std::ldexp(e5man, -16) : std::ldexp(4 + e5man, e5exp - 17);
      EXPECT_EQ(double(fp8_to_float(e5, uint8_t(b))), (b & 0x80) ? -v : v) << b;
    }
  }
}

TEST(Fp8, EveryValueRoundTripsAndEveryMidpointRoundsToEven) {
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const uint8_t max = fp8_spec(f).max_bits;
    for (int b = 0; b < 256; ++b) {
      const float v = fp8_to_float(f, uint8_t(b));
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(fp8_to_float(f, float_to_fp8(f, v))));
        continue;
      }
      if (std::isinf(v)) {
        EXPECT_EQ(float_to_fp8(f, v), uint8_t((b & 0x80) | max)) << "saturates";
        continue;
      }
      EXPECT_EQ(float_to_fp8(f, v), uint8_t(b)) << int(f) << " " << b;
    }
    // Positive neighbours a < c: the midpoint goes to the even pattern, just off it to the nearer.
    for (int b = 0; b < max; ++b) {
      const float a = fp8_to_float(f, uint8_t(b));
      const float c = fp8_to_float(f, uint8_t(b + 1));
      const float mid = (a + c) / 2; // exact in float
      const uint8_t even = (b % 2 == 0) ? uint8_t(b) : uint8_t(b + 1);
      EXPECT_EQ(float_to_fp8(f, mid), even) << int(f) << " " << b;
      EXPECT_EQ(float_to_fp8(f, -mid), uint8_t(0x80 | even)) << int(f) << " " << b;
      EXPECT_EQ(float_to_fp8(f, std::nextafter(mid, 0.0f)), uint8_t(b));
      EXPECT_EQ(float_to_fp8(f, std::nextafter(mid, kInfF)), uint8_t(b + 1));
    }
  }
}

TEST(Fp8, SaturatesAndKeepsNaN) {
  const Fp8Format e4 = Fp8Format::e4m3;
  const Fp8Format e5 = Fp8Format::e5m2;
  EXPECT_EQ(float_to_fp8(e4, 464.0f), 0x7e); // between 448 and (absent) 480: saturates
  EXPECT_EQ(float_to_fp8(e4, 1e9f), 0x7e);
  EXPECT_EQ(float_to_fp8(e4, kInfF), 0x7e);
  EXPECT_EQ(float_to_fp8(e4, -kInfF), 0xfe);
  EXPECT_EQ(float_to_fp8(e5, 61440.0f), 0x7b); // the midpoint to infinity saturates too
  EXPECT_EQ(float_to_fp8(e5, kInfF), 0x7b);
  EXPECT_EQ(float_to_fp8(e5, -1e30f), 0xfb);
  EXPECT_EQ(float_to_fp8(e4, std::ldexp(1.0f, -10)), 0x00); // half the smallest subnormal: even
  EXPECT_EQ(float_to_fp8(e4, std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(float_to_fp8(e4, -0.0f), 0x80);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(fp8_to_float(e4, float_to_fp8(e4, nan))));
  EXPECT_TRUE(std::isnan(fp8_to_float(e5, float_to_fp8(e5, -nan))));
  // Through the dtype: a tensor stores and loads the same values.
  HostTensor t(DType::fp8_e4m3, {3});
  t.set(0, 1.0625f); // midpoint of 1 and 1.125: even (1)
  t.set(1, 500.0f);
  t.set(2, -0.3f);
  EXPECT_EQ(t.data.size(), 3u);
  EXPECT_EQ(t.get(0), 1.0f);
  EXPECT_EQ(t.get(1), 448.0f);
  EXPECT_EQ(t.get(2), round_to(DType::fp8_e4m3, -0.3f));
  EXPECT_EQ(t.get(2), -0.3125f);
}

// The encoder works on the float's bits; its definition is the value arithmetic of
// detail::fp8_encode_slow. Every one of the 2^32 floats agreed when this was written (five
// minutes); here, every float whose low 13 bits are a fixed pattern (every exponent, sign and
// the top of every mantissa: 2^19 per pattern) for two patterns, plus the neighbours of every
// fp8 value and midpoint, which is where rounding and saturation turn.
TEST(Fp8, TheBitEncoderAgreesWithTheValueArithmetic) {
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    auto check = [&](uint32_t bits) {
      float x;
      std::memcpy(&x, &bits, 4);
      ASSERT_EQ(float_to_fp8(f, x), detail::fp8_encode_slow(f, x))
          << "format " << int(f) << ", float bits 0x" << std::hex << bits;
    };
    for (uint32_t low : {0x0000u, 0x1fffu}) {
      for (uint32_t hi = 0; hi < (1u << 19); ++hi) {
        check((hi << 13) | low);
      }
    }
    for (int b = 0; b < 256; ++b) {
      const float v = fp8_to_float(f, uint8_t(b));
      const float next = fp8_to_float(f, uint8_t(b + 1 < 256 ? b + 1 : b));
      for (float anchor_value : {v, (v + next) / 2}) {
        uint32_t bits;
        std::memcpy(&bits, &anchor_value, 4);
        for (uint32_t d = 0; d < 3; ++d) {
          check(bits - d);
          check(bits + d);
        }
      }
    }
  }
}

TEST(Fp8, DtypeNames) {
  EXPECT_EQ(parse_kv_dtype("auto", DType::bf16), DType::bf16);
  EXPECT_EQ(parse_kv_dtype("bf16", DType::bf16), DType::bf16);
  EXPECT_EQ(parse_kv_dtype("fp8", DType::f16), DType::fp8_e4m3);
  EXPECT_EQ(parse_kv_dtype("fp8_e4m3", DType::f16), DType::fp8_e4m3);
  EXPECT_EQ(parse_kv_dtype("float8_e5m2", DType::f16), DType::fp8_e5m2);
  EXPECT_EQ(dtype_name(DType::fp8_e5m2), "fp8_e5m2");
  EXPECT_EQ(dtype_size(DType::fp8_e4m3), 1u);
  expect_input_error([] { (void)parse_kv_dtype("int8", DType::f16); },
                     {"unknown KV-cache dtype 'int8'", "fp8_e4m3"}, "kv dtype");
  expect_input_error([] { (void)parse_kv_dtype("fp32", DType::f16); },
                     {"unknown KV-cache dtype 'fp32'"}, "another 16/32-bit cache");
  expect_input_error([] { (void)parse_dtype("fp8_e4m3"); }, {"is a KV-cache dtype"}, "query");
}

AttnParams fp8_params(DType kv, DType q = DType::f32) {
  AttnParams p = params(8, 2, 64, 16, q);
  p.kv_dtype = kv;
  return p;
}

// The reference on an fp8 cache equals the reference on an fp32 twin holding the dequantised
// values (power-of-two scales keep every product exact in fp32), in every layout.
TEST(Fp8, TheReferenceDequantisesExactly) {
  for (const DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    GenOptions o = gen(11);
    o.k_scale = {0.25f, 4.0f}; // per KV head
    o.v_scale = {0.125f};      // per tensor
    const Problem pr = make_decode_problem(fp8_params(kv), {1, 17, 40}, o);
    pr.validate();
    EXPECT_EQ(pr.key_cache.dtype, kv);
    EXPECT_EQ(pr.k_scale, o.k_scale);
    Problem twin = pr;
    twin.params.kv_dtype.reset();
    twin.k_scale.clear();
    twin.v_scale.clear();
    twin.key_cache = HostTensor(DType::f32, pr.key_cache.shape);
    twin.value_cache = HostTensor(DType::f32, pr.value_cache.shape);
    const int per_head = pr.params.block_size * pr.params.head_dim;
    for (std::size_t i = 0; i < std::size_t(pr.key_cache.numel()); ++i) {
      const int kvh = int((i / std::size_t(per_head)) % 2);
      twin.key_cache.set(i, pr.key_cache.get(i) * pr.key_scale(kvh));
      twin.value_cache.set(i, pr.value_cache.get(i) * pr.value_scale(kvh));
    }
    const ReferenceResult a = reference_attention(pr, {.threads = 1, .rows = {}});
    const ReferenceResult b = reference_attention(twin, {.threads = 1, .rows = {}});
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.lse, b.lse);
    // The scales matter: the same bits read with scale 1 give another answer.
    Problem unscaled = pr;
    unscaled.k_scale.clear();
    unscaled.v_scale.clear();
    EXPECT_NE(reference_attention(unscaled, {.threads = 1, .rows = {}}).out, a.out);
    // Every layout holds the same values (x = 16 for fp8 in the vllm layout).
    for (const KvLayout l : {KvLayout::NHD, KvLayout::vllm}) {
      const Problem moved = with_kv_layout(pr, l);
      EXPECT_EQ(moved.k_scale, pr.k_scale);
      EXPECT_EQ(moved.kv_geometry().x, l == KvLayout::vllm ? 16 : 1);
      EXPECT_EQ(reference_attention(moved, {.threads = 1, .rows = {}}).out, a.out) << kv_layout_name(l);
    }
  }
}

TEST(Fp8, SmallScalesPutValuesNearSaturation) {
  GenOptions o = gen(3);
  o.k_scale = {1.0f / 200}; // normal values / scale: 448 is 2.24 standard deviations
  const Problem pr = make_decode_problem(fp8_params(DType::fp8_e4m3), {256, 256}, o);
  int saturated = 0;
  for (std::size_t i = 0; i < std::size_t(pr.key_cache.numel()); ++i) {
    saturated += std::fabs(pr.key_cache.get(i)) == 448.0f ? 1 : 0;
  }
  const double share = double(saturated) / double(pr.key_cache.numel());
  EXPECT_GT(share, 0.01);
  EXPECT_LT(share, 0.05);
}

TEST(Fp8, BadScalesAndDtypesAreOneLine) {
  GenOptions o = gen(1);
  o.k_scale = {1.0f, 2.0f, 3.0f};
  expect_input_error([&] { (void)make_decode_problem(fp8_params(DType::fp8_e4m3), {4}, o); },
                     {"k_scale has 3 entries", "num_kv_heads 2"}, "scale count");
  o.k_scale = {-1.0f};
  expect_input_error([&] { (void)make_decode_problem(fp8_params(DType::fp8_e4m3), {4}, o); },
                     {"k_scale", "positive and finite"}, "negative scale");
  o.k_scale = {0.5f};
  expect_input_error([&] { (void)make_decode_problem(params(), {4}, o); },
                     {"k_scale and v_scale are for fp8 caches"}, "scales without fp8");
  Problem pr = make_decode_problem(fp8_params(DType::fp8_e5m2), {4}, gen(1));
  pr.v_scale = {std::numeric_limits<float>::quiet_NaN()};
  expect_input_error([&] { pr.validate(); }, {"v_scale[0]", "positive and finite"}, "NaN scale");
  AttnParams p = params();
  p.kv_dtype = DType::bf16;
  expect_input_error([&] { p.validate(); }, {"kv_dtype bf16", "fp8_e4m3"}, "16-bit kv dtype");
  p = params(8, 2, 64, 16, DType::fp8_e4m3);
  expect_input_error([&] { p.validate(); }, {"is a KV-cache dtype"}, "fp8 queries");
  Problem mixed = make_decode_problem(fp8_params(DType::fp8_e4m3), {4}, gen(1));
  mixed.key_cache.dtype = DType::fp8_e5m2;
  expect_input_error([&] { mixed.validate(); }, {"key_cache is fp8_e5m2", "fp8_e4m3"}, "mixed");
  EXPECT_NE(fp8_params(DType::fp8_e4m3).describe().find("kv=fp8_e4m3"), std::string::npos);
}

// A kernel set that does not declare fp8 is never handed an fp8 cache: the CPU kernels' own
// declaration with no fp8 dtypes.
class NoFp8 : public Backend {
public:
  NoFp8() : inner_(make_cpu_backend({.threads = 1, .kernels = ""})), decl_(inner_->declaration()) {
    for (FamilyDecl& f : decl_.families) {
      f.fp8_kv.clear();
    }
  }
  const DeviceInfo& info() const override { return inner_->info(); }
  const KernelSetDecl& declaration() const override { return decl_; }

protected:
  std::optional<std::string> refuse(const KernelConfig&, const Problem&) const override {
    return std::nullopt;
  }
  std::unique_ptr<PreparedRun> make_run(const Problem& p, const KernelConfig& c,
                                        const FamilyDecl&) override {
    return inner_->prepare(p, c);
  }

private:
  std::unique_ptr<Backend> inner_;
  KernelSetDecl decl_;
};

TEST(Fp8, KernelSetsWithoutFp8RefuseIt) {
  NoFp8 be;
  const Problem pr = make_decode_problem(fp8_params(DType::fp8_e5m2, DType::f16), {40}, gen(2));
  for (const KernelConfig& c : be.config_space(Family::decode_v1, pr.params)) {
    const auto why = be.can_run(c, pr);
    ASSERT_TRUE(why.has_value());
    EXPECT_NE(why->find("does not read fp8_e5m2 KV caches"), std::string::npos) << *why;
    EXPECT_THROW((void)be.prepare(pr, c), InputError);
  }
  // The CPU kernels themselves read it.
  auto cpu = make_cpu_backend({.threads = 1, .kernels = ""});
  for (const KernelConfig& c : cpu->config_space(Family::decode_v1, pr.params)) {
    EXPECT_FALSE(cpu->can_run(c, pr).has_value()) << c.key();
  }
}

} // namespace
