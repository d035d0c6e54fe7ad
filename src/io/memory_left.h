// How much more memory this process can take: what Linux says is available (MemAvailable in
// /proc/meminfo), less where an address-space limit (ulimit -v, RLIMIT_AS) comes first. For
// refusing work that would end in std::bad_alloc part way with one line that says so instead.
#pragma once
#include <cstdint>
#include <optional>

namespace attn {

// nullopt where neither is known (no /proc, no limit).
[[nodiscard]] std::optional<int64_t> memory_left_bytes();

} // namespace attn
