// Tests of kernels/attn_math.h, the math every kernel (CPU and CUDA) shares: hand-checked mask
// edges, the visible range against a brute-force predicate, the paged K/V address, partition
// bounds, the online softmax against a two-pass softmax (and its base-2 form against the natural
// base), and the combine of partials against the unsplit result.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attn_math.h"
#include "reference/reference.h"
#include "src/model/rng.h"

using namespace attn_math;

namespace {
constexpr Mask kCausal{1, -1, -1};
constexpr Mask kFull{0, -1, -1};
} // namespace

TEST(AttnMath, RowPositionIsBottomRightAligned) {
  EXPECT_EQ(row_position(/*q_len=*/3, /*k_len=*/10, /*i=*/0), 7);
  EXPECT_EQ(row_position(3, 10, 2), 9);
  EXPECT_EQ(row_position(1, 1, 0), 0);
  EXPECT_EQ(row_position(5, 2, 0), -3); // q_len > k_len: the first rows see nothing under causal
}

TEST(AttnMath, KeyVisibleHandChecked) {
  EXPECT_TRUE(key_visible(kCausal, /*pos=*/5, /*j=*/5));
  EXPECT_FALSE(key_visible(kCausal, 5, 6));
  EXPECT_TRUE(key_visible(kCausal, 5, 0));
  EXPECT_TRUE(key_visible(kFull, 5, 100));
  // Causal with window_left = 2 is a sliding window of 3 keys: 3, 4, 5.
  const Mask sliding{1, 2, -1};
  EXPECT_FALSE(key_visible(sliding, 5, 2));
  EXPECT_TRUE(key_visible(sliding, 5, 3));
  EXPECT_TRUE(key_visible(sliding, 5, 5));
  EXPECT_FALSE(key_visible(sliding, 5, 6));
  // Non-causal with window_right = 1 sees one key ahead.
  const Mask ahead{0, -1, 1};
  EXPECT_TRUE(key_visible(ahead, 5, 6));
  EXPECT_FALSE(key_visible(ahead, 5, 7));
  EXPECT_TRUE(key_visible(ahead, 5, 0));
  // window_left = 0 with causal: only the key at the row's own position.
  const Mask self{1, 0, -1};
  EXPECT_TRUE(key_visible(self, 4, 4));
  EXPECT_FALSE(key_visible(self, 4, 3));
  // Negative positions under causal see nothing.
  EXPECT_FALSE(key_visible(kCausal, -1, 0));
}

TEST(AttnMath, VisibleRangeMatchesBruteForce) {
  for (int causal : {0, 1}) {
    for (int wl : {-1, 0, 1, 3, 10}) {
      for (int wr : {-1, 0, 2, 7}) {
        const Mask m{causal, wl, wr};
        for (int k_len = 0; k_len <= 20; ++k_len) {
          for (int pos = -6; pos <= 26; ++pos) {
            int lo, hi;
            visible_range(m, pos, k_len, &lo, &hi);
            for (int j = 0; j < k_len; ++j) {
              const bool in_range = j >= lo && j < hi;
              ASSERT_EQ(in_range, key_visible(m, pos, j))
                  << "causal=" << causal << " wl=" << wl << " wr=" << wr << " k_len=" << k_len
                  << " pos=" << pos << " j=" << j;
            }
            // The range never leaves [0, k_len) when it is non-empty.
            if (lo < hi) {
              EXPECT_GE(lo, 0);
              EXPECT_LE(hi, k_len);
            }
          }
        }
      }
    }
  }
}

TEST(AttnMath, VisibleRangeRowsCoversEveryRowAndIsTight) {
  for (int causal : {0, 1}) {
    for (int wl : {-1, 0, 4}) {
      for (int wr : {-1, 0, 3}) {
        const Mask m{causal, wl, wr};
        for (int q_len = 1; q_len <= 9; ++q_len) {
          for (int k_len = 0; k_len <= 12; ++k_len) {
            for (int r0 = 0; r0 < q_len; ++r0) {
              for (int r1 = r0 + 1; r1 <= q_len; ++r1) {
                int lo, hi;
                visible_range_rows(m, q_len, k_len, r0, r1, &lo, &hi);
                bool any = false;
                int min_j = 1 << 30, max_j = -1;
                for (int i = r0; i < r1; ++i) {
                  for (int j = 0; j < k_len; ++j) {
                    if (key_visible(m, row_position(q_len, k_len, i), j)) {
                      ASSERT_TRUE(j >= lo && j < hi) << "row " << i << " key " << j;
                      any = true;
                      min_j = std::min(min_j, j);
                      max_j = std::max(max_j, j);
                    }
                  }
                }
                if (any) { // tight at the top: no tile past the last visible key
                  EXPECT_EQ(hi, max_j + 1);
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(AttnMath, PagedKvOffsetFollowsTheCacheLayout) {
  // [num_blocks, num_kv_heads, block_size, head_dim]: position j is slot j % bs of page
  // table[j / bs]; the offset is that of (page, kvh, slot, dim 0).
  const int table[] = {5, 0, 2, 7};
  struct Case {
    int block_size, num_kv_heads, kvh, head_dim, j;
  };
  for (const Case c : {Case{16, 4, 0, 64, 0}, Case{16, 4, 3, 64, 15}, Case{16, 4, 1, 128, 16},
                       Case{8, 2, 1, 80, 31}, Case{1, 1, 0, 8, 2}, Case{24, 8, 7, 256, 70}}) {
    const long long page = table[c.j / c.block_size];
    const long long want =
        ((page * c.num_kv_heads + c.kvh) * c.block_size + c.j % c.block_size) * c.head_dim;
    EXPECT_EQ(paged_kv_offset(table, c.block_size, c.num_kv_heads, c.kvh, c.head_dim, c.j), want)
        << "bs " << c.block_size << " kvh " << c.kvh << " j " << c.j;
  }
  // By hand: page 2, kv head 1 of 2, slot 3 of 8, head_dim 64: ((2 * 2 + 1) * 8 + 3) * 64.
  EXPECT_EQ(paged_kv_offset(table, 8, 2, 1, 64, 19), 2752);
  // Past 2^31 elements: page 2^20 of 8 heads x 16 slots x 256 dims.
  const int far[] = {1 << 20};
  EXPECT_EQ(paged_kv_offset(far, 16, 8, 7, 256, 9), ((1048576LL * 8 + 7) * 16 + 9) * 256);
  EXPECT_GT(paged_kv_offset(far, 16, 8, 7, 256, 9), (1LL << 31));
}

TEST(AttnMath, Softcap) {
  EXPECT_EQ(apply_softcap(3.5f, 0.0f), 3.5f);
  EXPECT_NEAR(apply_softcap(1.0f, 30.0f), 30.0 * std::tanh(1.0 / 30.0), 1e-6);
  EXPECT_NEAR(apply_softcap(-1e4f, 50.0f), -50.0f, 1e-4);
  EXPECT_LT(apply_softcap(1e6f, 20.0f), 20.0001f);
}

TEST(AttnMath, PartitionBounds) {
  EXPECT_EQ(num_partitions(0, 512), 0);
  EXPECT_EQ(num_partitions(1, 512), 1);
  EXPECT_EQ(num_partitions(512, 512), 1);
  EXPECT_EQ(num_partitions(513, 512), 2);
  int b, e;
  partition_bounds(1, 512, 700, &b, &e);
  EXPECT_EQ(b, 512);
  EXPECT_EQ(e, 700);
  partition_bounds(0, 16, 5, &b, &e);
  EXPECT_EQ(b, 0);
  EXPECT_EQ(e, 5);
  // Partitions tile [0, k_len) exactly, without gaps or overlaps.
  for (int p : {1, 8, 16, 48}) {
    for (int k = 1; k < 200; ++k) {
      int next = 0;
      for (int t = 0; t < num_partitions(k, p); ++t) {
        partition_bounds(t, p, k, &b, &e);
        ASSERT_EQ(b, next);
        ASSERT_GT(e, b);
        next = e;
      }
      ASSERT_EQ(next, k);
    }
  }
}

TEST(AttnMath, EmptySoftmaxState) {
  OnlineSoftmax s = OnlineSoftmax::empty();
  EXPECT_TRUE(std::isinf(s.lse()) && s.lse() < 0);
  EXPECT_EQ(s.inv_sum(), 0.0f);
  EXPECT_EQ(s.weight(neg_inf()), 0.0f);
  // The first block has no accumulators to rescale: factor 0, so NaN-free even from -inf.
  EXPECT_EQ(s.update(2.0f), 0.0f);
  EXPECT_EQ(s.m, 2.0f);
  // A block whose maximum does not beat the running one leaves the state alone.
  EXPECT_EQ(s.update(1.0f), 1.0f);
  EXPECT_EQ(s.m, 2.0f);
}

// Feeds random scores in random-size blocks through the online update and compares max, sum,
// output and lse with a two-pass softmax in double.
TEST(AttnMath, OnlineSoftmaxMatchesTwoPass) {
  attn::Rng rng(20261129);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = int(rng.range(1, 300));
    const int dim = 8;
    std::vector<float> s(static_cast<std::size_t>(n));
    std::vector<float> v(static_cast<std::size_t>(n * dim));
    const double spread = trial % 3 == 0 ? 30.0 : 3.0; // large spreads stress the rescaling
    for (auto& x : s) {
      x = float(rng.normal() * spread);
    }
    for (auto& x : v) {
      x = float(rng.normal());
    }
    OnlineSoftmax st = OnlineSoftmax::empty();
    std::vector<float> acc(dim, 0.0f);
    for (int j0 = 0; j0 < n;) {
      const int j1 = std::min(n, j0 + int(rng.range(1, 40)));
      float mx = neg_inf();
      for (int j = j0; j < j1; ++j) {
        mx = std::max(mx, s[std::size_t(j)]);
      }
      const float alpha = st.update(mx);
      for (auto& a : acc) {
        a *= alpha;
      }
      for (int j = j0; j < j1; ++j) {
        const float w = st.weight(s[std::size_t(j)]);
        st.add(w);
        for (int d = 0; d < dim; ++d) {
          acc[std::size_t(d)] += w * v[std::size_t(j * dim + d)];
        }
      }
      j0 = j1;
    }
    double m = -1e300;
    for (float x : s) {
      m = std::max(m, double(x));
    }
    double l = 0;
    std::vector<double> o(dim, 0.0);
    for (int j = 0; j < n; ++j) {
      const double w = std::exp(double(s[std::size_t(j)]) - m);
      l += w;
      for (int d = 0; d < dim; ++d) {
        o[std::size_t(d)] += w * v[std::size_t(j * dim + d)];
      }
    }
    EXPECT_EQ(double(st.m), m) << "trial " << trial;
    EXPECT_NEAR(st.l, l, 1e-5 * l) << "trial " << trial;
    EXPECT_NEAR(st.lse(), m + std::log(l), 1e-5 * std::max(1.0, std::abs(m))) << "trial " << trial;
    for (int d = 0; d < dim; ++d) {
      EXPECT_NEAR(acc[std::size_t(d)] * st.inv_sum(), o[std::size_t(d)] / l, 2e-5)
          << "trial " << trial << " dim " << d;
    }
  }
}

// Splits a score row into partitions (some fully masked), builds each partial with the online
// update and combines them with the helpers; the result must equal the unsplit softmax and the
// reference's split-KV algebra.
TEST(AttnMath, CombineOfPartialsMatchesUnsplit) {
  attn::Rng rng(77);
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (int trial = 0; trial < 200; ++trial) {
    const int n = int(rng.range(1, 400));
    const int p = int(rng.range(1, 4)) * 16;
    const int dim = 8;
    Eigen::VectorXd scores(n);
    Eigen::MatrixXd v(n, dim);
    // A visible window [vis_lo, vis_hi): partitions outside it are empty.
    const int vis_lo = int(rng.range(0, n - 1));
    const int vis_hi = int(rng.range(vis_lo + 1, n));
    for (int j = 0; j < n; ++j) {
      scores(j) = (j >= vis_lo && j < vis_hi) ? double(float(rng.normal() * 4)) : -INFINITY;
      for (int d = 0; d < dim; ++d) {
        v(j, d) = double(float(rng.normal()));
      }
    }
    const int np = num_partitions(n, p);
    std::vector<float> pm(np), pl(np), po(std::size_t(np) * dim);
    std::vector<attn::Partial> ref_parts;
    for (int t = 0; t < np; ++t) {
      int b, e;
      partition_bounds(t, p, n, &b, &e);
      ref_parts.push_back(attn::reference_partial(scores, v, b, e));
      OnlineSoftmax st = OnlineSoftmax::empty();
      float mx = neg_inf();
      for (int j = b; j < e; ++j) {
        mx = std::max(mx, float(scores(j)));
      }
      st.update(mx);
      std::vector<float> acc(dim, 0.0f);
      for (int j = b; j < e; ++j) {
        const float w = st.weight(float(scores(j)));
        st.add(w);
        for (int d = 0; d < dim; ++d) {
          acc[std::size_t(d)] += w * float(v(j, d));
        }
      }
      pm[std::size_t(t)] = st.m;
      pl[std::size_t(t)] = st.l;
      for (int d = 0; d < dim; ++d) {
        // An empty partition's output is garbage on purpose: combine must not read it.
        po[std::size_t(t * dim + d)] = st.l > 0 ? acc[std::size_t(d)] * st.inv_sum() : kNaN;
      }
      if (st.l == 0.0f) {
        EXPECT_TRUE(e <= vis_lo || b >= vis_hi) << "trial " << trial << " partition " << t;
      }
    }
    float m = neg_inf();
    for (int t = 0; t < np; ++t) {
      m = combine_max(m, pm[std::size_t(t)], pl[std::size_t(t)]);
    }
    float wsum = 0.0f;
    std::vector<float> out(dim, 0.0f);
    for (int t = 0; t < np; ++t) {
      const float w = combine_weight(pm[std::size_t(t)], pl[std::size_t(t)], m);
      if (w > 0.0f) {
        wsum += w;
        for (int d = 0; d < dim; ++d) {
          out[std::size_t(d)] += w * po[std::size_t(t * dim + d)];
        }
      }
    }
    const attn::Combined want = attn::reference_combine(ref_parts, dim);
    // The unsplit softmax over the whole row.
    const attn::Partial whole = attn::reference_partial(scores, v, 0, n);
    EXPECT_NEAR(want.lse, whole.m + std::log(whole.l), 1e-9);
    EXPECT_NEAR(combine_lse(m, wsum), want.lse, 1e-5 * std::max(1.0, std::abs(want.lse)))
        << "trial " << trial;
    for (int d = 0; d < dim; ++d) {
      EXPECT_NEAR(out[std::size_t(d)] / wsum, whole.o(d), 2e-5)
          << "trial " << trial << " dim " << d;
    }
  }
}

TEST(AttnMath, CombineOfOnlyEmptyPartitions) {
  const float ms[3] = {neg_inf(), neg_inf(), neg_inf()};
  const float ls[3] = {0.0f, 0.0f, 0.0f};
  float m = neg_inf();
  float wsum = 0.0f;
  for (int t = 0; t < 3; ++t) {
    m = combine_max(m, ms[t], ls[t]);
  }
  for (int t = 0; t < 3; ++t) {
    wsum += combine_weight(ms[t], ls[t], m);
  }
  EXPECT_EQ(wsum, 0.0f);
  EXPECT_TRUE(std::isinf(combine_lse(m, wsum)) && combine_lse(m, wsum) < 0);
  // A stale maximum of an empty partition must not win the global max.
  EXPECT_EQ(combine_max(1.0f, 5.0f, 0.0f), 1.0f);
}

TEST(AttnMath, HugeWindowsAndNegativePositionsDoNotOverflow) {
  // Engines pass INT_MAX-like windows for "unbounded"; rows with q_len > k_len have pos < 0.
  constexpr int kBig = std::numeric_limits<int>::max();
  for (const Mask m :
       {Mask{1, kBig, -1}, Mask{0, kBig, kBig}, Mask{0, -1, kBig}, Mask{1, kBig, kBig}}) {
    for (int pos : {-7, -1, 0, 3, 99}) {
      const int k_len = 100;
      int lo = 0;
      int hi = 0;
      visible_range(m, pos, k_len, &lo, &hi);
      int want_lo = k_len;
      int want_hi = 0;
      for (int j = 0; j < k_len; ++j) {
        if (key_visible(m, pos, j)) {
          want_lo = std::min(want_lo, j);
          want_hi = j + 1;
        }
      }
      if (want_hi == 0) {
        EXPECT_GE(lo, hi) << "pos " << pos << " causal " << m.causal;
      } else {
        EXPECT_EQ(lo, want_lo) << "pos " << pos << " causal " << m.causal;
        EXPECT_EQ(hi, want_hi) << "pos " << pos << " causal " << m.causal;
      }
      EXPECT_GE(lo, 0);
      EXPECT_LE(hi, k_len);
      // Unbounded windows behave like no window at all.
      const bool all_visible_noncausal = !m.causal && want_lo == 0 && want_hi == k_len;
      if (!m.causal) {
        EXPECT_TRUE(all_visible_noncausal) << "pos " << pos;
      }
    }
  }
}

// OnlineSoftmax2 (the base-2 running softmax of the prefill kernel) against the natural base
// OnlineSoftmax: same normalised weights and lse on random score blocks, and empty rows.
TEST(AttnMathLog2, MatchesTheNaturalBaseState) {
  attn::Rng rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    OnlineSoftmax e = OnlineSoftmax::empty();
    OnlineSoftmax2 b = OnlineSoftmax2::empty();
    double acc_e = 0.0;
    double acc_b = 0.0;
    for (int block = 0; block < 6; ++block) {
      std::vector<float> s(7);
      float mx = neg_inf();
      for (auto& x : s) {
        x = (block + trial) % 5 == 3 ? neg_inf() : float(rng.normal() * 4.0);
        mx = std::fmax(mx, x);
      }
      const float ae = e.update(mx);
      const float ab = b.update(mx == neg_inf() ? mx : mx * kLog2e);
      acc_e *= ae;
      acc_b *= ab;
      for (std::size_t j = 0; j < s.size(); ++j) {
        const float we = e.weight(s[j]);
        const float wb = b.weight(s[j] == neg_inf() ? s[j] : s[j] * kLog2e);
        e.add(we);
        b.add(wb);
        acc_e += we * double(j);
        acc_b += wb * double(j);
      }
    }
    if (e.l == 0.0f) {
      EXPECT_EQ(b.l, 0.0f);
      EXPECT_EQ(b.lse(), neg_inf());
      EXPECT_EQ(b.inv_sum(), 0.0f);
      continue;
    }
    EXPECT_NEAR(b.lse(), e.lse(), 1e-5 * std::fabs(e.lse()) + 1e-5);
    EXPECT_NEAR(acc_b * b.inv_sum(), acc_e * e.inv_sum(), 1e-4);
  }
}
