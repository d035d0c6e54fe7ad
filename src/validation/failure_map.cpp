// Failure lines that point at the cause (failure_map.h).
#include "src/validation/failure_map.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace attn {

namespace {

constexpr int kListedSequences = 8;

// How a context of k keys fills units of `unit` keys: "16 full blocks of 16", "17 blocks of 16,
// the last holding 1".
std::string last_unit(const char* name, int k, int unit) {
  const int n = (k + unit - 1) / unit;
  const int in_last = k - (n - 1) * unit;
  std::ostringstream s;
  s << n << (in_last == unit ? " full " : " ") << name << (n == 1 ? "" : "s") << " of " << unit;
  if (in_last != unit) {
    s << (n == 1 ? ", holding " : ", the last holding ") << in_last;
  }
  return s.str();
}

// The context's position against the blocks and the configuration's split of the keys.
std::string context_edges(const Problem& pr, const KernelConfig& cfg, int k) {
  std::ostringstream s;
  if (k == 0) {
    return "no key";
  }
  s << last_unit("block", k, pr.params.block_size);
  if (const int part = cfg.get("partition", 0); part > 0) {
    s << "; " << last_unit("partition", k, part);
  }
  if (const int tile = cfg.get("k_tile", 0); tile > 0) {
    s << "; " << last_unit("key tile", k, tile);
  }
  return s.str();
}

std::string join(const std::vector<int>& v) {
  std::ostringstream s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    s << (i ? ", " : "") << v[i];
  }
  return s.str();
}

// "heads 1 (24 rows), 2 (24 rows) of 4 (0, 3 right)": wrong rows per head.
std::string head_spread(const Problem& pr, const std::vector<WrongPair>& wrong) {
  const int H = pr.params.num_heads;
  std::map<int, int> rows_by_head;
  for (const WrongPair& w : wrong) {
    ++rows_by_head[w.head];
  }
  std::ostringstream s;
  if (int(rows_by_head.size()) == H) {
    s << "every head of " << H;
  } else {
    s << (rows_by_head.size() == 1 ? "head " : "heads ");
  }
  if (int(rows_by_head.size()) < H || rows_by_head.size() <= 8) {
    s << (int(rows_by_head.size()) == H ? ": " : "");
    int listed = 0;
    for (const auto& [h, n] : rows_by_head) {
      if (listed == 8) {
        s << ", ...";
        break;
      }
      s << (listed++ ? ", " : "") << h << " (" << n << (n == 1 ? " row)" : " rows)");
    }
  }
  if (int(rows_by_head.size()) < H) {
    std::vector<int> good;
    for (int h = 0; h < H; ++h) {
      if (!rows_by_head.count(h)) {
        good.push_back(h);
      }
    }
    s << " of " << H;
    if (good.size() <= 8) {
      s << " (" << join(good) << " right)";
    }
  }
  return s.str();
}

// "sequences #6 (ctx 257, 4 heads), ... of 24": wrong (row, head) pairs per sequence.
std::string sequence_spread(const Problem& pr, const std::vector<WrongPair>& wrong) {
  std::map<int, int> pairs_by_seq;
  for (const WrongPair& w : wrong) {
    ++pairs_by_seq[sequence_of_row(pr, w.row)];
  }
  std::ostringstream s;
  s << (pairs_by_seq.size() == 1 ? "sequence " : "sequences ");
  int listed = 0;
  for (const auto& [b, n] : pairs_by_seq) {
    if (listed == kListedSequences) {
      s << ", ...";
      break;
    }
    s << (listed++ ? ", " : "") << "#" << b << " (";
    if (pr.phase == Phase::prefill) {
      s << "q " << pr.q_len(b) << ", ";
    }
    s << "ctx " << pr.k_len(b) << ", " << n
      << (pr.phase == Phase::decode ? (n == 1 ? " head" : " heads")
                                    : (n == 1 ? " row x head" : " rows x heads"))
      << ")";
  }
  s << " of " << pr.batch;
  return s.str();
}

} // namespace

int sequence_of_row(const Problem& pr, int row) {
  if (pr.phase == Phase::decode) {
    return row;
  }
  const auto it = std::upper_bound(pr.cu_seqlens_q.begin(), pr.cu_seqlens_q.end(), row);
  return std::clamp(int(it - pr.cu_seqlens_q.begin()) - 1, 0, std::max(pr.batch - 1, 0));
}

FailureMap map_failures(const Problem& pr, const KernelConfig& cfg, const CheckReport& rep,
                        const std::vector<WrongPair>& wrong) {
  FailureMap m;
  for (const Mismatch& x : rep.first) {
    const int b = sequence_of_row(pr, x.row);
    std::ostringstream s;
    s << "seq " << b;
    if (pr.phase == Phase::prefill) {
      s << " query " << x.row - pr.q_start(b) << " of " << pr.q_len(b);
    }
    s << ", ctx " << pr.k_len(b) << ": " << context_edges(pr, cfg, pr.k_len(b));
    m.where.push_back(s.str());
  }
  if (wrong.empty()) {
    return m; // the error is in the norm alone
  }
  const bool lse_only = std::none_of(wrong.begin(), wrong.end(),
                                     [](const WrongPair& w) { return w.out_wrong; });
  std::ostringstream s;
  s << wrong.size() << " wrong (row, head) pair" << (wrong.size() == 1 ? "" : "s")
    << (lse_only ? " (lse only)" : "") << ": " << head_spread(pr, wrong) << "; "
    << sequence_spread(pr, wrong);
  m.spread = s.str();
  return m;
}

} // namespace attn
