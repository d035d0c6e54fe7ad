// libFuzzer target: results.jsonl as merge, report and sweep --resume read it (header and
// measurement lines checked at the door, then reduced to records).
#include "src/tuning/results_file.h"
#include "tests/fuzz/targets/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = attn::fuzz::as_file(data, size, ".jsonl");
  attn::fuzz::expect_read_or_refused([&] {
    const attn::ResultsFile rf = attn::read_results(path);
    (void)attn::to_records(rf.lines);
  });
  return 0;
}
