// Models of engines' attention bugs and the test of whether one explains a failed output
// (engine_bugs.h).
#include "src/validation/engine_bugs.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "src/validation/failure_map.h"

namespace attn {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr const char* kNanTailCause = "stale slots folded in with a zero weight";
constexpr const char* kPastLengthCause = "slots past the valid length are read";
const double kLn2 = std::log(2.0);

// One partition's running result: max score, sum of weights, weighted sum of values.
struct Part {
  double m = kNegInf;
  double l = 0.0;
  std::vector<double> acc;
};

// What query row `row`, head `head` reads through KV head kvh, in double precision from the
// problem's own caches (fp8 scales applied): score(b, j), the scaled dot product with key j of
// sequence b, soft-capped; value(b, j, d), element d of that key's value. A model may stop the
// product after `dims` dimensions (0: all), apply the soft cap before the scale (`cap_first`) or
// read a vllm-layout key cache as packed by another x (`key_x`). The caches' geometry, the query
// row and the scales are taken once: Problem::key_index and value_index work the geometry out
// for every element, and with the per-element dtype dispatch that was most of a diagnosis's time.
class KvReader {
public:
  KvReader(const Problem& pr, int row, int head, int kvh, int dims = 0, bool cap_first = false,
           int key_x = 0)
      : pr_(pr), kvh_(kvh), cap_first_(cap_first), kg_(pr.kv_geometry()), vg_(kg_),
        ks_(pr.key_scale(kvh)), vs_(pr.value_scale(kvh)) {
    const AttnParams& a = pr.params;
    kg_.x = key_x > 0 ? key_x : kg_.x;
    q_.resize(std::size_t(dims > 0 ? dims : a.head_dim));
    for (std::size_t d = 0; d < q_.size(); ++d) {
      q_[d] = double(pr.query.get((std::size_t(row) * a.num_heads + head) * a.head_dim + d));
    }
  }
  [[nodiscard]] double score(int b, int j) const {
    const AttnParams& a = pr_.params;
    const int64_t blk = pr_.physical_block(b, j);
    const int slot = j % a.block_size;
    double dot = 0.0;
    for (std::size_t d = 0; d < q_.size(); ++d) {
      dot += q_[d] * ks_ * load(pr_.key_cache, kg_.key_index(blk, kvh_, slot, int(d)));
    }
    if (cap_first_ && a.softcap > 0) {
      return a.effective_scale() * a.softcap * std::tanh(dot / a.softcap);
    }
    const double x = a.effective_scale() * dot;
    return a.softcap > 0 ? a.softcap * std::tanh(x / a.softcap) : x;
  }
  [[nodiscard]] double value(int b, int j, int d) const {
    const int64_t blk = pr_.physical_block(b, j);
    return vs_ * load(pr_.value_cache, vg_.value_index(blk, kvh_, j % pr_.params.block_size, d));
  }

private:
  // fp32 caches read directly: through HostTensor::get's dtype switch a planted-bug verify
  // (split_stale_block, quick, fp32) took a quarter more CPU time.
  static float load(const HostTensor& t, int64_t i) {
    return t.dtype == DType::f32 ? static_cast<const float*>(t.raw())[i] : t.get(std::size_t(i));
  }
  const Problem& pr_;
  int kvh_;
  bool cap_first_;
  KvCacheGeometry kg_; // the keys' (x as the model reads them)
  KvCacheGeometry vg_;
  float ks_;
  float vs_;
  std::vector<double> q_;
};

// The key lengths a kernel may believe in.
int one_short(int k, int, int, int) { return std::max(k - 1, 0); }
int one_past(int k, int, int, int) { return k + 1; }
int full_last_block_empty(int k, int bs, int, int) { return k >= bs && k % bs == 0 ? k - bs : k; }
int whole_last_block(int k, int bs, int, int) { return (k + bs - 1) / bs * bs; }
int every_table_entry(int, int, int table_keys, int) { return table_keys; }

// How often a kernel counts key j of a sequence of k keys split into partitions of p keys.
int drop_partition_last(int j, int, int p) { return j % p == p - 1 ? 0 : 1; }
int drop_partition_first(int j, int, int p) { return j > 0 && j % p == 0 ? 0 : 1; }
int twice_partition_first(int j, int, int p) { return j > 0 && j % p == 0 ? 2 : 1; }
int twice_partition_last(int j, int k, int p) { return j % p == p - 1 && j + 1 < k ? 2 : 1; }
int drop_last_partition(int j, int k, int p) { return k > p && j >= (k - 1) / p * p ? 0 : 1; }
int twice_lone_last_key(int j, int k, int p) { return k > p && k % p == 1 && j == k - 1 ? 2 : 1; }
// A full last block (p = block_size) left out while the mask stays where the length puts it.
int full_last_block_hidden(int j, int k, int p) {
  return k >= p && k % p == 0 && j >= k - p ? 0 : 1;
}

std::vector<BugModel> split_models(int p) {
  const std::string P = std::to_string(p);
  return {
      {"split-KV boundary: the last key of each partition (k*" + P + "-1) is dropped", p,
       Combine::exact, nullptr, drop_partition_last},
      {"split-KV boundary: the first key of each later partition (k*" + P + ") is dropped", p,
       Combine::exact, nullptr, drop_partition_first},
      {"split-KV boundary: key k*" + P + " is counted twice (partitions overlap by one key)", p,
       Combine::exact, nullptr, twice_partition_first},
      {"split-KV boundary: key k*" + P + "-1 is counted twice (partitions overlap by one key)", p,
       Combine::exact, nullptr, twice_partition_last},
      {"split-KV: the last partition is dropped (partition " + P + ")", p, Combine::exact, nullptr,
       drop_last_partition},
      {"split-KV: a last partition that holds one key counts it twice (partition " + P + ")", p,
       Combine::exact, nullptr, twice_lone_last_key},
      {"split-KV reduction: the partitions' maxima are not rescaled (partials weighted by their "
       "sums alone)",
       p, Combine::maxima_not_rescaled},
      {"split-KV reduction: the partitions' lse are combined in the wrong log base (natural lse "
       "weighted with exp2)",
       p, Combine::lse_in_base_2},
      {"split-KV reduction: the partitions' lse are combined in the wrong log base (base-2 lse "
       "weighted with exp)",
       p, Combine::lse_read_as_base_2},
  };
}

} // namespace

std::vector<BugModel> engine_bug_models(const Problem& pr, const KernelConfig& cfg) {
  std::vector<BugModel> all;
  const AttnParams& a = pr.params;
  if (a.num_kv_heads > 1 && a.group_size() > 1) {
    BugModel m{"GQA head mapping: query head h reads kv head h % num_kv_heads instead of "
               "h / (num_heads / num_kv_heads)"};
    m.gqa_modulo = true;
    all.push_back(m);
  }
  if (const int p = cfg.get("partition", 0); p > 0) {
    for (BugModel& m : split_models(p)) {
      all.push_back(std::move(m));
    }
  }
  // An online softmax over the configuration's declared key tiles ("k_tile", docs/plugins.md)
  // that forgets the rescale: its sums keep each earlier tile's weights taken against the
  // maximum of its time.
  // A configuration that declares none (a decode kernel's tiles usually go unnamed) is tried with
  // the usual tile sizes: an outside audit's decode module with 64-key tiles went unexplained.
  const std::string tiles = "online softmax: what earlier key tiles added to the output and its "
                            "sum is not rescaled when a later tile raises the row's maximum (key "
                            "tiles of ";
  if (const int t = cfg.get("k_tile", 0); t > 0) {
    all.push_back({tiles + std::to_string(t) + ")", t, Combine::tiles_not_rescaled});
  } else {
    int longest = 0;
    for (int b = 0; b < pr.batch; ++b) {
      longest = std::max(longest, pr.k_len(b));
    }
    for (const int t : {16, 32, 64, 128, 256}) {
      if (t < longest) {
        all.push_back({tiles + std::to_string(t) + "; the configuration declares no k_tile)", t,
                       Combine::tiles_not_rescaled});
      }
    }
  }
  if (a.softcap > 0 && a.effective_scale() != 1.0) {
    BugModel m{"soft cap before the scale: scale * softcap * tanh(q.k / softcap) instead of "
               "softcap * tanh(scale * q.k / softcap)"};
    m.softcap_first = true;
    all.push_back(m);
  }
  // A slot within a block found with a mask made for smaller blocks: key j read from slot
  // j & (m - 1) of its block, where the block holds more than m slots.
  for (int mask : {8, 16, 32}) {
    if (a.block_size > mask && (a.block_size & (a.block_size - 1)) == 0) {
      BugModel m{"block slots: key j is read from slot j & " + std::to_string(mask - 1) +
                 " of its block (a slot mask for blocks of " + std::to_string(mask) +
                 " where a block holds " + std::to_string(a.block_size) + ")"};
      m.slot_mask = mask;
      all.push_back(m);
    }
  }
  // A q.k product vectorised in chunks with no tail loop: the last head_dim % chunk dimensions
  // are left out of the score.
  for (int chunk : {16, 32, 64}) {
    if (const int tail = a.head_dim % chunk; tail != 0 && a.head_dim > chunk) {
      BugModel m{"head_dim tail: the q.k product leaves out the last " + std::to_string(tail) +
                 " dimensions (chunks of " + std::to_string(chunk) + " with no tail loop)"};
      m.score_dims = a.head_dim - tail;
      if (std::none_of(all.begin(), all.end(),
                       [&](const BugModel& o) { return o.score_dims == m.score_dims; })) {
        all.push_back(m);
      }
    }
  }
  // A vllm-layout fp8 key cache read with the x of the query's dtype (8 for 16-bit queries):
  // x = 16 / element size taken from the wrong tensor.
  if (pr.kv_layout == KvLayout::vllm && a.fp8_cache()) {
    const int qx = vllm_x(a.dtype);
    BugModel m{"vllm key layout: the " + std::string(dtype_name(pr.params.cache_dtype())) +
               " key cache is read as packed by x = " + std::to_string(qx) +
               " (16 / the query's element size) where its 1-byte elements pack x = 16"};
    m.key_x = qx;
    all.push_back(m);
  }
  // Block-table indexing: a page read through the entry before its own (the second page only,
  // or every page after the first), or each row found with a stride one entry short.
  if (pr.max_blocks_per_seq > 1) {
    BugModel m{"block table: the second page (keys " + std::to_string(a.block_size) + " to " +
               std::to_string(2 * a.block_size - 1) +
               ") is read through the first entry of the row instead of the second"};
    m.page_shift = -1;
    m.page_only = 1;
    all.push_back(m);
    m.what = "block table: every page after the first is read through the entry before its "
             "own (page p through entry p - 1)";
    m.page_only = -1;
    all.push_back(m);
  }
  // (A page read one entry late, or rows a stride one too long apart, take the last sequence's
  // last page from past its row or past the table: nothing a model can compute.)
  if (pr.batch > 1 && pr.max_blocks_per_seq > 1) {
    BugModel m{"block table: sequence b's row is found at b * " +
               std::to_string(pr.max_blocks_per_seq - 1) + " entries, where the rows hold " +
               std::to_string(pr.max_blocks_per_seq) +
               " (max_blocks_per_seq one short as the row stride)"};
    m.table_stride = pr.max_blocks_per_seq - 1;
    all.push_back(m);
  }
  const std::string full_empty = "last block: a full last block is read as empty (its valid "
                                 "length taken as k_len % block_size)";
  all.push_back({full_empty, 0, Combine::exact, full_last_block_empty});
  // The same with the mask placed by the true length (the block's keys hidden, the query's
  // position unmoved): under a sliding window it hides every key some rows see, where the model
  // above moves the window back (an outside audit's module, named "the mask hides every key").
  if (a.window_left >= 0 || a.window_right >= 0 || (pr.phase == Phase::prefill && a.causal)) {
    all.push_back({full_empty, a.block_size, Combine::exact, nullptr, full_last_block_hidden});
  }
  // Under a causal mask alone (bottom-right aligned), a length one short moves every row's limit
  // one key back: the same output as a causal limit one early, which no model can tell apart.
  all.push_back({a.causal && a.window_left < 0 && a.window_right < 0
                     ? "each row misses its last visible key: the valid length one short, or "
                       "equally the causal limit one key early (a row does not see its own "
                       "position): the same output under a causal mask"
                     : "last block: the valid length is one short (the last key is not read)",
                 0, Combine::exact, one_short});
  all.push_back({"last block: the valid length is one too long (the slot past the length is "
                 "read)",
                 0, Combine::exact, one_past});
  all.push_back({"stale keys: the whole last block is read (its slots past the length count)", 0,
                 Combine::exact, whole_last_block});
  all.push_back({"stale block-table entries: every entry of the row is followed, past the "
                 "length",
                 0, Combine::exact, every_table_entry});
  return all;
}

namespace {

// Where element d of a pair's output lies in `out`.
std::size_t out_index(const Problem& pr, const WrongPair& w, int d) {
  return (std::size_t(w.row) * pr.params.num_heads + w.head) * pr.params.head_dim + d;
}

// Whether the model's output for pair `w` equals the kernel's.
bool model_fits(const Problem& pr, const BugModel& m, const RunOutput& got, const WrongPair& w,
                const Tolerance& tol) {
  const std::vector<double> o = model_output(pr, m, w.row, w.head);
  if (o.empty()) {
    return false;
  }
  for (int d = 0; d < pr.params.head_dim; ++d) {
    if (judge_element(got.out, out_index(pr, w, d), o[std::size_t(d)], tol) != ElementVerdict::ok) {
      return false;
    }
  }
  return true;
}

// Whether the model's output for every wrong pair equals the kernel's.
bool model_explains(const Problem& pr, const BugModel& m, const RunOutput& got,
                    const std::vector<WrongPair>& wrong, const Tolerance& tol) {
  bool any = false;
  for (const WrongPair& w : wrong) {
    if (!w.out_wrong) {
      continue;
    }
    if (!model_fits(pr, m, got, w, tol)) {
      return false;
    }
    any = true;
  }
  return any;
}

// Whether `m` explains an output whose every element is within tolerance while its normwise error
// is not (a bf16 kernel that drops one key per partition, say): over every computed row, each
// element within tolerance of the model's, and the normwise error against the model within the
// bound and under half the error against the reference.
bool model_explains_normwise(const Problem& pr, const BugModel& m, const RunOutput& got,
                             const ReferenceResult& ref, const Tolerance& tol) {
  const int H = pr.params.num_heads;
  const int D = pr.params.head_dim;
  double to_model = 0.0;
  double to_ref = 0.0;
  double size = 0.0;
  for (int r = 0; r < ref.rows; ++r) {
    if (!ref.computed[std::size_t(r)]) {
      continue;
    }
    for (int h = 0; h < H; ++h) {
      const std::vector<double> o = model_output(pr, m, r, h);
      if (o.empty()) {
        return false;
      }
      for (int d = 0; d < D; ++d) {
        const std::size_t i = (std::size_t(r) * H + h) * D + d;
        const double want = o[std::size_t(d)];
        if (judge_element(got.out, i, want, tol, element_size(ref, i)) != ElementVerdict::ok) {
          return false;
        }
        const double g = got.out.get(i);
        to_model += (g - want) * (g - want);
        to_ref += (g - ref.out[i]) * (g - ref.out[i]);
        size += want * want;
      }
    }
  }
  return size > 0 && to_model <= tol.norm_rel * tol.norm_rel * size && to_model < 0.25 * to_ref;
}

// For every wrong pair, the one `choice` in [0, choices) whose model (`model_for`) gives the
// kernel's output, the same for every pair of a `group` (a query head, a sequence); a choice is
// searched once per group and then only checked. Empty when some pair fits none, when a group's
// pairs disagree, or when no output is wrong.
template <class Group, class ModelFor>
std::map<int, int> choice_per_group(const Problem& pr, const RunOutput& got,
                                    const std::vector<WrongPair>& wrong, const Tolerance& tol,
                                    int choices, Group group, ModelFor model_for) {
  std::map<int, int> chosen;
  for (const WrongPair& w : wrong) {
    if (!w.out_wrong) {
      continue;
    }
    const int g = group(w);
    if (const auto it = chosen.find(g); it != chosen.end()) {
      const std::optional<BugModel> m = model_for(w, it->second);
      if (!m || !model_fits(pr, *m, got, w, tol)) {
        return {};
      }
      continue;
    }
    int found = -1;
    for (int c = 0; c < choices && found < 0; ++c) {
      const std::optional<BugModel> m = model_for(w, c);
      if (m && model_fits(pr, *m, got, w, tol)) {
        found = c;
      }
    }
    if (found < 0) {
      return {};
    }
    chosen.emplace(g, found);
  }
  return chosen;
}

// Query heads that read another KV head than h / group, each always the same one: a GQA mapping
// other than h % num_kv_heads (a model of its own), such as a shift where the group is not a
// power of two, or every head reading KV head 0.
std::optional<std::string> kv_head_pattern(const Problem& pr, const RunOutput& got,
                                           const std::vector<WrongPair>& wrong,
                                           const Tolerance& tol) {
  const AttnParams& a = pr.params;
  if (a.num_kv_heads < 2) {
    return std::nullopt;
  }
  const std::map<int, int> reads = choice_per_group(
      pr, got, wrong, tol, a.num_kv_heads, [](const WrongPair& w) { return w.head; },
      [&](const WrongPair& w, int j) -> std::optional<BugModel> {
        if (j == w.head / a.group_size()) {
          return std::nullopt; // its own KV head: the reference
        }
        BugModel m;
        m.kv_head = j;
        return m;
      });
  if (reads.empty()) {
    return std::nullopt;
  }
  const int g = a.group_size();
  const int shift = int(std::floor(std::log2(double(g))));
  const auto every = [&](auto rule) {
    return std::all_of(reads.begin(), reads.end(), [&](const auto& hj) { return rule(hj); });
  };
  // The shift's KV head, kept in range by some kernels.
  const auto shifted = [&](int h) { return std::min(h >> shift, a.num_kv_heads - 1); };
  if ((g & (g - 1)) != 0 && every([&](const auto& hj) {
        return hj.second == hj.first >> shift || hj.second == shifted(hj.first);
      })) {
    return "GQA head mapping: query head h reads KV head h >> floor(log2(group)), a shift where "
           "the group (num_heads / num_kv_heads) is not a power of two";
  }
  if (every([](const auto& hj) { return hj.second == 0; })) {
    return std::string("GQA head mapping: every query head reads KV head 0");
  }
  return std::string("GQA head mapping: query heads read another KV head than "
                     "h / (num_heads / num_kv_heads), each always the same one");
}

// Whether every wrong sequence's choice (other_sequence_pattern) is sequence 0.
bool all_choose_sequence_zero(const std::map<int, int>& choices) {
  return std::all_of(choices.begin(), choices.end(), [](const auto& bc) { return bc.second == 0; });
}

// Sequences read through their own block-table rows as far as another sequence's length (the
// choice per wrong sequence of other_sequence_pattern, empty when none fits): where that length
// is longer than a sequence's own, past its end, through the rest of its row (the generator
// fills unused entries with valid block ids). shifted_end_pattern names sequence 0's length
// where every wrong sequence is longer than it; this names it where some are shorter (an outside
// audit's module was named only when sequence 0 was the batch's shortest).
std::optional<std::string> other_length_pattern(const std::map<int, int>& lengths) {
  if (lengths.empty()) {
    return std::nullopt;
  }
  if (all_choose_sequence_zero(lengths)) {
    return std::string("every wrong sequence is read as far as the first sequence's length, past "
                       "its own end through the rest of its block-table row where it is shorter: "
                       "sequence 0's length used for every sequence");
  }
  return std::string("some sequences are read as far as another sequence's length (through their "
                     "own block-table rows, past their end where that is longer), each always "
                     "the same one: the lengths read from the wrong place");
}

// Sequences whose rows attend over another sequence's keys (its block table and length), each
// always the same one: a batch launched in chunks whose table and length pointers do not move,
// a sequence index that wraps.
std::optional<std::string> other_sequence_pattern(const Problem& pr, const RunOutput& got,
                                                  const std::vector<WrongPair>& wrong,
                                                  const Tolerance& tol) {
  if (pr.batch < 2) {
    return std::nullopt;
  }
  // Per wrong sequence, the other sequence c whose `field` (keys_of, table_of, length_of) set to
  // c gives its output, the same for all its rows.
  const auto other_per_sequence = [&](int BugModel::*field) {
    return choice_per_group(
        pr, got, wrong, tol, pr.batch,
        [&](const WrongPair& w) { return sequence_of_row(pr, w.row); },
        [&](const WrongPair& w, int c) -> std::optional<BugModel> {
          if (c == sequence_of_row(pr, w.row)) {
            return std::nullopt;
          }
          BugModel m;
          m.*field = c;
          return m;
        });
  };
  const std::map<int, int> reads = other_per_sequence(&BugModel::keys_of);
  if (reads.empty()) {
    // The block-table row alone taken from another sequence, each its own length (a row pointer
    // not offset by the sequence: an outside audit's prefill and decode plugins read row 0 for
    // every sequence, and failed unexplained).
    const std::map<int, int> rows = other_per_sequence(&BugModel::table_of);
    if (rows.empty()) {
      return other_length_pattern(other_per_sequence(&BugModel::length_of));
    }
    if (all_choose_sequence_zero(rows)) {
      return std::string("wrong block table: every sequence reads its keys through sequence 0's "
                         "block-table row (at its own length): the row not offset by the "
                         "sequence");
    }
    return std::string("wrong block table: some sequences read their keys through another "
                       "sequence's block-table row (at their own length), each always the same "
                       "one");
  }
  // A work list that skips empty sequences, indexed by its own position: each sequence after an
  // empty one reads the sequence as many places before it as there are empty ones before it.
  const auto empty = [&](int b) { return pr.k_len(b) == 0 || pr.q_len(b) == 0; };
  const bool compacted = std::all_of(reads.begin(), reads.end(), [&](const auto& bc) {
    int skipped = 0;
    for (int e = 0; e < bc.first; ++e) {
      skipped += empty(e) ? 1 : 0;
    }
    // Any sequence without keys gives the same output: the search named the first of them.
    const int c = bc.first - skipped;
    return skipped > 0 && (bc.second == c || (pr.k_len(bc.second) == 0 && pr.k_len(c) == 0));
  });
  if (compacted) {
    return std::string("wrong sequence: each sequence after an empty one attends over the keys of "
                       "an earlier one, one place back per empty sequence before it (a work list "
                       "that leaves empty sequences out, indexed as if it did not)");
  }
  // The usual form: every sequence b from n on, and only those, reads sequence b % n.
  for (int n = 1; n < pr.batch; ++n) {
    if (int(reads.size()) == pr.batch - n &&
        std::all_of(reads.begin(), reads.end(),
                    [&](const auto& bc) { return bc.first >= n && bc.second == bc.first % n; })) {
      return "wrong sequence: sequence b attends over the keys of sequence b % " +
             std::to_string(n) +
             " (its block table and length), as when a batch is launched in "
             "chunks of " +
             std::to_string(n) + " whose pointers do not move";
    }
  }
  return std::string("wrong sequence: some sequences attend over another sequence's keys (its "
                     "block table and length), each always the same one");
}

// Whether there is a wrong output pair and every one satisfies `fits`.
template <class Fits> bool every_wrong_output(const std::vector<WrongPair>& wrong, Fits fits) {
  bool any = false;
  for (const WrongPair& w : wrong) {
    if (!w.out_wrong) {
      continue;
    }
    if (!fits(w)) {
      return false;
    }
    any = true;
  }
  return any;
}

// Whether no output element of the pair is a finite number: NaN or infinite as computed, or the
// poison of one never written.
bool none_finite(const Problem& pr, const RunOutput& got, const WrongPair& w) {
  for (int d = 0; d < pr.params.head_dim; ++d) {
    const std::size_t i = out_index(pr, w, d);
    if (!is_poison(got.out, i) && std::isfinite(got.out.get(i))) {
      return false;
    }
  }
  return true;
}

// Whether every computed row for which `has` holds has a wrong output: a mistake tied to a
// property of the row (its length, its mask) shows in every row that has it, so one such row
// that came out right rules it out (an outside audit's kernel that left the last sequence
// unwritten was named an empty last partition where that sequence's context happened to be a
// multiple of the partition, and another's was not).
bool every_row_with(const Problem& pr, const ReferenceResult& ref,
                    const std::vector<WrongPair>& wrong, const std::function<bool(int row)>& has) {
  std::set<int> rows;
  for (const WrongPair& w : wrong) {
    if (w.out_wrong) {
      rows.insert(w.row);
    }
  }
  for (int r = 0; r < pr.num_rows(); ++r) {
    if (ref.computed[std::size_t(r)] && !rows.count(r) && has(r)) {
      return false;
    }
  }
  return true;
}

// Whether the wrong pairs are every pair of the last sequence (of more than one) and nothing of
// them was written: a loop over the sequences one short (unwritten_pattern). The split-KV patterns
// leave it to that one where the last sequence's length or mask would fit theirs too (an outside
// audit's module saw its skipped last sequence named an empty last partition).
bool last_sequence_unwritten(const Problem& pr, const RunOutput& got,
                             const std::vector<WrongPair>& wrong) {
  if (pr.batch < 2) {
    return false;
  }
  const int last = pr.batch - 1;
  std::size_t pairs = 0;
  const bool all = every_wrong_output(wrong, [&](const WrongPair& w) {
    ++pairs;
    if (sequence_of_row(pr, w.row) != last) {
      return false;
    }
    for (int d = 0; d < pr.params.head_dim; ++d) {
      if (!is_poison(got.out, out_index(pr, w, d))) {
        return false;
      }
    }
    return true;
  });
  return all && pairs == std::size_t(pr.q_len(last)) * std::size_t(pr.params.num_heads);
}

// Rows that come out NaN or unwritten exactly where the context is a multiple of the partition.
std::optional<std::string> empty_partition_pattern(const Problem& pr, const KernelConfig& cfg,
                                                   const RunOutput& got, const ReferenceResult& ref,
                                                   const std::vector<WrongPair>& wrong) {
  const int p = cfg.get("partition", 0);
  const auto multiple = [&](int row) {
    const int k = pr.k_len(sequence_of_row(pr, row));
    return k > 0 && k % p == 0;
  };
  if (p <= 0 ||
      !every_wrong_output(
          wrong, [&](const WrongPair& w) { return multiple(w.row) && none_finite(pr, got, w); }) ||
      !every_row_with(pr, ref, wrong, multiple) || last_sequence_unwritten(pr, got, wrong)) {
    return std::nullopt;
  }
  return "split-KV: rows whose context is a multiple of the partition (" + std::to_string(p) +
         ") come out NaN or unwritten (an empty last partition)";
}

// Whether row `row` has a partition of p keys, up to its length, in which the mask leaves it no
// key (a window that starts past it, a causal limit before it).
bool has_masked_partition(const Problem& pr, int row, int p) {
  const int b = sequence_of_row(pr, row);
  const int ql = pr.q_len(b);
  const int i = row - pr.q_start(b);
  const int k = pr.k_len(b);
  for (int start = 0; start < k; start += p) {
    bool seen = false;
    for (int j = start; j < std::min(start + p, k) && !seen; ++j) {
      seen = reference_visible(pr.params, ql, k, i, j);
    }
    if (!seen) {
      return true;
    }
  }
  return false;
}

// Rows that come out NaN or unwritten exactly where a partition of theirs holds no key the mask
// lets them see: an empty partition's partial (never written, or 0/0) folded into the reduction
// with a zero weight (0 * NaN is NaN), where it should be left out.
std::optional<std::string> masked_partition_pattern(const Problem& pr, const KernelConfig& cfg,
                                                    const RunOutput& got,
                                                    const ReferenceResult& ref,
                                                    const std::vector<WrongPair>& wrong) {
  const int p = cfg.get("partition", 0);
  const auto masked = [&](int row) { return has_masked_partition(pr, row, p); };
  if (p <= 0 ||
      !every_wrong_output(
          wrong, [&](const WrongPair& w) { return none_finite(pr, got, w) && masked(w.row); }) ||
      !every_row_with(pr, ref, wrong, masked) || last_sequence_unwritten(pr, got, wrong)) {
    return std::nullopt;
  }
  return "split-KV: rows with a partition (" + std::to_string(p) +
         ") in which the mask leaves them no key come out NaN or unwritten (that partition's "
         "empty partial folded into the reduction instead of left out)";
}

// Rows that see keys come out exactly as rows that see none: an output of zeros (and an lse of
// -inf where one is written). The kernel reads the cache, but its mask hides every key from them:
// a causal offset or window start computed from the wrong length or tile.
std::optional<std::string> no_key_pattern(const Problem& pr, const RunOutput& got,
                                          const ReferenceResult& ref,
                                          const std::vector<WrongPair>& wrong) {
  const int H = pr.params.num_heads;
  // Whether every wrong row is of a later sequence than an empty sequence 0, whose length (no
  // key) taken for every sequence gives the same zeros.
  bool first_len = pr.batch > 1 && pr.k_len(0) == 0;
  const bool fits = every_wrong_output(wrong, [&](const WrongPair& w) {
    const std::size_t at = std::size_t(w.row) * H + w.head;
    if (!std::isfinite(ref.lse[at]) || (got.lse_written && got.lse[at] != kNegInf)) {
      return false;
    }
    for (int d = 0; d < pr.params.head_dim; ++d) {
      const std::size_t i = out_index(pr, w, d);
      if (is_poison(got.out, i) || got.out.get(i) != 0.0) {
        return false;
      }
    }
    first_len = first_len && sequence_of_row(pr, w.row) > 0;
    return true;
  });
  if (!fits) {
    return std::nullopt;
  }
  return std::string("rows that see keys come out as rows that see none (zeros): the mask hides "
                     "every key from them (a causal offset or window start computed wrong") +
         (first_len ? ", or the first sequence's length (no key) used for every sequence)" : ")");
}

// The last key a row of sequence b sees under the mask (its start is `lo`): -1 with no limit.
struct RowKeys {
  int lo = 0;  // the first key it sees
  int hi = -1; // the last key it sees (lo - 1: none)
  int pos = 0; // its position among the keys (bottom-right aligned)
};
RowKeys row_keys(const Problem& pr, int row) {
  const int b = sequence_of_row(pr, row);
  const int ql = pr.q_len(b);
  const int i = row - pr.q_start(b);
  const int k = pr.k_len(b);
  RowKeys r;
  r.pos = k - ql + i;
  r.lo = k;
  for (int j = 0; j < k; ++j) {
    if (reference_visible(pr.params, ql, k, i, j)) {
      r.lo = std::min(r.lo, j);
      r.hi = j;
    }
  }
  if (r.lo == k) {
    r.lo = 0;
    r.hi = -1;
  }
  return r;
}

// Where the keys a row attends over may be bounded wrongly: at its last key (keys lo..e, for e
// from lo - 1, none, up to the sequence's last) or at its first (keys s..hi, for s from hi + 1,
// none, down to 0). The bound nearest the mask's own such that attention over those keys is the
// kernel's output for the pair; nullopt when none gives it. One online-softmax pass over the
// keys, the output compared after each.
enum class Bound { last, first };
std::optional<int> matching_bound(const Problem& pr, const RunOutput& got, const WrongPair& w,
                                  const Tolerance& tol, Bound which) {
  const AttnParams& a = pr.params;
  const int D = a.head_dim;
  const int b = sequence_of_row(pr, w.row);
  const int k = pr.k_len(b);
  const int kvh = w.head / a.group_size();
  const KvReader rd(pr, w.row, w.head, kvh);
  const RowKeys r = row_keys(pr, w.row);
  const bool up = which == Bound::last;
  const int own = up ? r.hi : r.lo;
  const auto matches = [&](const std::vector<double>& acc, double l) {
    for (int d = 0; d < D; ++d) {
      if (judge_element(got.out, out_index(pr, w, d), l > 0 ? acc[std::size_t(d)] / l : 0.0, tol) !=
          ElementVerdict::ok) {
        return false;
      }
    }
    return true;
  };
  std::vector<double> acc(std::size_t(D), 0.0);
  double m = kNegInf;
  double l = 0.0;
  std::optional<int> best;
  const auto consider = [&](int e) {
    if (matches(acc, l) && (!best || std::abs(e - own) < std::abs(*best - own))) {
      best = e;
    }
  };
  consider(up ? r.lo - 1 : r.hi + 1);
  for (int j = up ? r.lo : r.hi; up ? j < k : j >= 0; j += up ? 1 : -1) {
    const double x = rd.score(b, j);
    if (x > m) {
      const double f = std::exp(m - x);
      l *= f;
      for (double& v : acc) {
        v *= f;
      }
      m = x;
    }
    const double wt = std::exp(x - m);
    l += wt;
    for (int d = 0; d < D; ++d) {
      acc[std::size_t(d)] += wt * rd.value(b, j, d);
    }
    consider(j);
  }
  return best;
}

// Rows whose output is attention over their keys from the mask's first up to another last key
// than the mask's: the causal limit (or window_right) placed wrong, or a bound on the keys read
// (every wrong row stopping at one key). Said as the kind of shift: aligned top-left (row i sees
// keys up to i, the cached prefix left out of its position), one key early or late in every row,
// early, late, or both (an offset computed from the wrong length or tile).
std::optional<std::string> shifted_end_pattern(const Problem& pr, const RunOutput& got,
                                               const std::vector<WrongPair>& wrong,
                                               const Tolerance& tol) {
  if (!pr.params.causal && pr.params.window_right < 0) {
    return std::nullopt; // no upper limit to place wrong
  }
  int lo_shift = std::numeric_limits<int>::max();
  int hi_shift = std::numeric_limits<int>::min();
  std::set<int> ends; // the last keys read, as key indices
  bool top_left = true;
  bool later_row = false; // a wrong row past its sequence's first query row (prefill)
  // Lengths taken from another sequence: every wrong row (none of sequence 0) stops at the last
  // key of sequence 0, or of the sequence before its own.
  bool first_len = pr.batch > 1;
  bool previous_len = pr.batch > 1;
  const bool fits = every_wrong_output(wrong, [&](const WrongPair& w) {
    const std::optional<int> e = matching_bound(pr, got, w, tol, Bound::last);
    if (!e) {
      return false;
    }
    const RowKeys r = row_keys(pr, w.row);
    const int b = sequence_of_row(pr, w.row);
    const int i = w.row - pr.q_start(b);
    lo_shift = std::min(lo_shift, *e - r.hi);
    hi_shift = std::max(hi_shift, *e - r.hi);
    ends.insert(*e);
    // Top-left: row i's limit placed at i (causal) or i + window_right (a non-causal call's right
    // window), not at its position k_len - q_len + i.
    top_left = top_left && pr.k_len(b) > pr.q_len(b) &&
               *e == std::min(r.hi, i + (pr.params.causal ? 0 : pr.params.window_right));
    later_row = later_row || i > 0;
    first_len = first_len && b > 0 && *e == pr.k_len(0) - 1;
    previous_len = previous_len && b > 0 && *e == pr.k_len(b - 1) - 1;
    return true;
  });
  if (!fits) {
    return std::nullopt;
  }
  if (pr.phase == Phase::decode && pr.params.causal && pr.params.window_right < 0 &&
      ends == std::set<int>{0}) {
    // A decode query's causal limit aligned top-left: its one row sees key 0 alone (before the
    // first-length reading, which a first sequence of one key also fits: an outside audit's
    // module was told that).
    return std::string("every wrong row reads key 0 alone: the causal mask aligned top-left (the "
                       "decode query's position taken as 0, not k_len - 1), ") +
           (first_len ? "or the first sequence's length (1 key) used for every sequence, " : "") +
           "or a bound of one key";
  }
  if (first_len) {
    // One wording whatever the length (the summary groups failures by it).
    return std::string("every wrong sequence is read only as far as the first sequence's length: "
                       "sequence 0's length used for every sequence (or a loop bound of as many "
                       "keys)");
  }
  if (previous_len) {
    return std::string("each wrong sequence is read only as far as the length of the sequence "
                       "before it: the lengths read one place off");
  }
  // Top-left needs a row past its sequence's first (in decode, row 0 seeing key 0 only is as
  // well a bound of one key).
  if (top_left && later_row && pr.params.causal && pr.params.window_right < 0) {
    return std::string("the causal mask is aligned top-left: query row i sees keys up to i, not "
                       "up to k_len - q_len + i (the cached keys before the query left out of "
                       "its position)");
  }
  if (top_left && later_row && !pr.params.causal) {
    return std::string("window_right is aligned top-left: query row i sees keys up to i + "
                       "window_right, not up to k_len - q_len + i + window_right (the cached keys "
                       "before the query left out of its position)");
  }
  if (ends.size() == 1 && hi_shift < 0 && *ends.begin() >= 0) {
    // Every wrong row stops at the same key, whatever its length and position: a bound on the
    // keys read, not an offset. The bound is its own diagnosis (a fixed buffer), so it is named.
    return "no key past key " + std::to_string(*ends.begin()) +
           " is read: every wrong row stops there, whatever its length (a buffer or loop bound "
           "of " +
           std::to_string(*ends.begin() + 1) + " keys)";
  }
  // One wording per kind, whatever the counts (the summary groups failures by it). A non-causal
  // call's upper limit is its right window's (an outside audit saw a causal limit named on one).
  const bool causal = pr.params.causal;
  const std::string limit = causal ? "the causal limit" : "window_right's limit";
  const std::string offset = causal ? " (a causal offset computed from the wrong length or tile)"
                                    : " (the right window's offset computed from the wrong length "
                                      "or tile, or not applied)";
  if (lo_shift == -1 && hi_shift == -1) {
    return causal ? std::string("the causal limit is one key early: each row misses the key at "
                                "its own position (< where <= belongs)")
                  : std::string("window_right's limit is one key early: each row misses the key "
                                "window_right past its position (< where <= belongs)");
  }
  if (lo_shift == 1 && hi_shift == 1) {
    return causal ? std::string("the causal limit is one key late: each row also sees the key "
                                "after its own position")
                  : std::string("window_right's limit is one key late: each row also sees the "
                                "key after the last its right window allows");
  }
  if (hi_shift < 0) {
    return limit +
           " is early: rows see their keys only up to some keys before the last one "
           "they should" +
           offset;
  }
  if (lo_shift > 0) {
    return limit + " is late: rows see keys past the last one they should" + offset;
  }
  return limit + " is misplaced, early in some rows and late in others" + offset;
}

// Rows whose output is attention over their window from another first key than the mask's, up
// to the mask's last: the sliding window's start placed wrong (window_left off by one, a start
// block computed with the wrong block size).
std::optional<std::string> shifted_start_pattern(const Problem& pr, const RunOutput& got,
                                                 const std::vector<WrongPair>& wrong,
                                                 const Tolerance& tol) {
  if (pr.params.window_left < 0) {
    return std::nullopt; // no lower limit to place wrong
  }
  int lo_shift = std::numeric_limits<int>::max();
  int hi_shift = std::numeric_limits<int>::min();
  const bool fits = every_wrong_output(wrong, [&](const WrongPair& w) {
    const std::optional<int> s = matching_bound(pr, got, w, tol, Bound::first);
    if (!s) {
      return false;
    }
    const int shift = *s - row_keys(pr, w.row).lo;
    lo_shift = std::min(lo_shift, shift);
    hi_shift = std::max(hi_shift, shift);
    return true;
  });
  if (!fits) {
    return std::nullopt;
  }
  if (lo_shift == 1 && hi_shift == 1) {
    return std::string("the sliding window starts one key late: each wrong row misses the first "
                       "key of its window (window_left off by one, or the block holding that key "
                       "skipped)");
  }
  if (lo_shift == -1 && hi_shift == -1) {
    return std::string("the sliding window starts one key early: each wrong row also sees the key "
                       "before its window (window_left off by one)");
  }
  if (lo_shift > 0) {
    return std::string("the sliding window starts late: rows miss the first keys of their window "
                       "(a window start, or its first block, computed wrong)");
  }
  if (hi_shift < 0) {
    return std::string("the sliding window starts early: rows also see keys before their window "
                       "(a window start computed wrong)");
  }
  return std::string("the sliding window's start is misplaced, late in some rows and early in "
                     "others");
}

// The one key whose weight left out of the pair's softmax gives the kernel's output (nullopt: no
// single key does). One pass for the row's sums, then each key taken out of them in turn.
std::optional<int> dropped_key(const Problem& pr, const RunOutput& got, const WrongPair& w,
                               const Tolerance& tol) {
  const AttnParams& a = pr.params;
  const int D = a.head_dim;
  const int b = sequence_of_row(pr, w.row);
  const int kvh = w.head / a.group_size();
  const RowKeys r = row_keys(pr, w.row);
  if (r.hi < r.lo + 1) {
    return std::nullopt; // one key or none: leaving it out is the no-key pattern's
  }
  const KvReader rd(pr, w.row, w.head, kvh);
  std::vector<double> s(std::size_t(r.hi - r.lo + 1));
  double m = kNegInf;
  for (int j = r.lo; j <= r.hi; ++j) {
    s[std::size_t(j - r.lo)] = rd.score(b, j);
    m = std::max(m, s[std::size_t(j - r.lo)]);
  }
  std::vector<double> acc(std::size_t(D), 0.0);
  double l = 0.0;
  for (int j = r.lo; j <= r.hi; ++j) {
    const double wt = std::exp(s[std::size_t(j - r.lo)] - m);
    l += wt;
    for (int d = 0; d < D; ++d) {
      acc[std::size_t(d)] += wt * rd.value(b, j, d);
    }
  }
  for (int j = r.lo; j <= r.hi; ++j) {
    const double wt = std::exp(s[std::size_t(j - r.lo)] - m);
    if (l - wt <= 0) {
      continue;
    }
    bool fits = true;
    for (int d = 0; d < D && fits; ++d) {
      fits = judge_element(got.out, out_index(pr, w, d),
                           (acc[std::size_t(d)] - wt * rd.value(b, j, d)) / (l - wt),
                           tol) == ElementVerdict::ok;
    }
    if (fits) {
      return j;
    }
  }
  return std::nullopt;
}

// Every wrong row misses the same single key, whatever its length: a key index a kernel skips (a
// partition's last key in one partition only, an off-by-one in one loop). Said with the index,
// and with it as a partition's edge where the configuration splits the keys.
std::optional<std::string> dropped_key_pattern(const Problem& pr, const KernelConfig& cfg,
                                               const RunOutput& got,
                                               const std::vector<WrongPair>& wrong,
                                               const Tolerance& tol) {
  std::set<int> keys;
  if (!every_wrong_output(wrong, [&](const WrongPair& w) {
        const std::optional<int> j = dropped_key(pr, got, w, tol);
        if (j) {
          keys.insert(*j);
        }
        return j.has_value() && keys.size() == 1;
      })) {
    return std::nullopt;
  }
  const int j = *keys.begin();
  std::string where;
  if (const int p = cfg.get("partition", 0); p > 0 && (j + 1) % p == 0) {
    where = " (" + std::to_string((j + 1) / p) + " x " + std::to_string(p) +
            " - 1: the last key of partition " + std::to_string((j + 1) / p) + " alone)";
  } else if (p > 0 && j % p == 0) {
    where = " (" + std::to_string(j / p) + " x " + std::to_string(p) +
            ": the first key of partition " + std::to_string(j / p + 1) + " alone)";
  }
  return "key " + std::to_string(j) + where +
         " is left out: every wrong row misses that one key, whatever its length";
}

// The output's dimensions from some d0 on hold the result's dimensions from 0 (a P.V product
// whose later chunk reads V from offset 0), the ones before d0 right.
std::optional<std::string> value_tail_pattern(const Problem& pr, const RunOutput& got,
                                              const ReferenceResult& ref,
                                              const std::vector<WrongPair>& wrong,
                                              const Tolerance& tol) {
  const int D = pr.params.head_dim;
  std::optional<int> from;
  const bool fits = every_wrong_output(wrong, [&](const WrongPair& w) {
    int d0 = 0;
    while (d0 < D && judge_element(got.out, out_index(pr, w, d0), ref.out[out_index(pr, w, d0)],
                                   tol) == ElementVerdict::ok) {
      ++d0;
    }
    // The first wrong dimension, rounded down to the chunk it opens (a right element may begin
    // a wrong chunk by chance).
    d0 = d0 / 16 * 16;
    if (d0 == 0 || (from && *from != d0)) {
      return false;
    }
    from = d0;
    for (int d = d0; d < D; ++d) {
      if (judge_element(got.out, out_index(pr, w, d), ref.out[out_index(pr, w, d - d0)], tol) !=
          ElementVerdict::ok) {
        return false;
      }
    }
    return true;
  });
  if (!fits) {
    return std::nullopt;
  }
  return "head_dim tail: output dimensions from " + std::to_string(*from) +
         " on hold the result's dimensions from 0 (a P.V product whose later chunk reads V from "
         "offset 0)";
}

// The largest score row `row`, head `head` gives a key it sees (-inf when it sees none): what an
// lse is when the log of the weights' sum is left out.
double row_max_score(const Problem& pr, int row, int head) {
  const AttnParams& a = pr.params;
  const int b = sequence_of_row(pr, row);
  const int ql = pr.q_len(b);
  const int i = row - pr.q_start(b);
  const int k = pr.k_len(b);
  const int kvh = head / a.group_size();
  const KvReader rd(pr, row, head, kvh);
  double top = kNegInf;
  for (int j = 0; j < k; ++j) {
    if (reference_visible(a, ql, k, i, j)) {
      top = std::max(top, rd.score(b, j));
    }
  }
  return top;
}

// Whether sequence b's last block is partly filled and a slot past its length there holds NaN in
// the keys or values of KV head kvh (a nan-tails case).
bool nan_past_length(const Problem& pr, int b, int kvh) {
  const int bs = pr.params.block_size;
  const int k = pr.k_len(b);
  if (k % bs == 0) {
    return false;
  }
  for (int j = k; j < (k + bs - 1) / bs * bs; ++j) {
    for (int d = 0; d < pr.params.head_dim; ++d) {
      if (std::isnan(pr.value_cache.get(std::size_t(pr.value_index(b, kvh, j, d)))) ||
          std::isnan(pr.key_cache.get(std::size_t(pr.key_index(b, kvh, j, d))))) {
        return true;
      }
    }
  }
  return false;
}

// Rows that come out NaN where their sequence's last block is partly filled and its slots past
// the length hold NaN: those slots folded in with a zero weight (0 * NaN is NaN), the bug vLLM's
// paged attention guards against by zeroing them (vllm-project/vllm issue 641).
std::optional<std::string> nan_tail_pattern(const Problem& pr, const RunOutput& got,
                                            const std::vector<WrongPair>& wrong) {
  bool any = false;
  for (const WrongPair& w : wrong) {
    if (!w.out_wrong) {
      continue;
    }
    for (int d = 0; d < pr.params.head_dim; ++d) {
      // NaN computed, not the poison left in an element never written (also a NaN pattern).
      const std::size_t i = out_index(pr, w, d);
      if (is_poison(got.out, i) || !std::isnan(got.out.get(i))) {
        return std::nullopt;
      }
    }
    if (!nan_past_length(pr, sequence_of_row(pr, w.row), w.head / pr.params.group_size())) {
      return std::nullopt;
    }
    any = true;
  }
  if (!any) {
    return std::nullopt;
  }
  return std::string(kNanTailCause) +
         ": rows whose last block is partly filled come out NaN, the NaN its slots past the "
         "length hold (0 * NaN; vLLM zeroes them, vllm-project/vllm issue 641)";
}

// What is wrong with an lse whose output is right.
std::optional<std::string> lse_pattern(const Problem& pr, const KernelConfig& cfg,
                                       const RunOutput& got, const ReferenceResult& ref,
                                       const std::vector<WrongPair>& wrong, const Tolerance& tol,
                                       bool output_off) {
  if (!got.lse_written || wrong.empty()) {
    return std::nullopt;
  }
  const int H = pr.params.num_heads;
  bool log2 = true;
  bool times_ln2 = true;
  bool neg_inf_seen_keys = true; // -inf where the row sees keys
  bool finite_no_key = true;     // finite where the row sees none
  bool max_only = true;          // the row's largest score: log(sum of weights) left out
  for (const WrongPair& w : wrong) {
    if (w.out_wrong) {
      return std::nullopt; // the output's own mistake comes first
    }
    const std::size_t i = std::size_t(w.row) * H + w.head;
    const double g = got.lse[i];
    const double want = ref.lse[i];
    log2 = log2 && std::isfinite(want) && std::abs(g - want / kLn2) <= 2 * tol.lse_atol;
    times_ln2 = times_ln2 && std::isfinite(want) && std::abs(g - want * kLn2) <= 2 * tol.lse_atol;
    neg_inf_seen_keys = neg_inf_seen_keys && std::isfinite(want) && g == kNegInf;
    finite_no_key = finite_no_key && want == kNegInf && std::isfinite(g);
    max_only = max_only && std::isfinite(want) &&
               std::abs(g - row_max_score(pr, w.row, w.head)) <= 2 * tol.lse_atol;
  }
  if (log2) {
    return std::string("lse is written in base 2 (log2) instead of the natural log");
  }
  if (times_ln2) {
    return std::string("lse is the natural log times ln 2 (a base-2 value converted the wrong "
                       "way)");
  }
  if (neg_inf_seen_keys) {
    return std::string("lse is -inf for rows that see keys");
  }
  if (finite_no_key) {
    return std::string("lse is finite for rows that see no key (it should be -inf)");
  }
  if (max_only) {
    return std::string("lse is the row's largest score: the log of the weights' sum is left out "
                       "(lse = m + log l)");
  }
  // The online softmax that does not rescale earlier key tiles (engine_bug_models), where the
  // output stays within tolerance and its sum does not: every wrong lse is the model's.
  for (const BugModel& m : engine_bug_models(pr, cfg)) {
    if (m.combine != Combine::tiles_not_rescaled) {
      continue;
    }
    const bool fits = std::all_of(wrong.begin(), wrong.end(), [&](const WrongPair& w) {
      double model_lse = 0.0;
      const std::vector<double> o = model_output(pr, m, w.row, w.head, &model_lse);
      const double g = got.lse[std::size_t(w.row) * H + w.head];
      return !o.empty() && std::isfinite(model_lse) && std::abs(g - model_lse) <= 2 * tol.lse_atol;
    });
    if (fits) {
      return m.what + (output_off ? " (seen in the lse and the normwise error: every output "
                                    "element is within tolerance)"
                                  : " (seen in the lse: the output is within tolerance)");
    }
  }
  // The output is right and the lse is not, in none of the ways above: said as such, not counted
  // with the wrong outputs nothing explains. An output whose normwise error is over its bound is
  // not right, though no element is out of tolerance: that is said instead.
  if (output_off) {
    return std::string(
        "the lse is wrong in none of the usual ways (base 2, times ln 2, -inf or finite where it "
        "should not be, the largest score alone), and the output is off in its normwise error "
        "though every element is within tolerance");
  }
  return std::string(
      "the lse alone is wrong (the output is right), in none of the usual ways (base "
      "2, times ln 2, -inf or finite where it should not be, the largest score "
      "alone)");
}

// A nan-tails case whose wrong pairs are exactly those of the sequences with NaN past their
// length, with outputs that are not NaN: the kernel reads past the length with a weight (a
// valid length one too long, the whole last block), and makes what it makes of a NaN score.
// (The exact models cannot tell which: their outputs there are NaN.)
std::optional<std::string> past_length_pattern(const Problem& pr, const RunOutput& got,
                                               const std::vector<WrongPair>& wrong) {
  const int H = pr.params.num_heads;
  std::set<std::pair<int, int>> wrong_pairs;
  bool all_nan = true;
  for (const WrongPair& w : wrong) {
    if (!w.out_wrong) {
      continue;
    }
    wrong_pairs.insert({w.row, w.head});
    for (int d = 0; d < pr.params.head_dim && all_nan; ++d) {
      all_nan = std::isnan(got.out.get(out_index(pr, w, d)));
    }
  }
  if (wrong_pairs.empty() || all_nan) {
    return std::nullopt;
  }
  for (int b = 0; b < pr.batch; ++b) {
    for (int r = pr.q_start(b); r < pr.q_start(b) + pr.q_len(b); ++r) {
      for (int h = 0; h < H; ++h) {
        const bool tail = nan_past_length(pr, b, h / pr.params.group_size());
        if (tail != (wrong_pairs.count({r, h}) != 0)) {
          return std::nullopt;
        }
      }
    }
  }
  return std::string(kPastLengthCause) +
         ": exactly the sequences whose partly filled last block holds NaN past the length come "
         "out wrong (a valid length one too long, or the whole last block read)";
}

// The least value `of` takes over the wrong (row, head) pairs `bad`, when they are exactly the
// pairs where `of` reaches it; -1 otherwise (or when it is 0: everything is wrong).
int first_wrong_from(const Problem& pr, const std::set<std::pair<int, int>>& bad,
                     const std::function<int(int row, int head)>& of) {
  int least = std::numeric_limits<int>::max();
  for (const auto& [r, h] : bad) {
    least = std::min(least, of(r, h));
  }
  for (int r = 0; r < pr.num_rows(); ++r) {
    for (int h = 0; h < pr.params.num_heads; ++h) {
      if ((of(r, h) >= least) != (bad.count({r, h}) > 0)) {
        return -1;
      }
    }
  }
  return least > 0 ? least : -1;
}

// Wrong output pairs whose only wrong elements are ones the kernel never wrote (the poison the
// output was filled with is still there): a kernel that skips a head, a row or a tail of
// head_dim. Unwritten elements among written wrong ones are the other mistake's to explain.
std::optional<std::string> unwritten_pattern(const Problem& pr, const RunOutput& got,
                                             const ReferenceResult& ref,
                                             const std::vector<WrongPair>& wrong,
                                             const Tolerance& tol) {
  std::size_t unwritten = 0;
  int pairs = 0;
  std::set<std::pair<int, int>> bad; // (row, head)
  for (const WrongPair& w : wrong) {
    if (!w.out_wrong) {
      continue;
    }
    bad.emplace(w.row, w.head);
    for (int d = 0; d < pr.params.head_dim; ++d) {
      const std::size_t i = out_index(pr, w, d);
      const ElementVerdict v = judge_element(got.out, i, ref.out[i], tol);
      if (v == ElementVerdict::unwritten) {
        ++unwritten;
      } else if (v != ElementVerdict::ok) {
        return std::nullopt;
      }
    }
    ++pairs;
  }
  if (unwritten == 0 || pairs == 0) {
    return std::nullopt;
  }
  if (unwritten == std::size_t(pairs) * std::size_t(pr.params.head_dim) &&
      std::size_t(pairs) == std::size_t(std::count(ref.computed.begin(), ref.computed.end(), 1)) *
                                std::size_t(pr.params.num_heads)) {
    return std::string("output never written: every element still holds the fill the kernel was "
                       "handed (a kernel that writes into another buffer, or returns before "
                       "writing)");
  }
  // Exactly the pairs from some sequence or head on, unwritten whole: a loop or launch grid that
  // stops short. The last sequence alone has one wording whatever the batch (the summary groups
  // failures by it).
  if (unwritten == std::size_t(pairs) * std::size_t(pr.params.head_dim)) {
    const std::string what = " left unwritten, and what the kernel wrote is right: a loop over ";
    if (const int s0 =
            first_wrong_from(pr, bad, [&](int r, int) { return sequence_of_row(pr, r); });
        s0 > 0) {
      return s0 == pr.batch - 1
                 ? "the last sequence's output" + what +
                       "the sequences (or a launch grid) that stops one short"
                 : "the output of sequences from " + std::to_string(s0) + " on" + what +
                       "the sequences (or a launch grid) that covers " + std::to_string(s0);
    }
    if (const int h0 = first_wrong_from(pr, bad, [](int, int h) { return h; }); h0 > 0) {
      return "the output of query heads from " + std::to_string(h0) + " on" + what +
             "the heads (or a launch grid) that covers " + std::to_string(h0);
    }
  }
  // One wording for every count (the summary groups failures by it; `unwritten=` counts them).
  return std::string("output left unwritten: the wrong (row, head) pairs still hold the fill "
                     "the kernel was handed where it wrote nothing, and what it wrote is right");
}

// Rows that see no key (an empty context, or a mask that leaves them none), which SPEC.md makes
// zeros, come out NaN or infinite, and every other row is right: the division by the row's sum
// of weights is not guarded (0 / 0). Unwritten outputs are another mistake.
std::optional<std::string> empty_row_nan_pattern(const Problem& pr, const RunOutput& got,
                                                 const ReferenceResult& ref,
                                                 const std::vector<WrongPair>& wrong) {
  const int H = pr.params.num_heads;
  const bool fits = every_wrong_output(wrong, [&](const WrongPair& w) {
    if (ref.lse[std::size_t(w.row) * H + w.head] != kNegInf) {
      return false;
    }
    for (int d = 0; d < pr.params.head_dim; ++d) {
      const std::size_t i = out_index(pr, w, d);
      if (is_poison(got.out, i) || std::isfinite(got.out.get(i))) {
        return false;
      }
    }
    return true;
  });
  if (!fits) {
    return std::nullopt;
  }
  return std::string("rows that see no key (an empty context, or a mask that leaves them none) "
                     "come out NaN or infinite where they should be zeros: the division by the "
                     "row's sum of weights is not guarded (0 / 0)");
}

// Output that is NaN or infinite where attention is finite, and right elsewhere: a launch grid
// that leaves heads, query rows of a sequence or sequences from some index on to whatever the
// kernel writes there. Said with that index where the wrong pairs are exactly those past it.
std::optional<std::string> nonfinite_pattern(const Problem& pr, const KernelConfig& cfg,
                                             const RunOutput& got,
                                             const std::vector<WrongPair>& wrong) {
  if (!every_wrong_output(wrong, [&](const WrongPair& w) { return none_finite(pr, got, w); })) {
    return std::nullopt;
  }
  std::set<std::pair<int, int>> bad; // (row, head)
  for (const WrongPair& w : wrong) {
    if (w.out_wrong) {
      bad.emplace(w.row, w.head);
    }
  }
  const int H = pr.params.num_heads;
  if (bad.size() == std::size_t(pr.num_rows()) * std::size_t(H)) {
    return std::string("every output comes out NaN or infinite where attention is finite "
                       "(nothing is right)");
  }
  const auto in_sequence = [&](int row) { return row - pr.q_start(sequence_of_row(pr, row)); };
  const auto from = [&](const std::function<int(int row, int head)>& of) {
    return first_wrong_from(pr, bad, of);
  };
  const std::string what = " come out NaN or infinite where attention is finite (a launch grid "
                           "that covers ";
  if (const int h0 = from([](int, int h) { return h; }); h0 > 0) {
    return "query heads from " + std::to_string(h0) + " on" + what + std::to_string(h0) + " heads)";
  }
  if (const int r0 = from([&](int r, int) { return in_sequence(r); }); r0 > 0) {
    return "query rows from " + std::to_string(r0) + " on in a sequence" + what +
           std::to_string(r0) + " rows of a sequence)";
  }
  // Split-KV: exactly the sequences with fewer partitions than the batch's longest (vLLM's
  // grid launches as many for every sequence; each past a sequence's end must be left out, and
  // its 0/0 partial folded in makes the row NaN). An outside audit's plugin that did so was named
  // a launch grid of one sequence, the longest being first.
  if (const int p = cfg.get("partition", 0); p > 0 && pr.batch > 1) {
    const auto parts = [&](int b) { return (pr.k_len(b) + p - 1) / p; };
    int most = 0;
    for (int b = 0; b < pr.batch; ++b) {
      most = std::max(most, parts(b));
    }
    const auto fewer = [&](int r, int) {
      const int b = sequence_of_row(pr, r);
      return pr.k_len(b) > 0 && parts(b) < most ? 1 : 0;
    };
    if (most > 1 && from(fewer) == 1) {
      return std::string("sequences with fewer partitions (") + std::to_string(p) +
             " keys) than the batch's longest come out NaN or infinite: the partitions past a "
             "sequence's end, launched for the longest, are folded in (their empty partial, 0/0) "
             "where they should be left out";
    }
  }
  if (const int s0 = from([&](int r, int) { return sequence_of_row(pr, r); }); s0 > 0) {
    return "sequences from " + std::to_string(s0) + " on" + what + std::to_string(s0) +
           " sequences)";
  }
  return std::string("NaN or infinite output where attention is finite, the rest right (the "
                     "failure map says where)");
}

} // namespace

bool rests_on_nan_tails(const std::string& cause) { return cause.starts_with(kNanTailCause); }

bool rests_on_reads_past_length(const std::string& cause) {
  return cause.starts_with(kPastLengthCause);
}

std::vector<double> model_output(const Problem& pr, const BugModel& m, int row, int head,
                                 double* lse) {
  const AttnParams& a = pr.params;
  const int D = a.head_dim;
  const int bs = a.block_size;
  const int own = sequence_of_row(pr, row);
  const int ql = pr.q_len(own);
  const int i = row - pr.q_start(own);
  const int b = m.keys_of >= 0 ? m.keys_of : own; // whose keys, block table and length
  const int k = pr.k_len(m.length_of >= 0 ? m.length_of : b);
  const int rows_of = m.table_of >= 0 ? m.table_of : b; // whose block-table row
  const int table_keys = pr.max_blocks_per_seq * bs;
  const int n = m.length ? m.length(k, bs, table_keys, m.partition) : k;
  if (n < 0 || n > table_keys) {
    return {};
  }
  const int kvh = m.kv_head >= 0 ? m.kv_head
                  : m.gqa_modulo ? head % a.num_kv_heads
                                 : head / a.group_size();
  const KvReader rd(pr, row, head, kvh, m.score_dims, m.softcap_first, m.key_x);
  const int p = m.partition > 0 ? m.partition : std::max(n, 1);
  // Where key j is read from, as (sequence, position) through that sequence's block-table row:
  // its own slot, the one a slot mask makes of it, the same slot of another page, or the entry a
  // wrong row stride lands on (flat index b * stride + page, in rows of max_blocks_per_seq).
  const auto read_at = [&](int j) -> std::pair<int, int> {
    int page = j / bs;
    int slot = m.slot_mask > 0 ? (j & (m.slot_mask - 1)) : j % bs;
    if (m.page_shift != 0 && (m.page_only >= 0 ? page == m.page_only : page + m.page_shift >= 0)) {
      page += m.page_shift;
    }
    if (m.table_stride > 0) {
      const int64_t flat = int64_t(rows_of) * m.table_stride + page;
      return {int(flat / pr.max_blocks_per_seq), int(flat % pr.max_blocks_per_seq) * bs + slot};
    }
    return {rows_of, page * bs + slot};
  };
  // Every block-table entry the model reads (one per page of its keys) must be a block of the
  // pool.
  for (int j = 0; j < n; j += bs) {
    const auto [rb, rj] = read_at(j);
    if (rb < 0 || rb >= pr.batch || rj < 0 || rj >= table_keys) {
      return {};
    }
    const int32_t e = pr.block_tables[std::size_t(rb) * std::size_t(pr.max_blocks_per_seq) +
                                      std::size_t(rj / bs)];
    if (e < 0 || e >= pr.num_blocks) {
      return {};
    }
  }
  std::vector<Part> parts(static_cast<std::size_t>((std::max(n, 1) + p - 1) / p));
  for (Part& part : parts) {
    part.acc.assign(std::size_t(D), 0.0);
  }
  // Scores first (per partition maxima), then weights: two passes over the partition's keys.
  std::vector<double> s(static_cast<std::size_t>(n), kNegInf);
  for (int j = 0; j < n; ++j) {
    if (!reference_visible(a, ql, n, i, j) || (m.count && m.count(j, k, m.partition) == 0)) {
      continue;
    }
    const auto [rb, rj] = read_at(j);
    const double x = rd.score(rb, rj);
    s[std::size_t(j)] = x;
    Part& part = parts[std::size_t(j / p)];
    part.m = std::max(part.m, x);
  }
  for (int j = 0; j < n; ++j) {
    if (s[std::size_t(j)] == kNegInf) {
      continue;
    }
    Part& part = parts[std::size_t(j / p)];
    const double w = (m.count ? m.count(j, k, m.partition) : 1) * std::exp(s[std::size_t(j)] - part.m);
    const auto [rb, rj] = read_at(j);
    part.l += w;
    for (int d = 0; d < D; ++d) {
      part.acc[std::size_t(d)] += w * rd.value(rb, rj, d);
    }
  }
  // The reduction: each partition's normalised output weighted as the model says.
  double top = kNegInf; // the largest max (exact, rescaled) or lse (the lse models)
  for (const Part& part : parts) {
    if (part.l > 0) {
      top = std::max(top,
                     m.combine == Combine::lse_in_base_2 || m.combine == Combine::lse_read_as_base_2
                         ? part.m + std::log(part.l)
                         : part.m);
    }
  }
  std::vector<double> out(static_cast<std::size_t>(D), 0.0);
  double wsum = 0.0;
  double running = kNegInf; // the largest max of the parts so far, in key order
  for (const Part& part : parts) {
    if (part.l <= 0) {
      continue;
    }
    running = std::max(running, part.m);
    double w = 0.0;
    switch (m.combine) {
    case Combine::tiles_not_rescaled: // each tile's weights taken against the running maximum
      w = part.l * std::exp(part.m - running);
      break;
    case Combine::exact:
      w = part.l * std::exp(part.m - top);
      break;
    case Combine::maxima_not_rescaled:
      w = part.l;
      break;
    case Combine::lse_in_base_2:
      w = std::exp2(part.m + std::log(part.l) - top);
      break;
    case Combine::lse_read_as_base_2:
      w = std::exp((part.m + std::log(part.l) - top) / kLn2);
      break;
    }
    wsum += w;
    for (int d = 0; d < D; ++d) {
      out[std::size_t(d)] += w * part.acc[std::size_t(d)] / part.l;
    }
  }
  if (wsum > 0) {
    for (double& o : out) {
      o /= wsum;
    }
  }
  if (lse != nullptr) {
    *lse = wsum > 0 ? running + std::log(wsum) : kNegInf;
  }
  return out;
}

std::vector<std::string>
explain_engine_bug(const Problem& pr, const KernelConfig& cfg, const RunOutput& got,
                   const ReferenceResult& ref, const Tolerance& tol,
                   const std::vector<WrongPair>& wrong,
                   const std::function<bool(const std::string&)>& confirm) {
  std::vector<std::string> found;
  // Every element within tolerance, the normwise error not: no pair is wrong by its elements, so
  // the models are judged over every computed row by their normwise error.
  const bool any_element_wrong =
      std::any_of(wrong.begin(), wrong.end(), [](const WrongPair& w) { return w.out_wrong; });
  const bool output_off = !any_element_wrong && !check_output(got.out, nullptr, ref, tol).pass;
  if (wrong.empty() && !output_off) {
    return found;
  }
  for (const BugModel& m : engine_bug_models(pr, cfg)) {
    if (output_off ? model_explains_normwise(pr, m, got, ref, tol)
                   : model_explains(pr, m, got, wrong, tol)) {
      found.push_back(output_off ? m.what + " (seen in the normwise error: every element is "
                                            "within tolerance)"
                                 : m.what);
      return found;
    }
  }
  if (output_off) {
    if (auto why = lse_pattern(pr, cfg, got, ref, wrong, tol, true)) {
      found.push_back(*why);
    } else {
      found.push_back("small errors everywhere: every element is within tolerance but the "
                      "normwise error is over its bound, in none of the usual ways (a precision "
                      "loss: a sum or the probabilities kept in a narrower type)");
    }
    return found;
  }
  // The patterns, most specific first; the first that fits (and that `confirm` holds) answers.
  const std::vector<std::function<std::optional<std::string>()>> patterns = {
      [&] { return empty_partition_pattern(pr, cfg, got, ref, wrong); },
      [&] { return masked_partition_pattern(pr, cfg, got, ref, wrong); },
      [&] { return nan_tail_pattern(pr, got, wrong); },
      [&] { return past_length_pattern(pr, got, wrong); },
      [&] { return no_key_pattern(pr, got, ref, wrong); },
      [&] { return shifted_end_pattern(pr, got, wrong, tol); },
      [&] { return shifted_start_pattern(pr, got, wrong, tol); },
      [&] { return dropped_key_pattern(pr, cfg, got, wrong, tol); },
      [&] { return value_tail_pattern(pr, got, ref, wrong, tol); },
      [&] { return kv_head_pattern(pr, got, wrong, tol); },
      [&] { return other_sequence_pattern(pr, got, wrong, tol); },
      [&] { return lse_pattern(pr, cfg, got, ref, wrong, tol, false); },
      [&] { return unwritten_pattern(pr, got, ref, wrong, tol); },
      [&] { return empty_row_nan_pattern(pr, got, ref, wrong); },
      [&] { return nonfinite_pattern(pr, cfg, got, wrong); },
  };
  for (const auto& pattern : patterns) {
    if (auto why = pattern(); why && (!confirm || confirm(*why))) {
      found.push_back(*why);
      break;
    }
  }
  return found;
}

} // namespace attn
