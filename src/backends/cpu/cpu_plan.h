// How one CPU attention call is divided into work items: by sequence, query-row tile, head group
// and (decode_v2) partition, sorted longest first so the pool's dynamic hand-out balances ragged
// batches, plus the split-KV reduce. The CPU backend and the CPU example plugin
// (plugins/cpu_example) both run their calls through it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/backends/cpu/cpu_kernels.h"
#include "src/backends/cpu/isa.h"
#include "src/backends/cpu/thread_pool.h"
#include "src/model/kernel_config.h"

namespace attn::cpu {

// The parameters of the CPU families (cpu_backend.h lists what each means).
struct PlanParams {
  Family family = Family::decode_v1;
  int split = 1;
  int partition = 512; // decode_v2
  int q_tile = 32;     // prefill
  int k_tile = 64;     // prefill; decode picks its own from head_dim
};

// Floats of split-KV partials (m, l and head_dim outputs per partition) a decode_v2 call needs.
[[nodiscard]] std::size_t partial_floats(int batch, int num_heads, int head_dim, int max_k_len,
                                         int partition);

class CallPlan {
public:
  // `a` views the call; for decode_v2, `partials` holds partial_floats(...) floats (the plan
  // points a's part_m, part_l and part_o into it). Per sequence: first query row, query rows
  // and keys. `workers` is the pool size the plan is run with.
  CallPlan(Isa isa, const KernelArgs& a, const PlanParams& pp, std::vector<int32_t> q_start,
           std::vector<int32_t> q_len, std::vector<int32_t> k_len, float* partials, int workers);
  // Runs every item on the pool (then the reduce for decode_v2); the pool has `workers` threads.
  void run(ThreadPool& pool);
  [[nodiscard]] const KernelArgs& args() const { return a_; }

private:
  void add_item(const WorkItem& it);

  Isa isa_;
  KernelArgs a_;
  PlanParams pp_;
  int k_tile_ = 64;
  std::vector<int32_t> q_start_, q_len_, k_len_;
  std::vector<WorkItem> items_;
  std::vector<int64_t> cost_;
  std::vector<int> reduce_seqs_;
  std::vector<Scratch> scratch_;
  std::vector<float> reduce_tmp_;
};

} // namespace attn::cpu
