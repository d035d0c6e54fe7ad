// libFuzzer target: a sweep profile as sweep --profile FILE reads it.
#include <nlohmann/json.hpp>

#include "src/tuning/profile.h"
#include "tests/fuzz/targets/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0; // not JSON: load_profile refuses it in one line
  }
  attn::fuzz::expect_read_or_refused([&] { (void)attn::parse_profile(j, "fuzz profile"); });
  return 0;
}
