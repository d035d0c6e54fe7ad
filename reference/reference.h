// The oracle: attention over a paged KV cache in double precision, exactly as SPEC.md defines
// it, plus the split-KV partial/combine algebra. Small on purpose; nothing here is tuned.
#pragma once
#include <Eigen/Dense>
#include <limits>
#include <vector>

#include "src/model/problem.h"

namespace attn {

struct ReferenceOptions {
  int threads = 0;       // 0: all hardware threads
  std::vector<int> rows; // query rows to compute (global row index); empty: all
};

struct ReferenceResult {
  int rows = 0;
  int heads = 0;
  int head_dim = 0;
  std::vector<double> out;       // [rows, heads, head_dim]; NaN where not computed
  std::vector<double> lse;       // [rows, heads]; natural log, -inf for rows with no visible key
  std::vector<uint8_t> computed; // [rows]: 1 where this row was computed
  // [rows, heads, head_dim]: sum_j softmax(s)_j * |v_j[d]| over the visible keys, the size of the
  // values an output element averages (0 for a row with no visible key; NaN where not computed).
  // A correct kernel's rounding error in an element grows with it, not with |out|, which
  // cancellation can make far smaller (check.h, Tolerance). Empty: every size taken as 1.
  std::vector<double> out_size;
};

// Throws InputError when the problem does not validate or a requested row is out of range.
[[nodiscard]] ReferenceResult reference_attention(const Problem& pr,
                                                  const ReferenceOptions& opt = {});

// About the most memory reference_attention(pr, {threads}) holds at once, in bytes: each of its
// concurrent (sequence, KV head) tasks gathers that sequence's K, V and |V| as doubles (24 bytes
// per key and dimension; the longest sequences counted), and the result keeps out, out_size and
// lse for every row. What `replay` weighs against the memory it has before it starts.
[[nodiscard]] int64_t reference_peak_bytes(const Problem& pr, int threads);

// Whether key j is visible to query row i of a sequence with q_len rows and k_len keys.
[[nodiscard]] bool reference_visible(const AttnParams& p, int q_len, int k_len, int i, int j);

// Split-KV algebra (SPEC.md "Split-KV partials"). scores holds every key's final score (after
// scale and softcap), -inf where masked; v holds the values, one row per key.
struct Partial {
  double m = -std::numeric_limits<double>::infinity(); // max score in the partition
  double l = 0.0;                                      // sum of exp(s - m)
  Eigen::VectorXd o;                                   // normalised partial output
};
[[nodiscard]] Partial reference_partial(const Eigen::VectorXd& scores, const Eigen::MatrixXd& v,
                                        int begin, int end);
struct Combined {
  Eigen::VectorXd out;
  double lse = -std::numeric_limits<double>::infinity();
};
[[nodiscard]] Combined reference_combine(const std::vector<Partial>& parts, int head_dim);

} // namespace attn
