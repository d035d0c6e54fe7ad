// What the page's views share: the partition palette, legend swatches and the data tables
// folded under each figure.
#include <algorithm>
#include <set>

#include "src/report/page_views.h"
#include "src/report/svg_plot.h"

namespace attn::report {

namespace {

std::string data_table_html(const DataTable& t) {
  std::string h = "<details><summary>Numbers: " + esc(t.title) + " (" +
                  std::to_string(t.rows.size()) + " rows; <code>" + esc(t.id) +
                  ".csv</code> with --format csv)</summary><div class=\"tw\"><table class=\"data\" "
                  "data-table=\"" +
                  esc(t.id) + "\"><thead><tr>";
  for (const auto& c : t.columns) {
    h += "<th scope=\"col\">" + esc(c) + "</th>";
  }
  h += "</tr></thead><tbody>";
  for (const auto& r : t.rows) {
    h += "<tr>";
    for (const auto& v : r) {
      h += "<td>" + esc(v) + "</td>";
    }
    h += "</tr>";
  }
  return h + "</tbody></table></div></details>";
}

} // namespace

std::string Palette::cls(int partition) const {
  const auto it = std::find(partitions.begin(), partitions.end(), partition);
  const auto i = it == partitions.end() ? 0 : std::size_t(it - partitions.begin());
  // Appended, not "p" + ...: GCC 12 at -O3 warns wrongly (-Wstringop-overflow) on that form here.
  std::string c = "p";
  c += std::to_string(i % 4);
  return c;
}

Palette palette_of(const ReportModel& a, const ReportModel* b) {
  std::set<int> parts;
  for (const ReportModel* m : {&a, b}) {
    if (m == nullptr) {
      continue;
    }
    for (const auto& dm : m->maps) {
      for (const auto& [bc, c] : dm.cells) {
        if (c.v2) {
          parts.insert(c.partition);
        }
      }
    }
    for (const auto& lc : m->latency) {
      for (const auto& s : lc.series) {
        if (s.kind == "partition") {
          parts.insert(s.partition);
        }
      }
    }
  }
  return {{parts.begin(), parts.end()}};
}

std::string esc(std::string_view s) { return xml_escape(s); }

std::string swatch_line(const std::string& cls) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 28 12\" aria-hidden=\"true\">"
         "<line x1=\"1\" y1=\"6\" x2=\"27\" y2=\"6\" class=\"" +
         cls + "\"/></svg>";
}
std::string swatch_box(const std::string& cls, double opacity) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 28 12\" aria-hidden=\"true\">"
         "<rect x=\"6\" y=\"0\" width=\"16\" height=\"12\" class=\"" +
         cls + "\" style=\"fill-opacity:" + coord(opacity) + "\"/></svg>";
}
std::string swatch_svg(const std::string& inner) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 28 12\" aria-hidden=\"true\">" +
         inner + "</svg>";
}
std::string legend_item(const std::string& swatch, const std::string& text) {
  return "<li>" + swatch + "<span>" + esc(text) + "</span></li>";
}

std::string tables_html(const ReportModel& m, std::initializer_list<const char*> ids) {
  std::string h;
  const std::vector<DataTable> all = model_tables(m);
  for (const char* id : ids) {
    for (const auto& t : all) {
      if (t.id == id) {
        h += data_table_html(t);
      }
    }
  }
  return h;
}

} // namespace attn::report
