// libFuzzer target: a traffic trace (docs/traffic.md) as sweep --traffic reads it.
#include "src/tuning/length_mix.h"
#include "tests/fuzz/targets/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = attn::fuzz::as_file(data, size, ".trace.jsonl");
  attn::fuzz::expect_read_or_refused([&] { (void)attn::read_trace(path); });
  return 0;
}
