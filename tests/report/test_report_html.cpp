// Tests of the report page and the CSV files: every view is on the page (one decision map per
// shape, every rule's regret), the page loads nothing and runs nothing, and CSV quoting.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "src/report/report_html.h"
#include "src/tuning/threshold_table.h"
#include "tests/support/files.h"
#include "tests/tuning/table_fixtures.h"

namespace attn::report {
namespace {

namespace fs = std::filesystem;

ReportModel fixture_model() {
  ReportSource src;
  src.given = "fixture";
  src.table_path = "fixture/threshold_table.json";
  src.results_path = "fixture/results.jsonl";
  src.records = fixtures::two_points_and_held_out();
  src.table = build_threshold_table(
      src.records, {{"device", {{"backend", "cpu"}, {"id", "cpu"}, {"name", "Test CPU"}}}}, 2);
  return build_report_model(src);
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) {
    ++n;
  }
  return n;
}

TEST(ReportHtml, HoldsEveryView) {
  const ReportModel m = fixture_model();
  const std::string h = render_report_html(m, nullptr, nullptr, "attn-tune test");
  EXPECT_EQ(h.rfind("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\"", 0), 0u);
  EXPECT_EQ(count(h, "class=\"chart decision-map\""), int(m.maps.size()));
  EXPECT_EQ(count(h, "class=\"chart latency\""), int(m.latency.size()));
  EXPECT_EQ(count(h, "class=\"chart regret\""), 2);
  for (const EngineRule& rule : engine_rules()) {
    const std::string& id = rule.id;
    // The summary row and the worst points on the sweep and held-out points.
    EXPECT_EQ(count(h, "data-rule=\"" + id + "\""), 3) << id;
  }
  for (const char* sec : {"glance", "provenance", "decision", "latency", "regret", "prefill"}) {
    EXPECT_NE(h.find(std::string("<section id=\"") + sec + "\">"), std::string::npos) << sec;
  }
  EXPECT_EQ(h.find("id=\"diff\""), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_NE(h.find("@media (prefers-color-scheme: dark)"), std::string::npos);
  EXPECT_NE(h.find("@media print"), std::string::npos);
  // The rules' switch lines are drawn where their decision changes between measured lengths.
  EXPECT_GT(count(h, "class=\"r-vllm_cuda\""), 0);
  EXPECT_GT(count(h, "class=\"r-seed_engine\""), 0);
  // Where v2 starts to win, in words: between 512 and 2048, where log(v2 / v1) crosses zero.
  EXPECT_NE(h.find("batch 1: v2 from 855"), std::string::npos);
  EXPECT_NE(h.find("batch 64: v1 at every length"), std::string::npos);
  // Every data table is on the page.
  for (const auto& t : model_tables(m)) {
    EXPECT_NE(h.find("data-table=\"" + t.id + "\""), std::string::npos) << t.id;
  }
}

// One decode point whose decision at 2048 rests on timings within noise (v1 carried from 512,
// v2's median 1% lower within a 5% spread, the switch to v2 at 8192 next), from `table`.
ReportModel noisy_model(const std::function<void(nlohmann::json&)>& edit = {}) {
  const KernelConfig v1{Family::decode_v1, {}};
  const KernelConfig v2{Family::decode_v2, {{"partition", 512}}};
  ReportSource src;
  src.given = "noisy";
  src.table_path = "noisy/threshold_table.json";
  src.table = build_threshold_table(
      {fixtures::spread_rec(2, 512, 8, v1, 1e-6, 0.01e-6),
       fixtures::spread_rec(2, 512, 8, v2, 2e-6, 0.01e-6),
       fixtures::spread_rec(2, 2048, 8, v1, 4.04e-6, 0.2e-6),
       fixtures::spread_rec(2, 2048, 8, v2, 4e-6, 0.1e-6),
       fixtures::spread_rec(2, 8192, 8, v1, 20e-6, 0.1e-6),
       fixtures::spread_rec(2, 8192, 8, v2, 10e-6, 0.1e-6)},
      {{"device", {{"backend", "cpu"}, {"id", "cpu"}, {"name", "Test CPU"}}}}, 2);
  if (edit) {
    edit(src.table);
  }
  return build_report_model(src);
}

TEST(ReportHtml, MarksTheDecisionsThatRestOnNoise) {
  const ReportModel m = noisy_model();
  ASSERT_TRUE(m.noisy_listed);
  ASSERT_EQ(m.noisy.size(), 1u);
  EXPECT_EQ(m.noisy[0].context_len, 2048);
  EXPECT_EQ(m.noisy[0].switch_at, 8192);
  ASSERT_EQ(m.maps.size(), 1u);
  EXPECT_TRUE(m.maps[0].cells.at({2, 2048}).noisy_decision);
  EXPECT_FALSE(m.maps[0].cells.at({2, 512}).noisy_decision);
  const std::string h = render_report_html(m, nullptr, nullptr, "attn-tune test");
  // The cell's dashed frame (and the legend's), its words under the map and the count at a glance.
  EXPECT_EQ(count(h, "class=\"noisy-cell\""), 2);
  EXPECT_NE(h.find("the table&#39;s decision here rests on timings within noise"),
            std::string::npos);
  EXPECT_NE(h.find("1 decision rests on timings within noise (dashed frames):<ul><li>batch 2 ctx "
                   "2048: v1 carried from 512, though v2&#39;s median is 1% faster (within the "
                   "noise of 5%); the switch to v2 before 8192 could lie this early</li></ul>"),
            std::string::npos)
      << h;
  EXPECT_NE(h.find("<strong>1 decision rests</strong> on timings within noise"), std::string::npos);
  EXPECT_NE(h.find("attn-tune sweep --resume --remeasure-noisy"), std::string::npos);
  EXPECT_NE(h.find("Those next to a switch between v1 and v2, which could move"),
            std::string::npos);
  // The decision map's numbers say which cells they are.
  for (const auto& t : model_tables(m)) {
    if (t.id != "decision_map") {
      continue;
    }
    const auto col = std::find(t.columns.begin(), t.columns.end(), "noisy_decision");
    ASSERT_NE(col, t.columns.end());
    int yes = 0;
    for (const auto& row : t.rows) {
      yes += row[std::size_t(col - t.columns.begin())] == "yes" ? 1 : 0;
    }
    EXPECT_EQ(yes, 1);
  }

  // A table made before the list: nothing said either way.
  const ReportModel older = noisy_model([](nlohmann::json& t) {
    for (auto& p : t["decode"]) {
      p.erase("noisy_decisions");
    }
  });
  EXPECT_FALSE(older.noisy_listed);
  const std::string ho = render_report_html(older, nullptr, nullptr, "attn-tune test");
  EXPECT_EQ(ho.find("Decisions resting on timings within noise"), std::string::npos);
  EXPECT_EQ(count(ho, "class=\"noisy-cell\""), 0) << "no frame, and no legend for one";
  // Clear margins: none, said so.
  const std::string hc = render_report_html(fixture_model(), nullptr, nullptr, "attn-tune test");
  EXPECT_NE(hc.find("None: no switch between v1 and v2 borders or hides in timings within "
                    "noise"),
            std::string::npos);
}

TEST(ReportHtml, AgainstShowsBothAndTheDifferingCalls) {
  const ReportModel m = fixture_model();
  const std::vector<DecisionDiff> diffs = {
      {"b=1 ctx=2048", "decode_v2[partition=256]", "decode_v1", true}};
  const std::string h = render_report_html(m, &m, &diffs, "attn-tune test");
  EXPECT_EQ(count(h, "class=\"chart decision-map\""), 2 * int(m.maps.size()));
  EXPECT_NE(h.find("<section id=\"diff\">"), std::string::npos);
  EXPECT_NE(h.find("1 calls differ, 1 of them between v1 and v2"), std::string::npos);
  EXPECT_NE(h.find("<td>b=1 ctx=2048</td><td>decode_v2[partition=256]</td><td>decode_v1</td>"),
            std::string::npos);
}

TEST(ReportCsv, QuotesAndWritesOneFilePerView) {
  const DataTable t{"x", "t", {"a", "b"}, {{"1,2", "say \"hi\""}, {"3", "4"}}};
  EXPECT_EQ(to_csv(t, "src"), "table,a,b\nsrc,\"1,2\",\"say \"\"hi\"\"\"\nsrc,3,4\n");

  const fs::path dir = test::fresh_path("report_csv");
  const ReportModel m = fixture_model();
  const std::vector<DecisionDiff> diffs = {{"call", "x", "y", false}};
  const auto files = write_report_csv(dir.string(), m, &m, &diffs);
  EXPECT_EQ(files.size(), model_tables(m).size() + 1);
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string header;
    std::getline(in, header);
    EXPECT_EQ(header.rfind("table,", 0), 0u) << f;
  }
  const std::string map = test::read_file(dir / "decision_map.csv");
  EXPECT_EQ(count(map, "\n"), 1 + 2 * 6); // both tables' rows under one header
  fs::remove_all(dir);
}

} // namespace
} // namespace attn::report
