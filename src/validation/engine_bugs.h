// The bugs engines' attention kernels really have, each as a model of what such a kernel computes
// instead of attention: a split-KV partition boundary that drops or repeats a key, a last
// partition left out, a reduction that forgets to rescale the partitions' maxima or combines
// their lse in the wrong base, the GQA head mapping h % num_kv_heads, a last block whose valid
// length is off by one, stale keys or block-table entries past the length, stale slots of the
// last block folded in with a zero weight (NaN there makes the row NaN), a partition the mask
// leaves empty folded in (NaN), rows that see keys computed as rows that see none (zeros), a
// causal limit placed wrong or a bound on the keys read (attention over a prefix of the keys), an
// lse in base 2 or the row's largest score alone; query heads that read another KV head, rows that
// read another sequence's keys, a q.k product without its head_dim tail, the soft cap applied
// before the scale, NaN from some head, row or sequence on, a sliding window's start misplaced.
//
// A model explains a failed output when every wrong (row, head) pair of it equals what the model
// computes there (within the dtype's tolerance), each in double precision from the problem's own
// cache. Rows the kernel got right need not follow the model: many such bugs show only at some
// lengths (a context that is a multiple of the partition), and the failure map names those.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "reference/reference.h"
#include "src/backends/backend.h"
#include "src/model/kernel_config.h"
#include "src/model/problem.h"
#include "src/validation/check.h"

namespace attn {

// The phrases of the models that explain `got` (usually one), most specific first. The split-KV
// models need the configuration's "partition".
// `confirm`, when given, is asked about a pattern's phrase before it answers (a re-run of the
// kernel that tests it: rests_on_nan_tails, rests_on_reads_past_length); one it refuses leaves
// the next pattern to answer.
[[nodiscard]] std::vector<std::string>
explain_engine_bug(const Problem& pr, const KernelConfig& cfg, const RunOutput& got,
                   const ReferenceResult& ref, const Tolerance& tol,
                   const std::vector<WrongPair>& wrong,
                   const std::function<bool(const std::string&)>& confirm = nullptr);

// Whether `cause` is the stale-slots diagnosis (rows NaN where the last block's slots past the
// length hold NaN), which a kernel re-run with those slots finite can confirm: such a kernel is
// right there, while one that reads keys from wrong places stays wrong.
[[nodiscard]] bool rests_on_nan_tails(const std::string& cause);
// Whether `cause` is the reads-past-the-length diagnosis (exactly the sequences with NaN past
// their length come out wrong, not NaN), which holds only if the output depends on those slots.
[[nodiscard]] bool rests_on_reads_past_length(const std::string& cause);

// What one model of engine_bugs.h computes for one query row and head: the kernel believes the
// sequence holds `length(k_len)` keys (its masks follow that length), counts key j `count(j)`
// times, reads kv head `kv_head(h)`, and when `partition` > 0 combines per-partition partial
// results with `combine`. Exposed for the tests, which check each model against the reference
// where the model changes nothing.
// tiles_not_rescaled: an online softmax over key tiles of `partition` keys (from key 0) that
// raises its running maximum but never rescales what earlier tiles added to its sums.
enum class Combine {
  exact,
  maxima_not_rescaled,
  lse_in_base_2,
  lse_read_as_base_2,
  tiles_not_rescaled
};
struct BugModel {
  std::string what;
  int partition = 0;
  Combine combine = Combine::exact;
  int (*length)(int k_len, int block_size, int table_keys, int partition) = nullptr; // null: k_len
  int (*count)(int j, int k_len, int partition) = nullptr;                           // null: 1
  bool gqa_modulo = false; // kv head h % num_kv_heads instead of h / group
  int kv_head = -1;        // >= 0: every query head reads this kv head
  int keys_of = -1;        // >= 0: the keys (block table, length) of this sequence are read
  int table_of = -1; // >= 0: keys read through this sequence's block-table row, at one's own length
  int length_of =
      -1; // >= 0: this sequence's length taken as one's own (keys through one's own row)
  int score_dims = 0;      // > 0: the q.k product stops after this many dimensions
  bool softcap_first = false; // scale * softcap * tanh(q.k / softcap): the cap before the scale
  int slot_mask = 0;          // > 0: key j is read from slot j & (slot_mask - 1) of its block
  int page_shift = 0;   // != 0: page p of the keys is read through block-table entry p + page_shift
  int page_only = -1;   // >= 0: only this page is (page_shift); else every page it can be
  int table_stride = 0; // > 0: the block tables are read as rows of this many entries
  int key_x = 0;        // > 0: a vllm-layout key cache read as packed by this x, not its own
};
// The models that apply to `pr` under `cfg`, in the order they are tried (the split-KV ones need
// the configuration's "partition"; the GQA one a group of more than one head).
[[nodiscard]] std::vector<BugModel> engine_bug_models(const Problem& pr, const KernelConfig& cfg);
// The output of (row, head) under `m`, or empty when the model would read a block-table entry
// that is not there or not a block of the pool. `lse`, when given, receives the lse such a kernel
// writes (its final maximum plus the log of its sum; -inf for a row that sees no key), for the
// combines that keep one maximum (exact, tiles_not_rescaled).
[[nodiscard]] std::vector<double> model_output(const Problem& pr, const BugModel& m, int row,
                                               int head, double* lse = nullptr);

} // namespace attn
