// What a fault's reason says when a worker died of SIGSEGV, in the normal and sanitized builds.
#pragma once
#include <string>

namespace attn::test {

// Whether `reason` reports a SIGSEGV. The supervisor names the signal ("killed by SIGSEGV");
// under AddressSanitizer with its default handle_segv=1 the runtime catches the signal, prints
// its report and exits 1 ("exited with status 1"). scripts/test-sanitizers.sh sets
// handle_segv=0, so there the signal arrives as in the normal build.
inline bool says_sigsegv(const std::string& reason) {
#if defined(__SANITIZE_ADDRESS__) || defined(ATTN_SANITIZED_BUILD)
  if (reason.find("exited with status") != std::string::npos) {
    return true;
  }
#endif
  return reason.find("SIGSEGV") != std::string::npos;
}

} // namespace attn::test
