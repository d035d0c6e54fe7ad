// Decode batches of mixed context lengths: the distributions a profile draws them from
// (docs/profiles.md "Mixed batches") and the traffic traces engines log (docs/traffic.md), both
// turned into decode workloads whose sequences have different lengths.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/model/dtype.h"

namespace attn {

// One distribution of context lengths. `dist`:
//   "lognormal": median, sigma (of the natural log)
//   "uniform":   min .. max
//   "zipf":      P(len = k) proportional to k^-s for k in min .. max
//   "mixture":   `long_count` sequences drawn from `long_part`, the rest from `short_part`
// Every draw is clamped to min .. max and rounded to an integer >= 1.
struct LengthDist {
  std::string dist;
  double median = 0.0;
  double sigma = 0.0;
  double s = 0.0;
  int min = 1;
  int max = 1 << 20;
  int long_count = 1;
  std::vector<LengthDist> parts; // mixture: {short_part, long_part}
};

// A profile's `length_mix` entry: a distribution, and how many batches of each batch size of
// the grid to draw from it for the sweep and how many more to hold out.
struct LengthMix {
  std::string name;
  LengthDist lengths;
  int batches = 4;
  int held_out_batches = 0;
  uint64_t seed = 1;
};

// Parses a `length_mix` entry or a distribution; errors name `path` ("decode.length_mix[0].sigma:
// expected a number > 0, got -1"), prefixed by `origin`.
[[nodiscard]] LengthMix parse_length_mix(const nlohmann::json& j, const std::string& origin,
                                         const std::string& path);
// The batches of `batch_size` sequences `mix` gives: `batches` for the sweep, then
// `held_out_batches` more, the same for a given seed on every machine.
[[nodiscard]] std::vector<std::vector<int>> draw_batches(const LengthMix& mix, int batch_size);
// One draw of a whole batch.
[[nodiscard]] std::vector<int> draw_batch(const LengthDist& d, int batch_size, uint64_t seed);

// A traffic trace (docs/traffic.md): decode batches as an engine logs them.
struct TraceShape {
  std::optional<int> num_heads;
  std::optional<int> num_kv_heads;
  std::optional<int> head_dim;
  std::optional<int> block_size;
  std::optional<DType> dtype;
};
struct TraceBatch {
  std::vector<int> seq_lens;
  double count = 1.0; // how often it occurred
  int line = 0;       // where it was read
};
struct Trace {
  std::string path;
  std::string source;
  TraceShape shape;
  std::vector<TraceBatch> batches; // distinct batches (equal ones merged, counts added), first-seen
  double total_count = 0.0;
  int lines = 0; // batch lines read
  // Lines cut short by a writer killed in the middle of them (the start of a JSON object that
  // ends before the object does, alone or with a whole line glued after it): skipped, their
  // batches lost (docs/traffic.md).
  std::vector<int> torn_lines;
};

// Reads a trace; a malformed line is an InputError naming the file, the line and the problem.
[[nodiscard]] Trace read_trace(const std::string& path);

// The trace batches a sweep measures: all of them when there are at most `max_batches`, else
// `max_batches` of them drawn with probability proportional to their count (without
// replacement, seeded); then `hold_out` (0 to 1) of those, drawn uniformly, are held out (never
// seen by the fit). Each keeps its count as its weight.
struct TrafficSample {
  TraceBatch batch;
  bool held_out = false;
};
[[nodiscard]] std::vector<TrafficSample> sample_traffic(const Trace& t, int max_batches,
                                                        double hold_out, uint64_t seed);

} // namespace attn
