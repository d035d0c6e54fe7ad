#include "src/tuning/provenance.h"

#include "build_info.h"
#include "src/io/embedded.h"

namespace attn {

using nlohmann::json;

json timing_options_json(const TimingOptions& t) {
  return {{"warmup", t.warmup},           {"warmup_seconds", t.warmup_seconds},
          {"min_reps", t.min_reps},       {"max_reps", t.max_reps},
          {"max_seconds", t.max_seconds}, {"target_noise", t.target_noise},
          {"flush_cache", t.flush_cache}, {"mode", timing_mode_name(t.mode)}};
}

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

} // namespace attn
