#include "src/validation/verify.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unistd.h>

#include "reference/reference.h"
#include "src/backends/deadline.h"
#include "src/io/safetensors.h"
#include "src/io/supervisor.h"
#include "src/model/errors.h"
#include "src/model/problem_gen.h"
#include "src/validation/check.h"
#include "src/validation/diagnose.h"
#include "src/validation/replay.h"

namespace attn {

using nlohmann::json;

Intensity parse_intensity(const std::string& s) {
  if (s == "quick") {
    return Intensity::quick;
  }
  if (s == "default" || s == "standard") {
    return Intensity::standard;
  }
  if (s == "full") {
    return Intensity::full;
  }
  throw InputError("unknown intensity '" + s + "' (expected quick, default or full)");
}

Problem VerifyCase::make() const {
  GenOptions g;
  g.seed = seed;
  g.shared_prefix = shared_prefix;
  return phase == Phase::decode ? make_decode_problem(params, k_lens, g)
                                : make_prefill_problem(params, q_lens, k_lens, g);
}

namespace {

uint64_t mix_seed(uint64_t seed, const std::string& group, int index) {
  uint64_t h = 1469598103934665603ull; // FNV-1a over the group name
  for (unsigned char c : group) {
    h = (h ^ c) * 1099511628211ull;
  }
  uint64_t z = seed ^ h ^ (uint64_t(index) * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Sizes {
  std::vector<int> head_dims;
  std::vector<int> block_sizes;
  int max_len;     // longest ragged length in the edge groups
  int prefill_len; // longest prefill sequence
  std::vector<int> long_lens;
};

Sizes sizes_for(Intensity in) {
  switch (in) {
  case Intensity::quick:
    return {{64, 128}, {16}, 1100, 96, {2049}};
  case Intensity::full:
    return {{64, 80, 96, 112, 128, 192, 256}, {8, 16, 32, 64, 128}, 4100, 600, {32768, 16385}};
  default:
    return {{64, 96, 128, 256}, {8, 16, 32}, 2100, 300, {8193, 4097}};
  }
}

AttnParams base_params(DType dt, int heads, int kv_heads, int head_dim, int block_size) {
  AttnParams p;
  p.dtype = dt;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  return p;
}

// The mask options every phase is checked with: name and how they change the defaults.
struct MaskVariant {
  const char* name;
  bool causal;
  int window_left;
  int window_right;
  double softcap;
  double scale; // 0: default 1/sqrt(head_dim)
};
constexpr MaskVariant kMaskVariants[] = {
    {"full", false, -1, -1, 0.0, 0.0},
    {"causal", true, -1, -1, 0.0, 0.0},
    {"window-narrow", true, 7, -1, 0.0, 0.0},
    {"window-wide", true, 100000, -1, 0.0, 0.0},
    {"window-partition", true, 511, -1, 0.0, 0.0},
    {"window-right", false, -1, 5, 0.0, 0.0},
    {"window-both", false, 40, 3, 0.0, 0.0},
    {"softcap", true, -1, -1, 5.0, 1.0},
    {"softcap-window", true, 100, -1, 30.0, 0.0},
    {"scale", true, -1, -1, 0.0, 0.3},
};

AttnParams with_mask(AttnParams p, const MaskVariant& m) {
  p.causal = m.causal;
  p.window_left = m.window_left;
  p.window_right = m.window_right;
  p.softcap = m.softcap;
  if (m.scale > 0) {
    p.scale = m.scale;
  }
  return p;
}

} // namespace

std::vector<VerifyCase> verify_cases(Phase phase, DType dt, Intensity in, uint64_t seed) {
  const Sizes sz = sizes_for(in);
  const std::string ph = phase == Phase::decode ? "decode" : "prefill";
  const std::string suffix = std::string("/").append(dtype_name(dt));
  std::vector<VerifyCase> cases;
  std::map<std::string, int> counts;
  auto add = [&](const std::string& group, AttnParams p, std::vector<int> q, std::vector<int> k,
                 bool shared = false) {
    VerifyCase c;
    c.group = ph + "/" + group + suffix;
    c.index = counts[c.group]++;
    c.seed = mix_seed(seed, c.group, c.index);
    c.phase = phase;
    c.params = p;
    c.q_lens = std::move(q);
    c.k_lens = std::move(k);
    c.shared_prefix = shared;
    cases.push_back(std::move(c));
  };
  const std::vector<int> partitions = {256, 512, 1024};

  if (phase == Phase::decode) {
    // Context lengths at every SPEC.md edge, plus an empty context, in one ragged batch.
    for (int d : sz.head_dims) {
      for (int bs : sz.block_sizes) {
        std::vector<int> lens = edge_lengths(bs, partitions, sz.max_len);
        lens.push_back(0);
        add("edges", base_params(dt, 4, 2, d, bs), {}, lens);
      }
    }
    // GQA ratios 1..16 and MQA.
    for (int ratio : {1, 2, 4, 8, 16}) {
      const uint64_t s = mix_seed(seed, "decode-gqa-lens", ratio);
      add("gqa", base_params(dt, 2 * ratio, 2, 128, 16), {},
          ragged_lengths(s, 5, 16, partitions, sz.max_len));
    }
    add("gqa", base_params(dt, 16, 1, 128, 16), {},
        ragged_lengths(mix_seed(seed, "decode-mqa-lens", 0), 5, 16, partitions, sz.max_len));
    for (const auto& m : kMaskVariants) {
      const AttnParams p =
          with_mask(base_params(dt, 4, 2, in == Intensity::quick ? 64 : 128, 16), m);
      add("masks", p, {}, ragged_lengths(mix_seed(seed, m.name, 1), 6, 16, partitions, sz.max_len));
    }
    add("shared-prefix", base_params(dt, 8, 2, 128, 16), {}, {300, 97, 1025, 64, 513}, true);
    add("long", base_params(dt, 8, 1, 128, 16), {}, sz.long_lens);
    return cases;
  }

  const int L = sz.prefill_len;
  for (int d : sz.head_dims) {
    for (int bs : sz.block_sizes) {
      // Equal query and key lengths at the block edges, plus an empty sequence.
      std::vector<int> lens = edge_lengths(bs, {}, L);
      lens.push_back(0);
      add("varlen", base_params(dt, 4, 2, d, bs), lens, lens);
    }
  }
  {
    // Chunked prefill and prefix caching: q_len < k_len.
    std::vector<int> q = {1, 17, 64, 5, 33};
    std::vector<int> k = {1 + 15, 17 + 16, 64 + 100, 5 + 17, 33 + 3 * 16};
    add("chunked", base_params(dt, 4, 2, 128, 16), q, k);
    add("chunked", base_params(dt, 4, 4, 64, 32), {8, 40}, {200, 41});
  }
  {
    // q_len > k_len: leading rows see no key under a causal mask.
    AttnParams p = base_params(dt, 4, 2, 64, 16);
    add("q-gt-k", p, {20, 10, 3, 17}, {5, 0, 1, 16});
    p.causal = false;
    add("q-gt-k", p, {20, 10, 3}, {5, 0, 1});
    p.causal = true;
    p.window_left = 2;
    add("q-gt-k", p, {9, 4}, {3, 1});
  }
  for (int ratio : {1, 2, 4, 8, 16}) {
    std::vector<int> q = ragged_lengths(mix_seed(seed, "prefill-gqa-q", ratio), 3, 16, {}, L / 2);
    add("gqa", base_params(dt, 2 * ratio, 2, 128, 16), q, q);
  }
  add("gqa", base_params(dt, 8, 1, 128, 16), {33, 70}, {33, 90});
  for (const auto& m : kMaskVariants) {
    const AttnParams p = with_mask(base_params(dt, 4, 2, in == Intensity::quick ? 64 : 128, 16), m);
    std::vector<int> q = ragged_lengths(mix_seed(seed, m.name, 2), 3, 16, {}, L / 2);
    std::vector<int> k = q;
    k[0] += 37; // one chunked sequence per mask option
    add("masks", p, q, k);
  }
  add("shared-prefix", base_params(dt, 4, 2, 128, 16), {40, 7, 64}, {160, 97, 200}, true);
  return cases;
}

namespace {

std::string slug(const std::string& s) {
  std::string o;
  for (char c : s) {
    o += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  }
  return o;
}

std::string fail_prefix(const std::string& device, const std::string& config,
                        const std::string& case_name, uint64_t case_seed, uint64_t run_seed) {
  return "FAIL " + device + " " + config + " " + case_name +
         " case_seed=" + std::to_string(case_seed) + " run_seed=" + std::to_string(run_seed);
}

std::string one_line_failure(const std::string& device, const KernelConfig& cfg,
                             const VerifyCase& c, const Problem& pr, const CheckReport& rep,
                             uint64_t run_seed) {
  std::ostringstream s;
  s << fail_prefix(device, cfg.key(), c.name(), c.seed, run_seed) << " (" << pr.describe()
    << "): " << rep.summary();
  int listed = 0;
  for (const auto& m : rep.first) {
    if (listed++ == 3) {
      break;
    }
    char buf[160];
    if (m.dim >= 0) {
      std::snprintf(buf, sizeof buf, "; out[%d,%d,%d] got %.6g want %.6g (%s)", m.row, m.head,
                    m.dim, m.got, m.want, m.what.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "; lse[%d,%d] got %.6g want %.6g (%s)", m.row, m.head, m.got,
                    m.want, m.what.c_str());
    }
    s << buf;
  }
  return s.str();
}

} // namespace

namespace {

// What identifies one check in a run, so that a later worker does not repeat it.
std::string check_key(const std::string& device, const KernelConfig& cfg, const VerifyCase& c) {
  return device + " | " + cfg.key() + " | " + c.name();
}

// Checks one configuration on one case: the failure line, or "" on a pass.
std::string check_one(Backend& be, const VerifyOptions& opt, const std::string& device,
                      const KernelConfig& cfg, const VerifyCase& c, const Problem& pr,
                      const ReferenceResult& ref, std::string& dumped,
                      std::vector<std::string>& causes) {
  RunOutput out = run_once(be, pr, cfg);
  const Tolerance tol = tolerance_for(c.params.dtype);
  const CheckReport check = check_output(out.out, out.checked_lse(), ref, tol);
  if (check.pass) {
    return "";
  }
  std::string failure = one_line_failure(device, cfg, c, pr, check, opt.seed);
  causes = diagnose_failure(be, cfg, pr, out, ref, tol, opt.reference_threads);
  for (std::size_t i = 0; i < causes.size(); ++i) {
    failure += (i == 0 ? "; looks like: " : "; ") + causes[i];
  }
  if (!opt.dump_dir.empty()) {
    const std::string path =
        opt.dump_dir + "/" + slug(device + "_" + cfg.key() + "_" + c.name()) + ".safetensors";
    std::map<std::string, std::string> meta = {
        {"attn_tune_case", c.name()},
        {"attn_tune_config", cfg.key()},
        {"attn_tune_kernels", be.kernels().value("name", "attn-tune")},
        {"attn_tune_device", device},
        {"attn_tune_run_seed", std::to_string(opt.seed)}};
    SafetensorsFile file = replay_to_safetensors(pr, &out.out, out.checked_lse());
    file.metadata.insert(meta.begin(), meta.end());
    write_safetensors(path, file);
    dumped = path;
    failure += "; dumped to " + path;
  }
  return failure;
}

// A verify worker's pass over one backend: every case of every family and configuration that
// `skip` (what earlier workers of this command checked) does not hold, each announced to the
// supervisor as a unit and reported as a {"ev": "case"} message.
void verify_worker(Backend& be, const VerifyOptions& opt, const std::set<std::string>& skip,
                   const Emit& emit) {
  const std::string device = be.info().id;
  emit({{"ev", "device"}, {"device", device}});
  if (!opt.dump_dir.empty()) {
    std::filesystem::create_directories(opt.dump_dir);
  }
  for (DType dt : opt.dtypes) {
    for (Phase phase : {Phase::decode, Phase::prefill}) {
      std::vector<Family> fams;
      for (Family f : opt.families) {
        if (family_is_decode(f) == (phase == Phase::decode)) {
          fams.push_back(f);
        }
      }
      if (fams.empty()) {
        continue;
      }
      for (const VerifyCase& c : verify_cases(phase, dt, opt.intensity, opt.seed)) {
        std::vector<std::pair<Family, KernelConfig>> todo;
        for (Family f : fams) {
          for (const KernelConfig& cfg : be.config_space(f, c.params)) {
            if (!skip.count(check_key(device, cfg, c))) {
              todo.emplace_back(f, cfg);
            }
          }
        }
        if (todo.empty()) {
          continue; // an earlier worker checked this case: do not even build it
        }
        const Problem pr = c.make();
        std::optional<ReferenceResult> ref; // computed on first use, shared by every config
        for (const auto& [f, cfg] : todo) {
          const std::string key = check_key(device, cfg, c);
          json result = {{"ev", "case"},        {"key", key},
                         {"device", device},    {"family", family_name(f)},
                         {"config", cfg.key()}, {"group", c.group},
                         {"case", c.name()},    {"case_seed", c.seed}};
          const double deadline = unit_deadline_s(pr, be.info(), nullptr);
          emit(begin_message(key, deadline, result));
          const auto t0 = std::chrono::steady_clock::now();
          std::string failure;
          std::string dumped;
          std::vector<std::string> causes;
          try {
            // can_run loads modules on the GPU: inside the unit, like the launch.
            if (auto why = be.can_run(cfg, pr)) {
              emit(end_message());
              result["result"] = "skipped";
              result["skip_reason"] = *why;
              emit(result);
              continue;
            }
            if (!ref) {
              emit(end_message());
              emit(begin_message("reference of " + c.name(), 0.0, json::object(),
                                 /*fault_unit=*/false));
              ref = reference_attention(pr, {.threads = opt.reference_threads, .rows = {}});
              emit(end_message());
              emit(begin_message(key, deadline, result));
            }
            failure = check_one(be, opt, device, cfg, c, pr, *ref, dumped, causes);
          } catch (const DeviceFault&) {
            throw; // the supervisor records the fault and starts a fresh worker
          } catch (const std::exception& e) {
            failure =
                fail_prefix(device, cfg.key(), c.name(), c.seed, opt.seed) + ": error: " + e.what();
          }
          emit(end_message());
          result["seconds"] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          result["result"] = failure.empty() ? "passed" : "failed";
          result["failure"] = failure;
          result["dumped"] = dumped;
          result["causes"] = causes;
          emit(result);
        }
      }
    }
  }
}

// The supervisor's side of verify: one report per device, built from the workers' case messages
// and the faults, with each failure printed to `log` as it arrives.
class VerifyTally {
public:
  VerifyTally(const VerifyOptions& opt, std::FILE* log, std::FILE* info)
      : opt_(opt), log_(log), info_(info) {}

  [[nodiscard]] const std::set<std::string>& done_here() const { return done_here_; }
  [[nodiscard]] std::vector<VerifyReport>& reports() { return reports_; }

  void on_message(const json& m) {
    const std::string ev = m.value("ev", "");
    if (ev == "device") {
      (void)report(m.value("device", ""));
    } else if (ev == "case") {
      apply(m);
    } else if (ev == "say" && info_ != nullptr && said_.insert(m.value("text", "")).second) {
      std::fprintf(info_, "%s\n", m.value("text", "").c_str());
      std::fflush(info_);
    }
  }

  void on_fault(const json& info, const std::string& reason) {
    json m = info;
    m["result"] = "failed";
    m["failure"] =
        fail_prefix(info.value("device", ""), info.value("config", ""), info.value("case", ""),
                    info.value("case_seed", uint64_t(0)), opt_.seed) +
        ": fault: " + reason;
    apply(m);
  }

private:
  VerifyReport& report(const std::string& device) {
    auto it = by_device_.find(device);
    if (it == by_device_.end()) {
      it = by_device_.emplace(device, reports_.size()).first;
      reports_.emplace_back();
    }
    return reports_[it->second];
  }

  void apply(const json& m) {
    done_here_.insert(m.value("key", ""));
    const std::string device = m.value("device", "");
    VerifyReport& rep = report(device);
    const std::string config = m.value("config", "");
    const std::string group = m.value("group", "");
    const std::string tkey = device + "|" + config + "|" + group;
    auto it = testcase_.find(tkey);
    if (it == testcase_.end()) {
      it = testcase_.emplace(tkey, rep.testcases.size()).first;
      VerifyTestcase tc;
      tc.device = device;
      tc.family = m.value("family", "");
      tc.config = config;
      tc.group = group;
      rep.testcases.push_back(std::move(tc));
    }
    VerifyTestcase& tc = rep.testcases[it->second];
    const std::string result = m.value("result", "");
    tc.seconds += m.value("seconds", 0.0);
    if (result == "skipped") {
      ++tc.skipped;
      ++rep.skipped;
      tc.skip_reason = m.value("skip_reason", "");
    } else if (result == "passed") {
      ++tc.passed;
      ++rep.passed;
    } else {
      ++tc.failed;
      ++rep.failed;
      const std::string failure = m.value("failure", "");
      tc.failures.push_back(failure);
      for (const auto& cause : m.value("causes", std::vector<std::string>{})) {
        ++tc.causes[cause];
      }
      // Errors and faults are their own explanation: counted by their message.
      for (const char* kind : {": error: ", ": fault: "}) {
        const auto at = failure.find(kind);
        if (at != std::string::npos) {
          std::string why = failure.substr(at + 2);
          // "error: plugin NAME run failed (code N): message": the summary keeps the message.
          const auto run_failed = why.find(" run failed (code ");
          if (why.rfind("error: plugin ", 0) == 0 && run_failed != std::string::npos) {
            const auto colon = why.find("): ", run_failed);
            if (colon != std::string::npos) {
              why = "error: " + why.substr(colon + 3);
            }
          }
          if (why.size() > 300) {
            why = why.substr(0, 297) + "...";
          }
          ++tc.causes[why];
          break;
        }
      }
      if (!m.value("dumped", "").empty()) {
        rep.dumped.push_back(m.value("dumped", ""));
      }
      if (log_) {
        std::fprintf(log_, "%s\n", failure.c_str());
        std::fflush(log_);
      }
    }
  }

  const VerifyOptions& opt_;
  std::FILE* log_;
  std::FILE* info_;
  std::vector<VerifyReport> reports_;
  std::map<std::string, std::size_t> by_device_;
  std::map<std::string, std::size_t> testcase_; // device|config|group -> its testcase
  std::set<std::string> done_here_;
  std::set<std::string> said_;
};

} // namespace

std::vector<VerifyReport> run_verify_isolated(const VerifyBackends& backends,
                                              const VerifyOptions& opt, std::FILE* log,
                                              std::FILE* info, bool in_process) {
  VerifyTally tally(opt, log, info);
  SupervisorHooks hooks;
  hooks.work = [&](const Emit& emit, int) {
    backends(emit, [&](Backend& be) { verify_worker(be, opt, tally.done_here(), emit); });
    return 0;
  };
  hooks.on_message = [&](const json& m) { tally.on_message(m); };
  hooks.on_fault = [&](const json& info, const std::string& reason) {
    tally.on_fault(info, reason);
  };
  (void)supervise(hooks, in_process);
  return std::move(tally.reports());
}

VerifyReport run_verify(Backend& be, const VerifyOptions& opt, std::FILE* log) {
  std::vector<VerifyReport> reports = run_verify_isolated(
      [&](const Emit&, const std::function<void(Backend&)>& each) { each(be); }, opt, log,
      /*info=*/nullptr, /*in_process=*/true);
  return reports.empty() ? VerifyReport{} : std::move(reports.front());
}

} // namespace attn
