// libFuzzer target: a threshold table as table show and table lookup read it: the schema check,
// then the engine reader (include/attn_tune/threshold_table_reader.hpp), a lookup and the text
// of table show, which may assume what the schema check promised.
#include <nlohmann/json.hpp>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/cli/table_text.h"
#include "src/tuning/table_schema.h"
#include "tests/fuzz/targets/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0; // not JSON: the commands refuse it before any reader sees it
  }
  attn::fuzz::expect_read_or_refused([&] {
    attn::validate_table(j);
    const attn_tune::ThresholdTableReader t(j);
    attn_tune::Query q;
    q.batch = 4;
    q.context_len = 1000;
    q.num_heads = 32;
    q.num_kv_heads = 8;
    q.head_dim = 128;
    q.block_size = 16;
    q.dtype = "fp16";
    try {
      (void)t.lookup(q);
      q.seq_lens = {30, 20000, 512};
      (void)t.lookup(q);
    } catch (const std::runtime_error&) {
      // the reader's own refusal (a table without points): table lookup turns it into one line
    } catch (const std::invalid_argument&) {
    }
    (void)attn::cli::describe_table(j);
  });
  return 0;
}
