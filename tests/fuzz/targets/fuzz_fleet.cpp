// libFuzzer target: a fleet table as table show and table lookup read it, then the entry chosen
// for a device (exact or nearest).
#include <nlohmann/json.hpp>

#include "include/attn_tune/fleet_table.hpp"
#include "src/tuning/fleet.h"
#include "tests/fuzz/targets/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  if (!attn_tune::FleetTable::is_fleet(j)) {
    return 0;
  }
  attn::fuzz::expect_read_or_refused([&] {
    attn::validate_fleet(j, "fuzz.json");
    const attn_tune::FleetTable f(j);
    for (const char* name : {"NVIDIA H100 80GB HBM3", "Карта"}) {
      try {
        (void)f.select({name, true, 132, 3350.0});
      } catch (const std::out_of_range&) {
        // no entry for the device: table lookup says so in one line
      }
    }
  });
  return 0;
}
