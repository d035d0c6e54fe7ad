#include "src/backends/cpu/cpu_plan.h"

#include <algorithm>

namespace attn::cpu {

namespace {

namespace am = attn_math;

// Keys per tile in decode: a K (then V) tile of 32 KiB of fp32 stays in L1/L2.
int decode_k_tile(int head_dim) { return std::clamp(8192 / head_dim, 16, 256); }

} // namespace

std::size_t partial_floats(int batch, int num_heads, int head_dim, int max_k_len, int partition) {
  const int max_parts = std::max(1, am::num_partitions(max_k_len, partition));
  return std::size_t(batch) * num_heads * max_parts * (2 + std::size_t(head_dim));
}

CallPlan::CallPlan(Isa isa, const KernelArgs& a, const PlanParams& pp, std::vector<int32_t> q_start,
                   std::vector<int32_t> q_len, std::vector<int32_t> k_len, float* partials,
                   int workers)
    : isa_(isa), a_(a), pp_(pp), q_start_(std::move(q_start)), q_len_(std::move(q_len)),
      k_len_(std::move(k_len)) {
  a_.seq_q_start = q_start_.data();
  a_.seq_q_len = q_len_.data();
  a_.seq_k_len = k_len_.data();
  const int batch = int(k_len_.size());
  const int H = a_.num_heads;
  const int heads_per_item = pp_.split ? a_.group : 1;
  const int item_groups = H / heads_per_item;
  int max_rows = 1;
  if (pp_.family == Family::prefill) {
    k_tile_ = pp_.k_tile;
    int max_q = 0;
    for (int b = 0; b < batch; ++b) {
      max_q = std::max(max_q, int(q_len_[std::size_t(b)]));
      for (int r0 = 0; r0 < q_len_[std::size_t(b)]; r0 += pp_.q_tile) {
        const int r1 = std::min(int(q_len_[std::size_t(b)]), r0 + pp_.q_tile);
        for (int g = 0; g < item_groups; ++g) {
          add_item({b, r0, r1, g * heads_per_item, heads_per_item, -1});
        }
      }
    }
    max_rows = std::max(1, std::min(pp_.q_tile, max_q));
  } else {
    k_tile_ = decode_k_tile(a_.head_dim);
    if (pp_.family == Family::decode_v2) {
      int max_k = 0;
      for (int32_t k : k_len_) {
        max_k = std::max(max_k, int(k));
      }
      a_.partition = pp_.partition;
      a_.max_parts = std::max(1, am::num_partitions(max_k, a_.partition));
      const std::size_t n = std::size_t(batch) * H * a_.max_parts;
      a_.part_m = partials;
      a_.part_l = partials + n;
      a_.part_o = partials + 2 * n;
    }
    for (int b = 0; b < batch; ++b) {
      const int kl = k_len_[std::size_t(b)];
      const int parts =
          pp_.family == Family::decode_v2 && kl > 0 ? am::num_partitions(kl, a_.partition) : 0;
      for (int g = 0; g < item_groups; ++g) {
        if (parts == 0) {
          // v1, or a v2 sequence with no keys: one item writes out and lse directly.
          add_item({b, 0, 1, g * heads_per_item, heads_per_item, -1});
        } else {
          for (int t = 0; t < parts; ++t) {
            add_item({b, 0, 1, g * heads_per_item, heads_per_item, t});
          }
        }
      }
      if (parts > 0) {
        reduce_seqs_.push_back(b);
      }
    }
  }
  // Longest first: with dynamic hand-out this bounds the tail by the shortest items.
  std::vector<std::size_t> order(items_.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return cost_[x] > cost_[y]; });
  std::vector<WorkItem> sorted;
  sorted.reserve(items_.size());
  for (std::size_t i : order) {
    sorted.push_back(items_[i]);
  }
  items_ = std::move(sorted);

  scratch_.resize(std::size_t(std::max(1, workers)));
  for (auto& s : scratch_) {
    size_scratch(s, max_rows, heads_per_item, a_.head_dim, k_tile_);
  }
  reduce_tmp_.resize(scratch_.size() * std::size_t(a_.head_dim));
}

void CallPlan::add_item(const WorkItem& it) {
  const int ql = q_len_[std::size_t(it.b)];
  const int kl = k_len_[std::size_t(it.b)];
  int kb = 0;
  int ke = kl;
  if (it.part >= 0) {
    am::partition_bounds(it.part, a_.partition, kl, &kb, &ke);
  }
  int64_t keys = 0;
  for (int r = it.row_begin; r < it.row_end; ++r) {
    int lo, hi;
    am::visible_range(a_.mask, am::row_position(ql, kl, r), kl, &lo, &hi);
    keys += std::max(0, std::min(hi, ke) - std::max(lo, kb));
  }
  items_.push_back(it);
  cost_.push_back(keys * it.heads + (it.row_end - it.row_begin));
}

void CallPlan::run(ThreadPool& pool) {
  pool.run(int(items_.size()), [&](int task, int worker) {
    attend(isa_, a_, items_[std::size_t(task)], k_tile_, scratch_[std::size_t(worker)]);
  });
  if (!reduce_seqs_.empty()) {
    const int H = a_.num_heads;
    pool.run(int(reduce_seqs_.size()) * H, [&](int task, int worker) {
      combine_partials(isa_, a_, reduce_seqs_[std::size_t(task / H)], task % H,
                       reduce_tmp_.data() + std::size_t(worker) * a_.head_dim);
    });
  }
}

} // namespace attn::cpu
