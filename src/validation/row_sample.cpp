#include "src/validation/row_sample.h"

#include <algorithm>

#include "src/model/rng.h"

namespace attn {

std::vector<int> sample_rows(const Problem& pr, const ValidationOptions& v, uint64_t seed) {
  const int rows = pr.num_rows();
  std::vector<int64_t> work(std::size_t(rows), 0);
  int64_t total = 0;
  for (int b = 0; b < pr.batch; ++b) {
    const int64_t per_row =
        std::max<int64_t>(1, int64_t(pr.k_len(b)) * pr.params.head_dim * pr.params.num_heads);
    for (int i = 0; i < pr.q_len(b); ++i) {
      work[std::size_t(pr.q_start(b) + i)] = per_row;
      total += per_row;
    }
  }
  if (total <= v.max_reference_work || rows <= v.min_rows) {
    return {};
  }
  // The first and the last row always (the ends of the batch, where index slips show), then
  // rows in a seeded random order while the budget lasts.
  std::vector<int> order;
  for (int r = 1; r + 1 < rows; ++r) {
    order.push_back(r);
  }
  Rng rng(seed ^ 0x5eed0f5a3b1e5ull);
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[std::size_t(rng.range(0, int64_t(i) - 1))]);
  }
  order.insert(order.begin(), {0, rows - 1});
  std::vector<int> picked;
  int64_t used = 0;
  for (int r : order) {
    const int64_t wr = work[std::size_t(r)];
    if (int(picked.size()) < v.min_rows || used + wr <= v.max_reference_work) {
      picked.push_back(r);
      used += wr;
    }
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

} // namespace attn
