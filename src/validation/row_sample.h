// Which query rows a check compares against the reference: all of them when the reference work
// is affordable, else a seeded sample that always includes the batch's ends.
#pragma once
#include <cstdint>
#include <vector>

#include "src/model/problem.h"

namespace attn {

// How much of the reference a check may compute. Every row is checked when the estimated
// reference work (sum over rows of k_len * head_dim * num_heads) is at most max_reference_work;
// otherwise a seeded sample of rows is checked (docs/profiles.md "Validation").
struct ValidationOptions {
  int64_t max_reference_work = 200'000'000;
  int min_rows = 4;
};

// The rows a check compares (ReferenceOptions::rows; empty = all), by the rule of
// docs/profiles.md "Validation": all rows when the estimated reference work fits
// max_reference_work, else row 0, the last row and seeded random rows up to the cap
// (at least min_rows). Sorted.
[[nodiscard]] std::vector<int> sample_rows(const Problem& pr, const ValidationOptions& v,
                                           uint64_t seed);

} // namespace attn
