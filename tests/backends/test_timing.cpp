// Tests of measure(): the warm-up it does (on a fake clock, and once on the real one), the
// statistics it keeps and when it stops, on synthetic sample sequences, so that every figure can
// be computed by hand; and the timing JSON with its clock fields and their sweep summary.
#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "src/backends/host/host_run.h"
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
  o.warmup_seconds = 0.0; // the count alone, unless a test sets a duration
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

// A clock that only the test moves.
struct FakeClock {
  double t = 100.0;
  double operator()() const { return t; }
};

TEST(Timing, WarmsUpForADurationNotACount) {
  // Each warm-up call takes 1/64 s of fake time (exact in binary): 5/64 s of warm-up is five
  // calls, though the count asks for one, and none of the measured reps runs before the fifth.
  FakeClock clock;
  int warm = 0;
  int measured_early = 0;
  TimingOptions o = options(1, 3, 3, 10.0, 0.0);
  o.warmup_seconds = 5.0 / 64;
  const TimingResult t = measure(
      [&] {
        measured_early += warm < 5;
        return 1e-3;
      },
      [&] {
        ++warm;
        clock.t += 1.0 / 64;
      },
      o, "m", std::cref(clock));
  EXPECT_EQ(warm, 5);
  EXPECT_EQ(t.warmup_calls, 5);
  EXPECT_DOUBLE_EQ(t.warmup_s, 5.0 / 64);
  EXPECT_EQ(measured_early, 0);
  EXPECT_EQ(t.reps, 3);
}

TEST(Timing, WarmUpCountIsAMinimum) {
  // A profile's old "warmup" count still holds when the duration passes sooner: eight calls of
  // 1/64 s against a 2/64 s duration.
  FakeClock clock;
  int warm = 0;
  TimingOptions o = options(8, 1, 1, 10.0, 0.0);
  o.warmup_seconds = 2.0 / 64;
  const TimingResult t = measure([] { return 1.0; },
                                 [&] {
                                   ++warm;
                                   clock.t += 1.0 / 64;
                                 },
                                 o, "m", std::cref(clock));
  EXPECT_EQ(warm, 8);
  EXPECT_EQ(t.warmup_calls, 8);
  EXPECT_DOUBLE_EQ(t.warmup_s, 8.0 / 64);
  // Calls slower than the whole duration: the one call the count asks for is enough.
  FakeClock slow;
  int slow_calls = 0;
  TimingOptions one = options(1, 1, 1, 10.0, 0.0);
  one.warmup_seconds = 1.0 / 16;
  (void)measure([] { return 1.0; },
                [&] {
                  ++slow_calls;
                  slow.t += 0.25;
                },
                one, "m", std::cref(slow));
  EXPECT_EQ(slow_calls, 1);
  // No count and no duration: no warm-up at all.
  int none = 0;
  (void)measure([] { return 1.0; }, [&] { ++none; }, options(0, 1, 1, 10.0, 0.0), "m",
                std::cref(clock));
  EXPECT_EQ(none, 0);
}

TEST(Timing, WarmUpDurationOnTheSteadyClock) {
  // The default clock: 20 ms of warm-up calls of about 1 ms each.
  int warm = 0;
  TimingOptions o = options(1, 1, 1, 10.0, 0.0);
  o.warmup_seconds = 0.02;
  const auto t0 = std::chrono::steady_clock::now();
  const TimingResult t = measure([] { return 1.0; },
                                 [&] {
                                   ++warm;
                                   std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                 },
                                 o, "m");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(t.warmup_s, 0.02);
  EXPECT_GE(took, 0.02);
  EXPECT_GE(warm, 2);
  EXPECT_LE(warm, 21); // each call sleeps at least 1 ms
  EXPECT_EQ(t.warmup_calls, warm);
}

TEST(Timing, ModeNamesRoundTrip) {
  EXPECT_STREQ(timing_mode_name(TimingMode::events), "events");
  EXPECT_STREQ(timing_mode_name(TimingMode::graph), "graph");
  EXPECT_EQ(parse_timing_mode("events"), TimingMode::events);
  EXPECT_EQ(parse_timing_mode("graph"), TimingMode::graph);
  EXPECT_FALSE(parse_timing_mode("Graph").has_value());
  EXPECT_FALSE(parse_timing_mode("").has_value());
  EXPECT_EQ(TimingOptions{}.mode, TimingMode::events);
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
  EXPECT_EQ(j.at("warmup_calls").get<int>(), 0);
  // No clock reading (the CPU backend): no clock fields at all.
  EXPECT_FALSE(j.contains("sm_clock_mhz"));
  EXPECT_FALSE(j.contains("clocks"));
  EXPECT_FALSE(j.contains("throttled"));
  // No CPU wait recorded (a GPU timing, or no schedstat), one attempt: neither field.
  EXPECT_FALSE(j.contains("cpu_wait_share"));
  EXPECT_FALSE(j.contains("attempts"));
}

TEST(Timing, CpuWaitSummaryCountsMeasurementsOverTheLimit) {
  const auto waited = [](double share, int attempts) {
    TimingResult t;
    t.median_s = 1e-3;
    t.cpu_wait_share = share;
    t.attempts = attempts;
    return to_json(t);
  };
  const nlohmann::json made_again = waited(0.6, 3);
  EXPECT_DOUBLE_EQ(made_again.at("cpu_wait_share").get<double>(), 0.6);
  EXPECT_EQ(made_again.at("attempts").get<int>(), 3);
  const nlohmann::json s = cpu_wait_summary(
      {waited(0.01, 1), waited(0.1, 2), made_again, nlohmann::json(), to_json(TimingResult{})});
  EXPECT_EQ(s.at("source"), "schedstat");
  EXPECT_EQ(s.at("measurements").get<int>(), 3);
  EXPECT_EQ(s.at("over_limit").get<int>(), 1);
  EXPECT_EQ(s.at("made_again").get<int>(), 2);
  EXPECT_DOUBLE_EQ(s.at("worst_share").get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(s.at("limit").get<double>(), kCpuWaitLimit);
  EXPECT_TRUE(cpu_wait_summary({to_json(TimingResult{})}).is_null());
}

// A host call that shares its one CPU with a busy process waits for it about half the time: the
// measurement says so, and is made again up to the limit of attempts (but once only where the
// call runs more threads than the CPUs it may use). Without that process it still records its
// wait.
TEST(HostTiming, WaitsForACpuAreMeasuredAndMadeAgain) {
  if (!std::ifstream("/proc/thread-self/schedstat")) {
    GTEST_SKIP() << "no /proc/thread-self/schedstat: the wait for a CPU is not known here";
  }
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &before)) {
    ++cpu;
  }
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0); // this thread, and a child forked now
  const auto spin_1ms = [] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  // Ten reps of 1 ms at least: several of the scheduler's time slices, so the busy process gets
  // the CPU during each measurement.
  TimingOptions opt = options(1, 10, 20, 0.05, 0.0);
  opt.flush_cache = false;
  int started[2];
  ASSERT_EQ(pipe(started), 0);
  const pid_t busy = fork();
  ASSERT_GE(busy, 0);
  if (busy == 0) {
    const char ready = 1;
    (void)!write(started[1], &ready, 1);
    for (;;) {
      asm volatile("" ::: "memory"); // a loop the compiler keeps: busy until killed
    }
  }
  char ready = 0;
  (void)!read(started[0], &ready, 1); // it runs: it took this CPU at least once
  close(started[0]);
  close(started[1]);
  const TimingResult shared = time_host_call(spin_1ms, opt, 0, "steady_clock");
  // A call that says it runs on more threads than the one CPU it may use waits for its own
  // threads: made once, its wait recorded.
  ASSERT_EQ(usable_cpus(), 1);
  const TimingResult crowded = time_host_call(spin_1ms, opt, 0, "steady_clock", {}, 2);
  kill(busy, SIGKILL);
  waitpid(busy, nullptr, 0);
  const TimingResult alone = time_host_call(spin_1ms, opt, 0, "steady_clock");
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
  ASSERT_TRUE(shared.cpu_wait_share.has_value());
  EXPECT_GT(*shared.cpu_wait_share, kCpuWaitLimit);
  EXPECT_EQ(shared.attempts, 1 + kCpuWaitRetries);
  EXPECT_EQ(to_json(shared).at("attempts").get<int>(), 1 + kCpuWaitRetries);
  ASSERT_TRUE(crowded.cpu_wait_share.has_value());
  EXPECT_GT(*crowded.cpu_wait_share, kCpuWaitLimit);
  EXPECT_EQ(crowded.attempts, 1);
  ASSERT_TRUE(alone.cpu_wait_share.has_value());
  EXPECT_GE(*alone.cpu_wait_share, 0.0); // not asserted small: CTest may run a test beside it
}

TimingResult with_clocks(std::optional<ClockReading> c) {
  TimingResult t;
  t.median_s = 1e-3;
  t.clocks = std::move(c);
  return t;
}

ClockReading nvml(int mhz, int max_mhz, std::vector<std::string> reasons, bool throttled) {
  ClockReading c;
  c.source = "nvml";
  c.sm_clock_mhz = mhz;
  c.sm_clock_max_mhz = max_mhz;
  c.throttle_reasons = std::move(reasons);
  c.throttled = throttled;
  return c;
}

TEST(Timing, JsonCarriesClocksOrWhyNot) {
  const nlohmann::json j = to_json(with_clocks(nvml(1755, 1980, {"sw_power_cap"}, true)));
  EXPECT_EQ(j.at("sm_clock_mhz").get<int>(), 1755);
  EXPECT_EQ(j.at("sm_clock_max_mhz").get<int>(), 1980);
  EXPECT_EQ(j.at("throttle_reasons"), nlohmann::json::array({"sw_power_cap"}));
  EXPECT_TRUE(j.at("throttled").get<bool>());
  EXPECT_FALSE(j.contains("clocks"));
  ClockReading none;
  none.source = "nvml unavailable: libnvidia-ml.so.1 not found";
  EXPECT_FALSE(none.available());
  const nlohmann::json k = to_json(with_clocks(none));
  EXPECT_EQ(k.at("clocks").get<std::string>(), "nvml unavailable: libnvidia-ml.so.1 not found");
  EXPECT_FALSE(k.contains("sm_clock_mhz"));
  EXPECT_FALSE(k.contains("throttled"));
}

TEST(Timing, ClockSummaryCountsThrottledMeasurements) {
  const std::vector<nlohmann::json> timings = {
      to_json(with_clocks(nvml(1980, 1980, {}, false))),
      to_json(with_clocks(nvml(1500, 1980, {"hw_thermal_slowdown", "sw_power_cap"}, true))),
      to_json(with_clocks(nvml(1900, 1980, {"gpu_idle"}, false))),
      nlohmann::json(), // a failed or skipped measurement has no timing
  };
  const nlohmann::json s = clock_summary(timings);
  EXPECT_EQ(s.at("source"), "nvml");
  EXPECT_EQ(s.at("measurements").get<int>(), 3);
  EXPECT_EQ(s.at("throttled_measurements").get<int>(), 1);
  EXPECT_EQ(s.at("sm_clock_mhz_min").get<int>(), 1500);
  EXPECT_EQ(s.at("sm_clock_mhz_max").get<int>(), 1980);
  EXPECT_EQ(s.at("sm_clock_max_mhz").get<int>(), 1980);
  EXPECT_EQ(s.at("throttle_reasons"),
            nlohmann::json::array({"gpu_idle", "hw_thermal_slowdown", "sw_power_cap"}));
  ClockReading none;
  none.source = "nvml unavailable: nvmlInit failed: Driver Not Loaded";
  EXPECT_EQ(clock_summary({to_json(with_clocks(none)), to_json(with_clocks(none))}),
            "nvml unavailable: nvmlInit failed: Driver Not Loaded");
  EXPECT_EQ(clock_summary({to_json(with_clocks(std::nullopt))}), "not recorded");
  EXPECT_EQ(clock_summary({}), "not recorded");
}

// A stand-in for the GPU's held probe rep: the timeouts it was given, and a call that holds up
// its own enqueue for `enqueue_ns` (a host synchronisation waits for the hold to give up, which
// looks the same as an enqueue longer than any timeout).
struct HeldProbe {
  explicit HeldProbe(unsigned long long enqueue) : enqueue_ns(enqueue) {}
  unsigned long long enqueue_ns = 0;
  std::vector<unsigned long long> timeouts;
  bool operator()(unsigned long long timeout_ns) {
    timeouts.push_back(timeout_ns);
    return enqueue_ns > timeout_ns;
  }
};

TEST(Timing, AQuickCallIsHeldAfterOneShortProbe) {
  HeldProbe p{50'000}; // 50 us to enqueue
  EXPECT_FALSE(synchronises_while_enqueued(std::ref(p), 200'000'000, 2'000'000'000));
  EXPECT_EQ(p.timeouts, (std::vector<unsigned long long>{200'000'000}));
}

TEST(Timing, ASlowHostIsProbedAgainWithTheFullTimeoutAndStaysHeld) {
  HeldProbe p{500'000'000}; // half a second to enqueue: longer than the probe, within a rep's
  EXPECT_FALSE(synchronises_while_enqueued(std::ref(p), 200'000'000, 2'000'000'000));
  EXPECT_EQ(p.timeouts, (std::vector<unsigned long long>{200'000'000, 2'000'000'000}));
}

TEST(Timing, ACallThatOutlastsBothProbesSynchronises) {
  HeldProbe p{~0ull}; // waits on the hold until it gives up, whatever its timeout
  EXPECT_TRUE(synchronises_while_enqueued(std::ref(p), 200'000'000, 2'000'000'000));
  EXPECT_EQ(p.timeouts, (std::vector<unsigned long long>{200'000'000, 2'000'000'000}));
}

TEST(Timing, GpuMethodSaysWhetherTheStreamWasHeld) {
  EXPECT_EQ(gpu_timing_method("cuda-events", true, 100),
            "cuda-events, stream held, L2 flushed (100 MiB clean read)");
  EXPECT_EQ(gpu_timing_method("cuda-graph replay", true, std::nullopt),
            "cuda-graph replay, stream held, L2 warm");
  EXPECT_EQ(gpu_timing_method("cuda-events", false, 100),
            "cuda-events, stream not held (the call synchronises the host while it is enqueued: "
            "launch gaps included), L2 flushed (100 MiB clean read)");
}

} // namespace
