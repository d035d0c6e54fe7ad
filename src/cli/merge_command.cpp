// `attn-tune merge OUT DIR...`: joins the folders of a sharded sweep (sweep --shard I/N) into one
// results.jsonl and threshold table, refusing folders that do not belong together.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "src/cli/commands.h"
#include "src/cli/report_command.h"
#include "src/model/errors.h"
#include "src/tuning/merge.h"

namespace attn::cli {

namespace {

struct MergeOptions {
  std::string out;
  std::vector<std::string> dirs;
  bool partial = false;
};

int run_merge(const MergeOptions& o) {
  attn::MergeOptions mo;
  mo.partial = o.partial;
  mo.info = stdout;
  // A merge into a folder that holds a sweep's report.html (its own earlier table) draws the page
  // again from the merged table, under the folder's lock; a merge into a new folder draws none.
  const std::string page = (std::filesystem::path(o.out) / "report.html").string();
  std::string report_said;
  mo.while_locked = [&] {
    std::error_code ec;
    if (!std::filesystem::exists(page, ec)) {
      return;
    }
    try {
      report_said = "merge: report " + write_sweep_report(o.out) + " (drawn again)\n";
    } catch (const std::exception& e) {
      std::filesystem::remove(page, ec); // a page of the earlier table would mislead
      report_said = std::string("merge: warning: no report: ") + e.what() + "; the earlier " +
                    "report.html was removed\n";
    }
  };
  const MergeSummary s = merge_shards(o.out, o.dirs, mo);
  std::printf("merge: %d measurements from %zu folders (%d shards%s, %d duplicate keys)\n",
              s.measurements, s.folders.size(), s.shard_count,
              s.complete ? ", complete" : ", INCOMPLETE", s.duplicates);
  if (s.replaced_own > 0) {
    std::printf("merge: replaced the %d measurement%s of the sweep whose folder this was (its own "
                "results, not an earlier merge's)\n",
                s.replaced_own, s.replaced_own == 1 ? "" : "s");
  }
  std::printf("merge: results %s\nmerge: table %s\n", s.results_path.c_str(), s.table_path.c_str());
  std::fputs(report_said.c_str(), report_said.rfind("merge: warning", 0) == 0 ? stderr : stdout);
  return kExitOk;
}

} // namespace

Command setup_merge(CLI::App& root) {
  auto opt = std::make_shared<MergeOptions>();
  CLI::App* sub = root.add_subcommand(
      "merge", "Join the output folders of a sharded sweep (sweep --shard I/N) into one "
               "results.jsonl and threshold table");
  sub->add_option("OUT", opt->out, "Output folder for results.jsonl and threshold_table.json")
      ->required();
  sub->add_option("DIR", opt->dirs,
                  "Shard output folders (read while their sweeps may still be writing: complete "
                  "lines only)")
      ->required();
  sub->add_flag("--partial", opt->partial,
                "Write the table even when shards are missing or unfinished (marked incomplete "
                "in provenance.merge); without it that is an error");
  sub->footer("Refuses (exit 2) folders from different device models, kernels, profiles, tool "
              "versions or timing modes. A key measured in two folders keeps the measurement "
              "with the lower spread and prints a line.");
  return {sub, [opt] { return run_merge(*opt); }};
}

} // namespace attn::cli
