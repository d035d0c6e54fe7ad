// verify's edge-case catalogue (verify_cases.h): SPEC.md's edges per phase and dtype, sized by
// intensity, each case seeded from the run's seed, its group and its index.
#include "src/validation/verify_cases.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/model/rng.h"

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
  g.k_scale = k_scale;
  g.v_scale = v_scale;
  g.nan_tails = nan_tails;
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
  // The long sequence of the mixed batches (short chats beside one long document): at least
  // this, and (0: no such rule) past `mixed_partitions` partitions of the largest declared one.
  int mixed_len;
  int mixed_partitions;
};

Sizes sizes_for(Intensity in) {
  switch (in) {
  case Intensity::quick:
    return {{64, 128}, {16}, 1100, 96, {2049}, 4097, 0};
  case Intensity::full:
    return {{64, 80, 96, 112, 128, 192, 256},
            {8, 16, 32, 64, 128},
            4100,
            600,
            {32768, 16385},
            33001,
            64};
  default:
    return {{64, 96, 128, 256}, {8, 16, 32}, 2100, 300, {8193, 4097}, 20001, 32};
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
    // Windows of zero keys on a side: 0 is a bound (SPEC.md: a causal window_left of W sees W + 1
    // keys, here each row itself alone), not "no window"; an engine API that reads 0 as unbounded
    // passed every case before these (an outside audit's prefill plugin).
    {"window-zero", true, 0, -1, 0.0, 0.0},
    {"window-left-zero", false, 0, -1, 0.0, 0.0},
    {"window-right-zero", false, -1, 0, 0.0, 0.0},
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

// The preferred value that the kernel set accepts (all are, when nothing was probed), else its
// smallest accepted one.
int pick(const std::vector<int>& accepted, std::initializer_list<int> preferred) {
  for (int v : preferred) {
    if (accepted.empty() || std::find(accepted.begin(), accepted.end(), v) != accepted.end()) {
      return v;
    }
  }
  return *std::min_element(accepted.begin(), accepted.end());
}

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

// The intensity's values that the set accepts, plus (with `unusual`) every accepted value that
// is not a power of two: a block size a kernel accepts in particular (48 for partition 384) is
// checked at every intensity. `fallback` when that leaves nothing.
std::vector<int> aimed(const std::vector<int>& intensity, const std::vector<int>& accepted,
                       int fallback, bool unusual) {
  if (accepted.empty()) {
    return intensity;
  }
  std::set<int> out;
  for (int v : intensity) {
    if (std::find(accepted.begin(), accepted.end(), v) != accepted.end()) {
      out.insert(v);
    }
  }
  for (int v : accepted) {
    if (unusual && !power_of_two(v)) {
      out.insert(v);
    }
  }
  if (out.empty()) {
    out.insert(fallback);
  }
  return {out.begin(), out.end()};
}

// The block size a case about partition `part` uses: `home` when it divides the partition, else
// the largest accepted one that does (0: none).
int block_for_partition(int part, int home, const std::vector<int>& accepted) {
  if (part % home == 0) {
    return home;
  }
  int best = 0;
  for (int bs : accepted) {
    if (part % bs == 0) {
      best = std::max(best, bs);
    }
  }
  return best;
}

// SPEC.md's edge lengths plus the second block boundary and one past it: sorted, unique.
std::vector<int> block_edges(int bs, const std::vector<int>& partitions, int max_len) {
  std::vector<int> lens = edge_lengths(bs, partitions, max_len);
  lens.insert(lens.end(), {2 * bs, 2 * bs + 1});
  std::sort(lens.begin(), lens.end());
  lens.erase(std::unique(lens.begin(), lens.end()), lens.end());
  return lens;
}

// Lengths around a boundary unit: k*u-1, k*u, k*u+1 for k = 1, 2 (those >= 1).
std::vector<int> around(int unit) {
  std::vector<int> v;
  for (int k = 1; k <= 2; ++k) {
    for (int d = -1; d <= 1; ++d) {
      if (k * unit + d >= 1) {
        v.push_back(k * unit + d);
      }
    }
  }
  return v;
}

void shuffle(std::vector<int>& v, uint64_t seed) {
  Rng rng(seed);
  for (std::size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[std::size_t(rng.range(0, int64_t(i) - 1))]);
  }
}

} // namespace

std::vector<VerifyCase> verify_cases(Phase phase, DType dt, Intensity in, uint64_t seed,
                                     const KernelTargets& aim) {
  const Sizes sz = sizes_for(in);
  // The set's own sizes: the block sizes the one-size groups run at (the first keeps their plain
  // names), the head size most groups use, the ones the edge groups cross.
  const std::vector<int> homes =
      aim.home_block_sizes.empty()
          ? std::vector<int>{pick(aim.block_sizes, {16, 32, 64, 8, 128})}
          : aim.home_block_sizes;
  const int bs0 = homes.front();
  const int d0 = pick(aim.head_dims, {128, 64, 256, 96});
  const int d_mask = in == Intensity::quick ? pick(aim.head_dims, {64, 128, 256, 96}) : d0;
  // The partition batches are long (two partitions past each one): a small head size keeps
  // their data cheap to draw.
  const int d_part = pick(aim.head_dims, {64, 128, 256, 96});
  const std::vector<int> edge_blocks = aimed(sz.block_sizes, aim.block_sizes, bs0, true);
  // A home block size the edge groups leave out gets its block edges in a group of its own (so
  // that the edge groups' cases, and what their seeds reproduce, stay as they were).
  auto edges_at_home = [&](std::size_t h) {
    return h > 0 &&
           std::find(edge_blocks.begin(), edge_blocks.end(), homes[h]) == edge_blocks.end();
  };
  const std::vector<int> edge_dims = aimed(sz.head_dims, aim.head_dims, d0, false);
  const std::string ph = phase == Phase::decode ? "decode" : "prefill";
  const std::string suffix = std::string("/").append(dtype_name(dt));
  std::vector<VerifyCase> cases;
  std::map<std::string, int> counts;
  VerifyCase* last = nullptr; // the case add() made, for the fp8 groups' scales
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
    last = &cases.back();
  };
  // The fp8 groups: each case over an fp8 cache with the scales given (SPEC.md "fp8 KV caches").
  // 1/250 saturates most E4M3 values (the data is normal, divided by the scale), 1/64 puts them
  // near 448, 24 puts most in the subnormals, and 0.37 and 4 are ordinary.
  auto add_fp8 = [&](DType kv, AttnParams p, std::vector<int> q, std::vector<int> k,
                     std::vector<float> ks, std::vector<float> vs) {
    p.kv_dtype = kv;
    add(std::string("fp8-") + std::string(dtype_name(kv)).substr(4), p, std::move(q),
        std::move(k));
    last->k_scale = std::move(ks);
    last->v_scale = std::move(vs);
  };
  const std::vector<int> partitions = aim.partitions.empty() && !aim.kernel_splits
                                          ? std::vector<int>{256, 512, 1024}
                                          : aim.partitions;
  const auto mixed_long_len = [&] {
    int len = sz.mixed_len;
    if (sz.mixed_partitions > 0 && !partitions.empty()) {
      const int largest = *std::max_element(partitions.begin(), partitions.end());
      len = std::max(len, sz.mixed_partitions * largest + 1);
    }
    return std::min(len, 65537); // a kernel set of huge partitions: bounded memory and time
  };
  const auto add_fp8_groups = [&] {
    for (DType kv : aim.fp8) {
      for (int home : homes) {
        if (phase == Phase::decode) {
          std::vector<int> lens = block_edges(home, partitions, sz.max_len);
          lens.push_back(0);
          add_fp8(kv, base_params(dt, 4, 2, d0, home), {}, lens, {1.0f / 250}, {1.0f / 64});
          add_fp8(kv, base_params(dt, 8, 2, d0, home), {}, {1, home + 1, 700}, {24.0f, 0.37f},
                  {0.37f, 24.0f});
          last->nan_tails = true; // the formats' NaN patterns in the slots nobody reads
          add_fp8(kv, with_mask(base_params(dt, 8, 1, d_mask, home), kMaskVariants[8]), {},
                  {33, 600, 150}, {4.0f}, {1.0f});
          for (int part : partitions) {
            const int bs = block_for_partition(part, home, aim.block_sizes);
            if (bs > 0) {
              add_fp8(kv, base_params(dt, 4, 2, d_part, bs), {},
                      {part - 1, part, part + 1, 2 * part + 1}, {1.0f / 64}, {4.0f});
            }
          }
        } else {
          add_fp8(kv, base_params(dt, 4, 2, d0, home), {1, 17, 64, 5}, {16, 33, 164, 22},
                  {1.0f / 250}, {1.0f / 64});
          add_fp8(kv, base_params(dt, 8, 2, d0, home), {20, 9}, {5, 60}, {24.0f, 0.37f},
                  {0.37f, 24.0f});
          last->nan_tails = true;
          add_fp8(kv, with_mask(base_params(dt, 4, 2, d_mask, home), kMaskVariants[8]),
                  {40, 7}, {160, 97}, {4.0f}, {1.0f});
        }
      }
      // Per-KV-head scales over four KV heads, each its own (a kernel that indexes them by
      // kv_head & 1, or by the query head, passes every two-head case).
      const std::vector<float> ks = {0.5f, 2.0f, 8.0f, 0.125f};
      const std::vector<float> vs = {4.0f, 0.25f, 1.0f, 16.0f};
      if (phase == Phase::decode) {
        add_fp8(kv, base_params(dt, 8, 4, d0, bs0), {}, {1, 70, bs0 + 1, 300}, ks, vs);
      } else {
        add_fp8(kv, base_params(dt, 8, 4, d0, bs0), {5, 17, 1}, {40, 17, 90}, ks, vs);
      }
      // And over sixteen, no two the same: with four heads, a kernel that reads the scales
      // through a vector of 4 or 8 lanes (head j gets head j % 4's, or j % 8's) gives the right
      // answer (an outside audit's module did, at every intensity). After the case above, so
      // that every earlier case keeps its seed.
      std::vector<float> ks16;
      for (int j = 0; j < 16; ++j) {
        ks16.push_back(std::ldexp(1.0f + 0.125f * float(j % 4), j % 5 - 2)); // 0.25 to 5
      }
      const std::vector<float> vs16(ks16.rbegin(), ks16.rend());
      if (phase == Phase::decode) {
        add_fp8(kv, base_params(dt, 32, 16, d0, bs0), {}, {1, 90, 2 * bs0 + 3}, ks16, vs16);
      } else {
        add_fp8(kv, base_params(dt, 32, 16, d0, bs0), {9, 1}, {30, 64}, ks16, vs16);
      }
      // The other block and head sizes the intensity's edge groups cross (and every accepted
      // block size that is no power of two, at every intensity). The cases above run at the
      // home block sizes and two head sizes: an outside audit's plugin whose fp8 path addressed
      // blocks as 16 slots passed all of them, at full too.
      std::set<int> fp8_blocks, fp8_dims;
      for (const VerifyCase& c : cases) {
        if (c.params.kv_dtype == kv) {
          fp8_blocks.insert(c.params.block_size);
          fp8_dims.insert(c.params.head_dim);
        }
      }
      for (int bs : edge_blocks) {
        if (fp8_blocks.count(bs) != 0) {
          continue;
        }
        // Per-KV-head scales, as at the edge head sizes below: the cases above hold them at
        // the home block and head sizes only (an outside audit's plugin that honoured them only
        // at head size 128 passed every case at every intensity).
        if (phase == Phase::decode) {
          add_fp8(kv, base_params(dt, 4, 2, d0, bs), {}, {1, bs - 1, bs, bs + 1, 2 * bs + 1},
                  {0.37f, 2.5f}, {4.0f, 0.75f});
        } else {
          add_fp8(kv, base_params(dt, 4, 2, d0, bs), {3, bs + 1}, {bs + 2, 2 * bs + 1},
                  {0.37f, 2.5f}, {4.0f, 0.75f});
        }
        last->probed_size = !power_of_two(bs);
      }
      for (int d : edge_dims) {
        if (fp8_dims.count(d) != 0) {
          continue;
        }
        if (phase == Phase::decode) {
          add_fp8(kv, base_params(dt, 4, 2, d, bs0), {}, {1, bs0 + 1, 77}, {4.0f, 0.5f},
                  {0.37f, 3.0f});
        } else {
          add_fp8(kv, base_params(dt, 4, 2, d, bs0), {5, 1}, {21, 40}, {4.0f, 0.5f}, {0.37f, 3.0f});
        }
      }
      // A long document beside short chats (as mixed-long), over an fp8 cache: an fp8 element
      // is one byte, so a kernel's offsets into a long fp8 cache are not its 16-bit path's, and
      // the longest context above is two partitions and a key. Two query heads over one KV head
      // and the small head size: the keys are the point, and mixed-long's 8 heads of 128 made
      // CI's fp8 verify tests several times slower.
      if (phase == Phase::decode) {
        add_fp8(kv, base_params(dt, 2, 1, d_part, bs0), {}, {30, mixed_long_len(), 1, 513}, {0.37f},
                {4.0f});
      } else {
        add_fp8(kv, base_params(dt, 2, 1, d_part, bs0), {5, 30}, {mixed_long_len(), 30}, {0.37f},
                {4.0f});
      }
      // The shapes the cases above leave out, each of which an outside audit's plugin got wrong
      // over fp8 caches alone and passed them (2026-12-08): a GQA group of one (a path for
      // multi-head attention that ignored the scales) over 32 KV heads, each with its own scale
      // (scales staged in a table of 16, head h reading entry h % 16); per-KV-head scales under
      // a window and a softcap (a masked path that read head 0's); and, in prefill, without the
      // causal mask (a non-causal path that dropped them).
      std::vector<float> ks32;
      for (int j = 0; j < 32; ++j) {
        ks32.push_back(std::ldexp(1.0f + 0.125f * float(j % 8), j % 7 - 3)); // 1/8 to 15, all apart
      }
      const std::vector<float> vs32(ks32.rbegin(), ks32.rend());
      if (phase == Phase::decode) {
        add_fp8(kv, base_params(dt, 32, 32, d_part, bs0), {}, {1, 40, 2 * bs0 + 3}, ks32, vs32);
        add_fp8(kv, with_mask(base_params(dt, 8, 4, d_mask, bs0), kMaskVariants[8]), {},
                {150, 33, 1}, ks, vs);
      } else {
        add_fp8(kv, base_params(dt, 32, 32, d_part, bs0), {5, 1}, {30, 40}, ks32, vs32);
        add_fp8(kv, with_mask(base_params(dt, 8, 4, d_mask, bs0), kMaskVariants[8]), {20, 3},
                {150, 40}, ks, vs);
        add_fp8(kv, with_mask(base_params(dt, 8, 4, d_mask, bs0), kMaskVariants[0]), {9, 3},
                {40, 70}, vs, ks);
      }
    }
  };

  // Shapes and batches the groups above leave out, each a kernel bug that passes them: GQA
  // ratios that are no power of two (a group found by shift), more than 32 heads, empty
  // sequences before non-empty ones, more than 16 sequences, every accepted head size (the
  // intensity's list holds only some), windows whose first visible key sits on a block or
  // partition boundary at every block size the edges run, and (prefill) keys past 512.
  // Appended in groups of their own, so that the cases above keep their seeds.
  const auto add_coverage_groups = [&] {
    const bool dec = phase == Phase::decode;
    const int short_max = std::min(sz.max_len, 700);
    for (const auto& [heads, kvh] : {std::pair{12, 4}, std::pair{15, 3}, std::pair{6, 1}}) {
      const AttnParams p = base_params(dt, heads, kvh, d0, bs0);
      if (dec) {
        add("gqa-odd", p, {},
            ragged_lengths(mix_seed(seed, "decode-gqa-odd", heads), 4, bs0, partitions, short_max));
      } else {
        add("gqa-odd", p, {33, 5, 70}, {33, 40, 70});
      }
    }
    if (dec) {
      add("many-heads", base_params(dt, 64, 8, d0, bs0), {}, {1, bs0 + 1, 300});
      add("many-heads", base_params(dt, 40, 40, d0, bs0), {}, {70, 2});
      add("empty-first", base_params(dt, 4, 2, d0, bs0), {}, {0, 37, 0, bs0 + 1, 1, 0, 300});
      add("many-seqs", base_params(dt, 4, 2, d0, bs0), {},
          ragged_lengths(mix_seed(seed, "decode-many-seqs", 0), 21, bs0, partitions, short_max));
    } else {
      add("many-heads", base_params(dt, 64, 8, d0, bs0), {5, 17}, {40, 17});
      add("empty-first", base_params(dt, 4, 2, d0, bs0), {0, 17, 0, 5, 9}, {0, 33, 0, 22, 9});
      std::vector<int> q = ragged_lengths(mix_seed(seed, "prefill-many-seqs", 0), 21, bs0, {}, 40);
      std::vector<int> k = q;
      for (std::size_t i = 0; i < k.size(); i += 3) {
        k[i] += 11; // a chunked sequence every third
      }
      add("many-seqs", base_params(dt, 4, 2, d0, bs0), q, k);
      // Keys past 512 (and past 1024) under a few query rows: a prefill that stops at 512
      // keys passes every other prefill group.
      add("long-keys", base_params(dt, 4, 2, d0, bs0), {4, 1, 9}, {1100, 517, 9});
    }
    for (int d : aim.head_dims) {
      if (std::find(edge_dims.begin(), edge_dims.end(), d) == edge_dims.end()) {
        const AttnParams p = base_params(dt, 4, 2, d, bs0);
        if (dec) {
          add("head-dims", p, {}, {1, bs0 + 1, 2 * bs0 + 3, 97, 0});
        } else {
          add("head-dims", p, {1, 17, 40}, {1, 33, 40});
        }
      }
    }
    std::vector<int> window_blocks = edge_blocks;
    if (std::find(window_blocks.begin(), window_blocks.end(), bs0) == window_blocks.end()) {
      window_blocks.push_back(bs0);
    }
    const int w = 100; // window_left: the first visible key of the last row is k_len - 1 - w
    for (int bs : window_blocks) {
      AttnParams p = base_params(dt, 4, 2, d_mask, bs);
      p.window_left = w;
      std::vector<int> lens = {w + bs, w + bs + 1, w + 2 * bs, w + 2 * bs - 1, w, w + 1};
      if (dec) {
        for (int part : partitions) {
          if (part % bs == 0) {
            lens.insert(lens.end(), {w + part, w + part + 1, w + 2 * part, w + 2 * part + 1});
          }
        }
        shuffle(lens, mix_seed(seed, "decode-window-edges", bs));
        add("window-edges", p, {}, lens);
      } else {
        std::vector<int> q;
        for (std::size_t i = 0; i < lens.size(); ++i) {
          q.push_back(std::min(lens[i], int(1 + 2 * i)));
        }
        add("window-edges", p, q, lens);
      }
      last->probed_size = !power_of_two(bs);
    }
  };

  if (phase == Phase::decode) {
    // Context lengths at every SPEC.md edge up to the intensity's length, on a block boundary
    // and one past it, plus an empty context, in one ragged batch. (The partition group below
    // reaches two partitions past every declared one.)
    for (int d : edge_dims) {
      for (int bs : edge_blocks) {
        std::vector<int> lens = block_edges(bs, partitions, sz.max_len);
        lens.push_back(0);
        add("edges", base_params(dt, 4, 2, d, bs), {}, lens);
        last->probed_size = !power_of_two(bs);
      }
    }
    for (std::size_t h = 0; h < homes.size(); ++h) {
      const int home = homes[h];
      const std::string tag = h == 0 ? "" : "-bs" + std::to_string(home);
      for (int d : edge_dims) {
        if (edges_at_home(h)) {
          std::vector<int> lens = block_edges(home, partitions, sz.max_len);
          lens.push_back(0);
          add("edges" + tag, base_params(dt, 4, 2, d, home), {}, lens);
        }
      }
      // Each partition's boundaries in a ragged batch of their own, in a seeded order (at the
      // other homes only where the home divides the partition: else the first home's batch).
      for (int part : partitions) {
        const int bs = h == 0 ? block_for_partition(part, home, aim.block_sizes)
                              : (part % home == 0 ? home : 0);
        if (bs == 0) {
          continue; // no accepted block size divides it: no configuration could run it
        }
        std::vector<int> lens = around(part);
        lens.push_back(1);
        shuffle(lens, mix_seed(seed, "decode-partition-lens", part));
        add("partition" + tag, base_params(dt, 8, 2, d_part, bs), {}, lens);
      }
      // GQA ratios 1..16 and MQA.
      for (int ratio : {1, 2, 4, 8, 16}) {
        const uint64_t s = mix_seed(seed, "decode-gqa-lens", ratio);
        add("gqa" + tag, base_params(dt, 2 * ratio, 2, d0, home), {},
            ragged_lengths(s, 5, home, partitions, sz.max_len));
      }
      add("gqa" + tag, base_params(dt, 16, 1, d0, home), {},
          ragged_lengths(mix_seed(seed, "decode-mqa-lens", 0), 5, home, partitions, sz.max_len));
      for (const auto& m : kMaskVariants) {
        const AttnParams p = with_mask(base_params(dt, 4, 2, d_mask, home), m);
        add("masks" + tag, p, {},
            ragged_lengths(mix_seed(seed, m.name, 1), 6, home, partitions, sz.max_len));
      }
      add("shared-prefix" + tag, base_params(dt, 8, 2, d0, home), {}, {300, 97, 1025, 64, 513},
          true);
      // NaN past each sequence's length in its last block, as an engine's cache holds garbage
      // there: a kernel may not fold it in, not even with a zero weight (0 * NaN is NaN; vLLM's
      // paged attention zeroes such values since vllm-project/vllm issue 641).
      add("nan-tails" + tag, base_params(dt, 8, 2, d0, home), {}, {1, home + 1, 2 * home - 1, 300});
      last->nan_tails = true;
      add("long" + tag, base_params(dt, 8, 1, d0, home), {}, sz.long_lens);
    }
    add_coverage_groups();
    // A long document beside short chats in one batch, as engines run them: past 16384 keys at
    // the default intensity, and past 32 partitions of the largest declared partition (a
    // reduction sized for 32 partitions, or a bug in lengths the other groups never reach, or
    // in a batch whose lengths differ by that much, passed every case before this group).
    add("mixed-long", base_params(dt, 8, 2, d0, bs0), {}, {30, mixed_long_len(), 1, 513});
    add_fp8_groups();
    return cases;
  }

  const int L = sz.prefill_len;
  for (int d : edge_dims) {
    for (int bs : edge_blocks) {
      // Equal query and key lengths at the block edges, plus an empty sequence.
      std::vector<int> lens = block_edges(bs, {}, L);
      lens.push_back(0);
      add("varlen", base_params(dt, 4, 2, d, bs), lens, lens);
      last->probed_size = !power_of_two(bs);
    }
  }
  for (std::size_t h = 0; h < homes.size(); ++h) {
    const int home = homes[h];
    const std::string tag = h == 0 ? "" : "-bs" + std::to_string(home);
    for (int d : edge_dims) {
      if (edges_at_home(h)) {
        std::vector<int> lens = block_edges(home, {}, L);
        lens.push_back(0);
        add("varlen" + tag, base_params(dt, 4, 2, d, home), lens, lens);
      }
    }
    // The declared tiles' edges: query lengths around each query tile (q = k, causal), key
    // lengths around each key tile under a few query rows (chunked).
    for (int t : aim.q_tiles) {
      const std::vector<int> q = around(t);
      add("tiles" + tag, base_params(dt, 4, 2, d0, home), q, q);
    }
    for (int t : aim.k_tiles) {
      const std::vector<int> k = around(t);
      std::vector<int> q;
      for (std::size_t i = 0; i < k.size(); ++i) {
        q.push_back(std::min(k[i], int(1 + 3 * i)));
      }
      add("tiles" + tag, base_params(dt, 4, 2, d0, home), q, k);
    }
    {
      // Chunked prefill and prefix caching: q_len < k_len.
      std::vector<int> q = {1, 17, 64, 5, 33};
      std::vector<int> k = {1 + 15, 17 + 16, 64 + 100, 5 + 17, 33 + 3 * 16};
      add("chunked" + tag, base_params(dt, 4, 2, d0, home), q, k);
      if (h == 0) {
        add("chunked", base_params(dt, 4, 4, pick(aim.head_dims, {64, 128, 256, 96}),
                                   pick(aim.block_sizes, {32, 64, 16, 128, 8})),
            {8, 40}, {200, 41});
      }
    }
    {
      // q_len > k_len: leading rows see no key under a causal mask.
      AttnParams p = base_params(dt, 4, 2, pick(aim.head_dims, {64, 128, 256, 96}), home);
      add("q-gt-k" + tag, p, {20, 10, 3, 17}, {5, 0, 1, 16});
      p.causal = false;
      add("q-gt-k" + tag, p, {20, 10, 3}, {5, 0, 1});
      p.causal = true;
      p.window_left = 2;
      add("q-gt-k" + tag, p, {9, 4}, {3, 1});
    }
    for (int ratio : {1, 2, 4, 8, 16}) {
      std::vector<int> q =
          ragged_lengths(mix_seed(seed, "prefill-gqa-q", ratio), 3, home, {}, L / 2);
      add("gqa" + tag, base_params(dt, 2 * ratio, 2, d0, home), q, q);
    }
    add("gqa" + tag, base_params(dt, 8, 1, d0, home), {33, 70}, {33, 90});
    for (const auto& m : kMaskVariants) {
      const AttnParams p = with_mask(base_params(dt, 4, 2, d_mask, home), m);
      std::vector<int> q = ragged_lengths(mix_seed(seed, m.name, 2), 3, home, {}, L / 2);
      std::vector<int> k = q;
      k[0] += 37; // one chunked sequence per mask option
      add("masks" + tag, p, q, k);
    }
    add("shared-prefix" + tag, base_params(dt, 4, 2, d0, home), {40, 7, 64}, {160, 97, 200},
        true);
    add("nan-tails" + tag, base_params(dt, 4, 2, d0, home), {5, 1, 20}, {home + 3, 2 * home - 1, 20});
    last->nan_tails = true;
  }
  add_coverage_groups();
  // A chunk of a long document's prefill beside a short chat's whole prompt (the query rows few:
  // the reference's work is rows x keys).
  add("mixed-long", base_params(dt, 8, 2, d0, bs0), {5, 30}, {mixed_long_len(), 30});
  add_fp8_groups();
  return cases;
}

} // namespace attn
