// attn_math::OnlineSoftmax2 (the base-2 running softmax of the prefill kernel) against the natural
// base OnlineSoftmax: same normalised weights and lse on random score blocks, and empty rows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/attn_math.h"
#include "src/model/rng.h"

using namespace attn_math;

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
