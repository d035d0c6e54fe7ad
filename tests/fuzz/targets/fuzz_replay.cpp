// libFuzzer target: a replay file (SPEC.md "Replay files") as replay reads it: the safetensors
// container, then the problem and the engine's answer it must describe.
#include <vector>

#include "src/io/safetensors.h"
#include "src/validation/replay.h"
#include "tests/fuzz/targets/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                                     reinterpret_cast<const std::byte*>(data) + size);
  attn::fuzz::expect_read_or_refused([&] {
    attn::SafetensorsFile f = attn::parse_safetensors(bytes, "fuzz.safetensors");
    (void)attn::replay_from_safetensors(std::move(f), "fuzz.safetensors");
  });
  return 0;
}
