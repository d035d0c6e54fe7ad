// `attn-tune sweep`: runs a profile on a device (GPU 0 when there is one, else the CPU),
// checking before timing, appending results.jsonl, and writes the threshold table.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include "build_info.h"
#include "src/backends/host/host_run.h"
#include "src/backends/registry.h"
#include "src/cli/commands.h"
#include "src/cli/exit_codes.h"
#include "src/cli/kernels_option.h"
#include "src/cli/report_command.h"
#include "src/cli/table_text.h"
#include "src/model/errors.h"
#include "src/tuning/length_mix.h"
#include "src/tuning/sweep.h"
#include "src/tuning/workloads.h"

namespace attn::cli {

namespace {
struct SweepOptions {
  std::string device;
  std::string profile = "default";
  std::string out;
  bool resume = false;
  int threads = 0;
  uint64_t seed = 1;
  bool publish = false;
  bool quiet = false;
  bool retry_faults = false;
  bool remeasure_noisy = false;
  bool no_wait = false;
  bool in_process = false;
  bool no_report = false;
  std::string timing;  // "events" or "graph"; empty: the profile's timing.mode
  std::string kernels; // a kernel plugin library; empty: the built-in kernels
  std::string shard;   // "I/N": measure shard I of N (src/tuning/shard.h); empty: all
  std::string
      search; // "exhaustive" or "adaptive"; empty: the folder's when resuming, else exhaustive
  std::string traffic; // a traffic trace (docs/traffic.md); empty: none
  int traffic_batches = 32;
  double hold_out = 0.25;
};

// Host timings whose threads still waited for a CPU above the limit: with more --threads than
// the CPUs this process may use, the kernels' threads waited for one another; otherwise other
// processes ran on this machine, even while those timings were made again. Their times include
// the waits. One line on stderr; nothing when every timing ran unhindered.
void warn_cpu_waits(const nlohmann::json& table, int threads) {
  const nlohmann::json waits =
      table.value("provenance", nlohmann::json::object()).value("cpu_wait", nlohmann::json());
  if (!waits.is_object() || waits.value("over_limit", 0) == 0) {
    return;
  }
  std::fprintf(stderr,
               "sweep: warning: %d of %d measurements waited for a CPU for more than %.0f%% of "
               "their time (the worst %.0f%%), and their times include the waits: ",
               waits.value("over_limit", 0), waits.value("measurements", 0), 100.0 * kCpuWaitLimit,
               100.0 * waits.value("worst_share", 0.0));
  const int cpus = usable_cpus();
  if (threads > cpus) {
    std::fprintf(stderr,
                 "--threads %d is more than the %d CPUs this process may use, so the kernels' "
                 "threads waited for one another: sweep with --threads %d or fewer, into a new "
                 "--out\n",
                 threads, cpus, cpus);
  } else {
    std::fprintf(stderr,
                 "other processes ran on this machine, even while those were made again (up to "
                 "%d times): sweep again, into a new --out, on an idle machine\n",
                 1 + kCpuWaitRetries);
  }
}

// The end of a sweep whose table has decisions resting on timings within noise says so on stderr,
// with the points (those that could move a switch first) and the remedy.
void warn_noisy_decisions(const nlohmann::json& table, const std::string& profile,
                          const std::string& out_dir, const std::string& table_path) {
  const NoisyDecisions n = noisy_decisions_of(table);
  if (n.count == 0) {
    return;
  }
  constexpr std::size_t kShown = 10;
  std::fprintf(stderr, "sweep: %s:\n", noisy_headline(n).c_str());
  for (std::size_t i = 0; i < n.lines.size() && i < kShown; ++i) {
    std::fprintf(stderr, "sweep:   %s\n", n.lines[i].c_str());
  }
  if (n.lines.size() > kShown) {
    std::fprintf(stderr, "sweep:   ... and %zu more (attn-tune table show %s lists them all)\n",
                 n.lines.size() - kShown, table_path.c_str());
  }
  const std::string command = "attn-tune sweep --profile " + profile + " --out " + out_dir +
                              " --resume --remeasure-noisy (with this sweep's other options)";
  std::fprintf(stderr, "sweep: %s\n", noisy_remedy(n, command).c_str());
}

int run_sweep(const SweepOptions& o) {
  // Load the profile first: a typo should not wait for a GPU to initialise.
  Profile prof = load_profile(o.profile);
  if (!o.timing.empty()) {
    prof.timing.mode = *parse_timing_mode(o.timing); // CLI11 checked the name
  }
  std::string traffic_said;
  if (!o.traffic.empty()) {
    const Trace trace = read_trace(o.traffic);
    const auto sample = sample_traffic(trace, o.traffic_batches, o.hold_out, o.seed);
    std::vector<Workload> batches = traffic_workloads(prof, trace, sample);
    int held = 0;
    for (const TrafficSample& t : sample) {
      held += t.held_out ? 1 : 0;
    }
    // Batches as `attn_tune_trace.py check` counts them: counts included, then the lines where
    // counts make the two differ, then the distinct batches the sample draws from.
    char total[32];
    std::snprintf(total, sizeof total, "%.0f", trace.total_count); // counts reach past 2^63
    const std::string lines =
        trace.total_count == double(trace.lines) ? "" : std::to_string(trace.lines) + " lines, ";
    traffic_said = "sweep: traffic " + o.traffic + ": " + std::string(total) + " batches (" +
                   lines + std::to_string(trace.batches.size()) + " distinct); measuring " +
                   std::to_string(sample.size()) + " of them on " +
                   std::to_string(sample.empty() ? 0 : batches.size() / sample.size()) +
                   " shapes, " + std::to_string(held) + " held out";
    if (!trace.torn_lines.empty()) {
      traffic_said += "\nsweep: warning: traffic " + o.traffic + ": " +
                      std::to_string(trace.torn_lines.size()) +
                      " line(s) cut short by a writer "
                      "killed mid-line (line " +
                      std::to_string(trace.torn_lines.front()) +
                      (trace.torn_lines.size() > 1 ? ", ..." : "") +
                      "), skipped: those batches are lost, the rest are read";
    }
    add_traffic(prof, std::move(batches));
  }
  if (o.retry_faults && !o.resume) {
    throw InputError("--retry-faults continues an earlier sweep: it needs --resume");
  }
  if (o.remeasure_noisy && !o.resume) {
    throw InputError("--remeasure-noisy re-times the noisy decisions of an earlier sweep: it needs "
                     "--resume");
  }
  // Once per command and before the header (it needs no backend); sweep_worker checks too, for
  // the library's other callers.
  check_workloads_fit(prof, expand_workloads(prof));
  const std::shared_ptr<const PluginLibrary> plugin = open_kernels(o.kernels);
  if (plugin && !o.device.empty()) {
    check_plugin_device(*plugin, o.device); // before the output folder is touched
  }
  const BackendOptions bo{.threads = o.threads, .kernels = o.kernels};
  attn::SweepOptions so;
  if (!o.shard.empty()) {
    so.shard = parse_shard(o.shard);
  }
  so.out_dir = o.out.empty() ? "attn-tune-out/" + prof.name : o.out;
  if (o.out.empty() && so.shard.sharded()) {
    so.out_dir += "/shard-" + std::to_string(so.shard.index);
  }
  if (!o.search.empty()) {
    so.search = parse_search_mode(o.search);
  }
  so.resume = o.resume;
  so.retry_faults = o.retry_faults;
  so.remeasure_noisy = o.remeasure_noisy;
  so.wait_for_device = !o.no_wait;
  so.in_process = o.in_process;
  so.seed = o.seed;
  so.reference_threads = o.threads;
  if (o.publish) {
    so.publish_dir = (std::filesystem::path(ATTN_SOURCE_DIR) / "results").string();
  }
  so.progress = o.quiet ? nullptr : stderr;
  so.progress_tty = ::isatty(STDERR_FILENO) != 0;
  so.info = stdout;
  std::fflush(stdout);
  // The device is chosen and opened in the worker process: the supervisor never touches it.
  const BackendMaker make = [&](const WorkerLink& link) {
    const DeviceChoice choice = choose_device(o.device, plugin.get(), bo);
    if (!choice.said.empty()) {
      link.say("sweep: " + choice.said);
    }
    auto be = make_backend(choice.spec, bo);
    const DeviceInfo& dev = be->info();
    if (prof.timing.mode == TimingMode::graph && dev.backend != "cuda") {
      // Named as the user asked for it: the option, or the profile's timing.mode.
      throw InputError(
          std::string(o.timing.empty() ? "the profile's timing.mode \"graph\"" : "--timing graph") +
          " needs a CUDA device; " + dev.id + " times with events only");
    }
    check_profile_params(prof, *be); // before the header: a refusal is the command's one line
    link.say("sweep: profile " + prof.name + " (hash " + prof.hash + ") on " + dev.name + " (" +
             dev.id + ") with " + kernels_phrase(plugin.get()) +
             (so.shard.sharded() ? ", shard " + so.shard.text() : std::string()) + ", results in " +
             so.out_dir);
    if (!traffic_said.empty()) {
      link.say(traffic_said);
    }
    if (dev.backend == "cpu" && prof.name == "default") {
      // The default grid is sized for a GPU; say so before the ETA does.
      link.say("sweep: note: the default profile's GPU-sized shapes take hours on a CPU; "
               "--profile quick finishes in seconds");
    }
    return be;
  };
  // The report is drawn while the sweep still holds the folder (SweepOptions::while_locked),
  // and said after the table, as it always was.
  std::string report_said;
  if (!o.no_report) {
    so.while_locked = [&](const SweepSummary&) {
      // The page is a view of the table just written: a failure to draw it leaves the results
      // and the table as they are, removes the page of an earlier table (which would mislead)
      // and ends the sweep with exit 4, after everything else, as any write that fails does.
      try {
        report_said = "sweep: report " + write_sweep_report(so.out_dir) + "\n";
      } catch (const std::exception& e) {
        std::error_code ec;
        const auto page = std::filesystem::path(so.out_dir) / "report.html";
        const bool had_page = std::filesystem::remove(page, ec);
        report_said =
            std::string("!") + e.what() + (had_page ? "; the earlier report.html was removed" : "");
      }
    };
  }
  const SweepSummary s = run_sweep_isolated(make, prof, so);
  const auto& c = s.table.at("measurement_counts");
  if (s.search == SearchMode::adaptive) {
    const nlohmann::json& sp = s.table.at("provenance").at("search");
    const int made = sp.value("measurements", 0);
    const int of = sp.value("exhaustive_measurements", 0);
    std::printf("sweep: adaptive search: %d of the %d measurements an exhaustive sweep makes "
                "(%.0f%%), in %d timings (%d brief race timings): %d timed, %d failed "
                "validation, %d skipped, %d errors, %d faults\n",
                made, of, of > 0 ? 100.0 * made / of : 0.0, sp.value("timings", 0),
                sp.value("race_timings", 0), c.value("ok", 0), c.value("failed", 0),
                c.value("skipped", 0), c.value("error", 0), c.value("fault", 0));
  } else {
    std::printf("sweep: %d measurements (%d from an earlier run): %d timed, %d failed "
                "validation, %d skipped, %d errors, %d faults\n",
                s.total, s.resumed, c.value("ok", 0), c.value("failed", 0), c.value("skipped", 0),
                c.value("error", 0), c.value("fault", 0));
  }
  if (o.remeasure_noisy) {
    if (s.noisy_before == 0) {
      std::printf("sweep: --remeasure-noisy: no decision rested on timings within noise; nothing "
                  "re-timed\n");
    } else {
      std::printf("sweep: re-timed %d of %d configurations at %d noisy decisions with %dx the "
                  "profile's repetitions",
                  s.remeasured, s.remeasure_planned, s.noisy_before, kRemeasureFactor);
      if (s.remeasure_other > 0) {
        // Failed and faulted re-timings replaced their lines; errors left the earlier ones.
        std::printf(" (%d did not pass: a failure or fault replaces the earlier line, an error "
                    "leaves it)",
                    s.remeasure_other);
      }
      std::printf("\n");
      if (s.search == SearchMode::adaptive && s.remeasured > 0) {
        std::printf("sweep: the adaptive search is open again (the new timings may move a "
                    "decision): a plain sweep --resume of %s measures what it then wants, and "
                    "merge takes the folder as unfinished until then\n",
                    so.out_dir.c_str());
      }
    }
  }
  std::printf("sweep: results %s\nsweep: table %s\n", s.results_path.c_str(), s.table_path.c_str());
  if (!s.published_path.empty()) {
    std::printf("sweep: published %s\n", s.published_path.c_str());
  }
  if (report_said.starts_with("!")) {
    std::fprintf(stderr, "sweep: warning: no report: %s\n", report_said.c_str() + 1);
  } else {
    std::printf("%s", report_said.c_str());
  }
  std::fflush(stdout);
  warn_cpu_waits(s.table, o.threads);
  warn_noisy_decisions(s.table, o.profile, so.out_dir, s.table_path);
  // Wrong results and faults (a configuration that crashed or hung) are the findings a sweep
  // must not bury: they set the exit code. Errors (a configuration that could not be measured)
  // leave the table incomplete: exit 4, so that a sweep in which nothing could be measured
  // never passes for a success; so does a sweep whose every configuration was refused.
  if (!s.teardown_failure.empty()) {
    std::fprintf(stderr, "sweep: the kernels failed after their measurements (which stand): %s\n",
                 s.teardown_failure.c_str());
    return kExitMismatch;
  }
  if (c.value("failed", 0) > 0 || c.value("fault", 0) > 0) {
    if (c.value("fault", 0) > 0) {
      std::fprintf(stderr,
                   "sweep: %d configurations crashed or hung their worker (status \"fault\" in "
                   "results.jsonl); --resume --retry-faults measures them again\n",
                   c.value("fault", 0));
    }
    return kExitMismatch;
  }
  if (c.value("error", 0) > 0) {
    std::fprintf(stderr,
                 "sweep: %d measurements ended in an error (see results.jsonl); --resume retries "
                 "each error once, and one that ended in an error again on a resumed run stays\n",
                 c.value("error", 0));
    return kExitInternal;
  }
  if (c.value("ok", 0) == 0 && c.value("skipped", 0) > 0) {
    // Every configuration was refused (kernels that cannot read the profile's cache dtype,
    // head sizes or layouts): a table without a point must not pass for a tuned one.
    std::fprintf(stderr,
                 "sweep: nothing was timed: the kernels refused all %d measurements (each "
                 "\"skipped\" line in results.jsonl says why), so the table has no point\n",
                 c.value("skipped", 0));
    return kExitInternal;
  }
  if (c.value("ok", 0) == 0 && s.total == 0 && !so.shard.sharded()) {
    // No configuration at all: a kernel set without a family for the profile's phases (a plugin
    // with decode only, on a prefill profile).
    std::fprintf(stderr, "sweep: nothing was timed: the kernels have no configuration for any "
                         "workload of the profile (no family of theirs runs its phases), so the "
                         "table has no point\n");
    return kExitInternal;
  }
  if (report_said.starts_with("!")) {
    return kExitInternal; // the report could not be written (said above)
  }
  return kExitOk;
}
} // namespace

Command setup_sweep(CLI::App& root) {
  auto opt = std::make_shared<SweepOptions>();
  CLI::App* sub = root.add_subcommand(
      "sweep", "Check and time every kernel configuration of a profile; write the threshold table");
  sub->add_option("--device", opt->device,
                  "0 / cuda:N (a GPU) or cpu; default: GPU 0 if there is one, else cpu");
  sub->add_option("--profile", opt->profile,
                  "Built-in profile name (quick, default, llama-3-8b, ...) or a .json path")
      ->capture_default_str();
  sub->add_option("--out", opt->out, "Output folder (default: attn-tune-out/<profile>)")
      ->check(
          [](const std::string& s) {
            return s.empty() ? std::string("is empty: name a folder, or leave --out out for "
                                           "attn-tune-out/<profile>")
                             : std::string();
          },
          "a folder");
  sub->add_flag("--resume", opt->resume, "Continue the sweep whose results.jsonl is in --out");
  sub->add_option("--threads", opt->threads, "CPU worker threads (backend and reference; 0: all)")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--seed", opt->seed, "Seed of the test data")
      ->check(unsigned_64())
      ->capture_default_str();
  sub->add_flag("--publish", opt->publish,
                "Also write the table to results/<device>-<profile>.json in the source tree");
  sub->add_flag("--quiet", opt->quiet, "No progress lines");
  sub->add_flag("--retry-faults", opt->retry_faults,
                "With --resume: measure again the configurations recorded as faults");
  sub->add_flag("--remeasure-noisy", opt->remeasure_noisy,
                "With --resume: time again, with " + std::to_string(kRemeasureFactor) +
                    "x the repetitions, every v1 and v2 configuration at each context length "
                    "whose decision rests on timings within noise, then rewrite the table");
  sub->add_flag("--no-wait", opt->no_wait,
                "Exit 3 instead of waiting when another attn-tune process is timing on the device");
  sub->add_flag("--in-process", opt->in_process,
                "Measure in this process, without a supervised worker (for debuggers; a crash "
                "ends the sweep)");
  sub->add_option("--timing", opt->timing,
                  "events: each call's launches between two events; graph: replay of the call "
                  "captured as a CUDA graph, as engines run decode (CUDA only). Default: the "
                  "profile's timing.mode, else events")
      ->check(CLI::IsMember({"events", "graph"}));
  add_kernels_option(sub, opt->kernels);
  sub->add_option("--shard", opt->shard,
                  "I/N: measure only shard I of N (counted from 0), a fixed part of the plan "
                  "balanced by estimated cost; `attn-tune merge` joins the shards' folders "
                  "(default --out: attn-tune-out/<profile>/shard-I)");
  sub->add_option("--search", opt->search,
                  "exhaustive: every (workload, configuration) of the profile; adaptive: race the "
                  "configurations, bisect each shape's v1/v2 switch along the context axis and "
                  "start each batch at its neighbour's switch (docs/adaptive-search.md). Default: "
                  "the folder's search with --resume, else exhaustive")
      ->check(CLI::IsMember({"exhaustive", "adaptive"}));
  sub->add_option("--traffic", opt->traffic,
                  "A traffic trace (JSONL of decode batches, docs/traffic.md): its batches are "
                  "measured too, and the table's batch rules and traffic regret come from them");
  sub->add_option("--traffic-batches", opt->traffic_batches,
                  "At most this many of the trace's distinct batches are measured (drawn by "
                  "their counts, seeded by --seed)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_option("--hold-out", opt->hold_out,
                  "The share of the measured trace batches held out of the fit, to test it")
      ->check(a_number() & CLI::Range(0.0, 0.9))
      ->capture_default_str();
  sub->add_flag("--no-report", opt->no_report,
                "Do not write report.html (attn-tune report) next to the table");
  return {sub, [opt] { return run_sweep(*opt); }};
}

} // namespace attn::cli
