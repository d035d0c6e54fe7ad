#include "src/backends/timing.h"


#include <algorithm>
#include <cstdio>
#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace attn {

namespace {
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) {
    return 0.0;
  }
  const double pos = q * double(sorted.size() - 1);
  const auto lo = std::size_t(pos);
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  const double f = pos - double(lo);
  return sorted[lo] * (1 - f) + sorted[hi] * f;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
} // namespace

const char* timing_mode_name(TimingMode m) { return m == TimingMode::graph ? "graph" : "events"; }

std::optional<TimingMode> parse_timing_mode(std::string_view s) {
  if (s == "events") {
    return TimingMode::events;
  }
  if (s == "graph") {
    return TimingMode::graph;
  }
  return std::nullopt;
}

std::string mib_text(uint64_t bytes) {
  char buf[48];
  if (bytes >= (uint64_t(10) << 20)) {
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>(bytes >> 20));
  } else if (bytes >= (uint64_t(1) << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1 << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

TimingResult measure(const std::function<double()>& one_rep, const std::function<void()>& warm_one,
                     const TimingOptions& opt, std::string method) {
  return measure(one_rep, warm_one, opt, std::move(method), steady_seconds);
}

TimingResult measure(const std::function<double()>& one_rep, const std::function<void()>& warm_one,
                     const TimingOptions& opt, std::string method,
                     const std::function<double()>& now) {
  TimingResult r;
  r.method = std::move(method);
  // A duration, not a count: a GPU that sat idle (or a CPU in a low P-state) needs tens of
  // milliseconds of work before it reaches its boost clock, however short each call is.
  const double warm_start = now();
  while (r.warmup_calls < opt.warmup || now() - warm_start < opt.warmup_seconds) {
    warm_one();
    ++r.warmup_calls;
  }
  r.warmup_s = now() - warm_start;
  std::vector<double> samples;
  double total = 0.0;
  while (int(samples.size()) < opt.max_reps) {
    const double t = one_rep();
    samples.push_back(t);
    total += t;
    if (int(samples.size()) >= opt.min_reps) {
      std::vector<double> s = samples;
      std::sort(s.begin(), s.end());
      const double med = quantile(s, 0.5);
      const double noise = med > 0 ? (quantile(s, 0.75) - quantile(s, 0.25)) / med : 0.0;
      if (noise <= opt.target_noise) {
        r.converged = true;
        break;
      }
      if (total >= opt.max_seconds) {
        break;
      }
    }
  }
  std::sort(samples.begin(), samples.end());
  r.reps = int(samples.size());
  r.median_s = quantile(samples, 0.5);
  r.min_s = samples.empty() ? 0.0 : samples.front();
  r.max_s = samples.empty() ? 0.0 : samples.back();
  r.p25_s = quantile(samples, 0.25);
  r.p75_s = quantile(samples, 0.75);
  r.rel_noise = r.median_s > 0 ? (r.p75_s - r.p25_s) / r.median_s : 0.0;
  return r;
}

bool synchronises_while_enqueued(
    const std::function<bool(unsigned long long timeout_ns)>& held_call_timed_out,
    unsigned long long probe_ns, unsigned long long full_ns) {
  // The short probe first: a call that does not synchronise is enqueued in microseconds to
  // milliseconds, and a call that does costs only probe_ns here.
  if (!held_call_timed_out(probe_ns)) {
    return false;
  }
  return held_call_timed_out(full_ns);
}

std::string gpu_timing_method(const std::string& what, bool stream_held,
                              std::optional<long long> flush_mib) {
  std::string m = what;
  m += stream_held ? ", stream held"
                   : ", stream not held (the call synchronises the host while it is enqueued: "
                     "launch gaps included)";
  if (flush_mib) {
    m += ", L2 flushed (" + std::to_string(*flush_mib) + " MiB clean read)";
  } else {
    m += ", L2 warm";
  }
  return m;
}

nlohmann::json to_json(const TimingResult& t) {
  nlohmann::json j = {
      {"median_s", t.median_s}, {"min_s", t.min_s},         {"max_s", t.max_s},
      {"p25_s", t.p25_s},       {"p75_s", t.p75_s},         {"rel_noise", t.rel_noise},
      {"reps", t.reps},         {"converged", t.converged}, {"warmup_calls", t.warmup_calls},
      {"warmup_s", t.warmup_s}, {"method", t.method}};
  if (t.cpu_wait_share) {
    j["cpu_wait_share"] = *t.cpu_wait_share;
  }
  if (t.attempts > 1) {
    j["attempts"] = t.attempts;
  }
  if (t.clocks) {
    if (t.clocks->available()) {
      j["sm_clock_mhz"] = t.clocks->sm_clock_mhz;
      j["sm_clock_max_mhz"] = t.clocks->sm_clock_max_mhz;
      j["throttle_reasons"] = t.clocks->throttle_reasons;
      j["throttled"] = t.clocks->throttled;
    } else {
      j["clocks"] = t.clocks->source;
    }
  }
  return j;
}

nlohmann::json cpu_wait_summary(const std::vector<nlohmann::json>& timings) {
  int recorded = 0;
  int over = 0;
  int again = 0;
  double worst = 0.0;
  for (const auto& t : timings) {
    if (!t.is_object() || !t.contains("cpu_wait_share") || !t["cpu_wait_share"].is_number()) {
      continue;
    }
    const double share = t["cpu_wait_share"].get<double>();
    ++recorded;
    over += share > kCpuWaitLimit ? 1 : 0;
    again += t.value("attempts", 1) > 1 ? 1 : 0;
    worst = std::max(worst, share);
  }
  if (recorded == 0) {
    return nullptr;
  }
  return {{"source", "schedstat"}, {"limit", kCpuWaitLimit}, {"measurements", recorded},
          {"over_limit", over},    {"made_again", again},    {"worst_share", worst}};
}

nlohmann::json clock_summary(const std::vector<nlohmann::json>& timings) {
  int read = 0;
  int throttled = 0;
  int lo = 0;
  int hi = 0;
  int max_clock = 0;
  std::set<std::string> reasons;
  std::string unavailable;
  for (const auto& t : timings) {
    if (!t.is_object()) {
      continue;
    }
    if (t.contains("sm_clock_mhz")) {
      const int c = t.value("sm_clock_mhz", 0);
      lo = read == 0 ? c : std::min(lo, c);
      hi = read == 0 ? c : std::max(hi, c);
      max_clock = std::max(max_clock, t.value("sm_clock_max_mhz", 0));
      ++read;
      throttled += t.value("throttled", false) ? 1 : 0;
      for (const auto& r : t.value("throttle_reasons", nlohmann::json::array())) {
        reasons.insert(r.get<std::string>());
      }
    } else if (unavailable.empty() && t.contains("clocks") && t["clocks"].is_string()) {
      unavailable = t["clocks"].get<std::string>();
    }
  }
  if (read == 0) {
    return unavailable.empty() ? std::string("not recorded") : unavailable;
  }
  return {{"source", "nvml"},
          {"measurements", read},
          {"throttled_measurements", throttled},
          {"sm_clock_mhz_min", lo},
          {"sm_clock_mhz_max", hi},
          {"sm_clock_max_mhz", max_clock},
          {"throttle_reasons", std::vector<std::string>(reasons.begin(), reasons.end())}};
}

} // namespace attn
