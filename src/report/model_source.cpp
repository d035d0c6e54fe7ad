// Reading what `attn-tune report` is given: a sweep folder or a lone table, checked against the
// schema, and the folder's results.jsonl checked against the table's profile.
#include <filesystem>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/model/errors.h"
#include "src/report/report_model.h"
#include "src/tuning/fleet.h"
#include "src/tuning/table_schema.h"

namespace attn::report {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_table(const std::string& path) {
  const json j = load_table_json(path); // as table show reads it: one line for any damage
  if (!j.is_object() || !j.contains("schema") || j["schema"] != attn_tune::kTableSchemaName) {
    throw InputError("'" + path + "' is not an attn-tune threshold table (schema is not \"" +
                     std::string(attn_tune::kTableSchemaName) + "\")");
  }
  try {
    validate_table(j);
  } catch (const InputError& e) {
    throw InputError("'" + path + "': " + e.what());
  }
  return j;
}

} // namespace

ReportSource load_report_source(const std::string& dir_or_table) {
  ReportSource src;
  src.given = dir_or_table;
  std::error_code ec;
  const fs::path given(dir_or_table);
  if (!fs::exists(given, ec)) {
    throw InputError("'" + dir_or_table + "' does not exist");
  }
  if (fs::is_directory(given, ec)) {
    src.table_path = (given / "threshold_table.json").string();
    if (!fs::exists(src.table_path, ec)) {
      throw InputError("'" + dir_or_table +
                       "' has no threshold_table.json (give a sweep's --out folder or a table)");
    }
    const fs::path results = given / "results.jsonl";
    if (fs::exists(results, ec)) {
      src.results_path = results.string();
    }
  } else {
    src.table_path = dir_or_table;
  }
  src.table = read_table(src.table_path);
  if (!src.results_path.empty()) {
    const ResultsFile rf = read_results(src.results_path);
    // A results file that is empty, cut short in its header, or without the measurements the
    // table counts would leave every regret figure empty without a word: refused, naming it.
    if (!rf.header.is_object()) {
      throw InputError("'" + src.results_path +
                       "' has no header line (empty or cut short); give the table alone, or "
                       "the folder of a sweep whose results are whole");
    }
    const std::string want =
        src.table["provenance"].value("profile", json::object()).value("hash", "");
    const std::string have = rf.header.is_object() ? rf.header.value("profile_hash", "") : "";
    if (!want.empty() && !have.empty() && want != have) {
      throw InputError("'" + src.results_path + "' is from profile hash " + have +
                       ", but the table beside it from " + want +
                       "; rebuild the table with "
                       "`attn-tune sweep --resume`");
    }
    int counted = 0;
    if (src.table.contains("measurement_counts") && src.table["measurement_counts"].is_object()) {
      for (const auto& [status, n] : src.table["measurement_counts"].items()) {
        counted += n.is_number_integer() ? n.get<int>() : 0;
      }
    }
    if (rf.lines.empty() && counted > 0) {
      throw InputError("'" + src.results_path +
                       "' holds no measurement, but the table beside it "
                       "counts " +
                       std::to_string(counted) +
                       "; give the table alone, or rebuild it with `attn-tune sweep --resume`");
    }
    try {
      src.records = to_records(rf.lines);
    } catch (const std::exception& e) {
      throw InputError("'" + src.results_path + "': " + e.what());
    }
    src.lines = rf.lines;
  }
  return src;
}

} // namespace attn::report
