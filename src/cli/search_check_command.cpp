// attn-tune search-check: sweeps one profile exhaustively and adaptively on the same device, one
// after the other, and reports what the adaptive search saved and what it cost
// (docs/adaptive-search.md): its measurements and time against the exhaustive sweep's, how often
// its table decides as the exhaustive one does, and its regret on the exhaustive measurements,
// with the search replayed on those measurements beside it; with --control, a second exhaustive
// sweep after the adaptive one sets how far two sweeps of the machine disagree beside that.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "src/backends/registry.h"
#include "src/cli/commands.h"
#include "src/cli/exit_codes.h"
#include "src/cli/kernels_option.h"
#include "src/io/atomic_file.h"
#include "src/model/errors.h"
#include "src/tuning/search_check.h"
#include "src/tuning/sweep.h"

namespace attn::cli {

namespace {

struct SearchCheckOptions {
  std::string device;
  std::string profile = "quick";
  std::string out;
  std::string kernels;
  int threads = 0;
  uint64_t seed = 1;
  bool quiet = false;
  bool require_goals = false;
  std::string replay; // an exhaustive sweep's folder: replay the search on it, sweep nothing
  std::string adaptive; // with replay: an adaptive sweep's folder to judge against it
  bool control = false; // sweep the profile exhaustively a second time, after the adaptive sweep
  std::string replay_control; // with replay: a second exhaustive sweep's folder, the control
};

struct TimedSweep {
  SweepSummary summary;
  double seconds = 0.0;
  std::vector<MeasurementRecord> records;
  ResultsFile file;
};

TimedSweep timed_sweep(const BackendMaker& make, const Profile& prof, attn::SweepOptions so,
                       SearchMode mode, const std::string& dir) {
  so.out_dir = dir;
  so.search = mode;
  const auto t0 = std::chrono::steady_clock::now();
  TimedSweep t;
  t.summary = run_sweep_isolated(make, prof, so);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.file = read_results(t.summary.results_path);
  t.records = to_records(t.file.lines);
  return t;
}

// part / whole, 0 when there is no whole.
double share(double part, double whole) { return whole > 0 ? part / whole : 0.0; }

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

std::string three_digits(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

void print_judgement(const char* what, const TableJudgement& j) {
  std::printf("search-check: %s: v1/v2 decision agrees at %d of %d points, configuration at %d; "
              "regret mean %s, worst %s (%s); beyond the point's noise: mean %s, worst %s\n",
              what, j.family_agree, j.points, j.config_agree, pct(j.mean_regret).c_str(),
              pct(j.worst_regret).c_str(), j.worst_point.c_str(),
              pct(j.mean_regret_beyond_noise).c_str(), pct(j.worst_regret_beyond_noise).c_str());
}

// The judgement's split: grid and held-out points, and the regret added to the exhaustive table's.
void print_split(const char* what, const TableJudgement& j) {
  const auto part = [](const TableJudgement::Regret& r) {
    return r.points == 0
               ? std::string("none")
               : "mean " + pct(r.mean) + ", worst " + pct(r.worst) + " (" + r.worst_point + ")";
  };
  std::printf("search-check: %s, regret at the %d grid points: %s; at the %d held-out points: "
              "%s; beyond the exhaustive table's regret at each point: %s\n",
              what, j.grid.points, part(j.grid).c_str(), j.held_out.points,
              part(j.held_out).c_str(), part(j.added).c_str());
}

// A judged point's cause, in the order the counts list them: the label it is counted under and
// the words it is named with.
struct Cause {
  int order;
  const char* counted;
  const char* named;
};
Cause cause_of(const TableJudgement::Point& p) {
  if (p.basis == "inferred") {
    return {0, "inferred", "inferred"};
  }
  if (p.basis == "best_untimed") {
    return {1, "without their fastest configuration",
            "measured, but not its fastest configuration"};
  }
  if (p.own_timings == "choice_ahead") {
    return {2, "noise between the sweeps",
            "measured; its own timings ranked its choice first: noise between the sweeps"};
  }
  if (p.own_timings == "best_ahead") {
    return {3, "the table's rules",
            "measured; its own timings ranked the fastest first too: the table's rules"};
  }
  if (p.basis == "held_out") {
    return {4, "held out", "held out"};
  }
  return {5, "measured", "measured"};
}

// The points whose regret is past the worst-regret goal, the worst first (five named), each with
// what its choice rested on (TableJudgement::Point::basis) and, beside_exhaustive, the exhaustive
// table's regret there: an inferred or best_untimed point's loss is the search's; a measured one's,
// the noise between the two sweeps or the table's rules (its own timings say which); a held-out
// one's, the lookup between measured points.
void print_above_goal(const char* what, const TableJudgement& j, bool beside_exhaustive = true) {
  const std::vector<TableJudgement::Point> past = j.above(kGoalWorstRegret);
  if (past.empty()) {
    return;
  }
  // How many of them each cause explains, the nonzero ones.
  std::map<int, std::pair<const char*, int>> by_cause;
  for (const TableJudgement::Point& p : past) {
    const Cause c = cause_of(p);
    auto& [label, n] = by_cause[c.order];
    label = c.counted;
    ++n;
  }
  std::string causes;
  for (const auto& [order, counted] : by_cause) {
    causes += (causes.empty() ? "" : ", ") + std::to_string(counted.second) + " " + counted.first;
  }
  constexpr std::size_t kNamed = 5;
  std::string named;
  for (std::size_t k = 0; k < past.size() && k < kNamed; ++k) {
    const TableJudgement::Point& p = past[k];
    named += (named.empty() ? "" : "; ") + p.workload_key + " " + pct(p.regret) + " (" +
             cause_of(p).named +
             (beside_exhaustive ? "; exhaustive table " + pct(p.exhaustive_regret) : "") + ")";
  }
  if (past.size() > kNamed) {
    named += "; and " + std::to_string(past.size() - kNamed) + " more";
  }
  std::printf("search-check: %s, %zu point%s past the worst-regret goal (%s; %s): %s\n", what,
              past.size(), past.size() == 1 ? "" : "s", pct(kGoalWorstRegret).c_str(),
              causes.c_str(), named.c_str());
}

// Whether a results header is a `merge --partial` of shards that did not all finish.
bool partial_merge(const nlohmann::json& header) {
  const auto m = header.find("merged");
  return m != header.end() && m->is_object() && !m->value("complete", true);
}

// A finished sweep's folder as --replay, --adaptive and --replay-control read it: its lines, its
// records and (once its checks have passed) its table, built once.
struct SweepFolder {
  std::string path; // its results.jsonl
  ResultsFile file;
  std::vector<MeasurementRecord> records;
  nlohmann::json table;
};

// `option` takes the folder `dir` of a finished sweep of search `mode` (adaptive or exhaustive),
// read before anything is printed; refused in one line otherwise: no sweep, the other search, a
// `--partial` merge, an adaptive search with no search_end line, an exhaustive sweep holding fewer
// measurements than its plan names.
SweepFolder open_sweep_folder(const std::string& dir, const std::string& option,
                              const std::string& mode) {
  SweepFolder f;
  f.path = (std::filesystem::path(dir) / "results.jsonl").string();
  const std::string& path = f.path;
  f.file = read_results(path);
  const ResultsFile& rf = f.file;
  if (rf.header.is_null() || rf.lines.empty()) {
    throw InputError(path + " holds no sweep (" + option + " takes an " + mode +
                     " sweep's folder)");
  }
  const std::string had = search_mode_of(rf.header);
  if ((had == "adaptive") != (mode == "adaptive")) {
    throw InputError(path + " is an " + had + " sweep's: " + option + " needs an " + mode + " one");
  }
  if (partial_merge(rf.header)) {
    throw InputError(path + " is a --partial merge of shards that did not all finish: " + option +
                     " needs a finished " + mode + " sweep");
  }
  if (mode == "adaptive" && rf.search_end.is_null()) {
    throw InputError(path + "'s search has not finished (no search_end line after its last "
                            "measurement): sweep --resume finishes it");
  }
  f.records = to_records(rf.lines);
  const int plan = rf.header.contains("plan") && rf.header["plan"].is_object()
                       ? rf.header["plan"].value("measurements", -1)
                       : -1;
  if (mode == "exhaustive" && plan > 0 && int(f.records.size()) < plan) {
    throw InputError(path + " holds " + std::to_string(f.records.size()) + " of the " +
                     std::to_string(plan) + " measurements its plan names: " + option +
                     " needs a finished exhaustive sweep (sweep --resume finishes it)");
  }
  return f;
}

// A second sweep judged beside the exhaustive one (--adaptive, --replay-control): as
// open_sweep_folder, and of the exhaustive sweep's profile, on its device, with its kernels.
SweepFolder open_second_folder(const std::string& dir, const ResultsFile& exhaustive,
                               const std::string& option, const std::string& mode) {
  SweepFolder f = open_sweep_folder(dir, option, mode);
  const std::string& path = f.path;
  const ResultsFile& rf = f.file;
  const std::string want = exhaustive.header.value("profile_hash", "");
  if (rf.header.value("profile_hash", "") != want) {
    throw InputError(path + " swept profile '" + rf.header.value("profile", "?") + "' (hash " +
                     rf.header.value("profile_hash", "?") + "), the exhaustive sweep '" +
                     exhaustive.header.value("profile", "?") + "' (hash " + want + "): " + option +
                     " needs the same profile");
  }
  if (!same_device(rf.header.value("device", nlohmann::json::object()),
                   exhaustive.header.value("device", nlohmann::json::object()))) {
    throw InputError(path +
                     " was measured on another device (or --threads) than the exhaustive "
                     "sweep: " +
                     option + " needs the same one");
  }
  // The same kernels, from the same sources: a table judged against another kernel set's timings
  // says nothing about the search.
  const nlohmann::json builtin = {{"source", "built-in"}, {"name", "attn-tune"}};
  const nlohmann::json& kernels = rf.header.contains("kernels") ? rf.header["kernels"] : builtin;
  const nlohmann::json& ex_kernels =
      exhaustive.header.contains("kernels") ? exhaustive.header["kernels"] : builtin;
  const std::string had_src = rf.header.value("kernel_sources_sha256", "");
  const std::string want_src = exhaustive.header.value("kernel_sources_sha256", "");
  if (kernels_identity(kernels) != kernels_identity(ex_kernels) ||
      (!had_src.empty() && !want_src.empty() && had_src != want_src)) {
    throw InputError(path + " timed the kernels of " + kernels_label(kernels) +
                     (had_src != want_src ? " built from other sources" : "") +
                     ", the exhaustive sweep " + kernels_label(ex_kernels) + ": " + option +
                     " needs the same kernels");
  }
  f.table = table_of_results(rf.header, rf.lines);
  return f;
}

// --replay DIR --adaptive ADIR: the adaptive sweep already made (`rf`, read from `path`) judged
// against the exhaustive one (its records and table): its measurements against the exhaustive
// count, the drift between the two, its table's regret, each point's basis. No wall times: the
// time goal is for a check that ran both sweeps. Returns the report (written to
// OUT/adaptive_judgement.json with --out).
struct AdaptiveJudged {
  TableJudgement table;  // the adaptive table on the exhaustive timings
  nlohmann::json report; // adaptive_judgement.json
};
AdaptiveJudged judge_adaptive_folder(const SweepFolder& f,
                                     const std::vector<MeasurementRecord>& records,
                                     const nlohmann::json& table) {
  const std::string& path = f.path;
  const std::vector<MeasurementRecord>& ad = f.records;
  const nlohmann::json& ad_table = f.table;
  const nlohmann::json& search = ad_table.at("provenance").at("search");
  const int pairs = search.value("measurements", 0);
  const double ratio = share(pairs, double(records.size()));
  std::printf("search-check: the adaptive sweep %s: %d of the exhaustive sweep's %d measurements "
              "(%s, goal <= %s), %d timings with %d brief race timings; time not judged (no "
              "wall times here)\n",
              path.c_str(), pairs, int(records.size()), pct(ratio).c_str(),
              pct(kGoalMeasurements).c_str(), search.value("timings", 0),
              search.value("race_timings", 0));
  const SweepDrift drift = sweep_drift(records, ad);
  if (drift.pairs > 0) {
    std::printf("search-check: the %d pairs both sweeps timed in full: adaptive/exhaustive time "
                "median %.2f, 10th-90th percentile %.2f-%.2f\n",
                drift.pairs, drift.median, drift.p10, drift.p90);
  }
  const TableJudgement j = judge_table(records, table, ad_table, &ad);
  print_judgement("adaptive table", j);
  print_split("adaptive table", j);
  print_above_goal("adaptive table", j);
  return {j,
          {{"adaptive", path},
           {"measurements", pairs},
           {"exhaustive_measurements", int(records.size())},
           {"measurement_ratio", ratio},
           {"drift", drift.to_json()},
           {"adaptive_table", j.to_json()}}};
}

void print_control(const ControlJudgement& c) {
  if (c.drift.pairs > 0) {
    std::printf("search-check: control %s: the %d pairs both exhaustive sweeps timed: "
                "control/first time median %.2f, 10th-90th percentile %.2f-%.2f\n",
                c.folder.c_str(), c.drift.pairs, c.drift.median, c.drift.p10, c.drift.p90);
  }
  print_judgement("control table (the second exhaustive sweep's, on the first's timings)",
                  c.control);
  print_above_goal("control table", c.control);
  print_judgement("exhaustive table on the control's timings", c.first);
  if (c.adaptive) {
    print_judgement("adaptive table on the control's timings", *c.adaptive);
    print_split("adaptive table on the control's timings", *c.adaptive);
  }
  std::printf("search-check: control: an exhaustive sweep's table on the other exhaustive "
              "sweep's timings loses mean %s, worst %s (the larger of the two ways round): the "
              "regret goals (mean <= %s, worst <= %s) %s\n",
              pct(c.floor_mean()).c_str(), pct(c.floor_worst()).c_str(),
              pct(kGoalMeanRegret).c_str(), pct(kGoalWorstRegret).c_str(),
              c.floor_meets_goals()
                  ? "hold across two sweeps of this machine"
                  : "are missed by measuring everything again: a regret judged across two "
                    "sweeps here cannot show them");
  if (c.pooled) {
    const PooledReplay& p = *c.pooled;
    std::printf("search-check: control: the search replayed on the two exhaustive sweeps pooled "
                "(each pair's faster median: a disturbance only slows a timing) measures %d of "
                "%d (%s)\n",
                p.measurements, p.plan, pct(share(p.measurements, p.plan)).c_str());
    print_judgement("pooled exhaustive table (on the pooled timings)", p.self);
    print_judgement("pooled replay (on the pooled timings)", p.replayed);
    print_split("pooled replay", p.replayed);
    print_above_goal("pooled replay", p.replayed);
  }
  if (c.adaptive_on_first) {
    std::printf("search-check: control: the adaptive table on the first sweep's timings loses "
                "mean %s, worst %s: %s the floor\n",
                pct(c.adaptive_on_first->first).c_str(), pct(c.adaptive_on_first->second).c_str(),
                c.adaptive_within_floor() ? "within" : "beyond");
  }
}

// --replay DIR: the search replayed on an exhaustive sweep's folder, judged against it.
int replay_check(const std::string& dir, const std::string& out, const std::string& adaptive,
                 const std::string& control) {
  namespace fs = std::filesystem;
  SweepFolder ex = open_sweep_folder(dir, "--replay", "exhaustive");
  const std::string& path = ex.path;
  const ResultsFile& rf = ex.file;
  const std::vector<MeasurementRecord>& records = ex.records;
  const std::optional<SweepFolder> ad =
      adaptive.empty() ? std::nullopt
                       : std::optional(open_second_folder(adaptive, rf, "--adaptive", "adaptive"));
  const std::string control_path =
      control.empty() ? std::string() : (fs::path(control) / "results.jsonl").string();
  if (!control.empty() && fs::exists(control_path) && fs::equivalent(control_path, path)) {
    throw InputError(control_path + " is the --replay sweep itself: --replay-control needs a "
                                    "second exhaustive sweep of the profile");
  }
  const std::optional<SweepFolder> ctl =
      control.empty()
          ? std::nullopt
          : std::optional(open_second_folder(control, rf, "--replay-control", "exhaustive"));
  ex.table = table_of_results(rf.header, rf.lines);
  const nlohmann::json& table = ex.table;
  const ReplayedSearch replay = replay_on(rf.header, rf.lines);
  const std::vector<MeasurementRecord> replay_records = to_records(replay.lines);
  const TableJudgement j = judge_table(records, table, replay.table, &replay_records);
  const TableJudgement self = judge_table(records, table, table, &records);
  print_judgement("exhaustive table (its own noise rules on its own timings)", self);
  print_above_goal("exhaustive table", self, false);
  const nlohmann::json& sp = replay.table.at("provenance").at("search");
  int full = 0;
  for (const MeasurementRecord& r : replay_records) {
    full += r.brief ? 0 : 1;
  }
  std::printf("search-check: the search replayed on %s: %d of its %d measurements (%s), %d in "
              "full, %d race timings\n",
              path.c_str(), sp.value("measurements", 0), int(records.size()),
              pct(double(sp.value("measurements", 0)) / double(records.size())).c_str(), full,
              sp.value("race_timings", 0));
  print_judgement("replayed table", j);
  print_split("replayed table", j);
  print_above_goal("replayed table", j);
  const std::optional<AdaptiveJudged> judged =
      ad ? std::optional(judge_adaptive_folder(*ad, records, table)) : std::nullopt;
  nlohmann::json control_json;
  if (ctl) {
    ControlJudgement c = judge_control(ctl->path, records, table, ctl->records, ctl->table,
                                       ad ? &ad->records : nullptr, ad ? &ad->table : nullptr);
    c.pooled = replay_pooled(rf.header, rf.lines, ctl->file.lines);
    if (judged) {
      c.adaptive_on_first = {judged->table.mean_regret, judged->table.worst_regret};
    }
    print_control(c);
    control_json = c.to_json();
  }
  if (!out.empty()) {
    fs::create_directories(out);
    const std::string table_path = (fs::path(out) / "replayed_table.json").string();
    write_json_atomically(table_path, replay.table);
    std::string lines = replay.header.dump() + "\n";
    for (const nlohmann::json& l : replay.lines) {
      lines += l.dump() + "\n";
    }
    lines += search_end_line(sp.value("measurements", 0), int64_t(records.size())).dump() + "\n";
    write_file_atomically((fs::path(out) / "replayed_results.jsonl").string(), lines);
    std::printf("search-check: replayed table %s (its lines beside it)\n", table_path.c_str());
    if (judged) {
      const std::string judged_path = (fs::path(out) / "adaptive_judgement.json").string();
      write_json_atomically(judged_path, judged->report);
      std::printf("search-check: the adaptive sweep's judgement %s\n", judged_path.c_str());
    }
    if (!control_json.is_null()) {
      const std::string control_judged = (fs::path(out) / "control_judgement.json").string();
      write_json_atomically(control_judged, control_json);
      std::printf("search-check: the control's judgement %s\n", control_judged.c_str());
    }
  }
  return kExitOk;
}

int run_search_check(const SearchCheckOptions& o) {
  if (!o.replay.empty()) {
    return replay_check(o.replay, o.out, o.adaptive, o.replay_control);
  }
  const Profile prof = load_profile(o.profile);
  const std::string out = o.out.empty() ? "attn-tune-out/search-check-" + prof.name : o.out;
  namespace fs = std::filesystem;
  for (const char* sub : {"exhaustive", "adaptive", "control"}) {
    const fs::path results = fs::path(out) / sub / "results.jsonl";
    if (fs::exists(results) && fs::file_size(results) > 0) {
      throw InputError(results.string() + " exists: search-check starts its sweeps afresh; "
                                          "choose another --out");
    }
  }
  const std::shared_ptr<const PluginLibrary> plugin = open_kernels(o.kernels);
  const BackendOptions bo{.threads = o.threads, .kernels = o.kernels};
  const BackendMaker make = [&](const WorkerLink& link) {
    const DeviceChoice choice = choose_device(o.device, plugin.get(), bo);
    if (!choice.said.empty()) {
      link.say("search-check: " + choice.said);
    }
    return make_backend(choice.spec, bo);
  };
  attn::SweepOptions so;
  so.seed = o.seed;
  so.reference_threads = o.threads;
  so.progress = o.quiet ? nullptr : stderr;
  so.progress_tty = ::isatty(STDERR_FILENO) != 0;
  so.info = o.quiet ? nullptr : stdout;
  // Its figures compare two sweeps timed in one run: a stopped check is run again afresh.
  so.stop_note = "search-check does not resume (its figures compare two sweeps timed in one "
                 "run): run it again with another --out, or after removing " +
                 out;
  const TimedSweep ex =
      timed_sweep(make, prof, so, SearchMode::exhaustive, (fs::path(out) / "exhaustive").string());
  const TimedSweep ad =
      timed_sweep(make, prof, so, SearchMode::adaptive, (fs::path(out) / "adaptive").string());
  // The control comes after the adaptive sweep, so that the two exhaustive sweeps stand on either
  // side of it in time.
  std::optional<TimedSweep> ctl;
  if (o.control) {
    ctl = timed_sweep(make, prof, so, SearchMode::exhaustive, (fs::path(out) / "control").string());
  }

  const nlohmann::json& search = ad.summary.table.at("provenance").at("search");
  const int exhaustive_pairs = int(ex.records.size());
  const int adaptive_pairs = search.value("measurements", 0);
  const double measurement_ratio = share(adaptive_pairs, exhaustive_pairs);
  int full_pairs = 0;
  for (const MeasurementRecord& r : ad.records) {
    full_pairs += r.brief ? 0 : 1;
  }
  const double time_ratio = share(ad.seconds, ex.seconds);
  const TableJudgement real =
      judge_table(ex.records, ex.summary.table, ad.summary.table, &ad.records);
  const TableJudgement self =
      judge_table(ex.records, ex.summary.table, ex.summary.table, &ex.records);
  const ReplayedSearch replay = replay_on(ex.file.header, ex.file.lines);
  const std::vector<MeasurementRecord> replay_records = to_records(replay.lines);
  const TableJudgement replayed =
      judge_table(ex.records, ex.summary.table, replay.table, &replay_records);
  const int replay_pairs = replay.table.at("provenance").at("search").value("measurements", 0);
  const KernelCalls ex_calls = kernel_calls(ex.file.lines);
  const KernelCalls ad_calls = kernel_calls(ad.file.lines);
  const double replay_ratio = share(replay_pairs, exhaustive_pairs);
  const double timed_ratio = share(double(ad_calls.timed), double(ex_calls.timed));
  const double warmup_ratio = share(double(ad_calls.warmup), double(ex_calls.warmup));
  const SweepDrift drift = sweep_drift(ex.records, ad.records);
  std::optional<ControlJudgement> control;
  if (ctl) {
    control = judge_control((fs::path(out) / "control").string(), ex.records, ex.summary.table,
                            ctl->records, ctl->summary.table, &ad.records, &ad.summary.table);
    control->adaptive_on_first = {real.mean_regret, real.worst_regret};
    control->pooled = replay_pooled(ex.file.header, ex.file.lines, ctl->file.lines);
  }

  // Which goals the run missed, with its figure (none: the goals are met); and whether the
  // exhaustive table, which saw every measurement, meets the regret goals on its own timings:
  // where it does not, the table's own rules (decisions carried across ties, lookups between
  // measured points) cost that much whatever the search measured.
  struct Goal {
    const char* name;
    double value;
    double limit;
  };
  std::vector<std::pair<std::string, double>> missed;
  for (const Goal& g :
       {Goal{"measurements", measurement_ratio, kGoalMeasurements},
        Goal{"time", time_ratio, kGoalTime}, Goal{"mean regret", real.mean_regret, kGoalMeanRegret},
        Goal{"worst regret", real.worst_regret, kGoalWorstRegret}}) {
    if (g.value > g.limit) {
      missed.emplace_back(g.name, g.value);
    }
  }
  const bool goals = missed.empty();
  const bool saved = measurement_ratio <= kGoalMeasurements && time_ratio <= kGoalTime;
  // The same goals with the regret the adaptive table adds to the exhaustive table's: what the
  // search cost, apart from the table's own rules and interpolation, which both tables share.
  const bool goals_added =
      saved && real.added.mean <= kGoalMeanRegret && real.added.worst <= kGoalWorstRegret;
  const bool exhaustive_meets_regret =
      self.mean_regret <= kGoalMeanRegret && self.worst_regret <= kGoalWorstRegret;
  nlohmann::json missed_json = nlohmann::json::object();
  std::string missed_words;
  for (const auto& [name, value] : missed) {
    missed_json[name] = value;
    missed_words += (missed_words.empty() ? "" : ", ") + name + " " + pct(value);
  }
  nlohmann::json report = {
      {"profile", prof.name},
      {"profile_hash", prof.hash},
      {"device", ex.summary.table.at("provenance").at("device")},
      {"exhaustive", {{"measurements", exhaustive_pairs}, {"seconds", ex.seconds}}},
      {"adaptive",
       {{"measurements", adaptive_pairs},
        {"measured_in_full", full_pairs},
        {"timings", search.value("timings", 0)},
        {"race_timings", search.value("race_timings", 0)},
        {"seconds", ad.seconds}}},
      {"measurement_ratio", measurement_ratio},
      {"time_ratio", time_ratio},
      {"kernel_calls",
       {{"exhaustive", {{"timed", ex_calls.timed}, {"warmup", ex_calls.warmup}}},
        {"adaptive", {{"timed", ad_calls.timed}, {"warmup", ad_calls.warmup}}},
        {"timed_ratio", timed_ratio},
        {"warmup_ratio", warmup_ratio}}},
      {"drift", drift.to_json()},
      {"adaptive_table", real.to_json()},
      {"exhaustive_table", self.to_json()},
      {"replayed_search",
       {{"measurements", replay_pairs},
        {"measurement_ratio", replay_ratio},
        {"table", replayed.to_json()}}},
      {"goals",
       {{"measurement_ratio", kGoalMeasurements},
        {"time_ratio", kGoalTime},
        {"mean_regret", kGoalMeanRegret},
        {"worst_regret", kGoalWorstRegret},
        {"met", goals},
        {"missed", missed_json},
        {"exhaustive_table_meets_regret", exhaustive_meets_regret},
        {"met_beyond_exhaustive_table", goals_added}}}};
  if (control) {
    report["control"] = control->to_json();
    report["control"]["seconds"] = ctl->seconds;
    report["control"]["time_ratio"] = share(ad.seconds, ctl->seconds);
  }
  const std::string path = (fs::path(out) / "search_check.json").string();
  write_json_atomically(path, report);

  std::printf("search-check: profile %s: exhaustive %d measurements in %.1f s; adaptive %d "
              "(%d in full, %d timings with %d brief race timings) in %.1f s\n",
              prof.name.c_str(), exhaustive_pairs, ex.seconds, adaptive_pairs, full_pairs,
              search.value("timings", 0), search.value("race_timings", 0), ad.seconds);
  std::printf("search-check: measurements %s of the exhaustive (goal <= %s), time %s (goal <= "
              "%s)\n",
              pct(measurement_ratio).c_str(), pct(kGoalMeasurements).c_str(),
              pct(time_ratio).c_str(), pct(kGoalTime).c_str());
  std::printf("search-check: kernel calls, races included: timed repetitions %lld of %lld "
              "(%s), warm-up calls %lld of %lld (%s)\n",
              ad_calls.timed, ex_calls.timed, pct(timed_ratio).c_str(), ad_calls.warmup,
              ex_calls.warmup, pct(warmup_ratio).c_str());
  if (drift.pairs > 0) {
    std::printf("search-check: the %d pairs both sweeps timed in full: adaptive/exhaustive time "
                "median %.2f, 10th-90th percentile %.2f-%.2f (the machine's drift between two "
                "sweeps, which the adaptive table's regret includes)\n",
                drift.pairs, drift.median, drift.p10, drift.p90);
  }
  if (drift.outliers > 0) {
    std::string named;
    for (const DriftOutlier& f : drift.farthest) {
      named += (named.empty() ? "" : "; ") + f.workload_key + " " + f.config_key + " " +
               three_digits(f.ratio) + "x";
    }
    std::printf("search-check: %d of those pairs came out %sx apart or more (a disturbance of the "
                "machine during one sweep, which a regret judged across the two takes as the "
                "truth), the farthest: %s\n",
                drift.outliers, three_digits(kDriftOutlier).c_str(), named.c_str());
  }
  print_judgement("exhaustive table (its own noise rules on its own timings)", self);
  print_above_goal("exhaustive table", self, false);
  print_judgement("adaptive table", real);
  print_split("adaptive table", real);
  print_above_goal("adaptive table", real);
  print_judgement("the search replayed on the exhaustive timings", replayed);
  print_split("the replayed search", replayed);
  print_above_goal("the replayed search", replayed);
  std::printf("search-check: the replayed search measures %d (%s)\n", replay_pairs,
              pct(replay_ratio).c_str());
  if (control) {
    std::printf("search-check: control: a second exhaustive sweep of %d measurements in %.1f s "
                "(the adaptive sweep's time is %s of it)\n",
                control->measurements, ctl->seconds, pct(share(ad.seconds, ctl->seconds)).c_str());
    print_control(*control);
  }
  std::printf("search-check: goals (measurements <= %s, time <= %s, regret mean <= %s, worst <= "
              "%s): %s%s%s\n",
              pct(kGoalMeasurements).c_str(), pct(kGoalTime).c_str(), pct(kGoalMeanRegret).c_str(),
              pct(kGoalWorstRegret).c_str(), goals ? "met" : "missed", missed.empty() ? "" : ": ",
              missed_words.c_str());
  if (!exhaustive_meets_regret) {
    std::printf("search-check: the exhaustive table, which saw every measurement, misses the "
                "regret goals on its own timings too (mean %s, worst %s): what the table's rules "
                "cost with every measurement in hand\n",
                pct(self.mean_regret).c_str(), pct(self.worst_regret).c_str());
  }
  std::printf("search-check: the same goals with the regret beyond the exhaustive table's at each "
              "point: %s\nsearch-check: report %s\n",
              goals_added ? "met" : "missed", path.c_str());
  return o.require_goals && !goals ? kExitMismatch : kExitOk;
}

} // namespace

Command setup_search_check(CLI::App& root) {
  auto opt = std::make_shared<SearchCheckOptions>();
  CLI::App* sub = root.add_subcommand(
      "search-check", "Sweep a profile exhaustively and adaptively, and compare the two: "
                      "measurements, time, decision agreement and regret");
  sub->add_option("--profile", opt->profile, "Profile name or JSON path")->capture_default_str();
  sub->add_option(
      "--out", opt->out,
      "Output folder: exhaustive/, adaptive/ (and control/) sweeps and search_check.json "
      "(default: attn-tune-out/search-check-<profile>)");
  sub->add_option("--device", opt->device, "Device (as for sweep; default: GPU 0, else cpu)");
  sub->add_option("--threads", opt->threads, "CPU worker threads (backend and reference; 0: all)")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--seed", opt->seed, "Seed of the test data")
      ->check(unsigned_64())
      ->capture_default_str();
  add_kernels_option(sub, opt->kernels);
  sub->add_flag("--quiet", opt->quiet, "No progress lines");
  CLI::Option* replay =
      sub->add_option("--replay", opt->replay,
                      "Sweep nothing: replay the adaptive search on this exhaustive sweep's folder "
                      "(its results.jsonl answers every run) and judge its table against it; with "
                      "--out, the replayed table and lines go to OUT/replayed_table.json and "
                      "OUT/replayed_results.jsonl");
  sub->add_option("--adaptive", opt->adaptive,
                  "With --replay: also judge this adaptive sweep's folder (same profile and "
                  "device) against the exhaustive one: its measurements, drift and table regret, "
                  "without sweeping")
      ->needs(replay);
  sub->add_flag(
         "--control", opt->control,
         "Sweep the profile exhaustively a second time after the adaptive sweep (OUT/control) "
         "and judge each exhaustive table on the other's timings: the regret that measuring "
         "everything again gives, the floor under the adaptive table's")
      ->excludes(replay);
  sub->add_option("--replay-control", opt->replay_control,
                  "With --replay: a second exhaustive sweep's folder (same profile, device and "
                  "kernels), judged against the first as --control judges its own; with --out, "
                  "OUT/control_judgement.json")
      ->needs(replay);
  sub->add_flag("--require-goals", opt->require_goals,
                "Exit 1 when the adaptive sweep misses a goal (measurements, time or regret)");
  return {sub, [opt] { return run_search_check(*opt); }};
}

} // namespace attn::cli
