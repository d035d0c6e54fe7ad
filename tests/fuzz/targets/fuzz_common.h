// What every libFuzzer target here shares: the promise it checks. A reader given any bytes
// either reads them or throws InputError (one line, exit 2). Anything else it throws (an
// std::runtime_error, which the command would report as exit 4, a json::exception, a
// std::bad_alloc) escapes LLVMFuzzerTestOneInput, and libFuzzer reports it as a crash; so do
// the sanitizers' findings, a signal, and an input that takes longer than -timeout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "src/model/errors.h"

namespace attn::fuzz {

// The input as a file, for readers that take a path (results files, traces): one per process,
// rewritten for each input, in $TMPDIR.
inline std::string as_file(const uint8_t* data, std::size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/attn-fuzz-" +
           std::to_string(::getpid()) + suffix;
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::abort(); // the disk, not the reader: stop rather than report a false finding
  }
  return path;
}

// Runs `read`, letting only InputError through as a refusal.
template <class F>
void expect_read_or_refused(F&& read) {
  try {
    read();
  } catch (const InputError&) {
    // a one-line refusal: what a bad input must get
  }
}

} // namespace attn::fuzz
