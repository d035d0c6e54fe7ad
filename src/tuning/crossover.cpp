// The v1/v2 crossover of one shape point: the start of the final run of v2 wins, so a v2 win
// followed by a loss at a longer context does not count.
#include "src/tuning/crossover.h"

namespace attn {

nlohmann::json Crossover::to_json() const {
  if (kind == threshold) {
    return from;
  }
  return kind == always ? "always" : "never";
}

Crossover find_crossover(const std::vector<ContextTiming>& sorted) {
  // Scan from the longest context down: the final run of v2 wins decides the threshold.
  int last_loss = -1;
  int n = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].v1_s == kInf && sorted[i].v2_s == kInf) {
      continue;
    }
    ++n;
    if (!(sorted[i].v2_s < sorted[i].v1_s)) {
      last_loss = int(i);
    }
  }
  Crossover c;
  if (n == 0) {
    c.kind = Crossover::never;
    return c;
  }
  if (last_loss < 0) {
    c.kind = Crossover::always;
    return c;
  }
  // The next measured entry after the last loss, if any.
  for (std::size_t i = std::size_t(last_loss) + 1; i < sorted.size(); ++i) {
    if (sorted[i].v1_s < kInf || sorted[i].v2_s < kInf) {
      c.kind = Crossover::threshold;
      c.from = sorted[i].context_len;
      return c;
    }
  }
  c.kind = Crossover::never;
  return c;
}

} // namespace attn
