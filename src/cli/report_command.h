// The report writer `sweep` shares with `attn-tune report`: the page of a sweep folder.
#pragma once
#include <string>

namespace attn::cli {

// Writes DIR/report.html for the sweep folder DIR and returns its path; throws what the report
// throws (InputError for unreadable input).
std::string write_sweep_report(const std::string& dir);

} // namespace attn::cli
