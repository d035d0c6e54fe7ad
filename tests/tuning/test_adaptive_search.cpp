// Tests of the adaptive search on planted timings: a decode grid whose v1 and v2 costs are set
// per context length (v2 wins from a planted length on), answered through replay_search. The
// search must race every configuration of a measured point and time only the survivors in full,
// put the table's switch between the grid lengths that bracket the planted one, start a second
// batch at the first batch's switch, measure well under the exhaustive plan, and decide the same
// way again when resumed from any prefix of its own lines.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/model/errors.h"
#include "src/tuning/adaptive_search.h"
#include "src/tuning/results_file.h"
#include "src/tuning/search_check.h"
#include "src/tuning/threshold_table.h"

namespace attn {
namespace {

using nlohmann::json;

const std::vector<int> kGrid = {128, 256, 512, 1024, 2048, 4096, 8192, 16384};

Workload decode(int batch, int ctx) {
  Workload w;
  w.phase = Phase::decode;
  w.params.num_heads = 8;
  w.params.num_kv_heads = 2;
  w.params.head_dim = 64;
  w.params.block_size = 16;
  w.params.dtype = DType::f16;
  w.batch = batch;
  w.context_len = ctx;
  return w;
}

KernelConfig cfg(Family f, std::map<std::string, int> params) { return {f, std::move(params)}; }

// Two v1 and four v2 configurations: split 0 of each family is twice as slow as split 1, and v2's
// partitions differ by 3% each.
std::vector<KernelConfig> configs() {
  return {cfg(Family::decode_v1, {{"split", 0}}),
          cfg(Family::decode_v1, {{"split", 1}}),
          cfg(Family::decode_v2, {{"partition", 256}, {"split", 1}}),
          cfg(Family::decode_v2, {{"partition", 512}, {"split", 1}}),
          cfg(Family::decode_v2, {{"partition", 1024}, {"split", 1}}),
          cfg(Family::decode_v2, {{"partition", 512}, {"split", 0}})};
}

// Planted costs: v1 1 ns per key of the batch, v2 `fixed` + 0.5 ns per key, so v2 wins from
// 2 * fixed keys on; a 1% interquartile range.
double cost(const Workload& w, const KernelConfig& c, double fixed_s) {
  const double keys = double(w.batch) * w.context_len;
  double t = c.family == Family::decode_v1 ? 1e-9 * keys : fixed_s + 0.5e-9 * keys;
  if (c.get("split", 1) == 0) {
    t *= 2.0;
  }
  if (c.family == Family::decode_v2) {
    t *= 1.0 + 0.03 * (c.get("partition", 512) == 256    ? 1
                       : c.get("partition", 512) == 1024 ? 2
                                                         : 0);
  }
  return t;
}

json line_of(const Workload& w, const KernelConfig& c, double t) {
  return {{"type", "measurement"},
          {"workload_key", w.key()},
          {"config_key", c.key()},
          {"workload", w.to_json()},
          {"config", c.to_json()},
          {"status", "ok"},
          {"timing", {{"median_s", t}, {"p25_s", t * 0.995}, {"p75_s", t * 1.005}}}};
}

struct Planted {
  std::vector<SearchPoint> points;
  std::map<std::string, json> measured;
  std::vector<json> lines; // the exhaustive sweep's, in plan order
};

// The exhaustive sweep of batches 1 and 4 over kGrid, each configuration timed as `time` says.
Planted planted_times(const std::function<double(const Workload&, const KernelConfig&)>& time) {
  Planted p;
  for (int batch : {1, 4}) {
    for (int ctx : kGrid) {
      const Workload w = decode(batch, ctx);
      p.points.push_back({w, configs()});
      for (const KernelConfig& c : configs()) {
        json l = line_of(w, c, time(w, c));
        p.measured[record_key(w.key(), c.key())] = l;
        p.lines.push_back(l);
      }
    }
  }
  return p;
}

// Batches 1 and 4 with the planted crossover at `keys_at` keys per sequence; `factor` (when
// given) multiplies each configuration's cost at a length.
Planted planted(double keys_at,
                const std::function<double(const KernelConfig&, int ctx)>& factor = nullptr) {
  return planted_times([&](const Workload& w, const KernelConfig& c) {
    // v2's fixed cost scales with the batch so that the switch stays at keys_at per sequence.
    return cost(w, c, 0.5e-9 * keys_at * w.batch) * (factor ? factor(c, w.context_len) : 1.0);
  });
}

json table_of(const std::vector<json>& lines) {
  const json prov = {{"device", {{"name", "test"}, {"backend", "cpu"}, {"threads", 2}}}};
  return build_threshold_table(to_records(lines), prov, 2);
}

TEST(AdaptiveSearch, RacesTheFirstPointAndCarriesItsSurvivors) {
  const Planted p = planted(1500);
  const AdaptiveSearch search(p.points);
  const std::vector<json> lines = replay_search(search, p.measured);
  ASSERT_FALSE(lines.empty());
  // The first point is batch 1's long end, and every configuration races there.
  const std::string first = lines.front()["workload_key"];
  EXPECT_EQ(first, decode(1, kGrid.back()).key());
  std::map<std::string, std::set<std::string>> race;
  std::map<std::string, std::set<std::string>> full;
  for (const json& l : lines) {
    (line_stage(l) == SearchStage::race ? race : full)[l["workload_key"]].insert(l["config_key"]);
  }
  EXPECT_EQ(race[first].size(), configs().size());
  // Batch 1's short end is 7 doublings from its long end (beyond kRaceReach, 2): it races
  // every configuration too (split 0 lost at 16384 only, one side of it).
  EXPECT_EQ(race.size(), 2u);
  EXPECT_EQ(race[decode(1, kGrid.front()).key()].size(), configs().size());
  // The first bisection step, 1024, lies 3 doublings from 128 and 4 from 16384: every
  // configuration again, but split 0, which lost by 2x on both sides of it (kHopelessMargin);
  // the four left are few enough to time in full without a race.
  const std::set<std::string> at_1024 = full[decode(1, 1024).key()];
  EXPECT_EQ(at_1024.size(), 4u);
  EXPECT_FALSE(at_1024.count("decode_v1[split=0]"));
  EXPECT_FALSE(at_1024.count("decode_v2[partition=512,split=0]"));
  for (const auto& [w, cs] : full) {
    // split 0 is twice as slow: it never survives; v1's survivor is timed at every measured
    // point, and elsewhere at most kRaceSurvivors of each family and the fastest of each at the
    // point's measured neighbours (here always one of those survivors).
    EXPECT_FALSE(cs.count("decode_v1[split=0]")) << w;
    EXPECT_FALSE(cs.count("decode_v2[partition=512,split=0]")) << w;
    EXPECT_TRUE(cs.count("decode_v1[split=1]")) << w;
    if (w != decode(1, 1024).key()) {
      EXPECT_LE(cs.size(), std::size_t(2 * kRaceSurvivors)) << w;
    }
  }
  // The table chooses from full timings: never a configuration that lost its race.
  const json t = table_of(lines);
  for (const json& pt : t["decode"]) {
    for (const json& m : pt["measured"]) {
      EXPECT_EQ(m["best"]["config"]["key"].get<std::string>().find("split=0"), std::string::npos);
    }
  }
}

// v2's best partition changes along the axis (256 keys below 2048 tokens, 1024 from there on, by
// 30% or more): batch 4, which starts from batch 1's switch, also measures its long end, where
// batch 1's best differs from its best past the switch, and chooses the long end's best there.
TEST(AdaptiveSearch, ABatchStartedFromItsNeighboursSwitchFindsWhereTheBestConfigurationChanges) {
  const Planted p = planted(300.0, [](const KernelConfig& c, int ctx) {
    if (c.family != Family::decode_v2) {
      return 1.0;
    }
    const int part = c.get("partition", 512);
    return ctx < 2048 ? (part == 256 ? 1.0 : 1.3) : (part == 1024 ? 1.0 : 1.5);
  });
  const AdaptiveSearch search(p.points);
  const std::vector<json> lines = replay_search(search, p.measured);
  const json t = table_of(lines);
  ASSERT_EQ(t["decode"].size(), 2u);
  // Batch 4: beside the two lengths of batch 1's switch, its long end, where the best v2 is the
  // one batch 1 found there (partition 1024), not the one past the switch (256).
  const json& b4 = t["decode"][1];
  ASSERT_EQ(b4["batch"], 4);
  EXPECT_GT(b4["measured"].size(), 2u) << b4["measured"];
  bool long_end = false;
  for (const json& m : b4["measured"]) {
    if (m["context_len"] == kGrid.back()) {
      long_end = true;
      EXPECT_EQ(m["best"]["config"]["key"], "decode_v2[partition=1024,split=1]") << m;
    }
  }
  EXPECT_TRUE(long_end) << b4["measured"];
}

// A point between two measured lengths whose fastest v2 configurations differ times both: the
// survivors of the nearest one (512 tokens, where partition 1024 won) and the fastest of each
// family at its other measured neighbour (2048, where partition 256 won).
TEST(AdaptiveSearch, APointTimesTheFastestOfEachFamilyAtItsMeasuredNeighbours) {
  const Planted p = planted(300);
  const AdaptiveSearch search(p.points);
  SearchObservations obs;
  const auto time = [&](int ctx, const KernelConfig& c, double t) {
    json l = line_of(decode(1, ctx), c, t);
    l["search"] = {{"stage", "full"}};
    observe(obs, l);
  };
  const std::vector<KernelConfig> cs = configs();
  time(512, cs[1], 2.0e-6);  // decode_v1[split=1]
  time(512, cs[4], 1.0e-6);  // decode_v2[partition=1024,split=1]
  time(2048, cs[1], 8.0e-6); // decode_v1[split=1]
  time(2048, cs[2], 4.0e-6); // decode_v2[partition=256,split=1]
  std::size_t at_1024 = search.size();
  for (std::size_t i = 0; i < search.size(); ++i) {
    if (search.point(i).workload.key() == decode(1, 1024).key()) {
      at_1024 = i;
    }
  }
  ASSERT_LT(at_1024, search.size());
  std::map<std::string, std::string> why;
  for (const SearchRun& r : search.runs_at(at_1024, obs)) {
    why[r.config.key()] = r.why;
  }
  ASSERT_EQ(why.size(), 3u);
  EXPECT_TRUE(why.count("decode_v1[split=1]"));
  EXPECT_TRUE(why.count("decode_v2[partition=1024,split=1]"));
  const std::string& w = why["decode_v2[partition=256,split=1]"];
  EXPECT_NE(w.find("the fastest decode_v2 configuration at its measured neighbour " +
                   decode(1, 2048).key()),
            std::string::npos)
      << w;
  // Raced here already and lost, a neighbour's fastest is not timed again.
  json lost = line_of(decode(1, 1024), cs[2], 9.0e-6);
  lost["search"] = {{"stage", "race"}};
  observe(obs, lost);
  for (const SearchRun& r : search.runs_at(at_1024, obs)) {
    EXPECT_NE(r.config.key(), "decode_v2[partition=256,split=1]") << r.why;
  }
}

// A race won by configurations that were candidates only as a neighbour's fastest: once timed
// here they are candidates no longer, yet the winners of the race are timed in full, since the
// table chooses from full timings (before 2026-12-06 such a point could end with no full timing
// of a family: seen once, on a replayed quick sweep, with a rule that added more neighbours).
TEST(AdaptiveSearch, ARaceWonByANeighboursFastestIsTimedInFull) {
  const Planted p = planted(300);
  const AdaptiveSearch search(p.points);
  SearchObservations obs;
  const auto time = [&](int batch, int ctx, const KernelConfig& c, double t, const char* stage) {
    json l = line_of(decode(batch, ctx), c, t);
    l["search"] = {{"stage", stage}};
    observe(obs, l);
  };
  const std::vector<KernelConfig> cs = configs();
  time(1, 512, cs[1], 2.0e-6, "full");  // decode_v1[split=1]
  time(1, 512, cs[2], 1.0e-6, "full");  // decode_v2[partition=256,split=1]
  time(1, 2048, cs[1], 8.0e-6, "full"); // decode_v1[split=1]
  time(1, 2048, cs[4], 4.0e-6, "full"); // decode_v2[partition=1024,split=1]
  // Batch 4 at 1024 tokens, the nearest measured point of batch 1 at 1024 (same length): its
  // survivors are decode_v1[split=0] and decode_v2[partition=512,split=0].
  time(4, 1024, cs[0], 3.0e-6, "full");
  time(4, 1024, cs[1], 5.0e-6, "full");
  time(4, 1024, cs[4], 4.0e-6, "full");
  time(4, 1024, cs[5], 2.0e-6, "full");
  std::size_t at = search.size();
  for (std::size_t i = 0; i < search.size(); ++i) {
    if (search.point(i).workload.key() == decode(1, 1024).key()) {
      at = i;
    }
  }
  ASSERT_LT(at, search.size());
  // Two survivors and three neighbours' fastest: five candidates, raced.
  std::set<std::string> raced;
  for (const SearchRun& r : search.runs_at(at, obs)) {
    EXPECT_EQ(r.stage, SearchStage::race) << r.config.key();
    raced.insert(r.config.key());
  }
  ASSERT_EQ(raced.size(), 5u);
  // The neighbours' fastest win the race: decode_v1[split=1] and decode_v2[partition=256,split=1].
  time(1, 1024, cs[0], 4.0e-6, "race");
  time(1, 1024, cs[1], 2.0e-6, "race");
  time(1, 1024, cs[2], 1.0e-6, "race");
  time(1, 1024, cs[4], 2.0e-6, "race");
  time(1, 1024, cs[5], 3.0e-6, "race");
  std::map<std::string, std::string> full;
  for (const SearchRun& r : search.runs_at(at, obs)) {
    EXPECT_EQ(r.stage, SearchStage::full) << r.config.key();
    full[r.config.key()] = r.why;
  }
  ASSERT_EQ(full.size(), 2u);
  for (const KernelConfig& c : {cs[1], cs[2]}) {
    ASSERT_TRUE(full.count(c.key())) << c.key();
    EXPECT_NE(full[c.key()].find("a contender after its race"), std::string::npos) << full[c.key()];
  }
  time(1, 1024, cs[1], 2.0e-6, "full");
  time(1, 1024, cs[2], 1.0e-6, "full");
  EXPECT_TRUE(search.runs_at(at, obs).empty());
}

// v2 wins at every length, and its best partition changes once along the axis (256 keys up to
// `last_256`, 1024 keys above, each 30% ahead of the other on its side): wherever that change lies,
// the search measures the lengths on both sides of it, so that the table holds each length's
// best partition (lengths between two measured ones take the nearer one's).
TEST(AdaptiveSearch, AConfigurationThatWinsOnOneSideAndLosesOnTheOtherIsBisected) {
  for (const int last_256 : {256, 512, 1024, 2048, 4096}) {
    SCOPED_TRACE("partition 256 wins up to " + std::to_string(last_256));
    const Planted p = planted(50.0, [&](const KernelConfig& c, int ctx) {
      if (c.family != Family::decode_v2) {
        return 1.0;
      }
      const int part = c.get("partition", 512);
      return ctx <= last_256 ? (part == 256 ? 1.0 : 1.3) : (part == 1024 ? 1.0 : 1.3);
    });
    const AdaptiveSearch search(p.points);
    const std::vector<json> lines = replay_search(search, p.measured);
    std::set<int> measured_b1;
    for (const json& l : lines) {
      if (l["workload"]["batch"] == 1 && line_stage(l) == SearchStage::full) {
        measured_b1.insert(l["workload"]["context_len"].get<int>());
      }
    }
    EXPECT_TRUE(measured_b1.count(last_256)) << last_256;
    EXPECT_TRUE(measured_b1.count(2 * last_256)) << 2 * last_256;
    const attn_tune::ThresholdTableReader reader(table_of(lines));
    for (const int ctx : kGrid) {
      for (const int batch : {1, 4}) {
        const Workload w = decode(batch, ctx);
        attn_tune::Query q;
        q.batch = batch;
        q.context_len = ctx;
        q.num_heads = w.params.num_heads;
        q.num_kv_heads = w.params.num_kv_heads;
        q.head_dim = w.params.head_dim;
        q.block_size = w.params.block_size;
        EXPECT_EQ(reader.lookup(q).config_key, ctx <= last_256
                                                   ? "decode_v2[partition=256,split=1]"
                                                   : "decode_v2[partition=1024,split=1]")
            << "batch " << batch << ", ctx " << ctx;
      }
    }
  }
}

TEST(AdaptiveSearch, BisectsToThePlantedSwitchAndReusesItForTheNextBatch) {
  for (const double keys_at : {300.0, 1500.0, 3000.0, 12000.0}) {
    const Planted p = planted(keys_at);
    const AdaptiveSearch search(p.points);
    const std::vector<json> lines = replay_search(search, p.measured);
    const json t = table_of(lines);
    ASSERT_EQ(t["decode"].size(), 2u);
    for (const json& pt : t["decode"]) {
      // The search bisects down to the two grid lengths around the planted switch, and the
      // table's switch lies between them, where log(v2 / v1) interpolated between them crosses
      // zero: within 5% of the planted one for these costs.
      int below = 0;
      int above = 0;
      for (int c : kGrid) {
        if (c <= keys_at) {
          below = c;
        } else if (above == 0) {
          above = c;
        }
      }
      ASSERT_TRUE(pt["v2_from"].is_number_integer()) << pt["v2_from"];
      const int from = pt["v2_from"];
      EXPECT_GT(from, below) << "planted at " << keys_at << ", batch " << pt["batch"];
      EXPECT_LE(from, above) << "planted at " << keys_at << ", batch " << pt["batch"];
      EXPECT_NEAR(from, keys_at, 0.05 * keys_at) << "batch " << pt["batch"];
      ASSERT_TRUE(pt.contains("search"));
      EXPECT_EQ(pt["search"]["grid"].size(), kGrid.size());
    }
    // Batch 4 starts where batch 1 switched: it measures the two lengths around the switch only.
    EXPECT_EQ(t["decode"][1]["measured"].size(), 2u) << "planted at " << keys_at;
    // The exhaustive plan times 96 pairs; the search times far fewer in full.
    int in_full = 0;
    for (const MeasurementRecord& r : to_records(lines)) {
      in_full += r.brief ? 0 : 1;
    }
    EXPECT_LE(in_full, int(0.35 * p.lines.size())) << "planted at " << keys_at;
    // Judged on the exhaustive timings, the table loses nothing.
    const TableJudgement j = judge_table(to_records(p.lines), table_of(p.lines), t);
    EXPECT_EQ(j.family_agree, j.points);
    EXPECT_LT(j.worst_regret, 1e-9);
  }
}

// Batches 1 and 4 where `v2_wins(batch, ctx)` says which family is faster (v2 by 30%, or v1 by
// 40%), in either order along the axis and with as many switches as it has.
Planted planted_by(const std::function<bool(int batch, int ctx)>& v2_wins) {
  return planted_times([&](const Workload& w, const KernelConfig& c) {
    const double t = cost(w, c, 0.0); // v2 half of v1, before the family factor
    return c.family == Family::decode_v2 ? t * (v2_wins(w.batch, w.context_len) ? 1.4 : 2.8) : t;
  });
}

// The switches a batch reuses from the one before are taken whatever their order and however
// many: v2 at short contexts and v1 at long ones (partitions that fill the SMs), each batch with
// its own switch, and a v1 stretch between two v2 ones. An outside audit's plugin found both
// missed (2026-12-06): the search took v1 below a switch for granted, carrying batch 2's v1 to
// the short end where v2 won by 2.2x, and took the first switch alone, choosing v2 over a v1
// stretch that batch 1 had found.
TEST(AdaptiveSearch, ReusesEverySwitchOfTheBatchBeforeInEitherOrder) {
  const std::map<std::string, std::function<bool(int, int)>> cases = {
      {"v2 below, batch 4's switch far lower",
       [](int batch, int ctx) { return ctx < (batch == 1 ? 3000 : 300); }},
      {"v2 below, batch 4's switch far higher",
       [](int batch, int ctx) { return ctx < (batch == 1 ? 300 : 6000); }},
      {"a v1 stretch between two v2 ones",
       [](int, int ctx) { return (ctx >= 400 && ctx < 1500) || ctx >= 6000; }},
      {"a v2 stretch between two v1 ones", [](int, int ctx) { return ctx >= 400 && ctx < 3000; }},
  };
  for (const auto& [name, v2_wins] : cases) {
    const Planted p = planted_by(v2_wins);
    const AdaptiveSearch search(p.points);
    const std::vector<json> lines = replay_search(search, p.measured);
    const TableJudgement j = judge_table(to_records(p.lines), table_of(p.lines), table_of(lines));
    EXPECT_EQ(j.family_agree, j.points) << name;
    EXPECT_LT(j.worst_regret, 1e-9) << name << ": worst at " << j.worst_point;
  }
}

// The planted sweep of a switch at 1500 keys with one held-out point (no table holds it): batch
// 2 at 3000 tokens, where v2 wins.
Planted planted_with_held_out(Workload& held_out) {
  Planted p = planted(1500);
  held_out = decode(2, 3000);
  held_out.held_out = true;
  for (const KernelConfig& c : configs()) {
    p.lines.push_back(line_of(held_out, c, cost(held_out, c, 0.5e-9 * 1500 * 2)));
  }
  return p;
}

TEST(SearchCheck, JudgementSplitsGridFromHeldOutAndCountsOnlyTheRegretItAdds) {
  Workload h;
  const Planted p = planted_with_held_out(h);
  const std::vector<MeasurementRecord> records = to_records(p.lines);
  const json exhaustive = table_of(p.lines);
  const TableJudgement self = judge_table(records, exhaustive, exhaustive);
  EXPECT_EQ(self.grid.points, 16);
  EXPECT_EQ(self.held_out.points, 1);
  EXPECT_EQ(self.points, 17);
  EXPECT_LT(self.grid.worst, 1e-9);
  EXPECT_EQ(self.added.worst, 0.0); // a table adds nothing to its own regret
  // A table that switches to v2 only past 12000 tokens: v1 where v2 wins, from 2048 to 8192.
  const json late = table_of(planted(12000).lines);
  const TableJudgement j = judge_table(records, exhaustive, late);
  EXPECT_GT(j.grid.worst, 0.1);
  EXPECT_DOUBLE_EQ(j.grid.worst, j.worst_regret);
  EXPECT_EQ(j.grid.worst_point, j.worst_point);
  // Where the exhaustive table loses nothing, all of the regret is added.
  EXPECT_DOUBLE_EQ(j.added.worst, j.grid.worst);
  EXPECT_NEAR(j.added.mean * j.added.points,
              j.grid.mean * j.grid.points + j.held_out.mean * j.held_out.points -
                  self.held_out.mean * self.held_out.points,
              1e-9);
}

TEST(SearchCheck, EachJudgedPointSaysWhatItsChoiceRestsOn) {
  Workload h;
  const Planted p = planted_with_held_out(h);
  const std::vector<MeasurementRecord> records = to_records(p.lines);
  const json exhaustive = table_of(p.lines);
  // The judged sweep: batch 1 at 4096 tokens never timed, batch 4 at 128 raced only (a race
  // decides nothing), batch 1 at 2048 timed without its fastest configuration (v2, partition 512,
  // split 1: v2 wins there and that partition costs 3% less than the others).
  const KernelConfig fastest = cfg(Family::decode_v2, {{"partition", 512}, {"split", 1}});
  std::vector<json> judged;
  for (json l : p.lines) {
    const std::string wk = l["workload_key"];
    if (wk == decode(1, 4096).key() ||
        (wk == decode(1, 2048).key() && l["config_key"] == fastest.key())) {
      continue;
    }
    if (wk == decode(4, 128).key()) {
      l["search"] = {{"stage", "race"}};
    }
    judged.push_back(l);
  }
  const std::vector<MeasurementRecord> judged_records = to_records(judged);
  const TableJudgement j = judge_table(records, exhaustive, table_of(judged), &judged_records);
  ASSERT_EQ(j.each.size(), 17u);
  std::map<std::string, TableJudgement::Point> by_key;
  for (const TableJudgement::Point& pt : j.each) {
    by_key[pt.workload_key] = pt;
  }
  EXPECT_EQ(by_key.at(decode(1, 4096).key()).basis, "inferred");
  EXPECT_EQ(by_key.at(decode(4, 128).key()).basis, "inferred");
  EXPECT_EQ(by_key.at(decode(1, 2048).key()).basis, "best_untimed");
  EXPECT_EQ(by_key.at(h.key()).basis, "held_out");
  EXPECT_TRUE(by_key.at(h.key()).held_out);
  EXPECT_EQ(by_key.at(decode(1, 1024).key()).basis, "measured");
  EXPECT_EQ(by_key.at(decode(4, 16384).key()).basis, "measured");
  // Without 2048's fastest configuration the table chooses another v2 there, 3% slower.
  const TableJudgement::Point& untimed = by_key.at(decode(1, 2048).key());
  EXPECT_NE(untimed.config_key, fastest.key());
  EXPECT_EQ(untimed.exhaustive_config_key, fastest.key());
  EXPECT_NEAR(untimed.regret, 0.03, 1e-9);
  EXPECT_LT(untimed.exhaustive_regret, 1e-9);
  // above(): the points past a limit, the worst first; each point in the report.
  const std::vector<TableJudgement::Point> past = j.above(0.02);
  ASSERT_FALSE(past.empty());
  for (std::size_t k = 0; k < past.size(); ++k) {
    EXPECT_GT(past[k].regret, 0.02);
    if (k > 0) {
      EXPECT_GE(past[k - 1].regret, past[k].regret);
    }
  }
  EXPECT_DOUBLE_EQ(past.front().regret, j.worst_regret);
  const json report = j.to_json();
  ASSERT_EQ(report["each_point"].size(), 17u);
  EXPECT_EQ(report["each_point"][0]["workload_key"], j.each[0].workload_key);
  EXPECT_EQ(report["each_point"][0]["basis"], j.each[0].basis);
  // Without the judged sweep's lines, every grid point counts as measured.
  for (const TableJudgement::Point& pt : judge_table(records, exhaustive, exhaustive).each) {
    EXPECT_EQ(pt.basis, pt.held_out ? "held_out" : "measured") << pt.workload_key;
  }
}

// At a point both sweeps timed, a loss is the noise between them when the judged sweep's own
// timings ranked its choice first, and the table's rules when they ranked the fastest first too.
TEST(SearchCheck, AMeasuredPointsLossSaysWhetherItsOwnTimingsAgreed) {
  Workload h;
  const Planted p = planted_with_held_out(h);
  const std::vector<MeasurementRecord> records = to_records(p.lines);
  const std::vector<KernelConfig> cs = configs();
  // Noise between the sweeps: the judged sweep timed decode_v2[partition=1024,split=1] at batch 4,
  // 8192 tokens 10% faster than the exhaustive sweep did, ahead of partition 512, which the
  // exhaustive sweep has 6% ahead of it.
  std::vector<json> judged = p.lines;
  for (json& l : judged) {
    if (l["workload_key"] == decode(4, 8192).key() && l["config_key"] == cs[4].key()) {
      for (const char* k : {"median_s", "p25_s", "p75_s"}) {
        l["timing"][k] = l["timing"][k].get<double>() * 0.9;
      }
    }
  }
  const std::vector<MeasurementRecord> judged_records = to_records(judged);
  const TableJudgement j =
      judge_table(records, table_of(p.lines), table_of(judged), &judged_records);
  bool seen_noise = false;
  for (const TableJudgement::Point& pt : j.each) {
    if (pt.workload_key == decode(4, 8192).key()) {
      seen_noise = true;
      EXPECT_EQ(pt.basis, "measured");
      EXPECT_EQ(pt.config_key, cs[4].key());
      EXPECT_EQ(pt.own_timings, "choice_ahead");
      EXPECT_NEAR(pt.regret, 0.06, 1e-9);
    } else {
      EXPECT_EQ(pt.own_timings, "") << pt.workload_key; // the choice is the fastest elsewhere
    }
  }
  EXPECT_TRUE(seen_noise);
  // The table's rules: at batch 1, 4096 tokens, v1 0.5% ahead of the best v2, within the 1%
  // spread, so the table carries v2 from 2048 tokens, where v2 wins beyond noise.
  std::vector<json> tie = p.lines;
  const double v2_best = cost(decode(1, 4096), cs[3], 0.5e-9 * 1500);
  for (json& l : tie) {
    if (l["workload_key"] == decode(1, 4096).key() && l["config_key"] == cs[1].key()) {
      l = line_of(decode(1, 4096), cs[1], v2_best * 0.995);
    }
  }
  const std::vector<MeasurementRecord> tie_records = to_records(tie);
  const json tie_table = table_of(tie);
  bool seen_rules = false;
  for (const TableJudgement::Point& pt :
       judge_table(tie_records, tie_table, tie_table, &tie_records).each) {
    if (pt.workload_key == decode(1, 4096).key()) {
      seen_rules = true;
      EXPECT_EQ(pt.config_key, cs[3].key());
      EXPECT_EQ(pt.own_timings, "best_ahead");
      EXPECT_NEAR(pt.regret, 1.0 / 0.995 - 1.0, 1e-9);
    }
  }
  EXPECT_TRUE(seen_rules);
  EXPECT_EQ(j.to_json()["each_point"][0]["own_timings"], nullptr);
}

// Resumes the search of `p` after every third line of its own run, as sweep does, and expects the
// same runs in the same order and stages; returns how many times the run went back to a point it
// had left (a neighbour measured later won with a configuration that point never timed).
int expect_resumes_to_the_same_runs(const Planted& p) {
  const AdaptiveSearch search(p.points);
  const std::vector<json> lines = replay_search(search, p.measured);
  for (std::size_t cut = 0; cut <= lines.size(); cut += 3) {
    // What a sweep killed after `cut` lines finds in results.jsonl.
    SearchObservations obs = search_observations({lines.begin(), lines.begin() + long(cut)});
    std::vector<std::string> next;
    // As sweep does: the point of the last line first, when it has runs left (the point in
    // flight), then each point the search asks for, until its runs are done.
    const auto finish = [&](std::size_t i) {
      for (auto runs = search.runs_at(i, obs); !runs.empty(); runs = search.runs_at(i, obs)) {
        for (const SearchRun& r : runs) {
          json l = p.measured.at(record_key(search.point(i).workload.key(), r.config.key()));
          l["search"] = {{"stage", search_stage_name(r.stage)}};
          observe(obs, l);
          next.push_back(l["workload_key"].get<std::string>() + l["config_key"].get<std::string>() +
                         search_stage_name(r.stage));
        }
      }
    };
    if (cut > 0) {
      for (std::size_t i = 0; i < search.size(); ++i) {
        if (search.point(i).workload.key() == lines[cut - 1]["workload_key"]) {
          finish(i);
        }
      }
    }
    while (const auto due = search.next_point(obs)) {
      EXPECT_FALSE(search.runs_at(due->index, obs).empty());
      finish(due->index);
    }
    EXPECT_EQ(next.size(), lines.size() - cut) << "cut " << cut;
    if (next.size() != lines.size() - cut) {
      continue;
    }
    for (std::size_t k = 0; k < next.size(); ++k) {
      const json& l = lines[cut + k];
      EXPECT_EQ(next[k], l["workload_key"].get<std::string>() + l["config_key"].get<std::string>() +
                             search_stage_name(line_stage(l)));
    }
  }
  int back = 0;
  std::set<std::string> left;
  for (std::size_t k = 1; k < lines.size(); ++k) {
    const std::string w = lines[k]["workload_key"];
    const std::string before = lines[k - 1]["workload_key"];
    if (w != before) {
      left.insert(before);
      back += left.count(w) ? 1 : 0;
    }
  }
  return back;
}

TEST(AdaptiveSearch, AResumedSearchReplaysTheSameDecisions) {
  EXPECT_EQ(expect_resumes_to_the_same_runs(planted(1500)), 0);
  // v2's best partition changes along the axis: neighbours measured later send the search back
  // to points it had left, and a resume anywhere makes the same runs.
  EXPECT_GT(expect_resumes_to_the_same_runs(
                planted(300.0,
                        [](const KernelConfig& c, int ctx) {
                          if (c.family != Family::decode_v2) {
                            return 1.0;
                          }
                          const int part = c.get("partition", 512);
                          return part == (ctx < 1024 ? 256 : ctx < 4096 ? 512 : 1024) ? 1.0 : 1.2;
                        })),
            0);
}

TEST(AdaptiveSearch, AnswersWithoutMeasurementsAreErrorsNotLoops) {
  Planted p = planted(1500);
  p.measured.clear(); // every run errs: each point is raced once and then settled
  const AdaptiveSearch search(p.points);
  const std::vector<json> lines = replay_search(search, p.measured);
  EXPECT_FALSE(lines.empty());
  for (const json& l : lines) {
    EXPECT_EQ(l["status"], "error");
  }
  EXPECT_LE(lines.size(), p.lines.size());
}

TEST(SearchCheck, CountsKernelCallsAndTheDriftBetweenTwoSweeps) {
  const Workload w = decode(1, 512);
  const std::vector<KernelConfig> cs = configs();
  json timed = line_of(w, cs[0], 1e-3);
  timed["timing"]["reps"] = 10;
  timed["timing"]["warmup_calls"] = 2;
  json race = line_of(w, cs[1], 1e-3);
  race["timing"]["reps"] = 3;
  race["timing"]["warmup_calls"] = 1;
  json failed = {{"type", "measurement"}, {"status", "error"}}; // no timing
  const KernelCalls k = kernel_calls({timed, race, failed});
  EXPECT_EQ(k.timed, 13);
  EXPECT_EQ(k.warmup, 3);

  const auto rec = [&](int c, double t, const char* status = "ok", bool brief = false) {
    MeasurementRecord r;
    r.workload = w;
    r.config = cs[std::size_t(c)];
    r.status = status;
    r.median_s = t;
    r.brief = brief;
    return r;
  };
  const std::vector<MeasurementRecord> a = {rec(0, 1.0), rec(1, 2.0), rec(2, 4.0), rec(3, 1.0),
                                            rec(4, 1.0)};
  // Pairs 0-2 timed in full by both (ratios 1.1, 1.0, 0.5); 3 only raced by b, 4 failed there,
  // 5 absent from a: none of those counts.
  const std::vector<MeasurementRecord> b = {rec(0, 1.1),          rec(1, 2.0),
                                            rec(2, 2.0),          rec(3, 9.0, "ok", true),
                                            rec(4, 9.0, "fault"), rec(5, 9.0)};
  const SweepDrift d = sweep_drift(a, b);
  EXPECT_EQ(d.pairs, 3);
  EXPECT_DOUBLE_EQ(d.median, 1.0);
  EXPECT_NEAR(d.p10, 0.6, 1e-12);  // 0.5 + 0.2 * (1.0 - 0.5)
  EXPECT_NEAR(d.p90, 1.08, 1e-12); // 1.0 + 0.8 * (1.1 - 1.0)
  EXPECT_EQ(sweep_drift(a, {}).pairs, 0);
  // 1.5x apart or more, either way, is an outlier; the farthest from 1 first (0.5 before 1.6).
  ASSERT_EQ(d.outliers, 1);
  EXPECT_EQ(d.farthest.at(0).config_key, cs[2].key());
  EXPECT_DOUBLE_EQ(d.farthest.at(0).ratio, 0.5);
  const SweepDrift o = sweep_drift(a, {rec(0, 1.6), rec(1, 2.9), rec(2, 2.0)});
  EXPECT_EQ(o.outliers, 2);
  ASSERT_EQ(o.farthest.size(), 2u);
  EXPECT_DOUBLE_EQ(o.farthest[0].ratio, 0.5);
  EXPECT_DOUBLE_EQ(o.farthest[1].ratio, 1.6);
  EXPECT_EQ(o.to_json().at("outliers"), 2);
}

// The control: each of two exhaustive sweeps' tables judged on the other's timings; the floor is
// the larger of the two regrets, and an adaptive table is within it when neither of its figures
// is above the floor's.
TEST(SearchCheck, AControlJudgesEachExhaustiveTableOnTheOthersTimings) {
  // Two exhaustive sweeps of the same grid that disagree: v2 from 1500 keys in the first, from
  // 12000 in the control (v1 where the first has v2 from 2048 to 8192 keys).
  const Planted first = planted(1500);
  const Planted second = planted(12000);
  const std::vector<MeasurementRecord> ex = to_records(first.lines);
  const std::vector<MeasurementRecord> ctl = to_records(second.lines);
  const json ex_table = table_of(first.lines);
  const json ctl_table = table_of(second.lines);
  const ControlJudgement c = judge_control("ctl", ex, ex_table, ctl, ctl_table);
  EXPECT_EQ(c.folder, "ctl");
  EXPECT_EQ(c.measurements, int(ctl.size()));
  EXPECT_EQ(c.drift.pairs, int(ex.size()));
  const TableJudgement on_first = judge_table(ex, ex_table, ctl_table, &ctl);
  const TableJudgement on_control = judge_table(ctl, ctl_table, ex_table, &ex);
  EXPECT_DOUBLE_EQ(c.control.worst_regret, on_first.worst_regret);
  EXPECT_DOUBLE_EQ(c.first.worst_regret, on_control.worst_regret);
  EXPECT_GT(c.control.worst_regret, 0.1); // v1 at 2048 keys where v2 wins in the first sweep
  EXPECT_GT(c.first.worst_regret, 0.0);
  EXPECT_NE(c.control.worst_regret, c.first.worst_regret);
  EXPECT_DOUBLE_EQ(c.floor_mean(), std::max(on_first.mean_regret, on_control.mean_regret));
  EXPECT_DOUBLE_EQ(c.floor_worst(), std::max(on_first.worst_regret, on_control.worst_regret));
  EXPECT_FALSE(c.floor_meets_goals());
  EXPECT_FALSE(c.adaptive);
  // Beside the floor: within when neither figure is above it; unknown is not within.
  EXPECT_FALSE(c.adaptive_within_floor());
  ControlJudgement w = c;
  w.adaptive_on_first = {c.floor_mean(), c.floor_worst()};
  EXPECT_TRUE(w.adaptive_within_floor());
  w.adaptive_on_first = {c.floor_mean() + 0.001, 0.0};
  EXPECT_FALSE(w.adaptive_within_floor());
  w.adaptive_on_first = {0.0, c.floor_worst() + 0.001};
  EXPECT_FALSE(w.adaptive_within_floor());
  const json j = w.to_json();
  EXPECT_DOUBLE_EQ(j.at("floor").at("worst_regret").get<double>(), c.floor_worst());
  EXPECT_FALSE(j.at("floor").at("adaptive_within_floor").get<bool>());
  EXPECT_FALSE(j.contains("adaptive_table_on_control"));
  EXPECT_FALSE(c.to_json().at("floor").contains("adaptive_within_floor"));
  // The same sweep as its own control: one judgement both ways, which loses nothing here (the
  // planted costs leave no tie to carry), and the goals hold; an adaptive table (here the first
  // sweep's own) is judged on the control's timings.
  const ControlJudgement same = judge_control("copy", ex, ex_table, ex, ex_table, &ex, &ex_table);
  EXPECT_DOUBLE_EQ(same.drift.median, 1.0);
  EXPECT_LT(same.floor_worst(), 1e-12);
  EXPECT_TRUE(same.floor_meets_goals());
  ASSERT_TRUE(same.adaptive);
  EXPECT_EQ(same.adaptive->family_agree, same.adaptive->points);
  EXPECT_TRUE(same.to_json().contains("adaptive_table_on_control"));
}

// Two sweeps pooled: each pair's faster median where both timed it with status ok, the first
// sweep's line otherwise; the search replayed on the pool steers by it.
TEST(SearchCheck, PoolsTwoSweepsByTheFasterTimingAndReplaysTheSearchOnThePool) {
  const Workload w = decode(1, 512);
  const std::vector<KernelConfig> cs = configs();
  const json header = {{"type", "header"}};
  json slow_in_a = line_of(w, cs[0], 2.0);
  json failed_in_b = line_of(w, cs[1], 1.0);
  json only_in_a = line_of(w, cs[2], 1.0);
  json faster_in_a = line_of(w, cs[3], 1.0);
  const std::vector<json> a = {header, slow_in_a, failed_in_b, only_in_a, faster_in_a};
  json b_fault = line_of(w, cs[1], 0.1);
  b_fault["status"] = "fault";
  const std::vector<json> b = {line_of(w, cs[0], 1.5), b_fault, line_of(w, cs[3], 1.2),
                               line_of(w, cs[4], 0.1)};
  const std::vector<json> pool = pool_faster(a, b);
  ASSERT_EQ(pool.size(), a.size()); // a's lines, in a's order: b's extra pair is not added
  EXPECT_EQ(pool[0], header);
  EXPECT_DOUBLE_EQ(pool[1]["timing"]["median_s"].get<double>(), 1.5); // b faster
  EXPECT_EQ(pool[2], failed_in_b); // b's line is a fault: a's stays
  EXPECT_EQ(pool[3], only_in_a);
  EXPECT_EQ(pool[4], faster_in_a);

  // One disturbed timing in the first sweep: v2's partition 512 (the fastest v2 at 2048 keys)
  // timed 1.5x slow there. Pooled with a clean second sweep, the replayed search loses nothing
  // and chooses partition 512 there, as on clean timings; on the disturbed sweep alone it does not.
  const Planted clean = planted(1500);
  std::vector<json> disturbed = clean.lines;
  const KernelConfig p512 = cfg(Family::decode_v2, {{"partition", 512}, {"split", 1}});
  for (json& l : disturbed) {
    if (l["workload_key"] == decode(1, 2048).key() && l["config_key"] == p512.key()) {
      l["timing"]["median_s"] = l["timing"]["median_s"].get<double>() * 1.5;
    }
  }
  const json prov_header = {{"type", "header"},
                            {"device", {{"name", "test"}, {"backend", "cpu"}, {"threads", 2}}}};
  const PooledReplay pooled = replay_pooled(prov_header, disturbed, clean.lines);
  EXPECT_EQ(pooled.plan, int(clean.lines.size()));
  EXPECT_GT(pooled.measurements, 0);
  EXPECT_LT(pooled.measurements, pooled.plan);
  EXPECT_LT(pooled.replayed.worst_regret, 1e-9);
  EXPECT_LT(pooled.self.worst_regret, 1e-9);
  EXPECT_EQ(pooled.replayed.family_agree, pooled.replayed.points);
  const auto choice_at = [](const TableJudgement& t, const Workload& at) {
    for (const TableJudgement::Point& pt : t.each) {
      if (pt.workload_key == at.key()) {
        return pt.config_key;
      }
    }
    return std::string();
  };
  EXPECT_EQ(choice_at(pooled.replayed, decode(1, 2048)), p512.key());
  const PooledReplay alone = replay_pooled(prov_header, disturbed, {});
  EXPECT_NE(choice_at(alone.replayed, decode(1, 2048)), p512.key());
  const json j = pooled.to_json();
  EXPECT_EQ(j.at("measurements"), pooled.measurements);
  EXPECT_DOUBLE_EQ(j.at("measurement_ratio").get<double>(),
                   double(pooled.measurements) / pooled.plan);
  // The same replay judged as the control's: it is reported with it.
  ControlJudgement c = judge_control("ctl", to_records(disturbed), table_of(disturbed),
                                     to_records(clean.lines), table_of(clean.lines));
  EXPECT_FALSE(c.to_json().contains("pooled_replay"));
  c.pooled = pooled;
  EXPECT_EQ(c.to_json().at("pooled_replay").at("measurements"), pooled.measurements);
}

TEST(AdaptiveSearch, ParsesItsModes) {
  EXPECT_EQ(parse_search_mode("adaptive"), SearchMode::adaptive);
  EXPECT_EQ(parse_search_mode("exhaustive"), SearchMode::exhaustive);
  EXPECT_THROW((void)parse_search_mode("greedy"), InputError);
  const TimingOptions t = race_timing({});
  EXPECT_GE(t.min_reps, 3);
  EXPECT_LT(t.max_seconds, TimingOptions{}.max_seconds);
}

} // namespace
} // namespace attn
