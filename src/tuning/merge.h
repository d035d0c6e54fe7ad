// `attn-tune merge`: joins the results of shard folders (sweep --shard I/N) into one results.jsonl
// and threshold table, refusing to mix devices, kernels, profiles or tool versions.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/tuning/shard.h"

namespace attn {

struct MergeOptions {
  bool partial = false; // write a table marked incomplete when shards are missing or unfinished
  FILE* info = nullptr; // one line per duplicate key and per incomplete shard; nullptr: silent
  // Called once the results and table are in place, while the merge still holds OUT's lock: the
  // files drawn from them are written here (the folder's report).
  std::function<void()> while_locked;
};

// One input folder as merge read it.
struct MergedFolder {
  std::string dir;
  ShardSpec shard;       // 0/1 for an unsharded sweep
  int expected = -1;     // measurements its plan asks for (-1: the header does not say)
  int measured = 0;      // distinct measurements in its complete lines
  bool complete = false; // measured >= expected (or expected unknown)
  // Lines written (a pair timed again, or raced then timed in full, counts each time) and how
  // many were brief race timings: for a merged folder, the sums over the sweep folders it names.
  int timings = 0;
  int race_timings = 0;
  // An adaptive folder with lines after its search_end (sweep --remeasure-noisy): its search is
  // open again until a plain resume ends it.
  bool reopened = false;
};

struct MergeSummary {
  std::vector<MergedFolder> folders;
  int shard_count = 1;
  std::vector<int> missing; // shards with no folder
  bool complete = false;    // every shard present and complete
  int measurements = 0;     // lines in the merged results.jsonl
  int duplicates = 0;       // keys found in more than one folder
  // Measurements of a sweep's own results (not an earlier merge's) that OUT held and the merge
  // replaced: OUT was that sweep's folder.
  int replaced_own = 0;
  std::string results_path; // OUT/results.jsonl
  std::string table_path;   // OUT/threshold_table.json
  nlohmann::json table;
};

// Reads the complete lines of DIR/results.jsonl for every folder (a sweep may still be writing
// them), checks that they come from one device model, kernel sources, profile, tool version and
// timing mode, keeps the lower-spread measurement of a key found twice, and writes
// OUT/results.jsonl and OUT/threshold_table.json atomically. Throws InputError with a one-line
// reason when folders do not belong together, or, unless `partial`, when shards are missing or
// incomplete.
[[nodiscard]] MergeSummary merge_shards(const std::string& out_dir,
                                        const std::vector<std::string>& dirs,
                                        const MergeOptions& opt);

} // namespace attn
