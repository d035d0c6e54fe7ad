// `attn-tune report`: the page an engine author reads (src/report/): a sweep folder or a table
// as one self-contained HTML file, optionally beside a second table, or its numbers as CSV files.
#include "src/cli/report_command.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "build_info.h"
#include "src/cli/commands.h"
#include "src/io/atomic_file.h"
#include "src/io/folder_lock.h"
#include "src/model/errors.h"
#include "src/report/report_html.h"

namespace attn::cli {

namespace {

namespace fs = std::filesystem;

struct ReportOptions {
  std::string input;   // a sweep folder or a table
  std::string against; // a second folder or table; empty: none
  std::string out;     // the page, or the CSV folder; empty: next to the input
  std::string format = "html";
};

std::string generator() {
  return std::string("attn-tune ") + ATTN_VERSION + " (" + ATTN_GIT_HASH + ")";
}

// DIR/report.html (DIR/report-csv) for a folder, X.report.html (X.report-csv) for a table X.json.
std::string default_out(const std::string& input, bool csv) {
  const fs::path p(input);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    return (p / (csv ? "report-csv" : "report.html")).string();
  }
  fs::path stem = p;
  stem.replace_extension();
  return stem.string() + (csv ? ".report-csv" : ".report.html");
}

// One writer per folder: a report written into a sweep's folder (where it goes by default)
// holds the folder's lock, as a sweep and merge do, so that it neither draws a sweep's results
// halfway through nor races the page the sweep writes last; a busy folder is refused at once,
// naming the holder's pid. Elsewhere a report needs no lock.
std::optional<FolderLock> lock_if_sweep_folder(const std::string& out) {
  fs::path dir = fs::path(out).parent_path();
  if (dir.empty()) {
    dir = ".";
  }
  std::error_code ec;
  if (fs::exists(dir / "results.jsonl", ec) || fs::exists(dir / "threshold_table.json", ec)) {
    return std::optional<FolderLock>(std::in_place, dir.string());
  }
  return std::nullopt;
}

int run_report(const ReportOptions& o) {
  const bool csv = o.format == "csv";
  const std::string out = o.out.empty() ? default_out(o.input, csv) : o.out;
  const std::optional<FolderLock> lock = lock_if_sweep_folder(out);
  const report::ReportSource src = report::load_report_source(o.input);
  const report::ReportModel a = report::build_report_model(src);
  std::unique_ptr<report::ReportModel> b;
  std::vector<report::DecisionDiff> diffs;
  if (!o.against.empty()) {
    const report::ReportSource other = report::load_report_source(o.against);
    b = std::make_unique<report::ReportModel>(report::build_report_model(other));
    diffs = report::decision_diffs(src.table, other.table);
  }
  if (csv) {
    const auto files = report::write_report_csv(out, a, b.get(), b ? &diffs : nullptr);
    std::printf("report: %zu CSV files in %s\n", files.size(), out.c_str());
    for (const auto& f : files) {
      std::printf("  %s\n", fs::path(f).filename().c_str());
    }
    return kExitOk;
  }
  write_file_atomically(out,
                        report::render_report_html(a, b.get(), b ? &diffs : nullptr, generator()));
  if (b) {
    std::printf("report: %zu decode calls choose differently in the two tables\n", diffs.size());
  }
  std::printf("report: %s\n", out.c_str());
  return kExitOk;
}

} // namespace

std::string write_sweep_report(const std::string& dir) {
  const report::ReportSource src = report::load_report_source(dir);
  const std::string out = (fs::path(dir) / "report.html").string();
  write_file_atomically(out, report::render_report_html(report::build_report_model(src), nullptr,
                                                        nullptr, generator()));
  return out;
}

Command setup_report(CLI::App& root) {
  auto opt = std::make_shared<ReportOptions>();
  CLI::App* sub = root.add_subcommand(
      "report", "Draw a sweep's table as one self-contained HTML page (or its numbers as CSV): "
                "decision maps, latency over context, regret of each rule, prefill rates");
  sub->add_option("input", opt->input,
                  "A sweep's --out folder (threshold_table.json and results.jsonl) or a table")
      ->required();
  sub->add_option("--against", opt->against,
                  "A second folder or table to show side by side, with the calls whose decision "
                  "differs");
  sub->add_option("--out", opt->out,
                  "The page (default: DIR/report.html, or X.report.html beside table X.json); "
                  "with --format csv the folder for the CSV files (default: DIR/report-csv)");
  sub->add_option("--format", opt->format,
                  "html: one page; csv: one CSV file per view (docs/report.md)")
      ->check(CLI::IsMember({"html", "csv"}))
      ->capture_default_str();
  return {sub, [opt] { return run_report(*opt); }};
}

} // namespace attn::cli
