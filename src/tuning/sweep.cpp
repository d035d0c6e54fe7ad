// The sweep: expand the profile, check each (workload, configuration) against the reference
// before timing it, append every outcome to results.jsonl (fsynced), resume, build the table.
// run_sweep only orchestrates; each step is a function below or a unit of its own
// (results_file, sweep_progress, workloads, threshold_table).
#include "src/tuning/sweep.h"

#include <filesystem>
#include <optional>

#include "build_info.h"
#include "reference/reference.h"
#include "src/backends/registry.h"
#include "src/io/atomic_file.h"
#include "src/io/embedded.h"
#include "src/io/folder_lock.h"
#include "src/model/errors.h"
#include "src/model/rng.h"
#include "src/tuning/sweep_progress.h"
#include "src/tuning/workloads.h"
#include "src/validation/check.h"
#include "src/validation/row_sample.h"

namespace attn {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The first line of results.jsonl: what a resumed sweep must match.
json results_header(const Profile& prof, const DeviceInfo& dev, uint64_t seed) {
  return {{"type", "header"},
          {"schema", kResultsSchema},
          {"version", kResultsVersion},
          {"profile", prof.name},
          {"profile_hash", prof.hash},
          {"device", dev.to_json()},
          {"seed", seed},
          {"tool_version", ATTN_VERSION},
          {"git_hash", ATTN_GIT_HASH},
          {"started_utc", utc_now()}};
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

// Checks the run's output against the reference; records the check, and on a pass times it.
void check_and_time(PreparedRun& run, WorkloadData& wd, const Profile& prof,
                    const SweepOptions& opt, Outcome& o, SweepSummary& sum) {
  const Problem& pr = wd.problem;
  run.poison_outputs();
  run.run();
  const RunOutput got = run.download();
  if (!wd.ref) {
    wd.rows = sample_rows(pr, prof.validation, wd.seed);
    wd.ref = reference_attention(pr, {opt.reference_threads, wd.rows});
  }
  const CheckReport rep = check_output(got.out, &got.lse, *wd.ref, tolerance_for(pr.params.dtype));
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
    ++sum.failed;
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
  ++sum.ok;
  char buf[64];
  std::snprintf(buf, sizeof buf, "ok %.2f us", t.median_s * 1e6);
  o.shown = buf;
  if (t.clocks && t.clocks->throttled) {
    o.shown += " (throttled)";
  }
}

// Measures one (workload, configuration): skipped with the backend's reason, or checked and then
// timed; any failure other than a lost device is recorded as an error and the sweep goes on.
Outcome measure_one(Backend& be, const PlannedWorkload& pw, const KernelConfig& cfg,
                    WorkloadData& wd, const Profile& prof, const SweepOptions& opt,
                    SweepSummary& sum) {
  Outcome o{record_base(pw, cfg, wd.seed), ""};
  if (auto why = be.can_run(cfg, wd.problem)) {
    o.record["status"] = "skipped";
    o.record["reason"] = *why;
    ++sum.skipped;
    o.shown = "skipped (" + *why + ")";
    return o;
  }
  try {
    auto run = be.prepare(wd.problem, cfg);
    check_and_time(*run, wd, prof, opt, o, sum);
  } catch (const DeviceUnavailable&) {
    throw;
  } catch (const std::exception& e) {
    o.record["status"] = "error";
    o.record["reason"] = e.what();
    ++sum.errors;
    o.shown = std::string("ERROR ") + e.what();
  }
  return o;
}

// What made the table: device, tool, kernels, profile, timing method and options, seed.
json sweep_provenance(const DeviceInfo& dev, const Profile& prof, const SweepOptions& opt,
                      const std::vector<MeasurementRecord>& records,
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
  return {{"device", dev.to_json()},
          {"tool", {{"name", "attn-tune"}, {"version", ATTN_VERSION}, {"git_hash", ATTN_GIT_HASH}}},
          {"kernel_sources_sha256", generated::kKernelSourcesSha256},
          {"profile", {{"name", prof.name}, {"hash", prof.hash}}},
          {"created_utc", utc_now()},
          {"timing_method", method},
          {"timing_mode", timing_mode_name(prof.timing.mode)},
          {"clocks", clock_summary(timings)},
          {"timing_options",
           {{"warmup", prof.timing.warmup},
            {"warmup_seconds", prof.timing.warmup_seconds},
            {"min_reps", prof.timing.min_reps},
            {"max_reps", prof.timing.max_reps},
            {"max_seconds", prof.timing.max_seconds},
            {"target_noise", prof.timing.target_noise},
            {"flush_cache", prof.timing.flush_cache},
            {"mode", timing_mode_name(prof.timing.mode)}}},
          {"seed", opt.seed}};
}

// Has the backend compile every kernel the plan still needs before the first timing, printing
// "compiling N kernels: i/N" (in place on a terminal, else at every tenth and the end).
void prepare_plan(Backend& be, const std::vector<PlannedWorkload>& plan, const SweepOptions& opt) {
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
    if (opt.progress == nullptr || total == 0) {
      return;
    }
    if (opt.progress_tty) {
      std::fprintf(opt.progress, "\rcompiling %d kernels: %d/%d", total, done, total);
      if (done == total) {
        std::fprintf(opt.progress, "\n");
      }
    } else if (const int tenth = done * 10 / total; tenth != shown_tenth) {
      shown_tenth = tenth;
      std::fprintf(opt.progress, "compiling %d kernels: %d/%d\n", total, done, total);
    }
    std::fflush(opt.progress);
  });
}

// Builds the table from everything in results.jsonl (earlier runs included) and writes it to
// the output folder and, when asked, to the publish folder.
void publish_table(const std::string& results, const DeviceInfo& dev, const Profile& prof,
                   const SweepOptions& opt, SweepSummary& sum) {
  const ResultsFile all = read_results(results);
  const auto records = to_records(all.lines);
  sum.table = build_threshold_table(records, sweep_provenance(dev, prof, opt, records, all.lines),
                                    dev.sm_count);
  sum.table_path = (fs::path(opt.out_dir) / "threshold_table.json").string();
  write_json_atomically(sum.table_path, sum.table);
  if (!opt.publish_dir.empty()) {
    std::error_code ec;
    fs::create_directories(opt.publish_dir, ec);
    sum.published_path =
        (fs::path(opt.publish_dir) / (device_slug(dev) + "-" + prof.name + ".json")).string();
    write_json_atomically(sum.published_path, sum.table);
  }
}

} // namespace

uint64_t workload_seed(uint64_t sweep_seed, const Workload& w) {
  Rng r(sweep_seed ^ fnv1a(w.key()));
  return r.next_u64();
}

SweepSummary run_sweep(Backend& be, const Profile& prof, const SweepOptions& opt) {
  SweepSummary sum;
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (!fs::is_directory(opt.out_dir)) {
    throw InputError("cannot create output folder '" + opt.out_dir + "'");
  }
  const FolderLock lock(opt.out_dir); // one sweep per folder: the second stops here
  const std::string results = (fs::path(opt.out_dir) / "results.jsonl").string();
  sum.results_path = results;
  const DeviceInfo& dev = be.info();
  OpenedResults log = open_results(results, results_header(prof, dev, opt.seed), opt.resume);

  // The plan: every workload with the configurations it still needs.
  const std::vector<Workload> workloads = expand_workloads(prof);
  std::vector<PlannedWorkload> plan;
  for (const auto& w : workloads) {
    PlannedWorkload pw{&w, w.key(), {}};
    for (const auto& c : configs_for(prof, be, w)) {
      ++sum.total;
      if (log.done.count(record_key(pw.key, c.key()))) {
        ++sum.resumed;
      } else {
        pw.pending.push_back(c);
      }
    }
    plan.push_back(std::move(pw));
  }

  prepare_plan(be, plan, opt); // every compile before the first timing
  SweepProgress progress(opt.progress, opt.progress_tty, sum.total, sum.resumed);
  if (opt.progress && sum.resumed > 0) {
    std::fprintf(opt.progress, "resuming: %d of %d measurements already in %s\n", sum.resumed,
                 sum.total, results.c_str());
  }
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
        log.out->append(rec);
        ++sum.errors;
        progress.step("ERROR cannot build the problem", pw.key + " " + cfg.key());
      }
      continue;
    }
    for (const KernelConfig& cfg : pw.pending) {
      const Outcome o = measure_one(be, pw, cfg, wd, prof, opt, sum);
      log.out->append(o.record);
      progress.step(o.shown, pw.key + " " + cfg.key());
    }
  }
  progress.finish();
  publish_table(results, dev, prof, opt, sum);
  return sum;
}

} // namespace attn
