// Tests of the Eigen reference: a second, naive implementation written here from SPEC.md alone
// (plain loops, its own mask and cache addressing) on randomized cases, plus hand-checked cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/model/errors.h"
#include "src/model/problem.h"
#include "src/model/problem_gen.h"
#include "src/model/rng.h"

using namespace attn;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// The naive implementation. It deliberately shares nothing with reference/ or kernels/: the
// cache is addressed from the SPEC.md layout [num_blocks, num_kv_heads, block_size, head_dim],
// and the mask is the three SPEC.md conditions, each written as a distance test.

// Element d of logical key/value position j of sequence b, kv head g.
double cache_at(const Problem& pr, const HostTensor& cache, int b, int g, int j, int d) {
  const int bs = pr.params.block_size;
  const long long block = pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq + j / bs];
  const long long slot = j % bs;
  const long long idx = ((block * pr.params.num_kv_heads + g) * bs + slot) * pr.params.head_dim + d;
  return cache.get(std::size_t(idx));
}

void cache_set(Problem& pr, HostTensor& cache, int b, int g, int j, int d, float v) {
  const int bs = pr.params.block_size;
  const long long block = pr.block_tables[std::size_t(b) * pr.max_blocks_per_seq + j / bs];
  const long long idx =
      ((block * pr.params.num_kv_heads + g) * bs + j % bs) * pr.params.head_dim + d;
  cache.set(std::size_t(idx), v);
}

bool naive_visible(bool causal, int window_left, int window_right, int q_len, int k_len, int i,
                   int j) {
  const long long p = (long long)k_len - q_len + i; // bottom-right aligned
  const long long ahead = j - p;                    // > 0: key lies in the query's future
  if (causal && ahead > 0) {
    return false;
  }
  if (window_left != -1 && -ahead > window_left) {
    return false;
  }
  if (window_right != -1 && ahead > window_right) {
    return false;
  }
  return true;
}

int first_row(const Problem& pr, int b) {
  return pr.phase == Phase::decode ? b : pr.cu_seqlens_q[std::size_t(b)];
}
int rows_of(const Problem& pr, int b) {
  return pr.phase == Phase::decode
             ? 1
             : pr.cu_seqlens_q[std::size_t(b) + 1] - pr.cu_seqlens_q[std::size_t(b)];
}
int keys_of(const Problem& pr, int b) {
  return pr.phase == Phase::decode
             ? pr.context_lens[std::size_t(b)]
             : pr.cu_seqlens_k[std::size_t(b) + 1] - pr.cu_seqlens_k[std::size_t(b)];
}

// Final score (after scale and softcap) of every key for one query row and head; -inf masked.
std::vector<double> naive_scores(const Problem& pr, int b, int i, int h) {
  const AttnParams& p = pr.params;
  const int D = p.head_dim;
  const int g = h / (p.num_heads / p.num_kv_heads);
  const double scale = p.scale.has_value() ? *p.scale : 1.0 / std::sqrt(double(D));
  const int ql = rows_of(pr, b);
  const int kl = keys_of(pr, b);
  const std::size_t qbase = (std::size_t(first_row(pr, b) + i) * p.num_heads + h) * D;
  std::vector<double> s(std::size_t(kl), -kInf);
  for (int j = 0; j < kl; ++j) {
    if (!naive_visible(p.causal, p.window_left, p.window_right, ql, kl, i, j)) {
      continue;
    }
    double dot = 0.0;
    for (int d = 0; d < D; ++d) {
      dot += double(pr.query.get(qbase + d)) * cache_at(pr, pr.key_cache, b, g, j, d);
    }
    double x = scale * dot;
    if (p.softcap > 0.0) {
      x = p.softcap * std::tanh(x / p.softcap);
    }
    s[std::size_t(j)] = x;
  }
  return s;
}

struct Naive {
  std::vector<double> out; // [rows, heads, head_dim]
  std::vector<double> lse; // [rows, heads]
};

Naive naive_attention(const Problem& pr) {
  const AttnParams& p = pr.params;
  const int H = p.num_heads;
  const int D = p.head_dim;
  int rows = 0;
  for (int b = 0; b < pr.batch; ++b) {
    rows += rows_of(pr, b);
  }
  Naive r;
  r.out.assign(std::size_t(rows) * H * D, 0.0);
  r.lse.assign(std::size_t(rows) * H, -kInf);
  for (int b = 0; b < pr.batch; ++b) {
    const int g_size = H / p.num_kv_heads;
    for (int i = 0; i < rows_of(pr, b); ++i) {
      const int row = first_row(pr, b) + i;
      for (int h = 0; h < H; ++h) {
        const std::vector<double> s = naive_scores(pr, b, i, h);
        double top = -kInf;
        for (double x : s) {
          top = std::max(top, x);
        }
        if (top == -kInf) {
          continue; // no visible key: out stays 0, lse -inf
        }
        double den = 0.0;
        std::vector<double> acc(std::size_t(D), 0.0);
        for (std::size_t j = 0; j < s.size(); ++j) {
          if (s[j] == -kInf) {
            continue;
          }
          const double w = std::exp(s[j] - top);
          den += w;
          for (int d = 0; d < D; ++d) {
            acc[std::size_t(d)] += w * cache_at(pr, pr.value_cache, b, h / g_size, int(j), d);
          }
        }
        for (int d = 0; d < D; ++d) {
          r.out[(std::size_t(row) * H + h) * D + d] = acc[std::size_t(d)] / den;
        }
        r.lse[std::size_t(row) * H + h] = top + std::log(den);
      }
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Comparison helpers.

bool close(double got, double want, double rel) {
  if (std::isinf(want) || std::isinf(got)) {
    return got == want;
  }
  return std::abs(got - want) <= rel * (1.0 + std::abs(want));
}

// Compares every computed row; reports the first few differences and their count.
void expect_agrees(const ReferenceResult& ref, const Naive& nv, const std::string& ctx,
                   double rel = 1e-12) {
  ASSERT_EQ(ref.out.size(), nv.out.size()) << ctx;
  ASSERT_EQ(ref.lse.size(), nv.lse.size()) << ctx;
  const int H = ref.heads;
  const int D = ref.head_dim;
  int bad = 0;
  for (int r = 0; r < ref.rows; ++r) {
    ASSERT_TRUE(ref.computed[std::size_t(r)]) << ctx << " row " << r;
    for (int h = 0; h < H; ++h) {
      const std::size_t li = std::size_t(r) * H + h;
      if (!close(ref.lse[li], nv.lse[li], rel) && ++bad <= 5) {
        ADD_FAILURE() << ctx << " lse[row=" << r << ", head=" << h << "] reference " << ref.lse[li]
                      << " naive " << nv.lse[li];
      }
      for (int d = 0; d < D; ++d) {
        const std::size_t oi = li * D + d;
        if (!(close(ref.out[oi], nv.out[oi], rel)) && ++bad <= 5) {
          ADD_FAILURE() << ctx << " out[row=" << r << ", head=" << h << ", dim=" << d
                        << "] reference " << ref.out[oi] << " naive " << nv.out[oi];
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << ctx << ": elements differing by more than " << rel << " relative";
}

ReferenceOptions with_threads(int n) {
  ReferenceOptions o;
  o.threads = n;
  return o;
}

std::string context(uint64_t seed, const Problem& pr) {
  std::ostringstream s;
  s << "seed=" << seed << " [" << pr.describe() << "]";
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Randomized cases over every mask option.

struct Lengths {
  std::vector<int> q, k;
};

// Decode context lengths: the edges around the block size, an empty context and random ones.
std::vector<int> decode_lengths(Rng& rng, int bs, int max_len) {
  const int picks[] = {0, 1, std::max(1, bs - 1), bs, bs + 1, 2 * bs + 1, max_len};
  std::vector<int> out;
  const int batch = int(rng.range(1, 5));
  for (int b = 0; b < batch; ++b) {
    out.push_back(rng.uniform() < 0.6 ? picks[rng.range(0, 6)] : int(rng.range(1, max_len)));
  }
  return out;
}

// Prefill sequences of every shape: full prefill, chunked (q < k), q > k, k = 0, q = 0, q = 1.
Lengths prefill_lengths(Rng& rng, int max_len) {
  Lengths l;
  const int batch = int(rng.range(1, 4));
  for (int b = 0; b < batch; ++b) {
    const int k = int(rng.range(1, max_len));
    int q = k;
    switch (rng.range(0, 5)) {
    case 0: // full prefill
      break;
    case 1: // chunked prefill / prefix caching
      q = int(rng.range(1, k));
      break;
    case 2: // more query rows than keys: the first rows see nothing when causal
      q = k + int(rng.range(1, 6));
      break;
    case 3: // no keys at all
      l.q.push_back(int(rng.range(1, 5)));
      l.k.push_back(0);
      continue;
    case 4: // a sequence without query rows
      q = 0;
      break;
    default: // one new token over a long context
      q = 1;
    }
    l.q.push_back(q);
    l.k.push_back(k);
  }
  return l;
}

// Window sizes: none, zero, narrow, around the context and wider than any context.
int pick_window(Rng& rng, int max_len) {
  const int picks[] = {0, 1, 2, 7, max_len / 2, max_len + 50};
  return rng.uniform() < 0.7 ? picks[rng.range(0, 5)] : int(rng.range(0, max_len));
}

// Case `index` walks the grid {causal} x {window mode} x {softcap} x {phase} x {dtype}; the seed
// picks the rest (shapes, GQA ratio, lengths, window sizes, scale, prefix sharing).
Problem random_problem(uint64_t seed, int index) {
  Rng rng(seed);
  AttnParams p;
  p.causal = index % 2 == 1;
  const int window_mode = (index / 2) % 4; // 0 none, 1 left, 2 right, 3 both
  const bool softcap = (index / 8) % 2 == 1;
  const bool decode = (index / 16) % 2 == 0;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  p.dtype = dtypes[(index / 32) % 3];
  const int ratio = 1 + index % 8;                            // GQA ratios 1..8
  p.num_kv_heads = index % 3 == 0 ? 1 : int(rng.range(1, 3)); // every third case MQA-shaped
  p.num_heads = p.num_kv_heads * ratio;
  const int dims[] = {8, 16, 32, 64};
  p.head_dim = dims[rng.range(0, 3)];
  const int sizes[] = {1, 2, 4, 8, 16, 32};
  p.block_size = sizes[rng.range(0, 5)];
  const int max_len = int(rng.range(8, 70));
  if (window_mode == 1 || window_mode == 3) {
    p.window_left = pick_window(rng, max_len);
  }
  if (window_mode == 2 || window_mode == 3) {
    p.window_right = pick_window(rng, max_len);
  }
  if (rng.uniform() < 0.4) {
    p.scale = 0.05 + 2.0 * rng.uniform(); // custom scale, up to ~10x the default
  }
  if (softcap) {
    p.softcap = 0.5 + 20.0 * rng.uniform();
  }
  GenOptions opt;
  opt.seed = rng.fork_seed();
  opt.shared_prefix = rng.uniform() < 0.5;
  if (decode) {
    return make_decode_problem(p, decode_lengths(rng, p.block_size, max_len), opt);
  }
  const Lengths l = prefill_lengths(rng, max_len);
  return make_prefill_problem(p, l.q, l.k, opt);
}

TEST(Reference, AgreesWithNaiveLoopsOnRandomCasesOverEveryMaskOption) {
  // 96 grid points (2 causal x 4 window modes x 2 softcap x 2 phases x 3 dtypes), 4 seeds each.
  for (int round = 0; round < 4; ++round) {
    for (int index = 0; index < 96; ++index) {
      const uint64_t seed = 7000 + uint64_t(round) * 1000 + uint64_t(index);
      const Problem pr = random_problem(seed, index);
      const std::string ctx = context(seed, pr) + " case=" + std::to_string(index);
      ASSERT_NO_THROW(pr.validate()) << ctx;
      expect_agrees(reference_attention(pr, with_threads(2)), naive_attention(pr), ctx);
    }
  }
}

TEST(Reference, AgreesWithNaiveLoopsAcrossPartitionBoundaries) {
  // Longer ragged contexts from the SPEC.md edges (1, bs-1, bs, bs+1, 512 +-1, 1024 +-1), with
  // sliding windows, softcap and chunked prefill over them.
  for (uint64_t seed = 300; seed < 306; ++seed) {
    Rng rng(seed);
    AttnParams p;
    p.num_kv_heads = int(rng.range(1, 2));
    p.num_heads = p.num_kv_heads * int(rng.range(1, 4));
    p.head_dim = 32;
    p.block_size = seed % 2 ? 16 : 32;
    p.dtype = seed % 3 == 0 ? DType::bf16 : DType::f16;
    p.causal = seed % 4 != 3;
    p.window_left = seed % 2 ? 300 : -1;
    p.softcap = seed % 3 == 1 ? 8.0 : 0.0;
    const std::vector<int> lens = ragged_lengths(seed, 14, p.block_size, {512}, 1100);
    GenOptions opt;
    opt.seed = seed;
    opt.shared_prefix = seed % 2 == 0;
    Problem pr;
    if (seed < 303) {
      pr = make_decode_problem(p, lens, opt);
    } else {
      std::vector<int> q;
      for (int k : lens) {
        q.push_back(int(rng.range(1, std::min(k, 40)))); // chunked prefill chunks
      }
      pr = make_prefill_problem(p, q, lens, opt);
    }
    const std::string ctx = context(seed, pr);
    expect_agrees(reference_attention(pr, with_threads(2)), naive_attention(pr), ctx);
  }
}

TEST(Reference, RandomGridCoversTheOptionsItClaims) {
  // Guards the sweep above against silently losing a mask option to a refactor of the grid.
  std::set<int> ratios;
  int mqa = 0, empty_rows = 0, chunked = 0, q_gt_k = 0, k_zero = 0, narrow = 0, wide = 0;
  int shared = 0, custom_scale = 0;
  for (int index = 0; index < 96; ++index) {
    const Problem pr = random_problem(7000 + uint64_t(index), index);
    const AttnParams& p = pr.params;
    ratios.insert(p.group_size());
    mqa += p.num_kv_heads == 1 && p.num_heads > 1;
    custom_scale += p.scale.has_value();
    for (int b = 0; b < pr.batch; ++b) {
      const int ql = pr.q_len(b), kl = pr.k_len(b);
      chunked += ql > 0 && ql < kl;
      q_gt_k += ql > kl && kl > 0;
      k_zero += kl == 0;
      const int w = std::max(p.window_left, p.window_right);
      narrow += w >= 0 && w < kl;
      wide += w >= kl && kl > 0;
    }
    // Shared prefix blocks show up as the same physical block in two rows of the table.
    if (pr.batch >= 2 && pr.max_blocks_per_seq > 1 && pr.k_len(0) >= p.block_size &&
        pr.k_len(1) >= p.block_size &&
        pr.block_tables[0] == pr.block_tables[std::size_t(pr.max_blocks_per_seq)]) {
      ++shared;
    }
    const Naive nv = naive_attention(pr);
    for (double l : nv.lse) {
      empty_rows += l == -kInf;
    }
  }
  EXPECT_EQ(ratios.size(), 8u);
  for (int count : {mqa, empty_rows, chunked, q_gt_k, k_zero, narrow, wide, shared, custom_scale}) {
    EXPECT_GT(count, 0);
  }
}

TEST(Reference, VisibilityPredicateMatchesSpecConditions) {
  for (int causal = 0; causal < 2; ++causal) {
    for (int wl : {-1, 0, 1, 3, 50}) {
      for (int wr : {-1, 0, 1, 3, 50}) {
        AttnParams p;
        p.causal = causal;
        p.window_left = wl;
        p.window_right = wr;
        for (int ql = 0; ql <= 6; ++ql) {
          for (int kl = 0; kl <= 6; ++kl) {
            for (int i = 0; i < ql; ++i) {
              for (int j = 0; j < kl; ++j) {
                EXPECT_EQ(reference_visible(p, ql, kl, i, j),
                          naive_visible(causal, wl, wr, ql, kl, i, j))
                    << "causal=" << causal << " wl=" << wl << " wr=" << wr << " q_len=" << ql
                    << " k_len=" << kl << " i=" << i << " j=" << j;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Reference, ThreadCountDoesNotChangeTheResult) {
  const uint64_t seed = 41;
  const Problem pr = random_problem(seed, 17);
  const ReferenceResult one = reference_attention(pr, with_threads(1));
  const ReferenceResult many = reference_attention(pr, with_threads(4));
  const ReferenceResult all = reference_attention(pr);
  EXPECT_EQ(one.out, many.out) << "seed=" << seed;
  EXPECT_EQ(one.lse, many.lse) << "seed=" << seed;
  EXPECT_EQ(one.out, all.out) << "seed=" << seed;
}

// ---------------------------------------------------------------------------------------------
// Hand-checked cases.

AttnParams small_params(int heads, int kv_heads, int head_dim, bool causal = true) {
  AttnParams p;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = 4;
  p.dtype = DType::f32;
  p.causal = causal;
  return p;
}

void fill(HostTensor& t, float v) {
  for (std::size_t i = 0; i < std::size_t(t.numel()); ++i) {
    t.set(i, v);
  }
}

TEST(Reference, EqualScoresGiveTheMeanOfTheValues) {
  // A zero query scores every key 0: the output is the plain mean of the visible values and
  // lse = log(number of visible keys).
  const AttnParams p = small_params(4, 2, 16);
  const std::vector<int> ctx = {1, 3, 4, 5, 16};
  Problem pr = make_decode_problem(p, ctx, {.seed = 5});
  fill(pr.query, 0.0f);
  const ReferenceResult ref = reference_attention(pr);
  for (int b = 0; b < pr.batch; ++b) {
    for (int h = 0; h < p.num_heads; ++h) {
      for (int d = 0; d < p.head_dim; ++d) {
        double mean = 0.0;
        for (int j = 0; j < ctx[std::size_t(b)]; ++j) {
          mean += cache_at(pr, pr.value_cache, b, h / 2, j, d);
        }
        mean /= ctx[std::size_t(b)];
        EXPECT_NEAR(ref.out[(std::size_t(b) * 4 + h) * 16 + d], mean, 1e-14)
            << "b=" << b << " h=" << h << " d=" << d;
      }
      EXPECT_NEAR(ref.lse[std::size_t(b) * 4 + h], std::log(double(ctx[std::size_t(b)])), 1e-14);
    }
  }
  // Causal prefill: row i sees keys 0..k_len-q_len+i, so its mean runs over a growing prefix.
  Problem pf = make_prefill_problem(p, {3}, {6}, {.seed = 6});
  fill(pf.query, 0.0f);
  const ReferenceResult rp = reference_attention(pf);
  for (int i = 0; i < 3; ++i) {
    const int n = 6 - 3 + i + 1;
    for (int d = 0; d < 16; ++d) {
      double mean = 0.0;
      for (int j = 0; j < n; ++j) {
        mean += cache_at(pf, pf.value_cache, 0, 0, j, d);
      }
      EXPECT_NEAR(rp.out[(std::size_t(i) * 4 + 0) * 16 + d], mean / n, 1e-14) << "i=" << i;
    }
    EXPECT_NEAR(rp.lse[std::size_t(i) * 4], std::log(double(n)), 1e-14) << "i=" << i;
  }
}

TEST(Reference, LseIsLogCountPlusTheScoreWhenScoresAreEqual) {
  // Every key of kv head g is the same vector, so all scores of a (row, head) are equal to
  // s = scale * dot(q, k_g): lse = log(n) + s exactly, with and without softcap.
  for (double softcap : {0.0, 3.0}) {
    AttnParams p = small_params(4, 2, 8, /*causal=*/false);
    p.softcap = softcap;
    Problem pr = make_prefill_problem(p, {2, 1}, {7, 12}, {.seed = 11});
    const float kval[2] = {0.25f, -0.5f};
    for (std::size_t i = 0; i < std::size_t(pr.key_cache.numel()); ++i) {
      const int g = int(i / (std::size_t(p.block_size) * p.head_dim)) % p.num_kv_heads;
      pr.key_cache.set(i, kval[g]);
    }
    const ReferenceResult ref = reference_attention(pr);
    const int klen[2] = {7, 12};
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < pr.q_len(b); ++i) {
        const int row = pr.q_start(b) + i;
        for (int h = 0; h < 4; ++h) {
          double qsum = 0.0;
          for (int d = 0; d < 8; ++d) {
            qsum += pr.query.get((std::size_t(row) * 4 + h) * 8 + d);
          }
          double s = qsum * kval[h / 2] / std::sqrt(8.0);
          if (softcap > 0) {
            s = softcap * std::tanh(s / softcap);
          }
          EXPECT_NEAR(ref.lse[std::size_t(row) * 4 + h], std::log(double(klen[b])) + s, 1e-13)
              << "softcap=" << softcap << " b=" << b << " row=" << row << " h=" << h;
        }
      }
    }
  }
}

// The keys each row of a sequence sees, read off the reference: with a zero query and one-hot
// values (value j is the unit vector e_j), out[d] = 1/n when key d is visible and 0 otherwise.
std::vector<std::vector<int>> visible_sets(bool causal, int wl, int wr, int q_len, int k_len,
                                           bool decode) {
  AttnParams p = small_params(1, 1, 16, causal);
  p.window_left = wl;
  p.window_right = wr;
  Problem pr = decode ? make_decode_problem(p, {k_len}, {.seed = 3})
                      : make_prefill_problem(p, {q_len}, {k_len}, {.seed = 3});
  fill(pr.query, 0.0f);
  fill(pr.value_cache, 0.0f);
  for (int j = 0; j < k_len; ++j) {
    cache_set(pr, pr.value_cache, 0, 0, j, j, 1.0f);
  }
  const ReferenceResult ref = reference_attention(pr);
  std::vector<std::vector<int>> sets;
  for (int i = 0; i < pr.q_len(0); ++i) {
    std::vector<int> s;
    for (int d = 0; d < 16; ++d) {
      if (ref.out[std::size_t(i) * 16 + d] != 0.0) {
        s.push_back(d);
      }
    }
    for (int d : s) {
      EXPECT_NEAR(ref.out[std::size_t(i) * 16 + d], 1.0 / double(s.size()), 1e-15);
    }
    const double lse = ref.lse[std::size_t(i)];
    if (s.empty()) {
      EXPECT_EQ(lse, -kInf);
    } else {
      EXPECT_NEAR(lse, std::log(double(s.size())), 1e-15);
    }
    sets.push_back(s);
  }
  return sets;
}

std::vector<int> span(int lo, int hi) { // [lo, hi]
  std::vector<int> v;
  for (int j = lo; j <= hi; ++j) {
    v.push_back(j);
  }
  return v;
}

TEST(Reference, WindowEdgesGiveTheExactVisibleKeys) {
  using Sets = std::vector<std::vector<int>>;
  // q_len 4 over k_len 10: the rows sit at absolute positions 6, 7, 8, 9.
  EXPECT_EQ(visible_sets(true, -1, -1, 4, 10, false),
            (Sets{span(0, 6), span(0, 7), span(0, 8), span(0, 9)}));
  // Causal with window_left 2: a sliding window of 3 keys ending at the row's position.
  EXPECT_EQ(visible_sets(true, 2, -1, 4, 10, false),
            (Sets{span(4, 6), span(5, 7), span(6, 8), span(7, 9)}));
  // window_right does nothing once causal has cut the future.
  EXPECT_EQ(visible_sets(true, 2, 1, 4, 10, false),
            (Sets{span(4, 6), span(5, 7), span(6, 8), span(7, 9)}));
  EXPECT_EQ(visible_sets(true, 0, -1, 4, 10, false), (Sets{{6}, {7}, {8}, {9}}));
  // Non-causal, 1 key back and 2 ahead, clipped at the end of the context.
  EXPECT_EQ(visible_sets(false, 1, 2, 4, 10, false),
            (Sets{span(5, 8), span(6, 9), span(7, 9), span(8, 9)}));
  // window_right 0 without causal is causal again.
  EXPECT_EQ(visible_sets(false, -1, 0, 4, 10, false),
            (Sets{span(0, 6), span(0, 7), span(0, 8), span(0, 9)}));
  EXPECT_EQ(visible_sets(false, -1, 1, 4, 10, false),
            (Sets{span(0, 7), span(0, 8), span(0, 9), span(0, 9)}));
  EXPECT_EQ(visible_sets(false, 0, 0, 4, 10, false), (Sets{{6}, {7}, {8}, {9}}));
  // Windows wider than the context change nothing.
  EXPECT_EQ(visible_sets(false, 20, 20, 4, 10, false),
            (Sets{span(0, 9), span(0, 9), span(0, 9), span(0, 9)}));
  EXPECT_EQ(visible_sets(true, 20, -1, 4, 10, false),
            (Sets{span(0, 6), span(0, 7), span(0, 8), span(0, 9)}));
  // More rows than keys: positions -2, -1, 0, 1; the first two rows see nothing when causal.
  EXPECT_EQ(visible_sets(true, -1, -1, 4, 2, false), (Sets{{}, {}, {0}, {0, 1}}));
  EXPECT_EQ(visible_sets(false, -1, 0, 4, 2, false), (Sets{{}, {}, {0}, {0, 1}}));
  EXPECT_EQ(visible_sets(false, 1, -1, 4, 2, false), (Sets{{0, 1}, {0, 1}, {0, 1}, {0, 1}}));
  EXPECT_EQ(visible_sets(false, -1, -1, 4, 2, false), (Sets{{0, 1}, {0, 1}, {0, 1}, {0, 1}}));
  // No keys at all.
  EXPECT_EQ(visible_sets(true, -1, -1, 3, 0, false), (Sets{{}, {}, {}}));
  EXPECT_EQ(visible_sets(false, 2, 2, 3, 0, false), (Sets{{}, {}, {}}));
  // Decode: the single row sits at k_len - 1.
  EXPECT_EQ(visible_sets(true, 3, -1, 1, 10, true), (Sets{span(6, 9)}));
  EXPECT_EQ(visible_sets(true, 0, -1, 1, 10, true), (Sets{{9}}));
  EXPECT_EQ(visible_sets(false, 3, 5, 1, 10, true), (Sets{span(6, 9)}));
  EXPECT_EQ(visible_sets(true, -1, -1, 1, 1, true), (Sets{{0}}));
  EXPECT_EQ(visible_sets(true, -1, -1, 1, 0, true), (Sets{{}}));
}

TEST(Reference, SoftcapCapsABigLogitPredictably) {
  // One head, two keys: s_0 = 10 * 10 = 100 and s_1 = 0 (scale 1). Values are e_0 and e_1, so
  // out = (softmax_0, softmax_1). With softcap 5 the big logit becomes 5 * tanh(20).
  for (double softcap : {0.0, 5.0}) {
    AttnParams p = small_params(1, 1, 8);
    p.scale = 1.0;
    p.softcap = softcap;
    Problem pr = make_decode_problem(p, {2}, {.seed = 9});
    fill(pr.query, 0.0f);
    fill(pr.key_cache, 0.0f);
    fill(pr.value_cache, 0.0f);
    pr.query.set(0, 10.0f);
    cache_set(pr, pr.key_cache, 0, 0, 0, 0, 10.0f);
    cache_set(pr, pr.value_cache, 0, 0, 0, 0, 1.0f);
    cache_set(pr, pr.value_cache, 0, 0, 1, 1, 1.0f);
    const double s0 = softcap > 0 ? softcap * std::tanh(100.0 / softcap) : 100.0;
    const double w1 = std::exp(-s0) / (1.0 + std::exp(-s0));
    const ReferenceResult ref = reference_attention(pr);
    EXPECT_NEAR(ref.out[0], 1.0 - w1, 1e-15) << "softcap=" << softcap;
    EXPECT_NEAR(ref.out[1], w1, 1e-15 * w1 + 1e-300) << "softcap=" << softcap;
    EXPECT_NEAR(ref.lse[0], s0 + std::log1p(std::exp(-s0)), 1e-13) << "softcap=" << softcap;
    if (softcap > 0) {
      // The capped weight of key 1 is about e^-5, far from the uncapped e^-100.
      EXPECT_NEAR(ref.out[1], 1.0 / (1.0 + std::exp(5.0)), 1e-8);
    } else {
      EXPECT_LT(ref.out[1], 1e-40);
    }
  }
}

TEST(Reference, SoftcapBoundsEveryScore) {
  // A huge scale drives raw scores far past the cap; every capped score lies in
  // [-softcap, softcap], so lse - log(n) does too, while the uncapped lse leaves that band.
  const uint64_t seed = 77;
  AttnParams p = small_params(4, 2, 32, /*causal=*/true);
  p.scale = 10.0;
  p.softcap = 2.0;
  Problem pr = make_prefill_problem(p, {5, 9}, {12, 9}, {.seed = seed});
  const ReferenceResult capped = reference_attention(pr);
  pr.params.softcap = 0.0;
  const ReferenceResult raw = reference_attention(pr);
  int outside = 0;
  for (int b = 0; b < pr.batch; ++b) {
    for (int i = 0; i < pr.q_len(b); ++i) {
      const int row = pr.q_start(b) + i;
      const int n = pr.k_len(b) - pr.q_len(b) + i + 1; // causal: keys 0..p
      for (int h = 0; h < 4; ++h) {
        const double centred = capped.lse[std::size_t(row) * 4 + h] - std::log(double(n));
        EXPECT_LE(centred, 2.0 + 1e-12) << "seed=" << seed << " row=" << row << " h=" << h;
        EXPECT_GE(centred, -2.0 - 1e-12) << "seed=" << seed << " row=" << row << " h=" << h;
        outside += std::abs(raw.lse[std::size_t(row) * 4 + h] - std::log(double(n))) > 2.0;
      }
    }
  }
  EXPECT_GT(outside, 0) << "seed=" << seed << ": the case never needed the cap";
}

TEST(Reference, GqaQueryHeadReadsKvHeadHOverGroupSize) {
  // Each kv head's values are one constant (10 * (g + 1)), so every output element of query
  // head h must equal 10 * (h / group + 1) whatever the softmax weights are.
  const int shapes[][2] = {{12, 3}, {8, 1}, {8, 8}, {16, 2}, {6, 6}, {14, 2}};
  for (const auto& s : shapes) {
    const int H = s[0], KVH = s[1], G = H / KVH;
    AttnParams p = small_params(H, KVH, 8);
    Problem pr = make_prefill_problem(p, {3, 1}, {5, 9}, {.seed = uint64_t(H * 100 + KVH)});
    for (std::size_t i = 0; i < std::size_t(pr.value_cache.numel()); ++i) {
      const int g = int(i / (std::size_t(p.block_size) * p.head_dim)) % KVH;
      pr.value_cache.set(i, 10.0f * float(g + 1));
    }
    const ReferenceResult ref = reference_attention(pr);
    for (int r = 0; r < ref.rows; ++r) {
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < 8; ++d) {
          EXPECT_NEAR(ref.out[(std::size_t(r) * H + h) * 8 + d], 10.0 * (h / G + 1), 1e-12)
              << "H=" << H << " KVH=" << KVH << " row=" << r << " h=" << h;
        }
      }
    }
  }
}

TEST(Reference, EmptyRowsGiveZeroOutAndMinusInfinityLse) {
  auto check = [](const Problem& pr, const std::vector<int>& empty_rows, const char* what) {
    const ReferenceResult ref = reference_attention(pr);
    const int H = ref.heads, D = ref.head_dim;
    for (double x : ref.out) {
      ASSERT_FALSE(std::isnan(x)) << what;
    }
    for (double x : ref.lse) {
      ASSERT_FALSE(std::isnan(x)) << what;
    }
    for (int r = 0; r < ref.rows; ++r) {
      const bool empty = std::find(empty_rows.begin(), empty_rows.end(), r) != empty_rows.end();
      for (int h = 0; h < H; ++h) {
        const double lse = ref.lse[std::size_t(r) * H + h];
        if (empty) {
          EXPECT_EQ(lse, -kInf) << what << " row " << r;
          for (int d = 0; d < D; ++d) {
            EXPECT_EQ(ref.out[(std::size_t(r) * H + h) * D + d], 0.0) << what << " row " << r;
          }
        } else {
          EXPECT_TRUE(std::isfinite(lse)) << what << " row " << r;
        }
      }
    }
  };
  const AttnParams causal = small_params(4, 2, 8);
  check(make_decode_problem(causal, {0, 5, 0}, {.seed = 1}), {0, 2}, "decode k_len 0");
  // q_len 5 over 3 keys: positions -2..2, rows 0 and 1 see nothing.
  check(make_prefill_problem(causal, {5}, {3}, {.seed = 2}), {0, 1}, "prefill q_len > k_len");
  check(make_prefill_problem(causal, {2, 3}, {0, 4}, {.seed = 3}), {0, 1}, "prefill k_len 0");
  AttnParams right = small_params(4, 2, 8, /*causal=*/false);
  right.window_right = 0;
  check(make_prefill_problem(right, {4}, {1}, {.seed = 4}), {0, 1, 2}, "window_right 0");
  // Softcap and a custom scale do not turn an empty row into NaN either.
  AttnParams capped = causal;
  capped.softcap = 1.5;
  capped.scale = 3.0;
  check(make_prefill_problem(capped, {3, 0, 2}, {1, 4, 0}, {.seed = 5}), {0, 1, 3, 4}, "softcap");
}

// A row whose scores are NaN comes out NaN (out and lse), as a kernel's softmax does, and not as
// a row that sees no key: the diagnosis's changed problems (fp8 bytes read in the wrong format)
// hold such keys, and were judged against zeros. A row that sees no key stays empty.
TEST(Reference, NanScoresGiveANanRowNotAnEmptyOne) {
  Problem pr = make_decode_problem(small_params(4, 2, 8), {3, 0, 17}, {.seed = 6});
  for (std::size_t i = 0; i < std::size_t(pr.key_cache.numel()); ++i) {
    pr.key_cache.set(i, std::numeric_limits<float>::quiet_NaN());
  }
  const ReferenceResult ref = reference_attention(pr);
  const int H = ref.heads, D = ref.head_dim;
  for (int r = 0; r < ref.rows; ++r) {
    for (int h = 0; h < H; ++h) {
      const double lse = ref.lse[std::size_t(r) * H + h];
      const double out = ref.out[(std::size_t(r) * H + h) * D];
      if (r == 1) {
        EXPECT_EQ(lse, -kInf);
        EXPECT_EQ(out, 0.0);
      } else {
        EXPECT_TRUE(std::isnan(lse)) << "row " << r << " head " << h << ": " << lse;
        EXPECT_TRUE(std::isnan(out)) << "row " << r << " head " << h << ": " << out;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Split-KV algebra.

Eigen::MatrixXd values_of(const Problem& pr, int b, int g) {
  const int kl = pr.k_len(b);
  Eigen::MatrixXd v(kl, pr.params.head_dim);
  for (int j = 0; j < kl; ++j) {
    for (int d = 0; d < pr.params.head_dim; ++d) {
      v(j, d) = cache_at(pr, pr.value_cache, b, g, j, d);
    }
  }
  return v;
}

TEST(Reference, SplitThenCombineEqualsTheUnsplitResult) {
  int checked = 0;
  for (int index = 0; index < 64; ++index) {
    const uint64_t seed = 9100 + uint64_t(index);
    const Problem pr = random_problem(seed, index);
    const std::string ctx = context(seed, pr);
    const ReferenceResult ref = reference_attention(pr, with_threads(2));
    Rng rng(seed ^ 0x5bd1e995u);
    const int H = pr.params.num_heads, D = pr.params.head_dim, G = pr.params.group_size();
    for (int b = 0; b < pr.batch; ++b) {
      const int kl = pr.k_len(b);
      for (int h = 0; h < H; ++h) {
        const Eigen::MatrixXd v = values_of(pr, b, h / G);
        for (int i = 0; i < pr.q_len(b); ++i) {
          const std::vector<double> s = naive_scores(pr, b, i, h);
          const Eigen::VectorXd scores = Eigen::Map<const Eigen::VectorXd>(s.data(), kl);
          // Random cut points; repeats make empty partitions, and 0 / k_len may repeat too.
          std::vector<int> cuts = {0, kl};
          const int extra = int(rng.range(0, 5));
          for (int c = 0; c < extra; ++c) {
            cuts.push_back(int(rng.range(0, kl)));
          }
          std::sort(cuts.begin(), cuts.end());
          std::vector<Partial> parts;
          for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
            const Partial part = reference_partial(scores, v, cuts[c], cuts[c + 1]);
            // Each partial is (max, sum of exp(s - max), normalised output) of its keys.
            double m = -kInf, l = 0.0;
            for (int j = cuts[c]; j < cuts[c + 1]; ++j) {
              m = std::max(m, s[std::size_t(j)]);
            }
            for (int j = cuts[c]; j < cuts[c + 1] && m > -kInf; ++j) {
              l += s[std::size_t(j)] == -kInf ? 0.0 : std::exp(s[std::size_t(j)] - m);
            }
            EXPECT_EQ(part.m, m) << ctx;
            EXPECT_NEAR(part.l, l, 1e-12 * l) << ctx;
            ASSERT_EQ(part.o.size(), D) << ctx;
            parts.push_back(part);
          }
          const Combined c = reference_combine(parts, D);
          const std::size_t li = std::size_t(pr.q_start(b) + i) * H + h;
          EXPECT_TRUE(close(c.lse, ref.lse[li], 1e-12))
              << ctx << " b=" << b << " i=" << i << " h=" << h << " lse " << c.lse << " vs "
              << ref.lse[li];
          for (int d = 0; d < D; ++d) {
            EXPECT_TRUE(close(c.out(d), ref.out[li * D + d], 1e-12))
                << ctx << " b=" << b << " i=" << i << " h=" << h << " d=" << d;
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(Reference, SpecPartitionsOfBlockMultiplesCombineExactly) {
  // SPEC.md partitions: size P (a multiple of block_size), partition t covers
  // [t*P, min((t+1)*P, k_len)). A sliding window leaves whole partitions without visible keys.
  const uint64_t seed = 4242;
  AttnParams p = small_params(4, 1, 16);
  p.window_left = 9;
  const Problem pr = make_decode_problem(p, {1, 3, 4, 5, 8, 9, 31, 32, 33, 70}, {.seed = seed});
  const ReferenceResult ref = reference_attention(pr);
  for (int P : {4, 8, 12, 32}) {
    for (int b = 0; b < pr.batch; ++b) {
      const int kl = pr.k_len(b);
      const Eigen::MatrixXd v = values_of(pr, b, 0);
      for (int h = 0; h < 4; ++h) {
        const std::vector<double> s = naive_scores(pr, b, 0, h);
        const Eigen::VectorXd scores = Eigen::Map<const Eigen::VectorXd>(s.data(), kl);
        std::vector<Partial> parts;
        int empty = 0;
        for (int t = 0; t * P < kl; ++t) {
          parts.push_back(reference_partial(scores, v, t * P, std::min((t + 1) * P, kl)));
          if (parts.back().l == 0.0) {
            ++empty;
            EXPECT_EQ(parts.back().m, -kInf);
          }
        }
        const Combined c = reference_combine(parts, 16);
        const std::size_t li = std::size_t(b) * 4 + h;
        EXPECT_TRUE(close(c.lse, ref.lse[li], 1e-12))
            << "seed=" << seed << " P=" << P << " b=" << b;
        for (int d = 0; d < 16; ++d) {
          EXPECT_TRUE(close(c.out(d), ref.out[li * 16 + d], 1e-12))
              << "seed=" << seed << " P=" << P << " b=" << b << " d=" << d;
        }
        if (kl == 70 && P == 4) {
          EXPECT_GT(empty, 10); // the window of 10 keys leaves most partitions empty
        }
      }
    }
  }
}

TEST(Reference, CombineOfNothingIsAnEmptyRow) {
  const Combined none = reference_combine({}, 4);
  EXPECT_EQ(none.lse, -kInf);
  EXPECT_EQ(none.out, Eigen::VectorXd::Zero(4));
  Eigen::VectorXd scores(3);
  scores << -kInf, -kInf, -kInf;
  const Eigen::MatrixXd v = Eigen::MatrixXd::Ones(3, 4);
  const Partial masked = reference_partial(scores, v, 0, 3);
  const Partial empty = reference_partial(scores, v, 2, 2);
  EXPECT_EQ(masked.l, 0.0);
  EXPECT_EQ(empty.l, 0.0);
  const Combined c = reference_combine({masked, empty}, 4);
  EXPECT_EQ(c.lse, -kInf);
  EXPECT_EQ(c.out, Eigen::VectorXd::Zero(4));
}

// ---------------------------------------------------------------------------------------------
// Row subset.

TEST(Reference, RowSubsetComputesExactlyThoseRows) {
  for (int index : {16, 17, 27, 44, 60, 0, 9}) { // prefill and decode grid points
    const uint64_t seed = 8800 + uint64_t(index);
    const Problem pr = random_problem(seed, index);
    const std::string ctx = context(seed, pr);
    const ReferenceResult full = reference_attention(pr);
    const int rows = full.rows;
    if (rows == 0) {
      continue;
    }
    Rng rng(seed);
    std::vector<int> want;
    for (int k = 0; k < 1 + rows / 3; ++k) {
      want.push_back(int(rng.range(0, rows - 1))); // unsorted, may repeat
    }
    const ReferenceResult sub = reference_attention(pr, {.threads = 2, .rows = want});
    const int H = full.heads, D = full.head_dim;
    for (int r = 0; r < rows; ++r) {
      const bool asked = std::find(want.begin(), want.end(), r) != want.end();
      ASSERT_EQ(sub.computed[std::size_t(r)], asked ? 1 : 0) << ctx << " row " << r;
      for (int h = 0; h < H; ++h) {
        const std::size_t li = std::size_t(r) * H + h;
        if (asked) {
          EXPECT_EQ(sub.lse[li], full.lse[li]) << ctx << " row " << r;
        } else {
          EXPECT_TRUE(std::isnan(sub.lse[li])) << ctx << " row " << r;
        }
        for (int d = 0; d < D; ++d) {
          if (asked) {
            EXPECT_EQ(sub.out[li * D + d], full.out[li * D + d]) << ctx << " row " << r;
          } else {
            EXPECT_TRUE(std::isnan(sub.out[li * D + d])) << ctx << " row " << r;
          }
        }
      }
    }
  }
}

TEST(Reference, RejectsRowsOutsideTheProblem) {
  const Problem pr = make_prefill_problem(small_params(4, 2, 8), {3, 2}, {5, 5}, {.seed = 1});
  for (int bad : {5, -1, 1000}) {
    ReferenceOptions o;
    o.rows = {0, bad};
    try {
      (void)reference_attention(pr, o);
      ADD_FAILURE() << "row " << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("row " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

TEST(Reference, RejectsAnInvalidProblemInsteadOfReadingOutsideTheCache) {
  Problem pr = make_decode_problem(small_params(4, 2, 8), {9}, {.seed = 1});
  pr.block_tables[1] = pr.num_blocks + 1000; // a used entry far outside the cache
  EXPECT_THROW((void)reference_attention(pr), InputError);
  pr = make_decode_problem(small_params(4, 2, 8), {9}, {.seed = 1});
  pr.context_lens[0] = 4 * pr.max_blocks_per_seq + 1; // more keys than the table holds
  EXPECT_THROW((void)reference_attention(pr), InputError);
}

// ---------------------------------------------------------------------------------------------
// Scale: a long decode context must be checkable in seconds.

TEST(Reference, LongDecodeContextFinishesInSeconds) {
  const uint64_t seed = 32768;
  AttnParams p;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 128;
  p.block_size = 16;
  p.dtype = DType::bf16;
  GenOptions opt;
  opt.seed = seed;
  opt.pool_factor = 1.0; // keep the cache at 2 x 16 MiB
  const auto start = std::chrono::steady_clock::now();
  const Problem pr = make_decode_problem(p, {32768}, opt);
  const ReferenceResult ref = reference_attention(pr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << "seed=" << seed << ": generating and checking a 32k context";
  const Naive nv = naive_attention(pr);
  expect_agrees(ref, nv, "seed=" + std::to_string(seed) + " 32k decode", 1e-11);
  std::printf("32k-token decode (8 heads, 2 kv heads, d=128, bf16): %.2f s\n", seconds);
}

// ---------------------------------------------------------------------------------------------
// KV-cache layouts: the same logical cache in HND, NHD or vllm gives bit-identical results.

TEST(Reference, EveryKvLayoutGivesIdenticalResults) {
  struct Case {
    const char* name;
    Phase phase;
    DType dtype;
    int heads, kv_heads, head_dim, block_size;
    bool causal;
    int window_left, window_right;
    double softcap;
    std::vector<int> q_lens, k_lens; // decode: q_lens unused
  };
  const std::vector<Case> cases = {
      {"decode gqa",
       Phase::decode,
       DType::f16,
       8,
       2,
       64,
       16,
       true,
       -1,
       -1,
       0.0,
       {},
       {1, 15, 16, 17, 200}},
      {"decode mqa window softcap",
       Phase::decode,
       DType::bf16,
       4,
       1,
       128,
       8,
       true,
       31,
       -1,
       20.0,
       {},
       {7, 8, 9, 100}},
      {"decode fp32 noncausal windows",
       Phase::decode,
       DType::f32,
       4,
       4,
       32,
       16,
       false,
       10,
       3,
       0.0,
       {},
       {40, 3}},
      {"prefill gqa causal",
       Phase::prefill,
       DType::f32,
       6,
       2,
       32,
       16,
       true,
       -1,
       -1,
       0.0,
       {5, 17, 1},
       {40, 17, 33}},
      {"prefill sliding chunked",
       Phase::prefill,
       DType::f16,
       4,
       2,
       64,
       8,
       true,
       12,
       -1,
       0.0,
       {16, 3},
       {50, 20}},
      {"prefill noncausal both windows",
       Phase::prefill,
       DType::bf16,
       8,
       4,
       64,
       16,
       false,
       5,
       4,
       0.0,
       {20, 9},
       {20, 4}},
  };
  for (const Case& c : cases) {
    AttnParams p;
    p.num_heads = c.heads;
    p.num_kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.block_size = c.block_size;
    p.dtype = c.dtype;
    p.causal = c.causal;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    p.softcap = c.softcap;
    const auto make = [&](KvLayout l) {
      const GenOptions opt{.seed = 77, .shared_prefix = true, .kv_layout = l};
      return c.phase == Phase::decode ? make_decode_problem(p, c.k_lens, opt)
                                      : make_prefill_problem(p, c.q_lens, c.k_lens, opt);
    };
    const Problem hnd = make(KvLayout::HND);
    const ReferenceResult want = reference_attention(hnd, {.threads = 2, .rows = {}});
    for (KvLayout l : {KvLayout::NHD, KvLayout::vllm}) {
      SCOPED_TRACE(std::string(c.name) + " in " + kv_layout_name(l));
      // Generated in the layout, and rearranged from HND: both read the same logical cache.
      for (const Problem& pr : {make(l), with_kv_layout(hnd, l)}) {
        ASSERT_EQ(pr.kv_layout, l);
        const ReferenceResult got = reference_attention(pr, {.threads = 2, .rows = {}});
        EXPECT_EQ(0, std::memcmp(got.out.data(), want.out.data(), want.out.size() * 8));
        EXPECT_EQ(0, std::memcmp(got.lse.data(), want.lse.data(), want.lse.size() * 8));
      }
    }
    // And the HND result is the naive loops' one: the layouts agree with SPEC.md, not only
    // with each other.
    expect_agrees(want, naive_attention(hnd), c.name, 1e-11);
  }
}

} // namespace
