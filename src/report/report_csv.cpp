// The report's numbers as CSV files: one per data table (report_tables.cpp), both models' rows
// under one header with --against.
#include <algorithm>
#include <filesystem>

#include "src/io/atomic_file.h"
#include "src/model/errors.h"
#include "src/report/report_html.h"

namespace attn::report {

std::string to_csv(const DataTable& t, const std::string& source) {
  const auto field = [](const std::string& v) {
    if (v.find_first_of(",\"\n\r") == std::string::npos) {
      return v;
    }
    std::string q(1, '"');
    for (char c : v) {
      q.push_back(c);
      if (c == '"') {
        q.push_back('"');
      }
    }
    q.push_back('"');
    return q;
  };
  std::string s = "table";
  for (const auto& c : t.columns) {
    s.push_back(',');
    s.append(field(c));
  }
  s.push_back('\n');
  for (const auto& r : t.rows) {
    s.append(field(source));
    for (const auto& v : r) {
      s.push_back(',');
      s.append(field(v));
    }
    s.push_back('\n');
  }
  return s;
}

std::vector<std::string> write_report_csv(const std::string& folder, const ReportModel& a,
                                          const ReportModel* b,
                                          const std::vector<DecisionDiff>* diffs) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    throw InputError("cannot create folder '" + folder + "': " + ec.message());
  }
  std::vector<std::string> written;
  std::vector<std::pair<std::string, std::string>> files; // path, text
  const std::vector<DataTable> ta = model_tables(a);
  const std::vector<DataTable> tb = b ? model_tables(*b) : std::vector<DataTable>{};
  // Every table either model has (the traffic tables only where there are batches), in page
  // order: both models' rows under one header.
  std::vector<const DataTable*> order;
  for (const auto* set : {&ta, &tb}) {
    for (const DataTable& t : *set) {
      if (std::none_of(order.begin(), order.end(),
                       [&](const DataTable* o) { return o->id == t.id; })) {
        order.push_back(&t);
      }
    }
  }
  const auto rows_of = [](const std::vector<DataTable>& set, const std::string& id,
                          const std::string& label) {
    for (const DataTable& t : set) {
      if (t.id == id) {
        const std::string text = to_csv(t, label);
        return text.substr(text.find('\n') + 1);
      }
    }
    return std::string();
  };
  for (const DataTable* t : order) {
    const std::string header = to_csv(DataTable{t->id, t->title, t->columns, {}}, "");
    std::string text = header + rows_of(ta, t->id, a.label);
    if (b != nullptr) {
      text += rows_of(tb, t->id, b->label);
    }
    files.emplace_back((std::filesystem::path(folder) / (t->id + ".csv")).string(), text);
  }
  if (b != nullptr && diffs != nullptr) {
    files.emplace_back((std::filesystem::path(folder) / "decision_diff.csv").string(),
                       to_csv(diff_table(*diffs), a.label + " vs " + b->label));
  }
  write_files_atomically(files); // all or none
  for (const auto& f : files) {
    written.push_back(f.first);
  }
  return written;
}

} // namespace attn::report
