#include "src/tuning/subject_cache.h"

#include <unistd.h>

namespace attn {

SubjectCache::SubjectCache() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  budget_ = pages > 0 && page > 0 ? int64_t(pages) * page / kMemoryShare : 0;
}

CheckSubject* SubjectCache::find(std::size_t i) {
  for (auto e = entries_.begin(); e != entries_.end(); ++e) {
    if (e->point == i) {
      entries_.splice(entries_.begin(), entries_, e);
      return entries_.front().subject.get();
    }
  }
  return nullptr;
}

void SubjectCache::make_room(int64_t bytes) {
  int64_t total = 0;
  for (const Entry& e : entries_) {
    total += e.subject->bytes();
  }
  while (!entries_.empty() && total + bytes > budget_) {
    total -= entries_.back().subject->bytes();
    entries_.pop_back();
  }
}

CheckSubject& SubjectCache::add(std::size_t i, std::unique_ptr<CheckSubject> s) {
  entries_.push_front({i, std::move(s)});
  int64_t total = entries_.front().subject->bytes();
  for (auto e = std::next(entries_.begin()); e != entries_.end();) {
    const int64_t b = e->subject->bytes();
    if (total + b > budget_) {
      e = entries_.erase(e);
    } else {
      total += b;
      ++e;
    }
  }
  return *entries_.front().subject;
}

} // namespace attn
