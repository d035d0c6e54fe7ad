// Tests of the fleet-table reader (include/attn_tune/fleet_table.hpp): canonical device names
// and their aliases, picking a fleet entry by any alias, the nearest entry only when asked, and
// single tables read as before.
#include <gtest/gtest.h>

#include <fstream>

#include "include/attn_tune/fleet_table.hpp"

namespace attn_tune {
namespace {

using nlohmann::json;

json fixture(const char* name, const std::string& device, int sm, int64_t memory) {
  json t = json::parse(std::ifstream(std::string(ATTN_SOURCE_DIR) + "/python/testdata/" + name));
  t["provenance"]["device"]["name"] = device;
  t["provenance"]["device"]["sm_count"] = sm;
  t["provenance"]["device"]["memory_bytes"] = memory;
  return t;
}

// Two GPUs' tables that answer the query below differently (v2 on the H100, v1 on the A100).
json fleet() {
  const json h100 = fixture("synthetic_table.json", "NVIDIA H100 80GB HBM3", 132, 85899345920);
  const json a100 = fixture("synthetic_table_v1.json", "NVIDIA A100-SXM4-40GB", 108, 42949672960);
  return {{"schema", kFleetSchemaName},
          {"version", kFleetSchemaVersion},
          {"devices",
           {{{"device", "h100-sxm"},
             {"raw_name", "NVIDIA H100 80GB HBM3"},
             {"sm_count", 132},
             {"bandwidth_gbps", 3350},
             {"table", h100}},
            {{"device", "a100-sxm4-40gb"},
             {"raw_name", "NVIDIA A100-SXM4-40GB"},
             {"sm_count", 108},
             {"bandwidth_gbps", 1555},
             {"table", a100}}}}};
}

Query q() {
  Query x;
  x.batch = 4;
  x.context_len = 64;
  x.num_heads = 32;
  x.num_kv_heads = 8;
  x.head_dim = 128;
  x.block_size = 16;
  x.dtype = "fp16";
  return x;
}

TEST(FleetTable, CanonicalNamesOfAliases) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"NVIDIA H100 80GB HBM3", "h100-sxm"},
      {"NVIDIA H100 SXM5 80GB", "h100-sxm"},
      {"H100-SXM", "h100-sxm"},
      {"h100-sxm", "h100-sxm"},
      {"NVIDIA H100 PCIe", "h100-pcie"},
      {"NVIDIA H100 NVL", "h100-nvl"},
      {"NVIDIA H200", "h200"},
      {"NVIDIA GH200 480GB", "gh200"},
      {"NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"},
      {"NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"},
      {"NVIDIA A100 80GB PCIe", "a100-pcie-80gb"},
      {"NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"},
      {"NVIDIA L40S", "l40s"},
      {"NVIDIA L4", "l4"},
      {"NVIDIA A10G", "a10g"},
      {"NVIDIA GeForce RTX 4090", "rtx-4090"},
      {"Tesla T4", "t4"},
      {"AMD Instinct MI300X", "mi300x"},
      {"AMD EPYC 7763 64-Core Processor", "epyc-7763-64-core-processor"}};
  for (const auto& [raw, canon] : cases) {
    EXPECT_EQ(canonical_device_name(raw), canon) << raw;
  }
  // An A100 name without its size takes it from the memory, else stays unsized.
  EXPECT_EQ(canonical_device_name("A100-SXM4", int64_t(80) << 30), "a100-sxm4-80gb");
  EXPECT_EQ(canonical_device_name("A100-SXM4", int64_t(40) << 30), "a100-sxm4-40gb");
  EXPECT_EQ(canonical_device_name("A100-SXM4"), "a100-sxm4");
  // Non-ASCII names keep their characters: two of them never meet in one empty name.
  EXPECT_EQ(canonical_device_name("NVIDIA Карта 1"), "Карта-1"); // only ASCII is lowered
  EXPECT_NE(canonical_device_name("Карта"), canonical_device_name("显卡"));
  EXPECT_FALSE(canonical_device_name("显卡").empty());
  // Every known device's canonical name is its own canonical name.
  for (const auto& k : known_devices()) {
    EXPECT_EQ(canonical_device_name(k.name), k.name);
  }
}

TEST(FleetTable, EachDeviceAndItsAliasesGetTheirOwnEntry) {
  const FleetTable f(fleet());
  for (const char* name :
       {"NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "H100-SXM", "h100-sxm"}) {
    const FleetSelection s =
        f.select({.device_name = name, .nearest = false, .sm_count = 0, .bandwidth_gbps = 0.0});
    EXPECT_EQ(s.device, "h100-sxm") << name;
    EXPECT_TRUE(s.exact);
    EXPECT_NE(s.said.find("fleet entry h100-sxm (measured on NVIDIA H100 80GB HBM3)"),
              std::string::npos)
        << s.said;
    EXPECT_EQ(s.table.lookup(q()).config_key, "decode_v2[partition=256]") << name;
  }
  for (const char* name :
       {"NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB", "a100-sxm4-40gb", "A100-SXM4"}) {
    const FleetSelection s =
        f.select({.device_name = name, .nearest = false, .sm_count = 0, .bandwidth_gbps = 0.0});
    EXPECT_EQ(s.device, "a100-sxm4-40gb") << name;
    EXPECT_EQ(s.table.lookup(q()).config_key, "decode_v1[]") << name;
  }
}

// Two entries for one device model (tables pasted together; `table combine` refuses to make one)
// would answer by their order in the file: refused, as the Python reader refuses it.
TEST(FleetTable, TwoEntriesForOneDeviceAreRefused) {
  json f = fleet();
  f["devices"].push_back(f["devices"][0]);
  try {
    const FleetTable t(f);
    ADD_FAILURE() << "taken";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("devices[2].device: h100-sxm again (devices[0]"),
              std::string::npos)
        << e.what();
  }
}

// A name without the memory size reaches the one sized entry of its form ("A100-SXM4" above),
// and only that: an entry of another model that starts with the name ("h200-nvl" for an H200,
// "h100-sxm" for "H1") is no match, so a device is not tuned with another one's table unless
// --nearest says so.
TEST(FleetTable, ASizelessNameMatchesOnlyASize) {
  json j = fleet();
  j["devices"][1]["device"] = "h200-nvl";
  j["devices"][1]["raw_name"] = "NVIDIA H200 NVL";
  const FleetTable f(j);
  for (const char* name : {"NVIDIA H200", "H1", "NVIDIA H"}) {
    const FleetQuery q{.device_name = name, .nearest = false, .sm_count = 0, .bandwidth_gbps = 0.0};
    EXPECT_THROW((void)f.select(q), std::out_of_range) << name;
  }
}

TEST(FleetTable, NearestOnlyWhenAsked) {
  const FleetTable f(fleet());
  try {
    (void)f.select(
        {.device_name = "NVIDIA H200", .nearest = false, .sm_count = 0, .bandwidth_gbps = 0.0});
    ADD_FAILURE() << "an H200 got another device's entry without asking";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("no entry for 'NVIDIA H200' (h200); it has h100-sxm, "
                                         "a100-sxm4-40gb"),
              std::string::npos)
        << e.what();
  }
  // H200 (132 SMs, 4.8 TB/s) is nearest to the H100; an A100 80GB PCIe to the A100 40GB.
  const FleetSelection h200 = f.select(
      {.device_name = "NVIDIA H200", .nearest = true, .sm_count = 0, .bandwidth_gbps = 0.0});
  EXPECT_EQ(h200.device, "h100-sxm");
  EXPECT_FALSE(h200.exact);
  EXPECT_NE(h200.said.find("using the nearest, h100-sxm"), std::string::npos) << h200.said;
  EXPECT_EQ(f.select({.device_name = "NVIDIA A100 80GB PCIe",
                      .nearest = true,
                      .sm_count = 0,
                      .bandwidth_gbps = 0.0})
                .device,
            "a100-sxm4-40gb");
  // An unknown model needs its SM count and bandwidth.
  EXPECT_THROW(
      (void)f.select(
          {.device_name = "Mystery GPU", .nearest = true, .sm_count = 0, .bandwidth_gbps = 0.0}),
      std::out_of_range);
  EXPECT_EQ(
      f.select(
           {.device_name = "Mystery GPU", .nearest = true, .sm_count = 100, .bandwidth_gbps = 1500})
          .device,
      "a100-sxm4-40gb");
}

TEST(FleetTable, SingleTablesReadAsBefore) {
  const json single = fixture("synthetic_table.json", "NVIDIA H100 80GB HBM3", 132, 0);
  const FleetSelection any = open_table_for_device(single, {});
  EXPECT_TRUE(any.exact);
  EXPECT_TRUE(any.said.empty());
  EXPECT_EQ(any.table.lookup(q()).config_key, "decode_v2[partition=256]");
  const FleetSelection alias = open_table_for_device(
      single, {.device_name = "H100-SXM", .nearest = false, .sm_count = 0, .bandwidth_gbps = 0.0});
  EXPECT_TRUE(alias.exact) << alias.said;
  const FleetSelection other = open_table_for_device(
      single,
      {.device_name = "NVIDIA L40S", .nearest = false, .sm_count = 0, .bandwidth_gbps = 0.0});
  EXPECT_FALSE(other.exact);
  EXPECT_NE(other.said.find("measured on NVIDIA H100 80GB HBM3 (h100-sxm), not on 'NVIDIA L40S'"),
            std::string::npos)
      << other.said;
  EXPECT_EQ(other.table.lookup(q()).config_key, "decode_v2[partition=256]");
  // A fleet needs a device name.
  EXPECT_THROW((void)open_table_for_device(fleet(), {}), std::out_of_range);
  EXPECT_THROW(FleetTable(json{{"schema", kFleetSchemaName}, {"version", 1}}), std::runtime_error);
}

} // namespace
} // namespace attn_tune
