// Tests of measure(): the statistics it keeps and when it stops, on synthetic sample sequences
// (no clock involved), so that every figure can be computed by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "src/backends/timing.h"

using namespace attn;

namespace {

// A one_rep that replays `samples` in order (cycling), counting its calls.
struct Replay {
  std::vector<double> samples;
  int calls = 0;
  double operator()() { return samples[std::size_t(calls++) % samples.size()]; }
};

TimingOptions options(int warmup, int min_reps, int max_reps, double max_seconds,
                      double target_noise) {
  TimingOptions o;
  o.warmup = warmup;
  o.min_reps = min_reps;
  o.max_reps = max_reps;
  o.max_seconds = max_seconds;
  o.target_noise = target_noise;
  return o;
}

TEST(Timing, WarmsUpBeforeMeasuring) {
  int warm = 0;
  int measured_before_warm_done = 0;
  Replay r{{1e-3}};
  const TimingResult t = measure(
      [&] {
        measured_before_warm_done += warm < 5;
        return r();
      },
      [&] { ++warm; }, options(5, 10, 100, 10.0, 0.02), "synthetic");
  EXPECT_EQ(warm, 5);
  EXPECT_EQ(measured_before_warm_done, 0);
  EXPECT_EQ(t.method, "synthetic");
}

TEST(Timing, ConstantSamplesConvergeAtMinReps) {
  Replay r{{2.5e-4}};
  const TimingResult t = measure(
      std::ref(r), [] {}, options(0, 10, 1000, 10.0, 0.02), "m");
  EXPECT_TRUE(t.converged);
  EXPECT_EQ(t.reps, 10);
  EXPECT_EQ(r.calls, 10);
  EXPECT_DOUBLE_EQ(t.median_s, 2.5e-4);
  EXPECT_DOUBLE_EQ(t.min_s, 2.5e-4);
  EXPECT_DOUBLE_EQ(t.max_s, 2.5e-4);
  EXPECT_DOUBLE_EQ(t.rel_noise, 0.0);
}

TEST(Timing, QuantilesInterpolateBetweenSortedSamples) {
  // Four samples 1..4 (given out of order): median 2.5, p25 1.75, p75 3.25 (linear).
  Replay r{{3.0, 1.0, 4.0, 2.0}};
  const TimingResult t = measure(
      std::ref(r), [] {}, options(0, 4, 4, 100.0, 0.0), "m");
  EXPECT_EQ(t.reps, 4);
  EXPECT_DOUBLE_EQ(t.median_s, 2.5);
  EXPECT_DOUBLE_EQ(t.p25_s, 1.75);
  EXPECT_DOUBLE_EQ(t.p75_s, 3.25);
  EXPECT_DOUBLE_EQ(t.min_s, 1.0);
  EXPECT_DOUBLE_EQ(t.max_s, 4.0);
  EXPECT_DOUBLE_EQ(t.rel_noise, 1.5 / 2.5);
  EXPECT_FALSE(t.converged);
}

TEST(Timing, NoisySamplesRunToMaxReps) {
  // 101 samples, 1..101 ms in a scrambled order: never under 2% noise, so all 101 are taken.
  std::vector<double> s;
  for (int i = 0; i < 101; ++i) {
    s.push_back(1e-3 * double(1 + (i * 37) % 101));
  }
  Replay r{s};
  const TimingResult t = measure(
      std::ref(r), [] {}, options(0, 10, 101, 1000.0, 0.02), "m");
  EXPECT_FALSE(t.converged);
  EXPECT_EQ(t.reps, 101);
  EXPECT_EQ(r.calls, 101);
  EXPECT_DOUBLE_EQ(t.median_s, 51e-3);
  EXPECT_DOUBLE_EQ(t.p25_s, 26e-3);
  EXPECT_DOUBLE_EQ(t.p75_s, 76e-3);
  EXPECT_DOUBLE_EQ(t.min_s, 1e-3);
  EXPECT_DOUBLE_EQ(t.max_s, 101e-3);
  EXPECT_NEAR(t.rel_noise, 50.0 / 51.0, 1e-12);
}

TEST(Timing, StopsWhenTheTimeBudgetIsSpent) {
  // Alternating 0.1 s and 0.3 s never converges; the measured total passes 1 s after six reps
  // (0.1, 0.4, 0.5, 0.8, 0.9, 1.2).
  Replay r{{0.1, 0.3}};
  const TimingResult t = measure(
      std::ref(r), [] {}, options(0, 3, 1000, 1.0, 0.02), "m");
  EXPECT_FALSE(t.converged);
  EXPECT_EQ(t.reps, 6);
  EXPECT_DOUBLE_EQ(t.median_s, 0.2);
  // The budget never cuts below min_reps: five 10 s launches against a 1 s budget.
  Replay slow{{10.0, 12.0}};
  const TimingResult u = measure(
      std::ref(slow), [] {}, options(0, 5, 1000, 1.0, 0.02), "m");
  EXPECT_EQ(u.reps, 5);
  EXPECT_FALSE(u.converged);
}

TEST(Timing, ConvergesOnceTheSpreadSettles) {
  // Two outliers, then a steady 1 ms: the interquartile spread falls under 2% and it stops long
  // before max_reps, with the median at the steady value.
  std::vector<double> s = {5e-3, 0.2e-3};
  s.resize(200, 1e-3);
  Replay r{s};
  const TimingResult t = measure(
      std::ref(r), [] {}, options(0, 3, 150, 1000.0, 0.02), "m");
  EXPECT_TRUE(t.converged);
  EXPECT_LT(t.reps, 20);
  EXPECT_GE(t.reps, 3);
  EXPECT_DOUBLE_EQ(t.median_s, 1e-3);
  EXPECT_DOUBLE_EQ(t.max_s, 5e-3);
  EXPECT_DOUBLE_EQ(t.min_s, 0.2e-3);
  EXPECT_LE(t.rel_noise, 0.02);
}

TEST(Timing, MaxRepsBelowMinRepsWins) {
  Replay r{{1.0, 2.0}};
  const TimingResult t = measure(
      std::ref(r), [] {}, options(0, 10, 4, 1000.0, 0.0), "m");
  EXPECT_EQ(t.reps, 4);
  EXPECT_EQ(r.calls, 4);
}

TEST(Timing, JsonCarriesEveryField) {
  Replay r{{3.0, 1.0, 4.0, 2.0}};
  const TimingResult t = measure(
      std::ref(r), [] {}, options(0, 4, 4, 100.0, 0.0), "events");
  const nlohmann::json j = to_json(t);
  EXPECT_DOUBLE_EQ(j.at("median_s").get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j.at("p25_s").get<double>(), 1.75);
  EXPECT_DOUBLE_EQ(j.at("p75_s").get<double>(), 3.25);
  EXPECT_DOUBLE_EQ(j.at("min_s").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("max_s").get<double>(), 4.0);
  EXPECT_EQ(j.at("reps").get<int>(), 4);
  EXPECT_FALSE(j.at("converged").get<bool>());
  EXPECT_EQ(j.at("method").get<std::string>(), "events");
  EXPECT_TRUE(j.contains("rel_noise"));
}

} // namespace
