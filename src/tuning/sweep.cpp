// The sweep: expand the profile, check each (workload, configuration) against the reference
// before timing it, append every outcome to results.jsonl (fsynced), resume, build the table.
#include "src/tuning/sweep.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

#include "build_info.h"
#include "reference/reference.h"
#include "src/validation/check.h"
#include "src/io/embedded.h"
#include "src/model/errors.h"
#include "src/model/rng.h"

namespace attn {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kResultsSchema = "attn-tune/results";
constexpr int kResultsVersion = 1;

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) % 3600) / 60);
  }
  return buf;
}

// Appends one line and makes it durable before returning, so a kill loses at most the
// measurement in flight.
class DurableAppender {
public:
  explicit DurableAppender(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd_ < 0) {
      throw InputError("cannot open '" + path + "' for appending");
    }
  }
  ~DurableAppender() {
    if (fd_ >= 0) {
      ::close(fd_);
    }
  }
  DurableAppender(const DurableAppender&) = delete;
  DurableAppender& operator=(const DurableAppender&) = delete;
  void append(const json& j) {
    const std::string line = j.dump() + "\n";
    std::size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n <= 0) {
        throw std::runtime_error("cannot write to '" + path_ + "'");
      }
      done += std::size_t(n);
    }
    if (::fsync(fd_) != 0) {
      throw std::runtime_error("cannot fsync '" + path_ + "'");
    }
  }

private:
  std::string path_;
  int fd_ = -1;
};

std::string record_key(const std::string& workload_key, const std::string& config_key) {
  return workload_key + " | " + config_key;
}

// The device fields a resumed sweep must share with the one that started the file.
bool same_device(const json& a, const json& b) {
  // CPU worker threads change the timings as much as the device does.
  return a.value("backend", "") == b.value("backend", "") &&
         a.value("name", "") == b.value("name", "") && a.value("uuid", "") == b.value("uuid", "") &&
         a.value("threads", 0) == b.value("threads", 0);
}

Problem make_problem(const Workload& w, double pool_factor, uint64_t seed) {
  GenOptions g;
  g.seed = seed;
  g.pool_factor = pool_factor;
  if (w.phase == Phase::decode) {
    return make_decode_problem(w.params, std::vector<int>(std::size_t(w.batch), w.context_len), g);
  }
  return make_prefill_problem(w.params, std::vector<int>(std::size_t(w.batch), w.q_len),
                              std::vector<int>(std::size_t(w.batch), w.k_len), g);
}

} // namespace

uint64_t workload_seed(uint64_t sweep_seed, const Workload& w) {
  Rng r(sweep_seed ^ fnv1a(w.key()));
  return r.next_u64();
}

std::vector<int> sample_rows(const Problem& pr, const ValidationOptions& v, uint64_t seed) {
  const int rows = pr.num_rows();
  std::vector<int64_t> work(std::size_t(rows), 0);
  int64_t total = 0;
  for (int b = 0; b < pr.batch; ++b) {
    const int64_t per_row =
        std::max<int64_t>(1, int64_t(pr.k_len(b)) * pr.params.head_dim * pr.params.num_heads);
    for (int i = 0; i < pr.q_len(b); ++i) {
      work[std::size_t(pr.q_start(b) + i)] = per_row;
      total += per_row;
    }
  }
  if (total <= v.max_reference_work || rows <= v.min_rows) {
    return {};
  }
  // The first and the last row always (the ends of the batch, where index slips show), then
  // rows in a seeded random order while the budget lasts.
  std::vector<int> order;
  for (int r = 1; r + 1 < rows; ++r) {
    order.push_back(r);
  }
  Rng rng(seed ^ 0x5eed0f5a3b1e5ull);
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[std::size_t(rng.range(0, int64_t(i) - 1))]);
  }
  order.insert(order.begin(), {0, rows - 1});
  std::vector<int> picked;
  int64_t used = 0;
  for (int r : order) {
    const int64_t wr = work[std::size_t(r)];
    if (int(picked.size()) < v.min_rows || used + wr <= v.max_reference_work) {
      picked.push_back(r);
      used += wr;
    }
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

ResultsFile read_results(const std::string& path) {
  ResultsFile rf;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return rf;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) {
      rf.truncated_tail = true; // killed mid-write: the measurement in flight is lost
      break;
    }
    ++line_no;
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) {
      rf.valid_bytes = pos;
      continue;
    }
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error&) {
      throw InputError(path + ": line " + std::to_string(line_no) +
                       " is not valid JSON (the file is corrupt; start a new --out folder)");
    }
    if (j.value("type", "") == "header") {
      if (j.value("schema", "") != kResultsSchema || j.value("version", 0) != kResultsVersion) {
        throw InputError(path + ": not an attn-tune results file of version " +
                         std::to_string(kResultsVersion));
      }
      rf.header = j;
    } else if (j.value("type", "") == "measurement") {
      rf.lines.push_back(j);
    } else {
      throw InputError(path + ": line " + std::to_string(line_no) + " has no known 'type'");
    }
    rf.valid_bytes = pos;
  }
  return rf;
}

std::vector<MeasurementRecord> to_records(const std::vector<json>& lines) {
  std::vector<MeasurementRecord> out;
  for (const auto& j : lines) {
    MeasurementRecord r;
    r.workload = Workload::from_json(j.at("workload"));
    r.config = KernelConfig::from_json(j.at("config"));
    r.status = j.value("status", "");
    if (j.contains("timing") && j["timing"].is_object()) {
      r.median_s = j["timing"].value("median_s", 0.0);
      r.method = j["timing"].value("method", "");
    }
    out.push_back(std::move(r));
  }
  return out;
}

SweepSummary run_sweep(Backend& be, const Profile& prof, const SweepOptions& opt) {
  SweepSummary sum;
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  if (!fs::is_directory(opt.out_dir)) {
    throw InputError("cannot create output folder '" + opt.out_dir + "'");
  }
  const std::string results = (fs::path(opt.out_dir) / "results.jsonl").string();
  sum.results_path = results;
  const DeviceInfo& dev = be.info();

  // Resume bookkeeping: what is already measured, and a file cut back to whole lines.
  std::set<std::string> done;
  ResultsFile existing = read_results(results);
  const bool has_content = !existing.header.is_null() || !existing.lines.empty();
  if (has_content && !opt.resume) {
    throw InputError(results + " already holds " + std::to_string(existing.lines.size()) +
                     " measurements; pass --resume to continue that sweep or choose another --out");
  }
  if (has_content) {
    const json& h = existing.header;
    if (h.is_null()) {
      throw InputError(results + " has no header line; start a new --out folder");
    }
    if (h.value("profile_hash", "") != prof.hash) {
      throw InputError(results + " was made with profile '" + h.value("profile", "?") + "' (hash " +
                       h.value("profile_hash", "?") + "), not '" + prof.name + "' (hash " +
                       prof.hash + "); --resume needs the same profile");
    }
    if (!same_device(h.value("device", json::object()), dev.to_json())) {
      throw InputError(results + " was measured on " + h["device"].value("name", "?") + " (" +
                       h["device"].value("id", "?") + ", " +
                       std::to_string(h["device"].value("threads", 0)) + " threads), not on " +
                       dev.name + " (" + dev.id + ", " + std::to_string(dev.threads) +
                       " threads); --resume needs the same device and --threads");
    }
    if (h.value("seed", uint64_t(0)) != opt.seed) {
      throw InputError(results + " was made with --seed " +
                       std::to_string(h.value("seed", uint64_t(0))) + ", not " +
                       std::to_string(opt.seed) + "; --resume needs the same seed");
    }
    for (const auto& l : existing.lines) {
      done.insert(record_key(l.value("workload_key", ""), l.value("config_key", "")));
    }
  }
  if (existing.truncated_tail ||
      (fs::exists(results) && fs::file_size(results) != existing.valid_bytes)) {
    fs::resize_file(results, existing.valid_bytes); // drop the half-written line
  }
  DurableAppender out(results);
  if (!has_content) {
    out.append({{"type", "header"},
                {"schema", kResultsSchema},
                {"version", kResultsVersion},
                {"profile", prof.name},
                {"profile_hash", prof.hash},
                {"device", dev.to_json()},
                {"seed", opt.seed},
                {"tool_version", ATTN_VERSION},
                {"git_hash", ATTN_GIT_HASH},
                {"started_utc", utc_now()}});
  }

  // The plan: every workload with its configurations.
  const std::vector<Workload> workloads = expand_workloads(prof);
  std::vector<std::vector<KernelConfig>> plan;
  for (const auto& w : workloads) {
    plan.push_back(configs_for(prof, be, w));
    sum.total += int(plan.back().size());
  }
  for (std::size_t i = 0; i < workloads.size(); ++i) {
    for (const auto& c : plan[i]) {
      sum.resumed += done.count(record_key(workloads[i].key(), c.key())) ? 1 : 0;
    }
  }

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  int finished = sum.resumed;
  int new_done = 0;
  auto progress = [&](const std::string& status, const std::string& what) {
    if (!opt.progress) {
      return;
    }
    const double el = std::chrono::duration<double>(clock::now() - t0).count();
    const int left = sum.total - finished;
    const std::string eta = new_done > 0 ? fmt_duration(el / new_done * left) : "?";
    const int pct = sum.total ? int(100.0 * finished / sum.total) : 100;
    if (opt.progress_tty) {
      std::string line = "[" + std::to_string(finished) + "/" + std::to_string(sum.total) + " " +
                         std::to_string(pct) + "%] ETA " + eta + "  " + what;
      if (line.size() > 150) {
        line = line.substr(0, 147) + "...";
      }
      std::fprintf(opt.progress, "\r\033[K%s", line.c_str());
    } else {
      std::fprintf(opt.progress, "[%d/%d %d%% ETA %s] %s %s\n", finished, sum.total, pct,
                   eta.c_str(), status.c_str(), what.c_str());
    }
    std::fflush(opt.progress);
  };
  if (opt.progress && sum.resumed > 0) {
    std::fprintf(opt.progress, "resuming: %d of %d measurements already in %s\n", sum.resumed,
                 sum.total, results.c_str());
  }

  for (std::size_t wi = 0; wi < workloads.size(); ++wi) {
    const Workload& w = workloads[wi];
    const std::string wkey = w.key();
    std::vector<const KernelConfig*> pending;
    for (const auto& c : plan[wi]) {
      if (!done.count(record_key(wkey, c.key()))) {
        pending.push_back(&c);
      }
    }
    if (pending.empty()) {
      continue;
    }
    const uint64_t seed = workload_seed(opt.seed, w);
    Problem pr;
    try {
      pr = make_problem(w, prof.pool_factor, seed);
    } catch (const std::exception& e) {
      // A workload too large for host memory is a finding about the profile, not a reason to
      // lose the rest of the sweep: record it against each of its configurations.
      for (const KernelConfig* cfg : pending) {
        out.append({{"type", "measurement"},
                    {"workload_key", wkey},
                    {"config_key", cfg->key()},
                    {"workload", w.to_json()},
                    {"config", cfg->to_json()},
                    {"seed", seed},
                    {"status", "error"},
                    {"reason", std::string("cannot build the problem: ") + e.what()}});
        ++sum.errors;
        ++finished;
        ++new_done;
        progress("ERROR cannot build the problem", wkey + " " + cfg->key());
      }
      continue;
    }
    std::optional<ReferenceResult> ref;
    std::vector<int> rows;
    for (const KernelConfig* cfg : pending) {
      json rec = {{"type", "measurement"},   {"workload_key", wkey},     {"config_key", cfg->key()},
                  {"workload", w.to_json()}, {"config", cfg->to_json()}, {"seed", seed}};
      std::string shown;
      if (auto why = be.can_run(*cfg, pr)) {
        rec["status"] = "skipped";
        rec["reason"] = *why;
        ++sum.skipped;
        shown = "skipped (" + *why + ")";
      } else {
        try {
          auto run = be.prepare(pr, *cfg);
          run->poison_outputs();
          run->run();
          const RunOutput got = run->download();
          if (!ref) {
            rows = sample_rows(pr, prof.validation, seed);
            ref = reference_attention(pr, {opt.reference_threads, rows});
          }
          const CheckReport rep =
              check_output(got.out, &got.lse, *ref, tolerance_for(w.params.dtype));
          rec["check"] = {{"pass", rep.pass},
                          {"rows_checked", rows.empty() ? pr.num_rows() : int(rows.size())},
                          {"rows_total", pr.num_rows()},
                          {"norm_rel_err", rep.norm_rel_err},
                          {"max_abs_err", rep.max_abs_err},
                          {"max_lse_err", rep.max_lse_err},
                          {"summary", rep.summary()}};
          if (!rep.pass) {
            rec["status"] = "failed";
            rec["reason"] = "wrong results: " + rep.summary();
            rec["check"]["details"] = rep.details();
            ++sum.failed;
            shown = "FAILED " + rep.summary();
          } else {
            const TimingResult t = run->time(prof.timing);
            json tj = to_json(t);
            const double bytes = double(pr.kv_bytes_touched());
            const double flops = 4.0 * double(pr.visible_pairs()) * w.params.head_dim;
            tj["kv_bytes"] = bytes;
            tj["flops"] = flops;
            tj["gbytes_per_s"] = t.median_s > 0 ? bytes / t.median_s * 1e-9 : 0.0;
            tj["gflops_per_s"] = t.median_s > 0 ? flops / t.median_s * 1e-9 : 0.0;
            rec["timing"] = tj;
            rec["status"] = "ok";
            ++sum.ok;
            char buf[64];
            std::snprintf(buf, sizeof buf, "ok %.2f us", t.median_s * 1e6);
            shown = buf;
          }
        } catch (const DeviceUnavailable&) {
          throw;
        } catch (const std::exception& e) {
          rec["status"] = "error";
          rec["reason"] = e.what();
          ++sum.errors;
          shown = std::string("ERROR ") + e.what();
        }
      }
      out.append(rec);
      ++finished;
      ++new_done;
      progress(shown, wkey + " " + cfg->key());
    }
  }
  if (opt.progress && opt.progress_tty) {
    std::fprintf(opt.progress, "\n");
  }

  // The table, from everything in the file (earlier runs included).
  const ResultsFile all = read_results(results);
  const auto records = to_records(all.lines);
  std::string method;
  for (const auto& r : records) {
    if (r.status == "ok" && !r.method.empty()) {
      method = r.method;
      break;
    }
  }
  json provenance = {
      {"device", dev.to_json()},
      {"tool", {{"name", "attn-tune"}, {"version", ATTN_VERSION}, {"git_hash", ATTN_GIT_HASH}}},
      {"kernel_sources_sha256", generated::kKernelSourcesSha256},
      {"profile", {{"name", prof.name}, {"hash", prof.hash}}},
      {"created_utc", utc_now()},
      {"timing_method", method},
      {"timing_options",
       {{"warmup", prof.timing.warmup},
        {"min_reps", prof.timing.min_reps},
        {"max_reps", prof.timing.max_reps},
        {"max_seconds", prof.timing.max_seconds},
        {"target_noise", prof.timing.target_noise},
        {"flush_cache", prof.timing.flush_cache}}},
      {"seed", opt.seed}};
  sum.table = build_threshold_table(records, provenance, dev.sm_count);
  sum.table_path = (fs::path(opt.out_dir) / "threshold_table.json").string();
  write_json_atomically(sum.table_path, sum.table);
  if (!opt.publish_dir.empty()) {
    fs::create_directories(opt.publish_dir, ec);
    sum.published_path =
        (fs::path(opt.publish_dir) / (device_slug(dev) + "-" + prof.name + ".json")).string();
    write_json_atomically(sum.published_path, sum.table);
  }
  return sum;
}

} // namespace attn
