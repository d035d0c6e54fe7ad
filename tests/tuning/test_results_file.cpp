// results.jsonl: a half-written last line is ignored and reported; a corrupt complete line is an
// input error; records keep the timing quartiles that tell a win from noise.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "src/model/errors.h"
#include "src/model/kernel_config.h"
#include "src/model/workload.h"
#include "src/tuning/results_file.h"
#include "tests/support/files.h"

namespace attn {
namespace {

namespace fs = std::filesystem;

// A decode workload of a real shape and an ok line that times it.
Workload real_workload() {
  Workload w;
  w.phase = Phase::decode;
  w.batch = 4;
  w.context_len = 1024;
  w.params.num_heads = 8;
  w.params.num_kv_heads = 2;
  w.params.head_dim = 64;
  return w;
}

nlohmann::json ok_line() {
  const Workload w = real_workload();
  const KernelConfig c{Family::decode_v1, {}};
  return {{"type", "measurement"},    {"workload_key", w.key()}, {"config_key", c.key()},
          {"workload", w.to_json()},  {"config", c.to_json()},   {"status", "ok"},
          {"timing", {{"median_s", 2e-6}, {"method", "m"}}}};
}

const char* kHeader = R"({"type":"header","schema":"attn-tune/results","version":1})";

// The message read_results throws for a file of the header and `line`, or "" when it reads it.
std::string refusal(const fs::path& f, const std::string& line) {
  {
    std::ofstream o(f, std::ios::binary);
    o << kHeader << "\n" << line << "\n";
  }
  try {
    (void)read_results(f.string());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ResultsFile, ReadsResultsWithATruncatedTail) {
  const fs::path dir = test::fresh_dir("results_read");
  const fs::path f = dir / "results.jsonl";
  {
    std::ofstream o(f, std::ios::binary);
    o << kHeader << "\n" << ok_line().dump() << "\n" << R"({"type":"measurem)";
  }
  const ResultsFile r = read_results(f.string());
  EXPECT_TRUE(r.truncated_tail);
  EXPECT_EQ(r.lines.size(), 1u);
  EXPECT_LT(r.valid_bytes, fs::file_size(f));
  {
    std::ofstream o(f, std::ios::binary | std::ios::app);
    o << "\n{not json}\n";
  }
  EXPECT_THROW((void)read_results(f.string()), InputError);
  fs::remove_all(dir);
}

TEST(ResultsFile, RecordsKeepTheQuartilesOrFallBackToTheMedian) {
  const Workload w = real_workload();
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  auto line = [&](const KernelConfig& c, const nlohmann::json& timing) {
    return nlohmann::json{{"type", "measurement"}, {"workload_key", w.key()},
                          {"config_key", c.key()}, {"workload", w.to_json()},
                          {"config", c.to_json()}, {"status", "ok"},
                          {"timing", timing}};
  };
  const auto rs = to_records(
      {line(v1, {{"median_s", 2e-6}, {"p25_s", 1.9e-6}, {"p75_s", 2.2e-6}, {"method", "m"}}),
       line(v2, {{"median_s", 3e-6}, {"method", "m"}})});
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_DOUBLE_EQ(rs[0].p25_s, 1.9e-6);
  EXPECT_DOUBLE_EQ(rs[0].p75_s, 2.2e-6);
  // A line written without quartiles has no spread: only exact ties are within noise.
  EXPECT_DOUBLE_EQ(rs[1].p25_s, 3e-6);
  EXPECT_DOUBLE_EQ(rs[1].p75_s, 3e-6);
}

// Every line is checked at the door: a value a consumer would divide by, wrap or trust is one
// InputError naming the file, the line and the field, never a crash or an internal error.
TEST(ResultsFile, RefusesImpossibleLinesNamingFileLineAndField) {
  const fs::path dir = test::fresh_dir("results_door");
  const fs::path f = dir / "results.jsonl";
  const std::string where = f.string() + ": line 2: ";
  EXPECT_EQ(refusal(f, ok_line().dump()), "");

  auto with = [](const nlohmann::json::json_pointer& at, const nlohmann::json& v) {
    nlohmann::json l = ok_line();
    l[at] = v;
    return l.dump();
  };
  using P = nlohmann::json::json_pointer;
  EXPECT_EQ(refusal(f, with(P("/workload/num_kv_heads"), 0)),
            where + "workload.num_kv_heads: expected an integer from 1 to 8, got 0");
  EXPECT_NE(refusal(f, with(P("/workload/num_heads"), INT32_MIN)).find("workload.num_heads"),
            std::string::npos);
  EXPECT_NE(refusal(f, with(P("/workload/context_len"), int64_t(1'000'000'000'000)))
                .find("workload.context_len: expected an integer from 1 to 10000000"),
            std::string::npos);
  EXPECT_NE(refusal(f, with(P("/workload/batch"), 0)).find("workload.batch"), std::string::npos);
  EXPECT_NE(refusal(f, with(P("/workload/head_dim"), "64")).find("got \"64\""),
            std::string::npos);
  EXPECT_NE(refusal(f, with(P("/config/params/partition"), int64_t(1) << 40))
                .find("32 bits"),
            std::string::npos);
  EXPECT_NE(refusal(f, with(P("/status"), "great")).find("status: expected ok"),
            std::string::npos);
  EXPECT_NE(refusal(f, with(P("/timing/median_s"), 1e-320)).find("timing.median_s"),
            std::string::npos);
  EXPECT_NE(refusal(f, with(P("/timing/p75_s"), "slow")).find("timing.p75_s"), std::string::npos);
  EXPECT_NE(refusal(f, with(P("/workload_key"), "decode b=4 ctx=2048")).find("workload_key"),
            std::string::npos);
  for (const char* line : {"[]", "1", "null", "\"x\""}) {
    EXPECT_EQ(refusal(f, line), where + "expected a JSON object, got " + std::string(line)) << line;
  }
  // 1e999 overflows a double while parsing: still the file's error.
  EXPECT_NE(refusal(f, R"({"type":"measurement","timing":{"median_s":1e999}})").find(where),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(ResultsFile, RefusesHeadersWithImpossibleShardsAndPlans) {
  const fs::path dir = test::fresh_dir("results_header_door");
  const fs::path f = dir / "results.jsonl";
  auto refused = [&](const nlohmann::json& h) {
    {
      std::ofstream o(f, std::ios::binary);
      o << h.dump() << "\n";
    }
    try {
      (void)read_results(f.string());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json h = nlohmann::json::parse(kHeader);
  EXPECT_EQ(refused(h), "");
  for (int count : {0, -3, 1'000'000'000}) {
    nlohmann::json x = h;
    x["shard"] = {{"index", 0}, {"count", count}};
    EXPECT_NE(refused(x).find("line 1: shard.count"), std::string::npos) << count;
  }
  nlohmann::json x = h;
  x["shard"] = {{"index", 4}, {"count", 4}};
  EXPECT_NE(refused(x).find("shard.index: expected an integer from 0 to 3"), std::string::npos);
  x = h;
  x["plan"] = {{"measurements", int64_t(1'000'000'000'000)}};
  EXPECT_NE(refused(x).find("plan.measurements"), std::string::npos);
  x = h;
  x["device"] = "cpu";
  EXPECT_NE(refused(x).find("device: expected an object"), std::string::npos);
  fs::remove_all(dir);
}

} // namespace

// The header a sweep of the built-in CPU kernels at `isa`, built from `sources`, writes.
nlohmann::json cpu_header(const std::string& isa, const std::string& sources) {
  return {{"type", "header"},
          {"schema", "attn-tune/results"},
          {"version", 1},
          {"profile", "p"},
          {"profile_hash", "0123456789abcdef"},
          {"device", {{"backend", "cpu"}, {"id", "cpu"}, {"name", "X"}, {"threads", 2}}},
          {"kernels", {{"source", "built-in"}, {"name", "attn-tune"}, {"isa", isa}}},
          {"kernel_sources_sha256", sources},
          {"seed", 1},
          {"tool_version", "0.1.0"}};
}

// The message open_results throws resuming `f` (started with `first`) as `again`, or "".
std::string resume_refusal(const fs::path& f, const nlohmann::json& first,
                           const nlohmann::json& again) {
  fs::remove(f);
  {
    OpenedResults o = open_results(f.string(), first, /*resume=*/false);
    o.out->append(ok_line());
  }
  try {
    (void)open_results(f.string(), again, /*resume=*/true);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A sweep resumed by another build of the kernels (another ISA level of the CPU kernels, other
// kernel sources) would mix two kernel sets in one table: refused, as merge refuses it.
TEST(ResultsFile, ResumeRefusesAnotherBuildOfTheKernels) {
  const fs::path dir = test::fresh_dir("resume_build");
  const fs::path f = dir / "results.jsonl";
  const nlohmann::json v4 = cpu_header("x86-64-v4", "aaaa");
  EXPECT_EQ(resume_refusal(f, v4, v4), "");
  const std::string isa = resume_refusal(f, v4, cpu_header("baseline", "aaaa"));
  EXPECT_NE(isa.find("(x86-64-v4 build), not the built-in attn-tune kernels (baseline build)"),
            std::string::npos)
      << isa;
  const std::string src = resume_refusal(f, v4, cpu_header("x86-64-v4", "bbbb"));
  EXPECT_NE(src.find("timed kernels built from other sources"), std::string::npos) << src;
  // A folder from before the level was recorded is another build too.
  nlohmann::json old = v4;
  old["kernels"].erase("isa");
  EXPECT_NE(resume_refusal(f, old, v4).find("--resume needs the same kernels"), std::string::npos);
  fs::remove_all(dir);
}

// merge's output is a results file and a table behind links that change together: a sweep
// resumed into it would append to one and rewrite the other. A folder where results.jsonl is
// a folder is an input error. A resume that finds the search ended says so.
TEST(ResultsFile, ResumeRefusesAMergedFolderAndAFolderForAFile) {
  const fs::path dir = test::fresh_dir("resume_merged");
  const fs::path f = dir / "results.jsonl";
  nlohmann::json merged = cpu_header("x86-64-v4", "aaaa");
  merged["merged"] = {{"shards", 2}};
  const std::string m = resume_refusal(f, merged, cpu_header("x86-64-v4", "aaaa"));
  EXPECT_NE(m.find("is the output of `attn-tune merge`"), std::string::npos) << m;
  fs::remove(f);
  fs::create_directories(f);
  try {
    (void)open_results(f.string(), cpu_header("x86-64-v4", "aaaa"), true);
    ADD_FAILURE() << "a folder named results.jsonl was opened";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder"), std::string::npos) << e.what();
  }
  fs::remove_all(f);
  {
    OpenedResults o = open_results(f.string(), cpu_header("x86-64-v4", "aaaa"), false);
    EXPECT_FALSE(o.search_ended);
    o.out->append({{"type", "search_end"}, {"measured_pairs", 0}, {"exhaustive_pairs", 0}});
  }
  EXPECT_TRUE(open_results(f.string(), cpu_header("x86-64-v4", "aaaa"), true).search_ended);
  fs::remove_all(dir);
}

} // namespace attn
