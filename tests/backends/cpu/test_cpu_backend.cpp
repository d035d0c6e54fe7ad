// Tests of the CPU backend against the Eigen reference: seeded random grids over dtype, head_dim,
// block_size, GQA ratio, mask options, ragged lengths and partition sizes (sampled, not the full
// product), prefill edge cases, every kernel build this processor runs, and the interface.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <xmmintrin.h>

#include "reference/reference.h"
#include "src/backends/backend.h"
#include "src/backends/cpu/cpu_backend.h"
#include "src/backends/cpu/isa.h"
#include "src/backends/registry.h"
#include "src/model/errors.h"
#include "src/model/fp8.h"
#include "src/model/problem_gen.h"
#include "src/model/rng.h"
#include "src/validation/check.h"
#include "tests/support/rewritten.h"
#include "tests/support/specials.h"

using namespace attn;

namespace {

constexpr uint64_t kGridSeed = 0x5eed2026;

// Draws values of one grid axis so that every value appears equally often: a shuffled deck,
// reshuffled when empty.
template <class T> class Deck {
public:
  Deck(std::vector<T> values, Rng& rng) : values_(std::move(values)), rng_(rng) {}
  T next() {
    if (pos_ == 0) {
      for (std::size_t i = values_.size(); i > 1; --i) {
        std::swap(values_[i - 1], values_[std::size_t(rng_.range(0, int64_t(i) - 1))]);
      }
    }
    T v = values_[pos_];
    pos_ = (pos_ + 1) % values_.size();
    return v;
  }

private:
  std::vector<T> values_;
  Rng& rng_;
  std::size_t pos_ = 0;
};

enum class MaskOpt { causal, full, window_left, window_right, both_windows, softcap, scale };
const char* mask_name(MaskOpt m) {
  switch (m) {
  case MaskOpt::causal:
    return "causal";
  case MaskOpt::full:
    return "full";
  case MaskOpt::window_left:
    return "window_left";
  case MaskOpt::window_right:
    return "window_right";
  case MaskOpt::both_windows:
    return "both_windows";
  case MaskOpt::softcap:
    return "softcap";
  default:
    return "scale";
  }
}

void apply_mask(AttnParams& p, MaskOpt m, Rng& rng, int max_len) {
  p.causal = true;
  const int w = int(rng.range(0, std::max(1, max_len / 2)));
  switch (m) {
  case MaskOpt::full:
    p.causal = false;
    break;
  case MaskOpt::window_left:
    p.window_left = w;
    break;
  case MaskOpt::window_right:
    p.causal = false;
    p.window_right = w;
    break;
  case MaskOpt::both_windows:
    p.causal = rng.range(0, 1) == 1;
    p.window_left = w;
    p.window_right = int(rng.range(0, 20));
    break;
  case MaskOpt::softcap:
    p.softcap = rng.range(0, 1) ? 5.0 : 30.0;
    break;
  case MaskOpt::scale:
    p.scale = 0.02 + rng.uniform() * 0.3;
    break;
  default:
    break;
  }
}

std::string lengths_string(const std::vector<int>& v) {
  std::ostringstream s;
  s << "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    s << (i ? "," : "") << v[i];
  }
  s << "]";
  return s.str();
}

// Checks one run against the reference; the message names everything needed to reproduce.
void expect_matches(const RunOutput& got, const ReferenceResult& ref, DType dt,
                    const std::string& what) {
  const CheckReport rep = check_output(got.out, &got.lse, ref, tolerance_for(dt));
  EXPECT_TRUE(rep.pass) << what << "\n  " << rep.summary() << "\n" << rep.details();
}

// The reference format for another kernel's output, to compare two kernels directly.
ReferenceResult as_reference(const RunOutput& o, int rows, int heads, int dim) {
  ReferenceResult r;
  r.rows = rows;
  r.heads = heads;
  r.head_dim = dim;
  r.out.resize(std::size_t(o.out.numel()));
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    r.out[i] = o.out.get(i);
  }
  r.lse.assign(o.lse.begin(), o.lse.end());
  r.computed.assign(std::size_t(rows), 1);
  return r;
}

struct GridAxes {
  Deck<DType> dtype;
  Deck<int> head_dim;
  Deck<int> block_size;
  Deck<int> gqa;
  Deck<MaskOpt> mask;
  explicit GridAxes(Rng& rng)
      : dtype({DType::f32, DType::f16, DType::bf16}, rng),
        head_dim({40, 64, 80, 96, 128, 256}, rng), block_size({8, 16, 32, 64, 128, 256}, rng),
        gqa({1, 2, 4, 8}, rng),
        mask({MaskOpt::causal, MaskOpt::full, MaskOpt::window_left, MaskOpt::window_right,
              MaskOpt::both_windows, MaskOpt::softcap, MaskOpt::scale},
             rng) {}
};

// Shapes are kept small (at most 8 query heads) so the reference stays cheap.
AttnParams draw_params(GridAxes& ax, Rng& rng, MaskOpt* mask_out) {
  AttnParams p;
  p.dtype = ax.dtype.next();
  p.head_dim = ax.head_dim.next();
  p.block_size = ax.block_size.next();
  const int g = ax.gqa.next();
  p.num_kv_heads = g == 8 ? 1 : int(rng.range(1, 8 / g));
  p.num_heads = p.num_kv_heads * g;
  *mask_out = ax.mask.next();
  return p;
}

// An fp8 cache for a drawn problem (SPEC.md "fp8 KV caches"): either format, and scales per
// tensor or per KV head, from 1 to far from it: 1/250 saturates most E4M3 values (normal values
// over the scale), 24 puts most in the subnormals.
void draw_fp8(AttnParams& p, GenOptions& gen, Rng& rng, std::string* words) {
  p.kv_dtype = rng.range(0, 1) == 0 ? DType::fp8_e4m3 : DType::fp8_e5m2;
  const float picks[] = {1.0f, 1.0f / 64, 1.0f / 250, 24.0f, 0.37f};
  auto draw = [&](bool per_head) {
    std::vector<float> v;
    for (int h = 0; h < (per_head ? p.num_kv_heads : 1); ++h) {
      v.push_back(picks[std::size_t(rng.range(0, 4))]);
    }
    return v;
  };
  gen.k_scale = draw(rng.range(0, 1) == 1);
  gen.v_scale = draw(rng.range(0, 1) == 1);
  std::ostringstream w;
  w << " k_scale=" << gen.k_scale.front() << (gen.k_scale.size() > 1 ? "..." : "")
    << " v_scale=" << gen.v_scale.front() << (gen.v_scale.size() > 1 ? "..." : "");
  *words = w.str();
}

void run_decode_grid(Backend& be, int cases, uint64_t seed, bool fp8 = false) {
  Rng rng(seed);
  GridAxes ax(rng);
  for (int c = 0; c < cases; ++c) {
    MaskOpt mask;
    AttnParams p = draw_params(ax, rng, &mask);
    const int bs = p.block_size;
    // Partition sizes that are multiples of the block size, from one block up to 1024.
    std::vector<int> parts;
    for (int m : {1, 2, 4}) {
      parts.push_back(bs * m);
    }
    for (int s : {256, 512, 1024}) {
      if (s % bs == 0) {
        parts.push_back(s);
      }
    }
    const int part = parts[std::size_t(rng.range(0, int64_t(parts.size()) - 1))];
    const int max_len = std::min(2 * part + 3, 2100);
    apply_mask(p, mask, rng, max_len);
    const int batch = int(rng.range(2, 5));
    std::vector<int> lens = ragged_lengths(rng.fork_seed(), batch, bs, {part}, max_len);
    if (rng.range(0, 7) == 0) {
      lens[std::size_t(rng.range(0, batch - 1))] = 0; // an empty context: out 0, lse -inf
    }
    GenOptions gen;
    gen.seed = rng.fork_seed();
    gen.shared_prefix = rng.range(0, 3) == 0;
    std::string scales;
    if (fp8) {
      draw_fp8(p, gen, rng, &scales);
    }
    const Problem pr = make_decode_problem(p, lens, gen);
    const ReferenceResult ref = reference_attention(pr);
    std::ostringstream ctx;
    ctx << "grid seed " << seed << " case " << c << ": " << pr.describe()
        << " mask=" << mask_name(mask) << " lens=" << lengths_string(lens)
        << " gen_seed=" << gen.seed << " shared_prefix=" << gen.shared_prefix << scales;

    const int split = int(rng.range(0, 1));
    const KernelConfig v1{Family::decode_v1, {{"split", split}}};
    const KernelConfig v2{Family::decode_v2, {{"partition", part}, {"split", 1 - split}}};
    const RunOutput o1 = run_once(be, pr, v1);
    const RunOutput o2 = run_once(be, pr, v2);
    expect_matches(o1, ref, p.dtype, ctx.str() + " " + v1.key());
    expect_matches(o2, ref, p.dtype, ctx.str() + " " + v2.key());
    // v1 and v2 agree with each other, too.
    expect_matches(o2, as_reference(o1, pr.num_rows(), p.num_heads, p.head_dim), p.dtype,
                   ctx.str() + " " + v2.key() + " vs " + v1.key());
    if (::testing::Test::HasFailure()) {
      return; // one reproducible failure is enough; the rest would repeat it
    }
  }
}

void run_prefill_grid(Backend& be, int cases, uint64_t seed, bool fp8 = false) {
  Rng rng(seed);
  GridAxes ax(rng);
  Deck<int> q_tiles({1, 7, 16, 32, 64}, rng);
  Deck<int> k_tiles({1, 5, 32, 64, 128}, rng);
  for (int c = 0; c < cases; ++c) {
    MaskOpt mask;
    AttnParams p = draw_params(ax, rng, &mask);
    const int max_k = 160;
    apply_mask(p, mask, rng, max_k);
    const int batch = int(rng.range(2, 4));
    std::vector<int> k_lens = ragged_lengths(rng.fork_seed(), batch, p.block_size, {}, max_k);
    std::vector<int> q_lens;
    for (int b = 0; b < batch; ++b) {
      const int kind = int(rng.range(0, 5));
      int& k = k_lens[std::size_t(b)];
      if (kind == 0) { // q_len > k_len: leading rows see no key under causal
        q_lens.push_back(k + int(rng.range(1, 6)));
      } else if (kind == 1) { // no keys at all
        k = 0;
        q_lens.push_back(int(rng.range(1, 5)));
      } else if (kind == 2) { // full prefill
        q_lens.push_back(std::min(k, 48));
        k = q_lens.back();
      } else { // chunked prefill: a chunk of new rows after cached keys
        q_lens.push_back(int(rng.range(1, std::min(k, 40))));
      }
    }
    GenOptions gen;
    gen.seed = rng.fork_seed();
    gen.shared_prefix = rng.range(0, 3) == 0;
    std::string scales;
    if (fp8) {
      draw_fp8(p, gen, rng, &scales);
    }
    const Problem pr = make_prefill_problem(p, q_lens, k_lens, gen);
    const ReferenceResult ref = reference_attention(pr);
    const KernelConfig cfg{
        Family::prefill,
        {{"q_tile", q_tiles.next()}, {"k_tile", k_tiles.next()}, {"split", int(rng.range(0, 1))}}};
    std::ostringstream ctx;
    ctx << "grid seed " << seed << " case " << c << ": " << pr.describe()
        << " mask=" << mask_name(mask) << " q_lens=" << lengths_string(q_lens)
        << " k_lens=" << lengths_string(k_lens) << " gen_seed=" << gen.seed
        << " shared_prefix=" << gen.shared_prefix << scales << " " << cfg.key();
    expect_matches(run_once(be, pr, cfg), ref, p.dtype, ctx.str());
    if (::testing::Test::HasFailure()) {
      return;
    }
  }
}

std::vector<cpu::Isa> supported_isas() {
  std::vector<cpu::Isa> v;
  for (cpu::Isa i : {cpu::Isa::base, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (cpu::isa_supported(i)) {
      v.push_back(i);
    }
  }
  return v;
}

} // namespace

// CTest runs these grids again with ATTN_TUNE_CPU_ISA forcing a lower kernel build
// (tests/CMakeLists.txt); a processor without that build skips them, and so does one whose best
// build it is (an AVX2 machine forced to x86-64-v3), where the unforced run just ran that code.
#define SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN()                                                      \
  do {                                                                                             \
    try {                                                                                          \
      const char* forced = std::getenv(cpu::kIsaOverrideEnv);                                      \
      if (forced != nullptr && *forced != '\0' && std::string(forced) != "native" &&               \
          cpu::selected_isa() == cpu::best_isa()) {                                                \
        GTEST_SKIP() << forced << " is this processor's best kernel build: the unforced "          \
                     << "CpuBackend tests ran it";                                                 \
      }                                                                                            \
    } catch (const InputError& e) {                                                                \
      GTEST_SKIP() << e.what();                                                                    \
    }                                                                                              \
  } while (0)

TEST(CpuBackend, DecodeGrid) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  run_decode_grid(*be, 150, kGridSeed);
}

TEST(CpuBackend, PrefillGrid) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  run_prefill_grid(*be, 150, kGridSeed + 1);
}

// fp8 caches (either format, scales per tensor or per KV head, near saturation and in the
// subnormals), judged with the query dtype's tolerance; CTest runs these at each lower build too.
TEST(CpuBackend, Fp8DecodeGrid) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  run_decode_grid(*be, 24, kGridSeed + 100, /*fp8=*/true);
}

TEST(CpuBackend, Fp8PrefillGrid) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  run_prefill_grid(*be, 40, kGridSeed + 101, /*fp8=*/true);
}

// MXCSR's control bits (rounding, masks, flush-to-zero, denormals-are-zero), not its sticky
// exception flags (bits 0-5), which any arithmetic may set.
constexpr unsigned kMxcsrControl = ~0x3fu;

// A small fp16 shape: 8 query heads on 2 KV heads, head_dim 64, 16-key blocks.
AttnParams small_f16_params() {
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.dtype = DType::f16;
  return p;
}

// The decode loops read fp8 values as fp32 subnormals times a power of two; with MXCSR's
// denormals-are-zero bit set (as torch.set_flush_denormal(True) leaves it, inherited by the
// threads a process starts) they would read most of a cache whose scale puts its values in the
// fp8 subnormals as zero. The kernels clear the bit while they read fp8 and restore it.
TEST(CpuBackend, Fp8DecodeReadsSubnormalsWhileDenormalsAreZero) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x40u); // before the backend starts its threads, which inherit it
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  for (const DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = small_f16_params();
    p.kv_dtype = kv;
    GenOptions gen;
    gen.seed = 7;
    // Normal values over these scales are mostly below the format's smallest normal (2^-6 for
    // E4M3, 2^-14 for E5M2).
    const float scale = kv == DType::fp8_e4m3 ? 256.0f : 65536.0f;
    gen.k_scale = {scale};
    gen.v_scale = {scale};
    const Problem pr = make_decode_problem(p, {300, 77}, gen);
    const ReferenceResult ref = reference_attention(pr);
    for (const KernelConfig& cfg :
         {KernelConfig{Family::decode_v1, {{"split", 1}}},
          KernelConfig{Family::decode_v2, {{"partition", 64}, {"split", 1}}},
          KernelConfig{Family::decode_v1, {{"split", 0}}}}) {
      expect_matches(run_once(*be, pr, cfg), ref, p.dtype,
                     std::string(dtype_name(kv)) + " " + cfg.key());
    }
  }
  EXPECT_EQ(_mm_getcsr() & kMxcsrControl, (csr | 0x40u) & kMxcsrControl);
  _mm_setcsr(csr);
}

// A key tile holding an E4M3 NaN (or, in the baseline build, an E5M2 infinity) is read through
// the exact conversion into a buffer, the others in place, with the scales folded differently
// (attend_dt); E5M2 read through fp16 bits stays in place, exact for its infinity: one V element
// of a visible key set to the special value makes that output dimension NaN or infinite, as in
// the reference, and every other element of the output still matches it.
TEST(CpuBackend, Fp8SpecialValueInOneTileKeepsTheOthersExact) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  for (const DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = small_f16_params();
    p.kv_dtype = kv;
    GenOptions gen;
    gen.seed = 11;
    gen.k_scale = {0.37f};
    gen.v_scale = {3.0f, 0.02f}; // per KV head
    Problem pr = make_decode_problem(p, {300, 77}, gen);
    // Key 150 of sequence 0, KV head 1, dimension 5: S.1111.111 (E4M3's NaN), 0.11111.00 (+inf).
    test::put_special_value(pr, 0, 1, 150, 5, false);
    const ReferenceResult ref = reference_attention(pr);
    const Tolerance tol = tolerance_for(p.dtype);
    for (const KernelConfig& cfg :
         {KernelConfig{Family::decode_v1, {{"split", 1}}},
          KernelConfig{Family::decode_v2, {{"partition", 64}, {"split", 1}}},
          KernelConfig{Family::decode_v1, {{"split", 0}}}}) {
      const int specials = test::specials_matching(ref, run_once(*be, pr, cfg), tol,
                                                   std::string(dtype_name(kv)) + " " + cfg.key());
      // Dimension 5 of the four query heads of KV head 1, sequence 0.
      EXPECT_EQ(specials, 4) << dtype_name(kv) << " " << cfg.key();
    }
  }
}

// An infinity in V at the last key of a context stays an infinity: the key loops' tails (keys
// past the context, a partition's end, a vector's unused lanes) must not multiply it by a zero
// weight. The last key of a 300-token and a 77-token context, KV head 1, dimension 5, over every
// cache dtype with infinities.
TEST(CpuBackend, InfinityAtTheLastKeyStaysAnInfinity) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  for (const DType dt : {DType::f16, DType::bf16, DType::f32, DType::fp8_e5m2}) {
    AttnParams p = small_f16_params();
    if (is_fp8(dt)) {
      p.kv_dtype = dt;
    } else {
      p.dtype = dt;
    }
    GenOptions gen;
    gen.seed = 13;
    if (is_fp8(dt)) {
      gen.k_scale = {0.37f};
      gen.v_scale = {3.0f};
    }
    const Problem pr = test::decode_with_last_key_infinities(p, gen);
    const ReferenceResult ref = reference_attention(pr);
    for (const KernelConfig& cfg :
         {KernelConfig{Family::decode_v1, {{"split", 1}}},
          KernelConfig{Family::decode_v2, {{"partition", 64}, {"split", 1}}},
          KernelConfig{Family::decode_v1, {{"split", 0}}}}) {
      const int specials =
          test::specials_matching(ref, run_once(*be, pr, cfg), tolerance_for(p.dtype),
                                  std::string(dtype_name(dt)) + " " + cfg.key());
      // Dimension 5 of the four query heads of KV head 1, in both sequences.
      EXPECT_EQ(specials, 8) << dtype_name(dt) << " " << cfg.key();
    }
  }
}

// A NaN or an infinity in V at a key that only some rows of a prefill tile see stays out of the
// rows that do not see it (their probability for it is 0, and 0 * NaN is NaN): a prompt's rows
// before the key (the tile-of-many-rows loops) and a chunk's first row (the few-rows loops, which
// read E5M2 in place, its NaN and infinity included).
TEST(CpuBackend, NonFiniteValueReachesOnlyTheRowsThatSeeIt) {
  SKIP_IF_THE_FORCED_BUILD_CANNOT_RUN();
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  for (const DType dt : {DType::f16, DType::bf16, DType::f32, DType::fp8_e5m2}) {
    AttnParams p = small_f16_params();
    if (is_fp8(dt)) {
      p.kv_dtype = dt;
    } else {
      p.dtype = dt;
    }
    GenOptions gen;
    gen.seed = 12;
    if (is_fp8(dt)) {
      gen.k_scale = {0.37f};
      gen.v_scale = {3.0f};
    }
    const Problem pr = test::prefill_with_specials(p, gen);
    const ReferenceResult ref = reference_attention(pr);
    const Tolerance tol = tolerance_for(p.dtype);
    for (const KernelConfig& cfg :
         {KernelConfig{Family::prefill, {{"split", 0}, {"q_tile", 32}, {"k_tile", 64}}},
          KernelConfig{Family::prefill, {{"split", 1}, {"q_tile", 16}, {"k_tile", 32}}}}) {
      const int specials = test::specials_matching(ref, run_once(*be, pr, cfg), tol,
                                                   std::string(dtype_name(dt)) + " " + cfg.key());
      // Dimension 5 of KV head 1's four query heads: the prompt's rows 40..99, the chunk's two
      // rows that see key 98 (the infinity times a positive probability stays infinite).
      EXPECT_EQ(specials, 4 * test::kPrefillSpecialRows) << dtype_name(dt) << " " << cfg.key();
    }
  }
}

TEST(CpuBackend, IsaOverrideForcesALowerBuildAndRefusesWhatCannotRun) {
  const char* had = std::getenv(cpu::kIsaOverrideEnv);
  const std::string saved = had != nullptr ? had : "";
  setenv(cpu::kIsaOverrideEnv, "baseline", 1);
  EXPECT_EQ(cpu::selected_isa(), cpu::Isa::base);
  AttnParams p;
  p.num_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = 16;
  auto be = make_cpu_backend({.threads = 1, .kernels = ""}); // the baseline build
  EXPECT_NE(be->prepare(make_decode_problem(p, {5}, GenOptions{}),
                        KernelConfig{Family::decode_v1, {{"split", 0}}}),
            nullptr);
  setenv(cpu::kIsaOverrideEnv, "sse9", 1);
  EXPECT_THROW((void)cpu::selected_isa(), InputError);
  setenv(cpu::kIsaOverrideEnv, "native", 1);
  EXPECT_EQ(cpu::selected_isa(), cpu::best_isa());
  if (!cpu::isa_supported(cpu::Isa::avx512)) {
    setenv(cpu::kIsaOverrideEnv, "x86-64-v4", 1);
    EXPECT_THROW((void)cpu::selected_isa(), InputError);
  }
  if (saved.empty()) {
    unsetenv(cpu::kIsaOverrideEnv);
  } else {
    setenv(cpu::kIsaOverrideEnv, saved.c_str(), 1);
  }
}

// negate_inputs rewrites the run's own query and caches in place (verify's call after a pass, as
// an engine's next decode step): the same kernels then answer the old output negated, bit for bit,
// lse the same; twice restores the problem.
TEST(CpuBackend, NegatedInputsNegateTheOutputInPlace) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  for (const DType kv : {DType::f16, DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = small_f16_params();
    GenOptions gen;
    gen.seed = 21;
    if (is_fp8(kv)) {
      p.kv_dtype = kv;
      gen.k_scale = {0.37f};
      gen.v_scale = {3.0f, 0.02f};
    }
    const Problem pr = make_decode_problem(p, {300, 77}, gen);
    for (const KernelConfig& cfg : {KernelConfig{Family::decode_v1, {{"split", 1}}},
                                    KernelConfig{Family::decode_v2, {{"partition", 64}}}}) {
      SCOPED_TRACE(std::string(dtype_name(kv)) + " " + cfg.key());
      test::expect_negation_round_trip(*be, pr, cfg);
    }
  }
  Problem pr = make_decode_problem(small_f16_params(), {40}, {.seed = 2});
  const Problem before = pr;
  negate_inputs(pr);
  EXPECT_NE(pr.query.data, before.query.data);
  EXPECT_EQ(pr.block_tables, before.block_tables);
  negate_inputs(pr);
  EXPECT_EQ(pr.query.data, before.query.data);
  EXPECT_EQ(pr.key_cache.data, before.key_cache.data);
  EXPECT_EQ(pr.value_cache.data, before.value_cache.data);
}

// How the decode loops read E4M3 (through fp16 bits, or moving the bits into fp32s) is the
// processor's choice, forced by ATTN_TUNE_CPU_FP8_READS so that both are tested everywhere (CTest
// runs the fp8 grids under each), and named in the timing method; the baseline build has one
// way. An unknown name is refused.
TEST(CpuBackend, Fp8ReadsAreForcedByTheEnvironmentAndNamed) {
  const char* had = std::getenv(cpu::kFp8ReadsEnv);
  const std::string saved = had != nullptr ? had : "";
  TimingOptions opt;
  opt.warmup = 1;
  opt.warmup_seconds = 0.0;
  opt.min_reps = 1;
  opt.max_reps = 1;
  opt.flush_cache = false;
  for (const DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    AttnParams p = small_f16_params();
    p.kv_dtype = kv;
    const Problem pr = make_decode_problem(p, {70}, {.seed = 3});
    const ReferenceResult ref = reference_attention(pr);
    for (cpu::Isa isa : supported_isas()) {
      for (const char* want : {"via-fp16", "via-fp32"}) {
        setenv(cpu::kFp8ReadsEnv, want, 1);
        // The baseline build has one way; the others read E5M2 through fp16 bits whatever is asked.
        const std::string named = isa == cpu::Isa::base   ? "via-fp32"
                                  : kv == DType::fp8_e5m2 ? "via-fp16"
                                                          : want;
        SCOPED_TRACE(std::string(dtype_name(kv)) + " " + cpu::isa_name(isa) + " " + want);
        auto be = make_cpu_backend({.threads = 1, .kernels = ""}, isa);
        auto run = be->prepare(pr, {Family::decode_v1, {{"split", 1}}});
        const std::string method = run->time(opt).method;
        EXPECT_NE(method.find("fp8 read " + named), std::string::npos) << method;
        expect_matches(run_once(*be, pr, {Family::decode_v1, {{"split", 1}}}), ref, p.dtype, named);
      }
    }
  }
  setenv(cpu::kFp8ReadsEnv, "auto", 1);
  const cpu::Fp8Reads chosen = cpu::selected_fp8_reads();
  EXPECT_TRUE(chosen == cpu::Fp8Reads::via_fp16 || chosen == cpu::Fp8Reads::via_fp32);
  setenv(cpu::kFp8ReadsEnv, "via-fp64", 1);
  try {
    (void)make_cpu_backend({.threads = 1, .kernels = ""});
    ADD_FAILURE() << "an unknown fp8 read was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ATTN_TUNE_CPU_FP8_READS='via-fp64'"), std::string::npos)
        << e.what();
  }
  if (saved.empty()) {
    unsetenv(cpu::kFp8ReadsEnv);
  } else {
    setenv(cpu::kFp8ReadsEnv, saved.c_str(), 1);
  }
}

// The baseline and v3 builds convert fp16 differently and vectorise differently: each build the
// processor runs gets a smaller grid of its own.
TEST(CpuBackend, EveryKernelBuildPassesAGrid) {
  for (cpu::Isa isa : supported_isas()) {
    if (isa == cpu::best_isa()) {
      continue; // covered by the full grids above
    }
    SCOPED_TRACE(std::string("kernel build ") + cpu::isa_name(isa));
    auto be = make_cpu_backend({.threads = 2, .kernels = ""}, isa);
    run_decode_grid(*be, 30, kGridSeed + 10 + uint64_t(isa));
    run_prefill_grid(*be, 30, kGridSeed + 20 + uint64_t(isa));
  }
}

// Each build blocks its loops by its own register count and vector width (cpu_kernels_body.inc):
// query vectors per item around one vector of lanes (the switch between the two score loops),
// counts that leave tails of every block (keys, query rows, output vectors), head dims that end
// in half a 16-float vector, and the soft cap, which both loops apply on their own.
TEST(CpuBackend, EveryBuildCoversItsBlockTails) {
  for (cpu::Isa isa : supported_isas()) {
    SCOPED_TRACE(std::string("kernel build ") + cpu::isa_name(isa));
    auto be = make_cpu_backend({.threads = 1, .kernels = ""}, isa);
    for (int head_dim : {8, 24, 72}) {
      for (int q_tile : {1, 3, 5, 9, 17}) {
        for (double softcap : {0.0, 20.0}) {
          AttnParams p;
          p.dtype = DType::f32;
          p.num_heads = 6;
          p.num_kv_heads = 2; // groups of 3: q_tile * 3 query vectors per item with split=1
          p.head_dim = head_dim;
          p.block_size = 8;
          p.softcap = softcap;
          GenOptions gen;
          gen.seed = uint64_t(head_dim * 100 + q_tile);
          const Problem pr = make_prefill_problem(p, {q_tile + 4, 2}, {q_tile + 40, 19}, gen);
          const ReferenceResult ref = reference_attention(pr);
          for (int split : {0, 1}) {
            for (int k_tile : {1, 7, 13}) {
              const KernelConfig cfg{Family::prefill,
                                     {{"q_tile", q_tile}, {"k_tile", k_tile}, {"split", split}}};
              expect_matches(run_once(*be, pr, cfg), ref, p.dtype, pr.describe() + " " + cfg.key());
            }
          }
        }
      }
    }
  }
}

// The kernels' output stores round as float_to_half and float_to_bf16 do, F16C included: every
// 16-bit value, the midpoints between neighbours (ties to even) and one ulp either side, overflow
// to inf; a NaN stays a NaN.
TEST(CpuBackend, OutputRoundingMatchesTheSoftwareConversion) {
  std::vector<float> in;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    for (DType t : {DType::f16, DType::bf16}) {
      const float a = t == DType::f16 ? half_to_float(uint16_t(h)) : bf16_to_float(uint16_t(h));
      const float b =
          t == DType::f16 ? half_to_float(uint16_t(h + 1)) : bf16_to_float(uint16_t(h + 1));
      if (std::isnan(a)) {
        in.push_back(a);
        continue;
      }
      in.push_back(a);
      if (std::isfinite(b) && std::signbit(a) == std::signbit(b)) {
        const float mid = a + (b - a) * 0.5f;
        in.push_back(mid);
        in.push_back(std::nextafter(mid, b));
        in.push_back(std::nextafter(mid, a));
      }
    }
  }
  for (float f :
       {65519.0f, 65520.0f, 1e30f, -1e30f, 1e-30f, std::numeric_limits<float>::infinity()}) {
    in.push_back(f);
  }
  std::vector<uint16_t> got(in.size());
  for (cpu::Isa isa : supported_isas()) {
    for (DType t : {DType::f16, DType::bf16}) {
      cpu::store_floats(isa, t, in.data(), got.data(), in.size());
      for (std::size_t i = 0; i < in.size(); ++i) {
        const uint16_t want = t == DType::f16 ? float_to_half(in[i]) : float_to_bf16(in[i]);
        if (std::isnan(in[i])) { // a NaN, of the same sign; F16C keeps more of the payload
          const float back = t == DType::f16 ? half_to_float(got[i]) : bf16_to_float(got[i]);
          ASSERT_TRUE(std::isnan(back)) << cpu::isa_name(isa) << " " << dtype_name(t);
          ASSERT_EQ(got[i] & 0x8000, want & 0x8000);
          continue;
        }
        ASSERT_EQ(got[i], want) << cpu::isa_name(isa) << " " << dtype_name(t) << " value " << in[i];
      }
    }
  }
}

// Every fp8 byte, at every lane position of the vector loop and in its scalar tail, converts
// as the model's exact decoding does, also while MXCSR's denormals-are-zero bit is set (the
// vector loads make fp32 subnormals of the fp8 values, times a power of two); NaN patterns stay
// NaN (E4M3's S.1111.111 among them), E5M2's infinities stay infinite.
TEST(CpuBackend, Fp8ConversionIsExactForEveryByte) {
  std::vector<uint8_t> bytes;
  for (int shift = 0; shift < 3; ++shift) { // each byte at several positions in a vector
    for (int i = 0; i < 256; ++i) {
      bytes.push_back(uint8_t(i * 7 + shift));
    }
  }
  for (int i = 0; i < 13; ++i) { // a tail the vector loop leaves to the scalar one
    bytes.push_back(uint8_t(0x7f + 0x80 * (i & 1)));
  }
  std::vector<float> got(bytes.size());
  const unsigned csr = _mm_getcsr();
  for (const unsigned daz : {0u, 0x40u}) {
    const char* mode = daz != 0 ? " (denormals-are-zero set)" : "";
    for (cpu::Isa isa : supported_isas()) {
      for (DType t : {DType::fp8_e4m3, DType::fp8_e5m2}) {
        _mm_setcsr(csr | daz);
        cpu::convert_to_float(isa, t, bytes.data(), got.data(), bytes.size());
        const unsigned after = _mm_getcsr();
        _mm_setcsr(csr);
        ASSERT_EQ(after & kMxcsrControl, (csr | daz) & kMxcsrControl)
            << "the conversion left MXCSR's controls changed" << mode;
        for (std::size_t i = 0; i < bytes.size(); ++i) {
          const float want = fp8_to_float(fp8_format(t), bytes[i]);
          uint32_t gb, wb;
          std::memcpy(&gb, &got[i], 4);
          std::memcpy(&wb, &want, 4);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got[i]))
                << cpu::isa_name(isa) << " " << dtype_name(t) << " byte " << int(bytes[i]) << mode;
          } else {
            ASSERT_EQ(gb, wb) << cpu::isa_name(isa) << " " << dtype_name(t) << " byte "
                              << int(bytes[i]) << " at " << i << mode;
          }
        }
      }
    }
  }
}

TEST(CpuBackend, HalfConversionIsExactForEveryValue) {
  std::vector<uint16_t> all(0x10000);
  for (uint32_t i = 0; i < 0x10000; ++i) {
    all[i] = uint16_t(i);
  }
  std::vector<float> got(all.size());
  for (cpu::Isa isa : supported_isas()) {
    for (DType t : {DType::f16, DType::bf16}) {
      cpu::convert_to_float(isa, t, all.data(), got.data(), all.size());
      for (uint32_t i = 0; i < 0x10000; ++i) {
        const float want =
            t == DType::f16 ? half_to_float(uint16_t(i)) : bf16_to_float(uint16_t(i));
        uint32_t gb, wb;
        std::memcpy(&gb, &got[i], 4);
        std::memcpy(&wb, &want, 4);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(got[i])) << cpu::isa_name(isa) << " " << dtype_name(t) << " " << i;
        } else {
          ASSERT_EQ(gb, wb) << cpu::isa_name(isa) << " " << dtype_name(t) << " bits " << i;
        }
      }
    }
  }
}

// Rows past the keys (q_len > k_len under causal) and sequences without keys: out exactly 0,
// lse -inf, never NaN; every other row matches the reference.
TEST(CpuBackend, PrefillRowsWithoutKeys) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.dtype = DType::f16;
  const Problem pr = make_prefill_problem(p, {5, 3, 2}, {2, 0, 40}, {.seed = 11});
  const RunOutput o = run_once(*be, pr, {Family::prefill, {{"q_tile", 4}, {"k_tile", 8}}});
  expect_matches(o, reference_attention(pr), p.dtype, "rows without keys");
  // Sequence 0: rows 0..2 have positions -3..-1; sequence 1 has no keys.
  for (int row : {0, 1, 2, 5, 6, 7}) {
    for (int h = 0; h < p.num_heads; ++h) {
      const float l = o.lse[std::size_t(row * p.num_heads + h)];
      EXPECT_TRUE(std::isinf(l) && l < 0) << "row " << row << " head " << h;
      for (int d = 0; d < p.head_dim; ++d) {
        EXPECT_EQ(o.out.get(std::size_t((row * p.num_heads + h) * p.head_dim + d)), 0.0f);
      }
    }
  }
}

// Decode with a context longer than many partitions and the sliding window: partitions left of
// the window are empty and must contribute nothing.
TEST(CpuBackend, DecodeV2WithEmptyPartitions) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = DType::bf16;
  p.window_left = 100;
  const Problem pr = make_decode_problem(p, {1000, 17, 512, 513}, {.seed = 5});
  const ReferenceResult ref = reference_attention(pr);
  for (int split : {0, 1}) {
    const KernelConfig cfg{Family::decode_v2, {{"partition", 64}, {"split", split}}};
    expect_matches(run_once(*be, pr, cfg), ref, p.dtype, cfg.key());
  }
}

// NaN in the slots of each sequence's last block past its length (GenOptions::nan_tails, as an
// engine's cache holds whatever was there) changes no output bit of any configuration of any
// family, at every kernel build, for 16-bit, fp32 and fp8 caches: the kernels never fold a
// masked slot in with a zero weight (0 * NaN), the bug vLLM's paged attention guards against by
// zeroing such values (vllm-project/vllm issue 641).
TEST(CpuBackend, NanInTheUnreadTailsOfBlocksChangesNothing) {
  struct Dtypes {
    DType query;
    std::optional<DType> cache;
  };
  int runs = 0;
  for (cpu::Isa isa : supported_isas()) {
    SCOPED_TRACE(std::string("kernel build ") + cpu::isa_name(isa));
    auto be = make_cpu_backend({.threads = 2, .kernels = ""}, isa);
    for (const Dtypes dt :
         {Dtypes{DType::f32, {}}, Dtypes{DType::f16, {}}, Dtypes{DType::bf16, {}},
          Dtypes{DType::f16, DType::fp8_e4m3}, Dtypes{DType::bf16, DType::fp8_e5m2}}) {
      AttnParams p;
      p.dtype = dt.query;
      p.kv_dtype = dt.cache;
      p.num_heads = 4;
      p.num_kv_heads = 2;
      p.head_dim = 40;
      p.block_size = 16;
      for (Phase phase : {Phase::decode, Phase::prefill}) {
        GenOptions clean;
        clean.seed = 11;
        GenOptions nan = clean;
        nan.nan_tails = true;
        auto make = [&](const GenOptions& g) {
          return phase == Phase::decode ? make_decode_problem(p, {5, 37, 100, 16}, g)
                                        : make_prefill_problem(p, {3, 7, 1}, {21, 50, 9}, g);
        };
        const Problem a = make(clean);
        const Problem b = make(nan);
        std::size_t nans = 0;
        for (std::size_t i = 0; i < std::size_t(b.value_cache.numel()); ++i) {
          nans += std::isnan(b.value_cache.get(i)) ? 1 : 0;
        }
        ASSERT_GT(nans, 0u) << "the generator planted no NaN";
        for (Family f : phase == Phase::decode
                            ? std::vector<Family>{Family::decode_v1, Family::decode_v2}
                            : std::vector<Family>{Family::prefill}) {
          for (const KernelConfig& cfg : be->config_space(f, p)) {
            if (be->can_run(cfg, b)) {
              continue;
            }
            const RunOutput want = run_once(*be, a, cfg);
            const RunOutput got = run_once(*be, b, cfg);
            ASSERT_EQ(got.out.data, want.out.data) << b.describe() << " " << cfg.key();
            ASSERT_EQ(0, std::memcmp(got.lse.data(), want.lse.data(), want.lse.size() * 4))
                << b.describe() << " " << cfg.key();
            ++runs;
          }
        }
      }
    }
  }
  // Every configuration the space offers, each family and dtype pair, at each build.
  EXPECT_GE(runs, int(supported_isas().size()) * 5 * 3);
  std::printf("%d configurations run with and without NaN tails\n", runs);
}

// Each output element is computed by exactly one work item, so the thread count changes nothing.
TEST(CpuBackend, ThreadCountDoesNotChangeResults) {
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 96;
  p.block_size = 32;
  p.dtype = DType::f16;
  const Problem pr = make_decode_problem(p, {700, 31, 1200, 64, 5}, {.seed = 3});
  const KernelConfig cfg{Family::decode_v2, {{"partition", 256}, {"split", 1}}};
  const RunOutput a = run_once(*make_cpu_backend({.threads = 1, .kernels = ""}), pr, cfg);
  const RunOutput b = run_once(*make_cpu_backend({.threads = 3, .kernels = ""}), pr, cfg);
  EXPECT_EQ(a.out.data, b.out.data);
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4));
}

// A host run copies its problem into the memory the previous run's copy held (host_run.cpp):
// larger, smaller or of another dtype, the bytes a run reads are its own problem's.
TEST(CpuBackend, RunsAfterLargerAndSmallerProblemsComputeTheSame) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.dtype = DType::f16;
  const Problem small = make_decode_problem(p, {40, 7}, {.seed = 5});
  const Problem large = make_decode_problem(p, {3000, 900, 1700}, {.seed = 6});
  AttnParams q = p;
  q.dtype = DType::bf16;
  q.kv_dtype = DType::fp8_e4m3;
  const Problem fp8 = make_decode_problem(q, {500, 60}, {.seed = 7});
  const KernelConfig cfg{Family::decode_v2, {{"partition", 256}, {"split", 1}}};
  const RunOutput small_first = run_once(*be, small, cfg);
  const RunOutput large_first = run_once(*be, large, cfg);
  const RunOutput small_after = run_once(*be, small, cfg); // into the large copy's memory
  const RunOutput fp8_after = run_once(*be, fp8, cfg);
  const RunOutput large_after = run_once(*be, large, cfg); // larger than what was kept
  EXPECT_EQ(small_first.out.data, small_after.out.data);
  EXPECT_EQ(large_first.out.data, large_after.out.data);
  expect_matches(small_after, reference_attention(small), p.dtype, "small after large");
  expect_matches(large_after, reference_attention(large), p.dtype, "large after fp8");
  expect_matches(fp8_after, reference_attention(fp8), q.dtype, "fp8 after small");
}

TEST(CpuBackend, PoisonReachesEveryOutput) {
  auto be = make_cpu_backend({.threads = 1, .kernels = ""});
  AttnParams p;
  p.num_heads = 2;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  const Problem pr = make_decode_problem(p, {10, 20}, {.seed = 1});
  auto run = be->prepare(pr, {Family::decode_v1, {{"split", 0}}});
  run->poison_outputs();
  const RunOutput o = run->download();
  for (std::size_t i = 0; i < std::size_t(o.out.numel()); ++i) {
    ASSERT_TRUE(is_poison(o.out, i)) << i;
  }
  for (float l : o.lse) {
    ASSERT_TRUE(is_poison(l));
  }
}

TEST(CpuBackend, CanRunExplainsRefusals) {
  auto be = make_cpu_backend({.threads = 1, .kernels = ""});
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 64;
  p.block_size = 32;
  const Problem dec = make_decode_problem(p, {40}, {.seed = 1});
  const Problem pre = make_prefill_problem(p, {4}, {40}, {.seed = 1});
  auto reason = [&](const KernelConfig& c, const Problem& pr) {
    auto r = be->can_run(c, pr);
    return r ? *r : std::string();
  };
  EXPECT_NE(
      reason({Family::decode_v2, {{"partition", 48}}}, dec).find("not a multiple of block_size"),
      std::string::npos);
  EXPECT_NE(reason({Family::prefill, {}}, dec).find("prefill problems"), std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {}}, pre).find("decode problems"), std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {{"split", 2}}}, dec).find("split=2"), std::string::npos);
  EXPECT_NE(reason({Family::decode_v1, {{"warps", 4}}}, dec).find("'warps'"), std::string::npos);
  EXPECT_NE(reason({Family::prefill, {{"q_tile", 0}}}, pre).find("q_tile=0"), std::string::npos);
  EXPECT_NE(reason({Family::prefill, {{"k_tile", 5000}}}, pre).find("k_tile=5000"),
            std::string::npos);
  EXPECT_EQ(reason({Family::decode_v2, {{"partition", 64}}}, dec), "");
  EXPECT_THROW((void)be->prepare(dec, {Family::decode_v2, {{"partition", 48}}}), InputError);
}

TEST(CpuBackend, ConfigSpaceRunsTypicalShapes) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.dtype = DType::f32;
  const Problem dec = make_decode_problem(p, {300, 1100}, {.seed = 9});
  const Problem pre = make_prefill_problem(p, {30, 70}, {90, 70}, {.seed = 9});
  const ReferenceResult ref_dec = reference_attention(dec);
  const ReferenceResult ref_pre = reference_attention(pre);
  EXPECT_EQ(be->config_space(Family::decode_v1, p).size(), 2u);
  EXPECT_EQ(be->config_space(Family::decode_v2, p).size(), 6u);
  EXPECT_EQ(be->config_space(Family::prefill, p).size(), 18u);
  for (Family f : {Family::decode_v1, Family::decode_v2, Family::prefill}) {
    for (const KernelConfig& cfg : be->config_space(f, p)) {
      const Problem& pr = f == Family::prefill ? pre : dec;
      ASSERT_FALSE(be->can_run(cfg, pr).has_value()) << cfg.key();
      expect_matches(run_once(*be, pr, cfg), f == Family::prefill ? ref_pre : ref_dec, p.dtype,
                     cfg.key());
    }
  }
}

// What the timing flushes before each rep where the processor has CLFLUSHOPT: every block the
// block tables reach within each sequence's keys, in K and in V, a block shared by two sequences
// once, and nothing of the blocks no sequence reads.
TEST(CpuBackend, ReadRangesAreTheBlocksTheCallReads) {
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 16;
  p.dtype = DType::f16;
  GenOptions gen;
  gen.pool_factor = 3.0;
  gen.shared_prefix = true;
  const Problem pr = make_decode_problem(p, {40, 70}, gen);
  std::set<int32_t> used;
  for (int b = 0; b < pr.batch; ++b) {
    for (int i = 0; i < (pr.k_len(b) + 15) / 16; ++i) {
      used.insert(pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq + i]);
    }
  }
  const std::size_t block_bytes = 2 * 16 * 64 * 2;
  std::size_t k_bytes = 0, v_bytes = 0;
  const auto* k0 = static_cast<const unsigned char*>(pr.key_cache.raw());
  const auto* v0 = static_cast<const unsigned char*>(pr.value_cache.raw());
  std::set<int32_t> k_blocks;
  for (const HostRange& r : problem_read_ranges(pr)) {
    const auto* d = static_cast<const unsigned char*>(r.data);
    if (d >= k0 && d < k0 + pr.key_cache.data.size()) {
      k_bytes += r.bytes;
      ASSERT_EQ(std::size_t(d - k0) % block_bytes, 0u);
      for (std::size_t o = 0; o < r.bytes; o += block_bytes) {
        k_blocks.insert(int32_t((std::size_t(d - k0) + o) / block_bytes));
      }
    } else if (d >= v0 && d < v0 + pr.value_cache.data.size()) {
      v_bytes += r.bytes;
    }
  }
  EXPECT_EQ(k_blocks, used);
  EXPECT_EQ(k_bytes, used.size() * block_bytes);
  EXPECT_EQ(v_bytes, used.size() * block_bytes);
  EXPECT_LT(used.size(), std::size_t(pr.num_blocks)); // the pool holds blocks nobody reads
}

TEST(CpuBackend, TimingReportsItsMethod) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  AttnParams p;
  p.num_heads = 4;
  p.num_kv_heads = 1;
  p.head_dim = 64;
  const Problem pr = make_decode_problem(p, {256, 512}, {.seed = 2});
  auto run = be->prepare(pr, {Family::decode_v1, {{"split", 1}}});
  TimingOptions opt;
  opt.warmup = 1;
  opt.min_reps = 3;
  opt.max_reps = 5;
  opt.flush_cache = false;
  TimingResult t = run->time(opt);
  EXPECT_GT(t.median_s, 0.0);
  EXPECT_GE(t.reps, 3);
  EXPECT_NE(t.method.find("warm cache"), std::string::npos) << t.method;
  opt.flush_cache = true;
  t = run->time(opt);
  EXPECT_GT(t.median_s, 0.0);
  EXPECT_NE(t.method.find("before each rep"), std::string::npos) << t.method;
  EXPECT_NE(t.method.find("steady_clock"), std::string::npos) << t.method;
  EXPECT_FALSE(t.clocks.has_value()); // no clocks to read on the CPU
  EXPECT_GE(t.warmup_s, opt.warmup_seconds);
  opt.mode = TimingMode::graph; // CUDA graphs: not a CPU notion, refused
  EXPECT_THROW((void)run->time(opt), InputError);
}

// The CPU kernels read HND; prepare rearranges a problem in another layout, so every family gives
// the very bytes it gives on the HND problem.
TEST(CpuBackend, OtherKvLayoutsAreRearrangedInPrepare) {
  auto be = make_cpu_backend({.threads = 2, .kernels = ""});
  AttnParams p = small_f16_params();
  p.window_left = 40;
  const Problem dec = make_decode_problem(p, {1, 17, 300}, {.seed = 21});
  const Problem pre = make_prefill_problem(p, {9, 1}, {30, 65}, {.seed = 22});
  const std::vector<std::pair<const Problem*, KernelConfig>> runs = {
      {&dec, {Family::decode_v1, {{"split", 1}}}},
      {&dec, {Family::decode_v2, {{"partition", 64}, {"split", 0}}}},
      {&pre, {Family::prefill, {{"q_tile", 4}, {"k_tile", 16}}}}};
  for (const auto& [pr, cfg] : runs) {
    const RunOutput want = run_once(*be, *pr, cfg);
    expect_matches(want, reference_attention(*pr), p.dtype, cfg.key());
    for (KvLayout l : {KvLayout::NHD, KvLayout::vllm}) {
      const RunOutput got = run_once(*be, with_kv_layout(*pr, l), cfg);
      EXPECT_EQ(got.out.data, want.out.data) << cfg.key() << " " << kv_layout_name(l);
      EXPECT_EQ(0, std::memcmp(got.lse.data(), want.lse.data(), want.lse.size() * 4))
          << cfg.key() << " " << kv_layout_name(l);
    }
  }
}
