// verify's edge-case catalogue (verify_cases.h): SPEC.md's edges per phase and dtype, sized by
// intensity, each case seeded from the run's seed, its group and its index.
#include "src/validation/verify_cases.h"

#include <map>

#include "src/model/errors.h"
#include "src/model/problem_gen.h"

namespace attn {

Intensity parse_intensity(const std::string& s) {
  if (s == "quick") {
    return Intensity::quick;
  }
  if (s == "default" || s == "standard") {
    return Intensity::standard;
  }
  if (s == "full") {
    return Intensity::full;
  }
  throw InputError("unknown intensity '" + s + "' (expected quick, default or full)");
}

Problem VerifyCase::make() const {
  GenOptions g;
  g.seed = seed;
  g.shared_prefix = shared_prefix;
  return phase == Phase::decode ? make_decode_problem(params, k_lens, g)
                                : make_prefill_problem(params, q_lens, k_lens, g);
}

namespace {

uint64_t mix_seed(uint64_t seed, const std::string& group, int index) {
  uint64_t h = 1469598103934665603ull; // FNV-1a over the group name
  for (unsigned char c : group) {
    h = (h ^ c) * 1099511628211ull;
  }
  uint64_t z = seed ^ h ^ (uint64_t(index) * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Sizes {
  std::vector<int> head_dims;
  std::vector<int> block_sizes;
  int max_len;     // longest ragged length in the edge groups
  int prefill_len; // longest prefill sequence
  std::vector<int> long_lens;
};

Sizes sizes_for(Intensity in) {
  switch (in) {
  case Intensity::quick:
    return {{64, 128}, {16}, 1100, 96, {2049}};
  case Intensity::full:
    return {{64, 80, 96, 112, 128, 192, 256}, {8, 16, 32, 64, 128}, 4100, 600, {32768, 16385}};
  default:
    return {{64, 96, 128, 256}, {8, 16, 32}, 2100, 300, {8193, 4097}};
  }
}

AttnParams base_params(DType dt, int heads, int kv_heads, int head_dim, int block_size) {
  AttnParams p;
  p.dtype = dt;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  return p;
}

// The mask options every phase is checked with: name and how they change the defaults.
struct MaskVariant {
  const char* name;
  bool causal;
  int window_left;
  int window_right;
  double softcap;
  double scale; // 0: default 1/sqrt(head_dim)
};
constexpr MaskVariant kMaskVariants[] = {
    {"full", false, -1, -1, 0.0, 0.0},
    {"causal", true, -1, -1, 0.0, 0.0},
    {"window-narrow", true, 7, -1, 0.0, 0.0},
    {"window-wide", true, 100000, -1, 0.0, 0.0},
    {"window-partition", true, 511, -1, 0.0, 0.0},
    {"window-right", false, -1, 5, 0.0, 0.0},
    {"window-both", false, 40, 3, 0.0, 0.0},
    {"softcap", true, -1, -1, 5.0, 1.0},
    {"softcap-window", true, 100, -1, 30.0, 0.0},
    {"scale", true, -1, -1, 0.0, 0.3},
};

AttnParams with_mask(AttnParams p, const MaskVariant& m) {
  p.causal = m.causal;
  p.window_left = m.window_left;
  p.window_right = m.window_right;
  p.softcap = m.softcap;
  if (m.scale > 0) {
    p.scale = m.scale;
  }
  return p;
}

} // namespace

std::vector<VerifyCase> verify_cases(Phase phase, DType dt, Intensity in, uint64_t seed) {
  const Sizes sz = sizes_for(in);
  const std::string ph = phase == Phase::decode ? "decode" : "prefill";
  const std::string suffix = std::string("/").append(dtype_name(dt));
  std::vector<VerifyCase> cases;
  std::map<std::string, int> counts;
  auto add = [&](const std::string& group, AttnParams p, std::vector<int> q, std::vector<int> k,
                 bool shared = false) {
    VerifyCase c;
    c.group = ph + "/" + group + suffix;
    c.index = counts[c.group]++;
    c.seed = mix_seed(seed, c.group, c.index);
    c.phase = phase;
    c.params = p;
    c.q_lens = std::move(q);
    c.k_lens = std::move(k);
    c.shared_prefix = shared;
    cases.push_back(std::move(c));
  };
  const std::vector<int> partitions = {256, 512, 1024};

  if (phase == Phase::decode) {
    // Context lengths at every SPEC.md edge, plus an empty context, in one ragged batch.
    for (int d : sz.head_dims) {
      for (int bs : sz.block_sizes) {
        std::vector<int> lens = edge_lengths(bs, partitions, sz.max_len);
        lens.push_back(0);
        add("edges", base_params(dt, 4, 2, d, bs), {}, lens);
      }
    }
    // GQA ratios 1..16 and MQA.
    for (int ratio : {1, 2, 4, 8, 16}) {
      const uint64_t s = mix_seed(seed, "decode-gqa-lens", ratio);
      add("gqa", base_params(dt, 2 * ratio, 2, 128, 16), {},
          ragged_lengths(s, 5, 16, partitions, sz.max_len));
    }
    add("gqa", base_params(dt, 16, 1, 128, 16), {},
        ragged_lengths(mix_seed(seed, "decode-mqa-lens", 0), 5, 16, partitions, sz.max_len));
    for (const auto& m : kMaskVariants) {
      const AttnParams p =
          with_mask(base_params(dt, 4, 2, in == Intensity::quick ? 64 : 128, 16), m);
      add("masks", p, {}, ragged_lengths(mix_seed(seed, m.name, 1), 6, 16, partitions, sz.max_len));
    }
    add("shared-prefix", base_params(dt, 8, 2, 128, 16), {}, {300, 97, 1025, 64, 513}, true);
    add("long", base_params(dt, 8, 1, 128, 16), {}, sz.long_lens);
    return cases;
  }

  const int L = sz.prefill_len;
  for (int d : sz.head_dims) {
    for (int bs : sz.block_sizes) {
      // Equal query and key lengths at the block edges, plus an empty sequence.
      std::vector<int> lens = edge_lengths(bs, {}, L);
      lens.push_back(0);
      add("varlen", base_params(dt, 4, 2, d, bs), lens, lens);
    }
  }
  {
    // Chunked prefill and prefix caching: q_len < k_len.
    std::vector<int> q = {1, 17, 64, 5, 33};
    std::vector<int> k = {1 + 15, 17 + 16, 64 + 100, 5 + 17, 33 + 3 * 16};
    add("chunked", base_params(dt, 4, 2, 128, 16), q, k);
    add("chunked", base_params(dt, 4, 4, 64, 32), {8, 40}, {200, 41});
  }
  {
    // q_len > k_len: leading rows see no key under a causal mask.
    AttnParams p = base_params(dt, 4, 2, 64, 16);
    add("q-gt-k", p, {20, 10, 3, 17}, {5, 0, 1, 16});
    p.causal = false;
    add("q-gt-k", p, {20, 10, 3}, {5, 0, 1});
    p.causal = true;
    p.window_left = 2;
    add("q-gt-k", p, {9, 4}, {3, 1});
  }
  for (int ratio : {1, 2, 4, 8, 16}) {
    std::vector<int> q = ragged_lengths(mix_seed(seed, "prefill-gqa-q", ratio), 3, 16, {}, L / 2);
    add("gqa", base_params(dt, 2 * ratio, 2, 128, 16), q, q);
  }
  add("gqa", base_params(dt, 8, 1, 128, 16), {33, 70}, {33, 90});
  for (const auto& m : kMaskVariants) {
    const AttnParams p = with_mask(base_params(dt, 4, 2, in == Intensity::quick ? 64 : 128, 16), m);
    std::vector<int> q = ragged_lengths(mix_seed(seed, m.name, 2), 3, 16, {}, L / 2);
    std::vector<int> k = q;
    k[0] += 37; // one chunked sequence per mask option
    add("masks", p, q, k);
  }
  add("shared-prefix", base_params(dt, 4, 2, 128, 16), {40, 7, 64}, {160, 97, 200}, true);
  return cases;
}

} // namespace attn
