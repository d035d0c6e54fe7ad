// The sweep: expand the profile, check each (workload, configuration) against the reference
// before timing it, append every outcome to results.jsonl (fsynced), resume, build the table.
// The measuring runs in supervised worker processes (src/io/supervisor.h): sweep_worker measures
// and reports, SweepSession (the supervisor's side) keeps the tally, records faults and builds
// the table. Each step is a function below or a unit of its own (results_file, sweep_progress,
// workloads, threshold_table).
#include "src/tuning/sweep.h"

#include <cctype>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <unistd.h>

#include "build_info.h"
#include "reference/reference.h"
#include "src/backends/deadline.h"
#include "src/backends/registry.h"
#include "src/io/atomic_file.h"
#include "src/io/embedded.h"
#include "src/io/folder_lock.h"
#include "src/io/supervisor.h"
#include "src/model/errors.h"
#include "src/model/rng.h"
#include "src/tuning/shard.h"
#include "src/tuning/sweep_progress.h"
#include "src/tuning/workloads.h"
#include "src/validation/check.h"
#include "src/validation/row_sample.h"

namespace attn {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// What made the measurements, as the table's provenance records it: the timing options.
json timing_options_json(const TimingOptions& t) {
  return {{"warmup", t.warmup},           {"warmup_seconds", t.warmup_seconds},
          {"min_reps", t.min_reps},       {"max_reps", t.max_reps},
          {"max_seconds", t.max_seconds}, {"target_noise", t.target_noise},
          {"flush_cache", t.flush_cache}, {"mode", timing_mode_name(t.mode)}};
}

// The first line of results.jsonl: what a resumed sweep must match, and what `merge` needs to
// check shards against each other and to build their table (timing options, kernel sources,
// the shard and the size of its plan).
json results_header(const Profile& prof, const Backend& be, uint64_t seed, const ShardSpec& shard,
                    int workloads, int measurements) {
  const json kernels = be.kernels();
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
  // The size of this folder's plan tells `merge` whether the folder is complete.
  h["plan"] = {{"workloads", workloads}, {"measurements", measurements}};
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

// The problem and reference of one workload, built once and shared by its configurations; the
// reference is computed on the first configuration that produces an output to compare.
struct WorkloadData {
  Problem problem;
  uint64_t seed = 0;
  std::vector<int> rows; // the rows checked (empty: all)
  std::optional<ReferenceResult> ref;
};

// One line of results.jsonl and the short text the progress line shows for it.
struct Outcome {
  json record;
  std::string shown;
};

json record_base(const PlannedWorkload& pw, const KernelConfig& cfg, uint64_t seed) {
  return {{"type", "measurement"},   {"workload_key", pw.key},
          {"config_key", cfg.key()}, {"workload", pw.workload->to_json()},
          {"config", cfg.to_json()}, {"seed", seed}};
}

// Checks the run's output against the reference (computed before the first launch); records
// the check, and on a pass times it.
void check_and_time(PreparedRun& run, WorkloadData& wd, const Profile& prof, Outcome& o) {
  const Problem& pr = wd.problem;
  run.poison_outputs();
  run.run();
  const RunOutput got = run.download();
  const CheckReport rep =
      check_output(got.out, got.checked_lse(), *wd.ref, tolerance_for(pr.params.dtype));
  o.record["check"] = {{"pass", rep.pass},
                       {"rows_checked", wd.rows.empty() ? pr.num_rows() : int(wd.rows.size())},
                       {"rows_total", pr.num_rows()},
                       {"norm_rel_err", rep.norm_rel_err},
                       {"max_abs_err", rep.max_abs_err},
                       {"max_lse_err", rep.max_lse_err},
                       {"summary", rep.summary()}};
  if (!rep.pass) {
    o.record["status"] = "failed";
    o.record["reason"] = "wrong results: " + rep.summary();
    o.record["check"]["details"] = rep.details();
    o.shown = "FAILED " + rep.summary();
    return;
  }
  const TimingResult t = run.time(prof.timing);
  json tj = to_json(t);
  const double bytes = double(pr.kv_bytes_touched());
  const double flops = 4.0 * double(pr.visible_pairs()) * pr.params.head_dim;
  tj["kv_bytes"] = bytes;
  tj["flops"] = flops;
  tj["gbytes_per_s"] = t.median_s > 0 ? bytes / t.median_s * 1e-9 : 0.0;
  tj["gflops_per_s"] = t.median_s > 0 ? flops / t.median_s * 1e-9 : 0.0;
  o.record["timing"] = tj;
  o.record["status"] = "ok";
  char buf[64];
  std::snprintf(buf, sizeof buf, "ok %.2f us", t.median_s * 1e6);
  o.shown = buf;
  if (t.clocks && t.clocks->throttled) {
    o.shown += " (throttled)";
  }
}

// The worker's measurement of one (workload, configuration), announced to the supervisor as a
// unit so that a crash or hang in it is recorded as this configuration's fault: skipped with the
// backend's reason, or checked and then timed. The reference is computed outside the unit (and
// before any launch), so that neither its time nor a failure in it is charged to a kernel.
Outcome measure_one(Backend& be, const PlannedWorkload& pw, const KernelConfig& cfg,
                    WorkloadData& wd, const Profile& prof, const SweepOptions& opt,
                    const Emit& emit) {
  Outcome o{record_base(pw, cfg, wd.seed), ""};
  const std::string key = record_key(pw.key, cfg.key());
  const DeviceInfo& dev = be.info();
  const double deadline = unit_deadline_s(wd.problem, dev, &prof.timing);
  emit(begin_message(key, deadline, o.record));
  try {
    // can_run loads modules on the GPU: a failure there is this configuration's, not the sweep's.
    if (auto why = be.can_run(cfg, wd.problem)) {
      o.record["status"] = "skipped";
      o.record["reason"] = *why;
      o.shown = "skipped (" + *why + ")";
      emit(end_message());
      return o;
    }
    if (!wd.ref) {
      emit(end_message());
      emit(begin_message("reference of " + pw.key, 0.0, json::object(), /*fault_unit=*/false));
      wd.rows = sample_rows(wd.problem, prof.validation, wd.seed);
      wd.ref = reference_attention(wd.problem, {opt.reference_threads, wd.rows});
      emit(end_message());
      emit(begin_message(key, deadline, o.record));
    }
    auto run = be.prepare(wd.problem, cfg);
    check_and_time(*run, wd, prof, o);
  } catch (const DeviceUnavailable&) {
    throw;
  } catch (const DeviceFault&) {
    throw; // the supervisor records the fault and starts a fresh worker
  } catch (const std::exception& e) {
    o.record["status"] = "error";
    o.record["reason"] = e.what();
    o.shown = std::string("ERROR ") + e.what();
  }
  emit(end_message());
  return o;
}

// Has the backend compile every kernel the plan still needs before the first timing, saying
// "compiling N kernels: i/N" at every tenth and at the end.
void prepare_plan(Backend& be, const std::vector<PlannedWorkload>& plan, const Emit& emit) {
  std::vector<PlanItem> items;
  for (const PlannedWorkload& pw : plan) {
    for (const KernelConfig& cfg : pw.pending) {
      items.push_back({pw.workload->params, cfg});
    }
  }
  if (items.empty()) {
    return;
  }
  int shown_tenth = -1;
  be.prepare_plan(items, [&](int done, int total) {
    if (total == 0) {
      return;
    }
    if (const int tenth = done * 10 / total; tenth != shown_tenth) {
      shown_tenth = tenth;
      emit({{"ev", "log"},
            {"text", "compiling " + std::to_string(total) + " kernels: " + std::to_string(done) +
                         "/" + std::to_string(total)}});
    }
  });
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

// One worker's part of a sweep: open results.jsonl, take the device, measure what is neither in
// it nor in `skip` (what earlier workers of this command finished or faulted), and report each
// outcome to the supervisor, which keeps the tally and builds the table.
int sweep_worker(Backend& be, const Profile& prof, const SweepOptions& opt, bool resume,
                 const std::set<std::string>& skip, const Emit& emit) {
  const DeviceInfo& dev = be.info();
  // The plan: the profile's workloads (this shard's only) and the configurations of each.
  const std::vector<Workload> all_workloads = expand_workloads(prof);
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
      results, results_header(prof, be, opt.seed, opt.shard, int(mine.size()), shard_measurements),
      resume, opt.retry_faults);
  const DeviceLock timing_lock(
      device_lock_key(dev), opt.wait_for_device, [&](const std::string& pid) {
        emit({{"ev", "log"},
              {"text", "sweep: waiting for " + dev.id + ": another attn-tune process" +
                           (pid.empty() ? "" : " (pid " + pid + ")") +
                           " is timing on it (--no-wait to stop instead)"}});
      });

  std::vector<PlannedWorkload> plan;
  int total = 0;
  int resumed = 0;
  for (const std::size_t i : mine) {
    const Workload& w = all_workloads[i];
    PlannedWorkload pw{&w, w.key(), {}};
    for (const auto& c : all_configs[i]) {
      ++total;
      const std::string key = record_key(pw.key, c.key());
      if (log.done.count(key) || skip.count(key)) {
        ++resumed;
      } else {
        pw.pending.push_back(c);
      }
    }
    plan.push_back(std::move(pw));
  }
  emit({{"ev", "start"},
        {"device", dev.to_json()},
        {"kernels", be.kernels()},
        {"sm_count", dev.sm_count},
        {"slug", device_slug(dev)},
        {"total", total},
        {"resumed", resumed}});

  // Every compile before the first timing: a phase, since a compiler crash is no kernel's fault.
  emit(begin_message("compiling the plan's kernels", 0.0, json::object(), /*fault_unit=*/false));
  prepare_plan(be, plan, emit);
  emit(end_message());

  auto report = [&](const json& rec, const std::string& shown, const PlannedWorkload& pw,
                    const KernelConfig& cfg) {
    log.out->append(rec);
    emit({{"ev", "done"},
          {"key", record_key(pw.key, cfg.key())},
          {"status", rec.value("status", "")},
          {"shown", shown},
          {"what", pw.key + " " + cfg.key()}});
  };
  for (const PlannedWorkload& pw : plan) {
    if (pw.pending.empty()) {
      continue;
    }
    WorkloadData wd;
    wd.seed = workload_seed(opt.seed, *pw.workload);
    try {
      wd.problem = make_workload_problem(*pw.workload, prof.pool_factor, wd.seed);
    } catch (const std::exception& e) {
      // A workload too large for host memory is a finding about the profile, not a reason to
      // lose the rest of the sweep: record it against each of its configurations.
      for (const KernelConfig& cfg : pw.pending) {
        json rec = record_base(pw, cfg, wd.seed);
        rec["status"] = "error";
        rec["reason"] = std::string("cannot build the problem: ") + e.what();
        report(rec, "ERROR cannot build the problem", pw, cfg);
      }
      continue;
    }
    for (const KernelConfig& cfg : pw.pending) {
      const Outcome o = measure_one(be, pw, cfg, wd, prof, opt, emit);
      report(o.record, o.shown, pw, cfg);
    }
  }
  return 0;
}

} // namespace

json table_provenance(const json& header, const std::vector<MeasurementRecord>& records,
                      const std::vector<json>& lines) {
  std::vector<json> timings;
  for (const auto& l : lines) {
    if (l.contains("timing")) {
      timings.push_back(l["timing"]);
    }
  }
  std::string method;
  for (const auto& r : records) {
    if (r.status == "ok" && !r.method.empty()) {
      method = r.method;
      break;
    }
  }
  // The kernels' sources: the embedded kernel files, or the plugin library that was timed.
  const json kernels = header.value("kernels", json::object());
  const bool plugin = kernels.value("source", "") == "plugin";
  const json k = kernels.is_object() && !kernels.empty()
                     ? kernels
                     : json{{"source", "built-in"}, {"name", "attn-tune"}};
  std::string sources = header.value("kernel_sources_sha256", "");
  if (sources.empty()) {
    sources =
        plugin ? kernels.value("library_sha256", "") : std::string(generated::kKernelSourcesSha256);
  }
  json pv = {{"device", header.at("device")},
             {"tool",
              {{"name", "attn-tune"},
               {"version", header.value("tool_version", ATTN_VERSION)},
               {"git_hash", header.value("git_hash", ATTN_GIT_HASH)}}},
             {"kernels", k},
             {"kernel_sources_sha256", sources},
             {"profile",
              {{"name", header.value("profile", "")}, {"hash", header.value("profile_hash", "")}}},
             {"created_utc", utc_now()},
             {"timing_method", method},
             {"timing_mode", header.value("timing_mode", "events")},
             {"clocks", clock_summary(timings)}};
  if (header.contains("timing_options")) {
    pv["timing_options"] = header["timing_options"];
  }
  pv["seed"] = header.value("seed", uint64_t(0));
  if (header.contains("shard")) {
    pv["shard"] = {{"index", header["shard"].value("index", 0)},
                   {"count", header["shard"].value("count", 1)}};
  }
  return pv;
}

namespace {

// The supervisor's side of a sweep: holds the output folder, turns the workers' reports into
// progress and a tally, records faults, and builds the table from everything in results.jsonl
// (earlier runs included) once the last worker is done.
class SweepSession {
public:
  SweepSession(const Profile& prof, const SweepOptions& opt) : prof_(prof), opt_(opt) {
    std::error_code ec;
    fs::create_directories(opt.out_dir, ec);
    if (!fs::is_directory(opt.out_dir)) {
      throw InputError("cannot create output folder '" + opt.out_dir + "'");
    }
    lock_.emplace(opt.out_dir); // one sweep per folder: the second stops here
    sum_.results_path = (fs::path(opt.out_dir) / "results.jsonl").string();
  }

  // Keys measured or faulted by this command's workers: a later worker leaves them alone.
  [[nodiscard]] const std::set<std::string>& done_here() const { return done_here_; }

  void on_message(const json& m) {
    const std::string ev = m.value("ev", "");
    if (ev == "start") {
      device_ = m.at("device");
      kernels_ = m.value("kernels", json::object());
      sm_count_ = m.value("sm_count", 0);
      slug_ = m.value("slug", "");
      // The first worker's plan counts; a note before it (waiting for the device) may already
      // have opened a progress line without them.
      if (!started_) {
        started_ = true;
        sum_.total = m.value("total", 0);
        sum_.resumed = m.value("resumed", 0);
        if (progress_) {
          progress_->finish();
        }
        progress_.emplace(opt_.progress, opt_.progress_tty, sum_.total, sum_.resumed);
        if (sum_.resumed > 0) {
          progress_->note("resuming: " + std::to_string(sum_.resumed) + " of " +
                          std::to_string(sum_.total) + " measurements already in " +
                          sum_.results_path);
        }
      }
    } else if (ev == "done") {
      const std::string status = m.value("status", "");
      int* counter = status == "ok"        ? &sum_.ok
                     : status == "failed"  ? &sum_.failed
                     : status == "skipped" ? &sum_.skipped
                                           : &sum_.errors;
      ++*counter;
      done_here_.insert(m.value("key", ""));
      progress().step(m.value("shown", ""), m.value("what", ""));
    } else if (ev == "log") {
      progress().note(m.value("text", ""));
    } else if (ev == "say" && opt_.info != nullptr && said_.insert(m.value("text", "")).second) {
      std::fprintf(opt_.info, "%s\n", m.value("text", "").c_str());
      std::fflush(opt_.info);
    }
  }

  void on_fault(const json& info, const std::string& reason) {
    json rec = info;
    rec["status"] = "fault";
    rec["reason"] = reason;
    append_after_valid(sum_.results_path, rec);
    ++sum_.faults;
    done_here_.insert(record_key(info.value("workload_key", ""), info.value("config_key", "")));
    progress().step("FAULT " + reason,
                    info.value("workload_key", "") + " " + info.value("config_key", ""));
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
  std::optional<SweepProgress> progress_;
  bool started_ = false; // the first worker's "start" has been seen
  SweepSummary sum_;
  json device_;
  json kernels_;
  int sm_count_ = 0;
  std::string slug_;
  std::set<std::string> done_here_;
  std::set<std::string> said_;
};

SweepSummary supervised_sweep(const std::function<Backend&(const Emit&)>& backend,
                              const Profile& prof, const SweepOptions& opt, bool in_process) {
  SweepSession session(prof, opt);
  SupervisorHooks hooks;
  hooks.work = [&](const Emit& emit, int worker) {
    // A later worker continues the file the first one started, whatever --resume said.
    return sweep_worker(backend(emit), prof, opt, opt.resume || worker > 0, session.done_here(),
                        emit);
  };
  hooks.on_message = [&](const json& m) { session.on_message(m); };
  hooks.on_fault = [&](const json& info, const std::string& reason) {
    session.on_fault(info, reason);
  };
  (void)supervise(hooks, in_process);
  return session.finish();
}

} // namespace

uint64_t workload_seed(uint64_t sweep_seed, const Workload& w) {
  Rng r(sweep_seed ^ fnv1a(w.key()));
  return r.next_u64();
}

SweepSummary run_sweep(Backend& be, const Profile& prof, const SweepOptions& opt) {
  return supervised_sweep([&](const Emit&) -> Backend& { return be; }, prof, opt,
                          /*in_process=*/true);
}

SweepSummary run_sweep_isolated(const BackendMaker& make, const Profile& prof,
                                const SweepOptions& opt) {
  std::unique_ptr<Backend> be; // made in each worker, never in the supervisor
  return supervised_sweep(
      [&](const Emit& emit) -> Backend& {
        be = make(emit);
        return *be;
      },
      prof, opt, opt.in_process);
}

} // namespace attn
