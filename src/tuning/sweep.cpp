// The sweep: expand the profile, check each (workload, configuration) against the reference
// before timing it, append every outcome to results.jsonl (fsynced), resume, build the table.
// Each measurement is a checked run (src/validation/checked_run.h) in a supervised worker:
// sweep_worker plans, runs and appends, SweepSession (the supervisor's side) keeps the tally,
// records faults and builds the table; `--remeasure-noisy` then runs the same workers over the
// configurations behind the table's noisy decisions. Each step is a function below or a unit of
// its own (results_file, sweep_progress, workloads, provenance, threshold_table).
#include "src/tuning/sweep.h"

#include <cctype>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unistd.h>

#include "build_info.h"
#include "src/backends/registry.h"
#include "src/io/atomic_file.h"
#include "src/io/embedded.h"
#include "src/io/folder_lock.h"
#include "src/io/stop_signals.h"
#include "src/model/errors.h"
#include "src/model/rng.h"
#include "src/tuning/provenance.h"
#include "src/tuning/shard.h"
#include "src/tuning/subject_cache.h"
#include "src/tuning/sweep_progress.h"
#include "src/tuning/workloads.h"
#include "src/validation/checked_run.h"
#include "src/validation/row_sample.h"

namespace attn {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The first line of results.jsonl: what a resumed sweep must match, and what `merge` needs to
// check shards against each other and to build their table (timing options, kernel sources,
// the shard and the size of its plan).
json results_header(const Profile& prof, const Backend& be, uint64_t seed, const ShardSpec& shard,
                    SearchMode search, int workloads, int measurements) {
  const json kernels = kernels_provenance(be);
  const bool plugin = kernels.value("source", "") == "plugin";
  json h = {{"type", "header"},
            {"schema", kResultsSchema},
            {"version", kResultsVersion},
            {"profile", prof.name},
            {"profile_hash", prof.hash},
            {"device", be.info().to_json()},
            {"kernels", kernels},
            {"kernel_sources_sha256", plugin ? kernels.value("library_sha256", "")
                                             : std::string(generated::kKernelSourcesSha256)},
            {"seed", seed},
            {"timing_mode", timing_mode_name(prof.timing.mode)},
            {"timing_options", timing_options_json(prof.timing)},
            {"tool_version", ATTN_VERSION},
            {"git_hash", ATTN_GIT_HASH},
            {"started_utc", utc_now()}};
  // The size of this folder's plan tells `merge` whether the folder is complete (an adaptive
  // folder: its search_end line does); an adaptive search counts its measurements against it.
  h["plan"] = {{"workloads", workloads}, {"measurements", measurements}};
  h["search"] = search_header(search, &prof.timing);
  if (shard.sharded()) {
    h["shard"] = {{"index", shard.index}, {"count", shard.count}};
  }
  return h;
}

// One workload with the configurations still to measure (those not in results.jsonl).
struct PlannedWorkload {
  const Workload* workload = nullptr;
  std::string key;
  std::vector<KernelConfig> pending;
};

json record_base(const PlannedWorkload& pw, const KernelConfig& cfg, uint64_t seed) {
  return {{"type", "measurement"},   {"workload_key", pw.key},
          {"config_key", cfg.key()}, {"workload", pw.workload->to_json()},
          {"config", cfg.to_json()}, {"seed", seed}};
}

// The results.jsonl line of a checked run: its identity's record base with the status, the
// check's figures and the timing with the bytes and flops it moved.
json measurement_record(const json& base, const CheckedRunResult& r, const Problem& pr) {
  json rec = base;
  if (r.check) {
    const CheckReport& rep = r.check->report;
    rec["check"] = {{"pass", rep.pass},
                    {"rows_checked", r.check->rows_checked},
                    {"rows_total", r.check->rows_total},
                    {"norm_rel_err", rep.norm_rel_err},
                    {"max_abs_err", rep.max_abs_err},
                    {"max_lse_err", rep.max_lse_err},
                    {"summary", rep.summary()}};
  }
  switch (r.status) {
  case RunStatus::passed:
    if (r.timing) {
      json tj = to_json(*r.timing);
      const double bytes = double(pr.kv_bytes_touched());
      const double flops = 4.0 * double(pr.visible_pairs()) * pr.params.head_dim;
      const double median = r.timing->median_s;
      tj["kv_bytes"] = bytes;
      tj["flops"] = flops;
      tj["gbytes_per_s"] = median > 0 ? bytes / median * 1e-9 : 0.0;
      tj["gflops_per_s"] = median > 0 ? flops / median * 1e-9 : 0.0;
      rec["timing"] = tj;
    }
    rec["status"] = "ok";
    break;
  case RunStatus::failed:
    rec["status"] = "failed";
    rec["reason"] = "wrong results: " + r.check->report.summary();
    rec["check"]["details"] = r.check->report.details();
    break;
  case RunStatus::skipped:
    rec["status"] = "skipped";
    rec["reason"] = r.reason;
    break;
  case RunStatus::error:
    rec["status"] = "error";
    rec["reason"] = r.reason;
    break;
  case RunStatus::fault:
    rec["status"] = "fault";
    rec["reason"] = r.reason;
    break;
  }
  return rec;
}

// The short text the progress line shows for a run.
std::string shown(const CheckedRunResult& r) {
  switch (r.status) {
  case RunStatus::passed: {
    if (!r.timing) {
      return "ok";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "ok %.2f us", r.timing->median_s * 1e6);
    std::string s = buf;
    if (r.timing->clocks && r.timing->clocks->throttled) {
      s += " (throttled)";
    }
    if (r.timing->cpu_wait_share && *r.timing->cpu_wait_share > kCpuWaitLimit) {
      std::snprintf(buf, sizeof buf, " (waited for a CPU %.0f%% of the time)",
                    100.0 * *r.timing->cpu_wait_share);
      s += buf;
    }
    return s;
  }
  case RunStatus::failed:
    return "FAILED " + r.check->report.summary();
  case RunStatus::skipped:
    return "skipped (" + r.reason + ")";
  case RunStatus::error:
    return "ERROR " + r.reason;
  case RunStatus::fault:
    break;
  }
  return "FAULT " + r.reason;
}

// Has the backend compile every kernel the plan still needs before the first timing.
void prepare_plan(Backend& be, const std::vector<PlannedWorkload>& plan, const WorkerLink& link) {
  std::vector<PlanItem> items;
  for (const PlannedWorkload& pw : plan) {
    for (const KernelConfig& cfg : pw.pending) {
      items.push_back({pw.workload->params, cfg});
    }
  }
  prepare_logged(be, items, link);
}

// The device a timing lock is taken on: a GPU by its UUID, a CPU by its host.
std::string device_lock_key(const DeviceInfo& dev) {
  if (!dev.uuid.empty()) {
    return dev.backend + "-" + dev.uuid;
  }
  char host[256] = {};
  (void)::gethostname(host, sizeof host - 1);
  return dev.backend + "-" + host;
}

// The run key of a re-timing: apart from the measurement's own, so that a worker started after
// a crash skips what this command has re-timed already, not what earlier runs measured.
std::string remeasure_key(const std::string& workload_key, const std::string& config_key) {
  return record_key(workload_key, config_key) + " | remeasure";
}

// The plan of `sweep --remeasure-noisy`: the timed configurations of each noisy decision's
// workload in this folder's plan, those this command has not re-timed yet pending.
std::vector<PlannedWorkload> remeasure_plan(const std::vector<NoisyPoint>& noisy,
                                            const std::map<std::string, const Workload*>& mine,
                                            const WorkerLink& link, int& total, int& resumed) {
  std::vector<PlannedWorkload> plan;
  std::map<std::string, std::size_t> at;
  for (const NoisyPoint& np : noisy) {
    const std::string key = np.workload.key();
    const auto w = mine.find(key);
    if (w == mine.end()) {
      continue; // not this plan's: a results file always matches its profile and shard
    }
    auto [it, fresh] = at.try_emplace(key, plan.size());
    if (fresh) {
      plan.push_back({w->second, key, {}});
    }
    for (const KernelConfig& cfg : np.configs) {
      ++total;
      if (link.finished(remeasure_key(key, cfg.key()))) {
        ++resumed;
      } else {
        plan[it->second].pending.push_back(cfg);
      }
    }
  }
  return plan;
}

// The worker's part of an adaptive sweep, once results.jsonl is open and the device taken: ask
// the search for its next point and runs until it has none, each run a checked run (race runs
// with race_timing) whose line is appended, then observed, before it is reported; then a
// search_end line. The observations start from the lines already in the file that count as
// done (so an error is retried once and --retry-faults measures faults again, as exhaustively).
// Lines of a resumed results file that are no part of this folder's plan: a configuration the
// kernels do not offer, a workload of another profile or shard, data drawn from another seed. The
// header matched, so such a line was edited in or pasted from another folder; the table would
// take it as a measurement. Refused naming the line, as a damaged line is.
void refuse_foreign_lines(const OpenedResults& log, const std::string& path,
                          const std::vector<Workload>& workloads,
                          const std::vector<std::vector<KernelConfig>>& configs,
                          const std::vector<std::size_t>& mine, uint64_t sweep_seed) {
  std::map<std::string, std::size_t> workload_at;
  for (const std::size_t i : mine) {
    workload_at.emplace(workloads[i].key(), i);
  }
  for (std::size_t n = 0; n < log.lines.size(); ++n) {
    const json& l = log.lines[n];
    const std::string wk = l.value("workload_key", "");
    const std::string ck = l.value("config_key", "");
    const std::string which =
        path + ": measurement " + std::to_string(n + 1) + " (" + wk + " " + ck + ")";
    const auto w = workload_at.find(wk);
    if (w == workload_at.end()) {
      throw InputError(which + " is no workload of this folder's plan (profile and shard): a line "
                               "from another sweep; remove it or start a new --out folder");
    }
    const auto& offered = configs[w->second];
    if (std::none_of(offered.begin(), offered.end(),
                     [&](const KernelConfig& c) { return c.key() == ck; })) {
      throw InputError(which + " names a configuration these kernels do not offer for it: a line "
                               "from another sweep; remove it or start a new --out folder");
    }
    if (const std::string why = other_seed_reason(l, workloads[w->second], sweep_seed);
        !why.empty()) {
      throw InputError(which + " " + why);
    }
  }
}

int adaptive_worker(Backend& be, const Profile& prof, const SweepOptions& opt,
                    const AdaptiveSearch& search, int exhaustive, OpenedResults& log,
                    const WorkerLink& link) {
  SearchObservations obs;
  for (const json& l : log.lines) {
    const std::string key = record_key(l.value("workload_key", ""), l.value("config_key", ""));
    // A fault this command already ran again (--retry-faults; the worker it crashed was
    // replaced by this one) stands: asked for once more, the search would crash each new
    // worker on it without end, as an outside audit's plugin that aborts showed.
    const bool retried = l.value("status", "") == "fault" &&
                         link.finished(key + (line_stage(l) == SearchStage::race ? " | race" : ""));
    if (log.done.count(key) || retried) {
      observe(obs, l);
    }
  }
  link.opened(be);
  link.plan(exhaustive, int(obs.size()));
  std::vector<PlannedWorkload> all;
  for (std::size_t i = 0; i < search.size(); ++i) {
    all.push_back(
        {&search.point(i).workload, search.point(i).workload.key(), search.point(i).configs});
  }
  link.begin_phase("compiling the plan's kernels");
  prepare_plan(be, all, link);
  link.end();

  RunRequest full;
  full.timing = prof.timing;
  RunRequest race;
  race.timing = race_timing(prof.timing);
  std::set<std::string> ran; // a run asked for twice is a fault of the search, not a loop
  // A sweep stopped between the runs of one point resumes that point first: an unstopped search
  // finishes a point before it asks for the next, and asked with the point half measured, a
  // finished neighbour took it for measured and raced again from its partial survivors.
  std::vector<AdaptiveSearch::Due> first;
  if (!log.lines.empty()) {
    const json& line = log.lines.back();
    const std::string last = line.value("workload_key", "");
    // Its lines keep the reason the point was due (a line's why: the point's, "; ", the run's).
    std::string why;
    if (const auto s = line.find("search"); s != line.end() && s->is_object()) {
      if (const auto w = s->find("why"); w != s->end() && w->is_string()) {
        why = w->get<std::string>();
        why = why.substr(0, why.find("; "));
        why = why.substr(0, why.find(" (resumed: ")); // stopped again while resumed
      }
    }
    for (std::size_t i = 0; i < search.size(); ++i) {
      if (search.point(i).workload.key() == last && !search.runs_at(i, obs).empty()) {
        first.push_back({i, (why.empty() ? "" : why + " ") +
                                "(resumed: the point in flight when the sweep stopped)"});
        break;
      }
    }
  }
  // --retry-faults: each run whose last line is a fault runs again in its stage, at its point,
  // before the search goes on (asked for its next point, the search would not return to a point
  // it finished: one whose race faulted has its survivors without it).
  std::map<std::size_t, std::vector<SearchRun>> retries;
  if (opt.retry_faults) {
    std::map<std::string, const json*> last_line; // the last line of each pair and stage
    for (const json& l : log.lines) {
      last_line[record_key(l.value("workload_key", ""), l.value("config_key", "")) + " | " +
                search_stage_name(line_stage(l))] = &l;
    }
    for (const auto& [pair, l] : last_line) {
      const std::string wk = l->value("workload_key", "");
      const std::string ck = l->value("config_key", "");
      const SearchStage stage = line_stage(*l);
      // Once per command: a worker that replaces one the retried run crashed sees its fault
      // line last again.
      if (l->value("status", "") != "fault" ||
          link.finished(record_key(wk, ck) + (stage == SearchStage::race ? " | race" : ""))) {
        continue;
      }
      for (std::size_t i = 0; i < search.size(); ++i) {
        if (search.point(i).workload.key() != wk) {
          continue;
        }
        for (const KernelConfig& c : search.point(i).configs) {
          if (c.key() == ck) {
            if (retries[i].empty()) {
              first.push_back({i, "--retry-faults"});
            }
            retries[i].push_back({c, stage, "measured again after a fault"});
          }
        }
      }
    }
  }
  SubjectCache subjects;
  std::size_t next_first = 0;
  const auto next_due = [&]() -> std::optional<AdaptiveSearch::Due> {
    return next_first < first.size() ? std::optional(first[next_first++]) : search.next_point(obs);
  };
  for (std::optional<AdaptiveSearch::Due> due = next_due(); due; due = next_due()) {
    const std::size_t i = due->index;
    const SearchPoint& sp = search.point(i);
    const PlannedWorkload pw{&sp.workload, sp.workload.key(), {}};
    const uint64_t seed = workload_seed(opt.seed, sp.workload);
    const std::vector<int> grid = search.shape_grid(i);
    const auto identity = [&](const SearchRun& run) {
      json base = record_base(pw, run.config, seed);
      base["search"] = {{"stage", search_stage_name(run.stage)},
                        {"why", due->why + "; " + run.why}};
      if (!grid.empty()) {
        base["search"]["grid"] = grid;
      }
      const std::string key =
          record_key(pw.key, run.config.key()) + (run.stage == SearchStage::race ? " | race" : "");
      if (!ran.insert(key).second) {
        throw std::logic_error("the adaptive search asked for " + key + " twice");
      }
      return RunIdentity{key, run.config, base};
    };
    const auto record = [&](const RunIdentity& run, const CheckedRunResult& r, const Problem& pr) {
      const json line = measurement_record(run.context, r, pr);
      log.out->append(line);
      observe(obs, line);
      link.result(run, r);
    };
    CheckSubject* subject = subjects.find(i);
    try {
      if (subject == nullptr) {
        subjects.make_room(int64_t(workload_cache_bytes(sp.workload, prof.pool_factor)));
        Problem pr =
            make_workload_problem(sp.workload, prof.pool_factor, seed, opt.reference_threads);
        std::vector<int> rows = sample_rows(pr, prof.validation, seed);
        subject =
            &subjects.add(i, std::make_unique<CheckSubject>(pw.key, std::move(pr), std::move(rows),
                                                            opt.reference_threads));
      }
    } catch (const std::exception& e) {
      for (const SearchRun& run : search.runs_at(i, obs)) {
        CheckedRunResult r;
        r.status = RunStatus::error;
        r.reason = std::string("cannot build the problem: ") + e.what();
        record(identity(run), r, Problem{});
      }
      continue;
    }
    std::vector<SearchRun> runs = search.runs_at(i, obs);
    if (const auto r = retries.find(i); r != retries.end()) {
      runs = r->second; // then whatever the search wants there once it has seen them
      retries.erase(r);
    }
    for (; !runs.empty(); runs = search.runs_at(i, obs)) {
      for (const SearchRun& run : runs) {
        const RunIdentity id = identity(run);
        const CheckedRunResult r =
            checked_run(link, be, *subject, id, run.stage == SearchStage::race ? race : full);
        record(id, r, subject->problem());
      }
    }
  }
  if (!ran.empty() || !log.search_ended) { // a resume that found nothing to do adds none
    log.out->append(search_end_line(int(obs.size()), exhaustive));
  }
  return 0;
}

// One worker's part of a sweep: open results.jsonl, take the device, measure what is neither in
// it nor finished by earlier workers of this command, each a checked run, appending each line
// before reporting it to the supervisor, which keeps the tally and builds the table. With
// `remeasure` it times those configurations again instead, with remeasure_timing(); each new line
// replaces the earlier one (to_records keeps the last), except after an error, which is reported
// but not written, so a transient failure does not cost a measurement the table had.
int sweep_worker(Backend& be, const Profile& prof, const SweepOptions& opt, SearchMode search,
                 pid_t sweep_pid, bool resume, const std::vector<NoisyPoint>* remeasure,
                 const WorkerLink& link) {
  const DeviceInfo& dev = be.info();
  check_profile_params(prof, be);
  // The plan: the profile's workloads (this shard's only) and the configurations of each.
  const std::vector<Workload> all_workloads = expand_workloads(prof);
  check_workloads_fit(prof, all_workloads);
  std::vector<std::vector<KernelConfig>> all_configs;
  std::vector<int> config_counts;
  for (const auto& w : all_workloads) {
    all_configs.push_back(configs_for(prof, be, w));
    config_counts.push_back(int(all_configs.back().size()));
  }
  const std::vector<int> shard_of = assign_shards(all_workloads, config_counts, opt.shard.count);
  std::vector<std::size_t> mine;
  int shard_measurements = 0;
  for (std::size_t i = 0; i < all_workloads.size(); ++i) {
    if (shard_of[i] == opt.shard.index) {
      mine.push_back(i);
      shard_measurements += config_counts[i];
    }
  }
  // The results file before the device: a sweep that cannot resume says so at once, not after
  // a wait.
  const std::string results = (fs::path(opt.out_dir) / "results.jsonl").string();
  OpenedResults log = open_results(
      results,
      results_header(prof, be, opt.seed, opt.shard, search, int(mine.size()), shard_measurements),
      resume, opt.retry_faults);
  refuse_foreign_lines(log, results, all_workloads, all_configs, mine, opt.seed);
  const DeviceLock timing_lock(
      device_lock_key(dev), opt.wait_for_device,
      [&](const std::string& pid) {
        link.log("sweep: waiting for " + dev.id + ": another attn-tune process" +
                 (pid.empty() ? "" : " (pid " + pid + ")") +
                 " is timing on it (--no-wait to stop instead)");
      },
      sweep_pid);

  if (search == SearchMode::adaptive && remeasure == nullptr) {
    std::vector<SearchPoint> points;
    for (const std::size_t i : mine) {
      points.push_back({all_workloads[i], all_configs[i]});
    }
    return adaptive_worker(be, prof, opt, AdaptiveSearch(std::move(points)), shard_measurements,
                           log, link);
  }
  std::vector<PlannedWorkload> plan;
  int total = 0;
  int resumed = 0;
  if (remeasure != nullptr) {
    std::map<std::string, const Workload*> by_key;
    for (const std::size_t i : mine) {
      by_key[all_workloads[i].key()] = &all_workloads[i];
    }
    plan = remeasure_plan(*remeasure, by_key, link, total, resumed);
  } else {
    for (const std::size_t i : mine) {
      const Workload& w = all_workloads[i];
      PlannedWorkload pw{&w, w.key(), {}};
      for (const auto& c : all_configs[i]) {
        ++total;
        const std::string key = record_key(pw.key, c.key());
        if (log.done.count(key) || link.finished(key)) {
          ++resumed;
        } else {
          pw.pending.push_back(c);
        }
      }
      plan.push_back(std::move(pw));
    }
  }
  link.opened(be);
  link.plan(total, resumed);

  // Every compile before the first timing: a phase, since a compiler crash is no kernel's fault.
  link.begin_phase("compiling the plan's kernels");
  prepare_plan(be, plan, link);
  link.end();

  RunRequest req;
  req.timing = remeasure != nullptr ? remeasure_timing(prof.timing) : prof.timing;
  const auto identity = [&](const PlannedWorkload& pw, const KernelConfig& cfg, uint64_t seed) {
    if (remeasure == nullptr) {
      return RunIdentity{record_key(pw.key, cfg.key()), cfg, record_base(pw, cfg, seed)};
    }
    json base = record_base(pw, cfg, seed);
    base["remeasure_factor"] = kRemeasureFactor;
    if (search == SearchMode::adaptive) { // every line of an adaptive folder says its stage
      base["search"] = {{"stage", search_stage_name(SearchStage::full)},
                        {"why", "--remeasure-noisy: a decision within noise timed again with " +
                                    std::to_string(kRemeasureFactor) + "x the repetitions"}};
    }
    return RunIdentity{remeasure_key(pw.key, cfg.key()), cfg, base};
  };
  const auto record = [&](const RunIdentity& run, const CheckedRunResult& r, const Problem& pr) {
    if (remeasure == nullptr || r.status != RunStatus::error) {
      log.out->append(measurement_record(run.context, r, pr));
    }
    link.result(run, r);
  };
  for (const PlannedWorkload& pw : plan) {
    if (pw.pending.empty()) {
      continue;
    }
    const uint64_t seed = workload_seed(opt.seed, *pw.workload);
    std::optional<CheckSubject> subject;
    try {
      Problem pr =
          make_workload_problem(*pw.workload, prof.pool_factor, seed, opt.reference_threads);
      std::vector<int> rows = sample_rows(pr, prof.validation, seed);
      subject.emplace(pw.key, std::move(pr), std::move(rows), opt.reference_threads);
    } catch (const std::exception& e) {
      // A workload too large for host memory is a finding about the profile, not a reason to
      // lose the rest of the sweep: record it against each of its configurations.
      for (const KernelConfig& cfg : pw.pending) {
        CheckedRunResult r;
        r.status = RunStatus::error;
        r.reason = std::string("cannot build the problem: ") + e.what();
        record(identity(pw, cfg, seed), r, Problem{});
      }
      continue;
    }
    for (const KernelConfig& cfg : pw.pending) {
      const RunIdentity run = identity(pw, cfg, seed);
      const CheckedRunResult r = checked_run(link, be, *subject, run, req);
      record(run, r, subject->problem());
    }
  }
  return 0;
}

} // namespace

namespace {

// What a sweep that stops with its results file in `out_dir` keeps, and how to go on.
std::string resume_note(const std::string& out_dir) {
  return "the measurements made so far are in " + (fs::path(out_dir) / "results.jsonl").string() +
         ": the same command with --resume carries on";
}

// The supervisor's side of a sweep: holds the output folder, turns the runs' results into
// progress and a tally, records faults, and builds the table from everything in results.jsonl
// (earlier runs included) once the last worker is done.
class SweepSession {
public:
  SweepSession(const Profile& prof, const SweepOptions& opt) : prof_(prof), opt_(opt) {
    std::error_code ec;
    made_folder_ = !fs::exists(opt.out_dir, ec);
    fs::create_directories(opt.out_dir, ec);
    const std::error_code why = ec;
    if (!fs::is_directory(opt.out_dir)) {
      throw InputError(
          "cannot create output folder '" + opt.out_dir + "'" +
          (fs::exists(opt.out_dir, ec) ? ": a file of that name is there" : ": " + why.message()));
    }
    lock_.emplace(opt.out_dir); // one sweep per folder: the second stops here
    remove_stale_temporaries(opt.out_dir); // a table or report write that a kill cut short
    // The table and report are written at the end, next to the results: a folder where they
    // cannot be (no permission, a path too long for their temporary files) is said now, before
    // any measurement, not after all of them.
    for (const char* name : {"threshold_table.json", "report.html"}) {
      check_can_write((fs::path(opt.out_dir) / name).string());
    }
    sum_.results_path = (fs::path(opt.out_dir) / "results.jsonl").string();
    // Until a worker has opened the results file (its plan says so), a stop leaves none to
    // point at: the line says nothing was measured rather than naming a file that is not there.
    if (!opt.stop_note.empty()) {
      set_stop_note(opt.stop_note);
    } else if (fs::exists(sum_.results_path, ec)) {
      set_stop_note(resume_note(opt.out_dir));
    } else {
      set_stop_note("nothing was measured (" + opt.out_dir + " holds no results yet)");
    }
  }

  // A sweep that stopped before its first measurement (a device it cannot use or may not wait
  // for, a refused plugin) leaves no folder it made holding nothing but its lock and the header
  // of a results file.
  ~SweepSession() {
    if (!made_folder_ || !lock_) {
      return;
    }
    std::error_code ec;
    bool header_only = false;
    for (const auto& e : fs::directory_iterator(opt_.out_dir, ec)) {
      if (e.path().filename() == "results.jsonl") {
        try {
          const ResultsFile f = read_results(e.path().string());
          header_only = f.lines.empty() && f.search_end.is_null();
        } catch (const std::exception&) {
          return;
        }
        if (!header_only) {
          return;
        }
      } else if (e.path().filename() != FolderLock::file_name()) {
        return;
      }
    }
    if (ec) {
      return;
    }
    if (header_only) {
      fs::remove(fs::path(opt_.out_dir) / "results.jsonl", ec);
    }
    lock_->remove_file(); // before the lock goes, so no one can lock the file then removed
    lock_.reset();
    fs::remove(opt_.out_dir, ec); // only while empty
  }
  SweepSession(const SweepSession&) = delete;
  SweepSession& operator=(const SweepSession&) = delete;

  void opened(const OpenedMsg& m) {
    device_ = m.device.to_json();
    kernels_ = m.kernels;
    sm_count_ = m.device.sm_count;
    slug_ = device_slug(m.device);
  }

  void planned(const PlanMsg& m) {
    // The first worker's plan counts; a note before it (waiting for the device) may already
    // have opened a progress line without them.
    if (started_) {
      return;
    }
    started_ = true;
    if (opt_.stop_note.empty()) {
      set_stop_note(resume_note(opt_.out_dir)); // the worker opened the results file before its plan
    }
    if (progress_) {
      progress_->finish();
    }
    if (remeasuring_) {
      sum_.remeasure_planned = m.total;
      progress_.emplace(opt_.progress, opt_.progress_tty, m.total, m.resumed);
      return;
    }
    sum_.total = m.total;
    sum_.resumed = m.resumed;
    const bool adaptive = sum_.search == SearchMode::adaptive;
    progress_.emplace(opt_.progress, opt_.progress_tty, sum_.total, sum_.resumed, adaptive);
    if (adaptive) {
      progress_->note("adaptive search: no ETA; the search stops when its decisions settle, "
                      "within the exhaustive plan's " +
                      std::to_string(sum_.total) + " measurements");
    }
    if (sum_.resumed > 0) {
      progress_->note("resuming: " + std::to_string(sum_.resumed) + " of " +
                      std::to_string(sum_.total) + " measurements already in " + sum_.results_path);
    } else if (opt_.resume) {
      // A sweep killed before its first line resumes from nothing; a mistyped --out does too.
      // Killed before its header, it left no word of the search it was asked for either.
      progress_->note(
          "--resume: " + sum_.results_path +
          " holds no measurement yet; the sweep starts from the first, " +
          (adaptive ? "adaptive" : "exhaustive") +
          (adaptive || opt_.search ? "" : " (give --search adaptive for an adaptive one)"));
    }
  }

  void result(const RunIdentity& run, const CheckedRunResult& r) {
    const json& base = run.context;
    if (remeasuring_) {
      (r.status == RunStatus::passed ? sum_.remeasured : sum_.remeasure_other) += 1;
      if (r.status == RunStatus::fault) {
        append_after_valid(sum_.results_path, measurement_record(base, r, Problem{}));
      }
      progress().step(shown(r), "re-timed " + base.value("workload_key", "") + " " +
                                    base.value("config_key", ""));
      return;
    }
    switch (r.status) {
    case RunStatus::passed:
      ++sum_.ok;
      break;
    case RunStatus::failed:
      ++sum_.failed;
      break;
    case RunStatus::skipped:
      ++sum_.skipped;
      break;
    case RunStatus::error:
      ++sum_.errors;
      break;
    case RunStatus::fault:
      // The worker died before it could write the line: the supervisor writes it, after cutting
      // any half-written one.
      append_after_valid(sum_.results_path, measurement_record(base, r, Problem{}));
      ++sum_.faults;
      break;
    }
    progress().step(shown(r), base.value("workload_key", "") + " " + base.value("config_key", ""));
  }

  void note(const std::string& text) { progress().note(text); }
  void searched(SearchMode m) { sum_.search = m; }
  // The kernels' teardown (a plugin's destroy) crashed or hung after the measurements: they
  // stand, and the sweep fails as it does for a fault.
  void teardown_failed(const std::string& what) {
    note("the kernels failed after their measurements: " + what);
    sum_.teardown_failure = what;
  }

  // The decisions of the table as results.jsonl stands now that rest on timings within noise.
  [[nodiscard]] std::vector<NoisyPoint> noisy_now() const {
    return noisy_decision_points(to_records(read_results(sum_.results_path).lines));
  }

  // What follows is the re-timing of `noisy` (SweepOptions::remeasure_noisy): its own plan and
  // progress line, tallied apart from the sweep's measurements.
  void begin_remeasure(const std::vector<NoisyPoint>& noisy) {
    remeasuring_ = true;
    started_ = false;
    sum_.noisy_before = int(noisy.size());
    progress().note("re-timing the v1 and v2 configurations at " + std::to_string(noisy.size()) +
                    " decision" + (noisy.size() == 1 ? "" : "s") + " within noise with " +
                    std::to_string(kRemeasureFactor) + "x the profile's repetitions");
  }

  void say(const std::string& text) {
    if (opt_.info != nullptr && said_.insert(text).second) {
      std::fprintf(opt_.info, "%s\n", text.c_str());
      std::fflush(opt_.info);
    }
  }

  SweepSummary finish() {
    progress().finish();
    if (device_.is_null()) {
      throw std::runtime_error("the sweep's worker ended before it reported its device");
    }
    const ResultsFile all = read_results(sum_.results_path);
    const auto records = to_records(all.lines);
    // The header of this file (an earlier run's, when resumed), with the device and kernels this
    // run saw and the profile's timing options as they stand.
    json header = all.header.is_object() ? all.header : json::object();
    header["device"] = device_;
    header["kernels"] = kernels_;
    header["seed"] = opt_.seed;
    header["timing_options"] = timing_options_json(prof_.timing);
    header["timing_mode"] = timing_mode_name(prof_.timing.mode);
    header["profile"] = prof_.name;
    header["profile_hash"] = prof_.hash;
    header["tool_version"] = ATTN_VERSION;
    header["git_hash"] = ATTN_GIT_HASH;
    header.erase("kernel_sources_sha256"); // this binary's, as the kernels were timed by it
    sum_.table =
        build_threshold_table(records, table_provenance(header, records, all.lines), sm_count_);
    sum_.table_path = (fs::path(opt_.out_dir) / "threshold_table.json").string();
    write_json_atomically(sum_.table_path, sum_.table);
    if (!opt_.publish_dir.empty()) {
      std::error_code ec;
      fs::create_directories(opt_.publish_dir, ec);
      // A plugin's table is published under its own name, beside the built-in kernels' tables.
      std::string kernels;
      if (kernels_.value("source", "") == "plugin") {
        for (char c : kernels_.value("name", "plugin")) {
          kernels += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '-';
        }
        kernels += "-";
      }
      sum_.published_path =
          (fs::path(opt_.publish_dir) / (slug_ + "-" + kernels + prof_.name + ".json")).string();
      write_json_atomically(sum_.published_path, sum_.table);
    }
    return sum_;
  }

private:
  SweepProgress& progress() {
    if (!progress_) {
      progress_.emplace(opt_.progress, opt_.progress_tty, 0, 0);
    }
    return *progress_;
  }

  const Profile& prof_;
  const SweepOptions& opt_;
  std::optional<FolderLock> lock_;
  bool made_folder_ = false; // the folder did not exist before this sweep
  std::optional<SweepProgress> progress_;
  bool started_ = false;     // the first worker's plan has been seen
  bool remeasuring_ = false; // the re-timing of noisy decisions is under way
  SweepSummary sum_;
  json device_;
  json kernels_;
  int sm_count_ = 0;
  std::string slug_;
  std::set<std::string> said_;
};

// The search a sweep runs: the one asked for; else, resuming, the folder's (an exhaustive
// folder stays exhaustive); else exhaustive.
SearchMode search_of(const SweepOptions& opt) {
  if (opt.search) {
    return *opt.search;
  }
  if (opt.resume) {
    const ResultsFile rf = read_results((fs::path(opt.out_dir) / "results.jsonl").string());
    if (rf.header.is_object()) {
      return parse_search_mode(search_mode_of(rf.header));
    }
  }
  return SearchMode::exhaustive;
}

// `backend` gives the worker its backend; `release`, called in the worker once its measurements
// are sent, frees one it made, so that a plugin's destroy runs in the worker's teardown
// (src/io/teardown.h) as it does after verify and plugin check.
SweepSummary supervised_sweep(const std::function<Backend&(const WorkerLink&)>& backend,
                              const std::function<void()>& release, const Profile& prof,
                              const SweepOptions& opt, bool in_process) {
  SweepSession tally(prof, opt);
  const SearchMode search = search_of(opt);
  const pid_t sweep_pid = ::getpid(); // the workers are forked: they lock the device for it
  // One supervised session for the sweep's own measurements, then (remeasure_noisy) one that
  // re-times the noisy decisions they and the earlier runs' make.
  const auto supervise = [&](const std::vector<NoisyPoint>* remeasure) {
    CheckedSession session;
    session.work = [&](const WorkerLink& link, int worker) {
      // A later worker continues the file the first one started, whatever --resume said.
      const bool resume = opt.resume || worker > 0 || remeasure != nullptr;
      const int code =
          sweep_worker(backend(link), prof, opt, search, sweep_pid, resume, remeasure, link);
      release();
      return code;
    };
    session.on_opened = [&](const OpenedMsg& m) { tally.opened(m); };
    session.on_plan = [&](const PlanMsg& m) { tally.planned(m); };
    session.on_result = [&](const RunIdentity& run, const CheckedRunResult& r) {
      tally.result(run, r);
    };
    session.on_log = [&](const std::string& text) { tally.note(text); };
    session.on_say = [&](const std::string& text) { tally.say(text); };
    SupervisedRun run;
    try {
      run = session.run(in_process);
    } catch (const InputError&) {
      throw;
    } catch (const DeviceUnavailable&) {
      throw;
    } catch (const KernelFault&) {
      throw;
    } catch (const StopRequested&) {
      throw;
    } catch (const std::exception& e) {
      // Its workers failing (twice in a row, outside any configuration) ends the sweep with its
      // measurements safe: the line that says so says where they are and how to carry on.
      throw std::runtime_error(std::string(e.what()) + "; " +
                               (!opt.stop_note.empty() ? opt.stop_note
                                                       : resume_note(opt.out_dir)));
    }
    if (!run.teardown_failure.empty()) {
      tally.teardown_failed(run.teardown_failure);
    }
  };
  tally.searched(search);
  supervise(nullptr);
  if (opt.remeasure_noisy) {
    const std::vector<NoisyPoint> noisy = tally.noisy_now();
    if (!noisy.empty()) {
      tally.begin_remeasure(noisy);
      supervise(&noisy);
    }
  }
  SweepSummary s = tally.finish();
  if (opt.while_locked) {
    opt.while_locked(s); // the folder's lock is still held: its last files are written under it
  }
  return s;
}

} // namespace

void check_workloads_fit(const Profile& prof, const std::vector<Workload>& workloads) {
  for (const Workload& w : workloads) {
    if (const std::string why = workload_too_big(w, prof.pool_factor); !why.empty()) {
      throw InputError("profile '" + prof.name + "': " + why);
    }
  }
}

void check_profile_params(const Profile& prof, const Backend& be) {
  for (const auto& [fam, list] : prof.configs) {
    const FamilyDecl* decl = be.declaration().family(fam);
    for (std::size_t i = 0; decl != nullptr && i < list.size(); ++i) {
      for (const auto& [name, value] : list[i].params) {
        const bool known = std::any_of(decl->params.begin(), decl->params.end(),
                                       [&](const ParamSpace& p) { return p.name == name; });
        if (!known) {
          std::string declared;
          for (const ParamSpace& p : decl->params) {
            declared += (declared.empty() ? "" : ", ") + p.name;
          }
          throw InputError("profile '" + prof.name + "': configs." + family_name(fam) + ": '" +
                           name + "' is not a parameter the kernels declare for " +
                           family_name(fam) + " (" + (declared.empty() ? "none" : declared) + ")");
        }
      }
    }
  }
}

TimingOptions remeasure_timing(TimingOptions t) {
  t.min_reps *= kRemeasureFactor;
  t.max_reps *= kRemeasureFactor;
  t.max_seconds *= kRemeasureFactor;
  t.target_noise /= kRemeasureFactor;
  return t;
}

uint64_t workload_seed(uint64_t sweep_seed, const Workload& w) {
  Rng r(sweep_seed ^ fnv1a(w.key()));
  return r.next_u64();
}

std::string other_seed_reason(const json& line, const Workload& w, uint64_t sweep_seed) {
  const uint64_t want = workload_seed(sweep_seed, w);
  if (!line.contains("seed") || line.value("seed", uint64_t(0)) == want) {
    return {};
  }
  return "was measured on data of seed " + std::to_string(line.value("seed", uint64_t(0))) +
         ", not the sweep's " + std::to_string(want) + ": a line from another sweep";
}

SweepSummary run_sweep(Backend& be, const Profile& prof, const SweepOptions& opt) {
  return supervised_sweep([&](const WorkerLink&) -> Backend& { return be; }, [] {}, prof, opt,
                          /*in_process=*/true);
}

SweepSummary run_sweep_isolated(const BackendMaker& make, const Profile& prof,
                                const SweepOptions& opt) {
  std::unique_ptr<Backend> be; // made in each worker, never in the supervisor
  return supervised_sweep(
      [&](const WorkerLink& link) -> Backend& {
        be = link.start_kernels([&] { return make(link); });
        return *be;
      },
      [&] { be.reset(); }, prof, opt, opt.in_process);
}

} // namespace attn
