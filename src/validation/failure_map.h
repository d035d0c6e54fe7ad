// Where a failed output goes wrong, in the problem's own terms: the sequence of each listed
// mismatch and where its context ends against the blocks and the configuration's partition or
// key tile (a row of context 257 under partition 256 has one key in its last partition), and
// how the wrong (row, head) pairs spread over heads and sequences (heads 1 and 2 wrong, 0 and 3
// right is what a GQA mapping bug looks like).
#pragma once
#include <string>
#include <vector>

#include "src/model/kernel_config.h"
#include "src/model/problem.h"
#include "src/validation/check.h"

namespace attn {

struct FailureMap {
  std::vector<std::string> where; // one per CheckReport::first entry, same order
  std::string spread;             // "wrong rows: heads 1, 2 of 4 (0, 3 right); sequences ..."
};

// The sequence a query row belongs to (decode: the row itself).
[[nodiscard]] int sequence_of_row(const Problem& pr, int row);

// `wrong` is wrong_pairs() of the same output.
[[nodiscard]] FailureMap map_failures(const Problem& pr, const KernelConfig& cfg,
                                      const CheckReport& rep, const std::vector<WrongPair>& wrong);

} // namespace attn
