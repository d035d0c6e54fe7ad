// The checked-run subjects (a point's problem and its reference) the adaptive search keeps for
// its return to a point.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>

#include "src/validation/checked_run.h"

namespace attn {

// The subjects of the points measured last, kept for the search's return to one of them: a point
// is due again when a neighbour measured later wins with a configuration it never timed, and
// building its problem again was most of such a visit (drawing its caches, the fresh pages they
// take, its reference: half a second for batch 4 with 4096 tokens and 8 KV heads on a 2-core VM,
// where the run itself took a twentieth of that). The runs never write a subject's problem (each
// reads its own copy), so a kept one is the one a new build would make. The most recent that fit
// in the budget are kept (one bigger than the budget only until the next point's comes).
class SubjectCache {
public:
  // The share of the machine's memory the default budget is.
  static constexpr int kMemoryShare = 8;

  SubjectCache(); // a budget of 1/kMemoryShare of the machine's memory
  explicit SubjectCache(int64_t budget_bytes) : budget_(budget_bytes) {}

  // Point i's kept subject, now the most recent; nullptr when none is kept.
  [[nodiscard]] CheckSubject* find(std::size_t i);

  // Lets the least recent go until `bytes` more fit in the budget beside the rest (all of them
  // where they do not): called before a new subject is built, so that the kept ones and the new
  // one do not take the budget and the new one's memory at once.
  void make_room(int64_t bytes);

  // Keeps s as point i's, and of the others the most recent that fit in the budget beside it.
  CheckSubject& add(std::size_t i, std::unique_ptr<CheckSubject> s);

  [[nodiscard]] std::size_t size() const { return entries_.size(); }

private:
  struct Entry {
    std::size_t point;
    std::unique_ptr<CheckSubject> subject;
  };
  std::list<Entry> entries_; // most recent first
  int64_t budget_ = 0;
};

} // namespace attn
