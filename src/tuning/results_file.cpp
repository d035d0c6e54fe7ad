#include "src/tuning/results_file.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

#include "build_info.h"
#include "src/io/json_fields.h"
#include "src/io/json_unique.h"
#include "src/model/errors.h"
#include "src/tuning/shard.h"

namespace attn {

using nlohmann::json;
namespace fs = std::filesystem;

std::string kernels_label(const json& k) {
  if (k.value("source", "built-in") != "plugin") {
    const std::string isa = k.value("isa", "");
    return "the built-in attn-tune kernels" + (isa.empty() ? "" : " (" + isa + " build)");
  }
  std::string s = k.value("bridge", "") == "python" ? "Python kernels " : "plugin ";
  s += k.value("name", "?");
  const std::string version = k.value("version", "");
  if (!version.empty()) {
    s += ' ';
    s += version;
  }
  if (k.contains("library")) {
    s += " (";
    s += k.value("library", "?");
    s += ", sha256 ";
    s += k.value("library_sha256", "?").substr(0, 12);
    s += ')';
  }
  return s;
}

std::string kernels_identity(const json& k) {
  if (k.value("source", "built-in") != "plugin") {
    // The CPU backend names its build level; GPU kernels and files from before it name none.
    const std::string isa = k.value("isa", "");
    return isa.empty() ? "built-in" : "built-in " + isa;
  }
  return "plugin " + k.value("name", "") + " " + k.value("library_sha256", "");
}

bool same_device(const json& a, const json& b) {
  // CPU worker threads change the timings as much as the device does.
  return a.value("backend", "") == b.value("backend", "") &&
         a.value("name", "") == b.value("name", "") && a.value("uuid", "") == b.value("uuid", "") &&
         a.value("threads", 0) == b.value("threads", 0);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json search_end_line(int measured_pairs, int64_t exhaustive_pairs) {
  return {{"type", "search_end"},
          {"measured_pairs", measured_pairs},
          {"exhaustive_pairs", exhaustive_pairs},
          {"utc", utc_now()}};
}

DurableAppender::DurableAppender(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd_ < 0) {
    throw InputError("cannot open '" + path + "' for appending: " + std::strerror(errno));
  }
}

DurableAppender::~DurableAppender() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

void DurableAppender::append(const json& j) {
  const std::string line = j.dump() + "\n";
  // Where the file ended: a line that cannot be written whole (a full disk) is cut off again,
  // so the file never ends in half a line.
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      if (before >= 0 && ::ftruncate(fd_, before) == 0) {
        (void)::fsync(fd_);
      }
      throw std::runtime_error("cannot write to '" + path_ + "': " + std::strerror(err) +
                               " (the line was not kept)");
    }
    done += std::size_t(n);
  }
  if (::fsync(fd_) != 0) {
    throw std::runtime_error("cannot fsync '" + path_ + "': " + std::strerror(errno));
  }
}

std::string search_mode_of(const json& header) {
  return header.contains("search") && header["search"].is_object()
             ? header["search"].value("mode", "exhaustive")
             : std::string("exhaustive");
}

bool is_race_line(const json& line) {
  return line.contains("search") && line["search"].is_object() &&
         line["search"].value("stage", "") == "race";
}

std::string record_key(const std::string& workload_key, const std::string& config_key) {
  return workload_key + " | " + config_key;
}

namespace {

// The longest time a measurement may report, in seconds; the shortest an `ok` median may be
// (below it a margin or a throughput would overflow to infinity).
constexpr double kMaxSeconds = 1e6;
constexpr double kMinOkMedian = 1e-12;

// The header line, checked at the door: every field a reader of results files uses has its type
// and range (fields older files lack may be absent).
void check_header(const JsonDoor& door, const json& h) {
  if (door.text_or(h, "", "schema", "") != kResultsSchema ||
      door.integer_or(h, "", "version", 0, INT32_MAX, 0) != kResultsVersion) {
    door.fail("", "not an attn-tune results header of version " + std::to_string(kResultsVersion));
  }
  for (const char* k : {"profile", "profile_hash", "kernel_sources_sha256", "timing_mode",
                        "tool_version", "git_hash", "started_utc"}) {
    (void)door.text_or(h, "", k, "");
  }
  if (h.contains("timing_mode") && h["timing_mode"] != "events" && h["timing_mode"] != "graph") {
    door.fail("timing_mode", "expected \"events\" or \"graph\", got " + JsonDoor::shown(h["timing_mode"]));
  }
  (void)door.unsigned_integer(h, "", "seed", 0);
  if (h.contains("device")) {
    const json& d = door.object(h["device"], "device");
    for (const char* k : {"name", "backend", "uuid", "id"}) {
      (void)door.text_or(d, "device", k, "");
    }
    (void)door.integer_or(d, "device", "threads", 0, 1 << 20, 0);
    (void)door.integer_or(d, "device", "sm_count", 0, 1 << 20, 0);
  }
  if (h.contains("kernels")) {
    const json& k = door.object(h["kernels"], "kernels");
    for (const char* f : {"source", "name", "version", "bridge", "library", "library_sha256",
                          "engine_rule"}) {
      (void)door.text_or(k, "kernels", f, "");
    }
  }
  if (h.contains("search")) {
    const json& sj = door.object(h["search"], "search");
    const std::string mode = door.text_or(sj, "search", "mode", "exhaustive");
    if (mode != "exhaustive" && mode != "adaptive") {
      door.fail("search.mode",
                "expected \"exhaustive\" or \"adaptive\", got " + JsonDoor::shown(sj["mode"]));
    }
  }
  if (h.contains("plan")) {
    const json& p = door.object(h["plan"], "plan");
    (void)door.integer_or(p, "plan", "measurements", -1, kMaxPlanMeasurements, -1);
    (void)door.integer_or(p, "plan", "workloads", 0, kMaxPlanMeasurements, 0);
  }
  if (h.contains("shard")) {
    const json& s = door.object(h["shard"], "shard");
    const int64_t count = door.integer_or(s, "shard", "count", 1, kMaxShards, 1);
    (void)door.integer_or(s, "shard", "index", 0, count - 1, 0);
  }
  if (h.contains("merged")) {
    const json& m = door.object(h["merged"], "merged");
    (void)door.integer_or(m, "merged", "shard_count", 1, kMaxShards, 1);
  }
}

// A measurement line, checked at the door: its workload and configuration in range and matching
// their keys, a known status, finite timings.
void check_measurement(const JsonDoor& door, const json& l) {
  const Workload w = Workload::from_json(door.field(l, "", "workload"));
  if (door.text(l, "", "workload_key") != w.key()) {
    door.fail("workload_key", "does not match the line's workload (" + w.key() + ")");
  }
  KernelConfig c;
  try {
    c = KernelConfig::from_json(door.field(l, "", "config"));
  } catch (const InputError& e) {
    door.fail("config", e.what());
  }
  if (door.text(l, "", "config_key") != c.key()) {
    door.fail("config_key", "does not match the line's configuration (" + c.key() + ")");
  }
  const std::string status = door.text(l, "", "status");
  if (status != "ok" && status != "failed" && status != "skipped" && status != "error" &&
      status != "fault") {
    door.fail("status", "expected ok, failed, skipped, error or fault, got " +
                            JsonDoor::shown(l["status"]));
  }
  (void)door.text_or(l, "", "reason", "");
  (void)door.unsigned_integer(l, "", "seed", 0);
  (void)door.number_or(l, "", "remeasure_factor", 0.0, kMaxSeconds, 1.0);
  if (l.contains("timing")) {
    const json& t = door.object(l["timing"], "timing");
    const double median = door.number(t, "timing", "median_s", 0.0, kMaxSeconds);
    if (status == "ok" && median < kMinOkMedian) {
      door.fail("timing.median_s", "an ok measurement needs a median of at least 1e-12 s, got " +
                                       JsonDoor::shown(t["median_s"]));
    }
    for (const char* k : {"p25_s", "p75_s", "min_s", "max_s"}) {
      (void)door.number_or(t, "timing", k, 0.0, kMaxSeconds, 0.0);
    }
    (void)door.text_or(t, "timing", "method", "");
  } else if (status == "ok") {
    door.fail("timing", "missing (an ok measurement has its timing)");
  }
  if (l.contains("check")) {
    (void)door.object(l["check"], "check");
  }
}

} // namespace

ResultsFile read_results(const std::string& path) {
  ResultsFile rf;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return rf;
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) {
    throw std::runtime_error("cannot read '" + path + "'");
  }
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
    const std::string where = path + ": line " + std::to_string(line_no);
    const JsonDoor door(where);
    json j;
    try {
      j = parse_json_bounded(line);
    } catch (const JsonTooDeep& e) {
      door.fail("", std::string(e.what()) +
                        ", as no results line is (the file is corrupt; start a new --out folder)");
    } catch (const json::exception&) {
      door.fail("", "not valid JSON (the file is corrupt; start a new --out folder)");
    }
    const std::string type = j.is_object() && j.contains("type") && j["type"].is_string()
                                 ? j["type"].get<std::string>()
                                 : std::string();
    if (type == "header") {
      if (!rf.header.is_null() || line_no != 1) {
        door.fail("", "a second header line (only the first line is the header)");
      }
      check_header(door, j);
      rf.header = j;
    } else if (type == "measurement") {
      try {
        check_measurement(door, j);
      } catch (const InputError& e) {
        // Workload::from_json names the field but not the file.
        const std::string what = e.what();
        throw InputError(what.rfind(where, 0) == 0 ? what : where + ": " + what);
      }
      rf.lines.push_back(std::move(j));
      // Measured after the search ended (sweep --remeasure-noisy): its decisions may have moved,
      // so the search is open again until a resume finds nothing more to measure.
      rf.search_reopened = rf.search_reopened || !rf.search_end.is_null();
      rf.search_end = nullptr;
    } else if (type == "search_end") {
      rf.search_end = std::move(j);
      rf.search_reopened = false;
    } else {
      door.fail("", j.is_object() ? "has no known 'type' (header, measurement or search_end)"
                                  : "expected a JSON object, got " + JsonDoor::shown(j));
    }
    rf.valid_bytes = pos;
  }
  return rf;
}

std::vector<MeasurementRecord> to_records(const std::vector<json>& lines) {
  // A retried measurement has several lines: the last one stands, in the place of the first.
  std::map<std::string, std::size_t> last;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    last[record_key(lines[i].value("workload_key", ""), lines[i].value("config_key", ""))] = i;
  }
  std::vector<MeasurementRecord> out;
  std::set<std::string> taken;
  for (const auto& first : lines) {
    const std::string key =
        record_key(first.value("workload_key", ""), first.value("config_key", ""));
    if (!taken.insert(key).second) {
      continue;
    }
    const json& j = lines[last.at(key)];
    MeasurementRecord r;
    r.workload = Workload::from_json(j.at("workload"));
    r.config = KernelConfig::from_json(j.at("config"));
    r.status = j.value("status", "");
    if (j.contains("timing") && j["timing"].is_object()) {
      r.median_s = j["timing"].value("median_s", 0.0);
      r.p25_s = j["timing"].value("p25_s", r.median_s);
      r.p75_s = j["timing"].value("p75_s", r.median_s);
      r.method = j["timing"].value("method", "");
    }
    r.remeasured = j.contains("remeasure_factor");
    r.brief = is_race_line(j);
    if (j.contains("search") && j["search"].is_object()) {
      const json& sj = j["search"];
      if (sj.contains("grid") && sj["grid"].is_array()) {
        for (const json& c : sj["grid"]) {
          if (c.is_number_integer()) {
            r.search_grid.push_back(c.get<int>());
          }
        }
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

OpenedResults open_results(const std::string& path, const json& header, bool resume,
                           bool retry_faults) {
  OpenedResults r;
  ResultsFile existing = read_results(path);
  if (!resume && !existing.header.is_null() && existing.lines.empty() &&
      existing.search_end.is_null() && !existing.header.contains("merged")) {
    // A sweep that stopped before its first measurement (a busy device and --no-wait, a kill
    // while it waited) left its header alone: nothing to continue, so a new sweep starts over.
    fs::resize_file(path, 0);
    existing = read_results(path);
  }
  const bool has_content = !existing.header.is_null() || !existing.lines.empty();
  if (has_content && !resume) {
    throw InputError(path + " already holds " + std::to_string(existing.lines.size()) +
                     " measurements; pass --resume to continue that sweep or choose another --out");
  }
  if (fs::is_directory(path)) {
    throw InputError(path + " is a folder, where the sweep keeps its results file");
  }
  if (has_content) {
    const json& h = existing.header;
    if (h.is_null()) {
      throw InputError(path + " has no header line; start a new --out folder");
    }
    if (h.contains("merged")) {
      // merge's results and table are one pair behind links; a sweep appending to the one and
      // rewriting the other would split them.
      throw InputError(path + " is the output of `attn-tune merge`; resume the shard folders "
                              "it was merged from and merge them again");
    }
    const std::string profile = header.value("profile", "");
    const std::string profile_hash = header.value("profile_hash", "");
    if (h.value("profile_hash", "") != profile_hash) {
      throw InputError(path + " was made with profile '" + h.value("profile", "?") + "' (hash " +
                       h.value("profile_hash", "?") + "), not '" + profile + "' (hash " +
                       profile_hash + "); --resume needs the same profile" +
                       (h.value("profile", "") == profile
                            ? std::string(" (its hash covers the file and the batches --traffic "
                                          "and --hold-out add: give the first run's)")
                            : std::string()));
    }
    const json& dev = header.at("device");
    if (!same_device(h.value("device", json::object()), dev)) {
      throw InputError(path + " was measured on " + h["device"].value("name", "?") + " (" +
                       h["device"].value("id", "?") + ", " +
                       std::to_string(h["device"].value("threads", 0)) + " threads), not on " +
                       dev.value("name", "") + " (" + dev.value("id", "") + ", " +
                       std::to_string(dev.value("threads", 0)) +
                       " threads); --resume needs the same device and --threads");
    }
    const uint64_t seed = header.value("seed", uint64_t(0));
    if (h.value("seed", uint64_t(0)) != seed) {
      throw InputError(path + " was made with --seed " +
                       std::to_string(h.value("seed", uint64_t(0))) + ", not " +
                       std::to_string(seed) + "; --resume needs the same seed");
    }
    // Events and graph replay time different things: one table must not mix them. Files from
    // before the mode existed were timed with events.
    const std::string mode = header.value("timing_mode", "events");
    if (h.value("timing_mode", "events") != mode) {
      throw InputError(path + " was timed with --timing " + h.value("timing_mode", "events") +
                       ", not " + mode + "; --resume needs the same timing mode");
    }
    // A shard's folder resumes that shard only: another split measures other workloads.
    const auto shard_text = [](const json& hdr) {
      if (!hdr.contains("shard")) {
        return std::string("0/1");
      }
      return std::to_string(hdr["shard"].value("index", 0)) + "/" +
             std::to_string(hdr["shard"].value("count", 1));
    };
    // An adaptive search decides from what it measured; an exhaustive folder stays exhaustive.
    if (search_mode_of(h) != search_mode_of(header)) {
      throw InputError(path + " was swept with --search " + search_mode_of(h) + ", not " +
                       search_mode_of(header) + "; --resume needs the same search");
    }
    if (shard_text(h) != shard_text(header)) {
      throw InputError(path + " holds shard " + shard_text(h) + " of the plan, not " +
                       shard_text(header) + "; --resume needs the same --shard");
    }
    // A table is true only for the kernels that were timed: a plugin (by its library's hash)
    // or the built-in kernels. Files from before plugins existed timed the built-in ones.
    const json builtin = {{"source", "built-in"}, {"name", "attn-tune"}};
    const json& had = h.contains("kernels") ? h["kernels"] : builtin;
    const json& want = header.contains("kernels") ? header["kernels"] : builtin;
    if (kernels_identity(had) != kernels_identity(want)) {
      throw InputError(path + " timed the kernels of " + kernels_label(had) + ", not " +
                       kernels_label(want) + "; --resume needs the same kernels");
    }
    // The same kernels means the same sources too: a folder started by another attn-tune build
    // whose kernels changed would mix two kernel sets in one table (merge refuses it as well).
    const std::string had_src = h.value("kernel_sources_sha256", "");
    const std::string want_src = header.value("kernel_sources_sha256", "");
    if (!had_src.empty() && had_src != want_src) {
      throw InputError(path + " timed kernels built from other sources (sha256 " +
                       had_src.substr(0, 12) + ", this attn-tune's " + want_src.substr(0, 12) +
                       ", version " + ATTN_VERSION +
                       "; the folder's: " + h.value("tool_version", "?") +
                       "); --resume needs the attn-tune that started it, or a new --out");
    }
    // An `error` (a transient failure: out of memory, a busy device) is retried once: its key
    // counts as done only when a line of another status exists or it already failed twice. A
    // `fault` crashed or hung a worker; it is tried again only when asked to. The last line of
    // a key decides whether a fault stands.
    std::map<std::string, int> errors;
    std::map<std::string, std::string> last_status;
    for (const auto& l : existing.lines) {
      const std::string key = record_key(l.value("workload_key", ""), l.value("config_key", ""));
      const std::string status = l.value("status", "");
      last_status[key] = status;
      if (status == "error") {
        ++errors[key];
      } else if (status != "fault") {
        r.done.insert(key);
      }
    }
    for (const auto& [key, status] : last_status) {
      if (status == "fault") {
        if (retry_faults) {
          r.done.erase(key);
        } else {
          r.done.insert(key);
        }
      }
    }
    for (const auto& [key, n] : errors) {
      if (n >= 2) {
        r.done.insert(key);
      }
    }
  }
  if (existing.truncated_tail ||
      (fs::exists(path) && fs::file_size(path) != existing.valid_bytes)) {
    fs::resize_file(path, existing.valid_bytes); // drop the half-written line
  }
  r.lines = std::move(existing.lines);
  r.search_ended = !existing.search_end.is_null();
  r.out = std::make_unique<DurableAppender>(path);
  if (!has_content) {
    r.out->append(header);
  }
  return r;
}

void append_after_valid(const std::string& path, const json& j) {
  const ResultsFile existing = read_results(path);
  if (fs::exists(path) && fs::file_size(path) != existing.valid_bytes) {
    fs::resize_file(path, existing.valid_bytes);
  }
  DurableAppender(path).append(j);
}

} // namespace attn
