// tools/plan/timeline_svg.cpp — see timeline_svg.h.
#include "timeline_svg.h"

#include <tandem/core/check.h>
#include <algorithm>
#include <cstdio>

#include "../train/svg_chart.h"

namespace tandem::tools {
namespace {

constexpr const char* kCompute = "#4878cf";
constexpr const char* kCommunication = "#e8853d";
constexpr const char* kIdle = "#c8c8c8";
constexpr const char* kBlocked = "#b5523b";

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

// One row's box for [start, end) seconds, with a tooltip.
std::string box(double x0, double scale, int y, int height, double start, double end,
                const char* fill, const std::string& what) {
  const double x = x0 + start * scale, w = std::max(0.5, (end - start) * scale);
  return str("<rect x=\"", svg_number(x), "\" y=\"", y, "\" width=\"", svg_number(w),
             "\" height=\"", height, "\" fill=\"", fill, "\"><title>", html_escape(what), " ",
             ms(start), " to ", ms(end), "</title></rect>\n");
}

}  // namespace

std::string timeline_svg(const StepTime& predicted, const std::vector<MeasuredStep>& measured,
                         const std::string& caption, int width) {
  TD_CHECK_VALUE(measured.empty() || measured.size() == predicted.ranks.size(),
                 "timeline_svg: ", measured.size(), " ranks measured, but ", predicted.ranks.size(),
                 " predicted");
  double longest = predicted.step;
  for (const MeasuredStep& m : measured) longest = std::max(longest, m.last);
  const int label = 118, row = 14, gap = 8, top = 24;
  const int per_rank = measured.empty() ? row + gap : 2 * row + gap;
  const double x0 = label, scale = double(width - label - 8) / std::max(longest, 1e-9);
  const int height = top + per_rank * int(predicted.ranks.size()) + 30;
  std::string s = str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"",
                      height, "\" font-family=\"sans-serif\" font-size=\"10\">\n");
  s += str("<text x=\"0\" y=\"14\" font-size=\"12\">", html_escape(caption), "</text>\n");
  for (size_t r = 0; r < predicted.ranks.size(); ++r) {
    const int y = top + per_rank * int(r);
    s += str("<text x=\"0\" y=\"", y + 11, "\">rank ", r, "</text>\n");
    s += str("<text x=\"44\" y=\"", y + 11, "\">predicted</text>\n");
    for (const TimeSpan& t : predicted.ranks[r].spans) {
      const bool compute = t.kind == TimeSpan::Kind::Compute;
      const bool comm = t.kind == TimeSpan::Kind::Communication;
      s += box(x0, scale, y, row - 2, t.start, t.end,
               compute ? kCompute
               : comm  ? kCommunication
                       : kIdle,
               compute ? "compute"
               : comm  ? "communication"
                       : "idle (waiting for peers)");
    }
    if (measured.empty()) continue;
    const MeasuredStep& m = measured[r];
    s += str("<text x=\"44\" y=\"", y + row + 11, "\">measured</text>\n");
    double at = 0;  // compute fills what the blocked spans leave
    for (const parallel::BlockedSpan& b : m.spans) {
      if (b.start > at) s += box(x0, scale, y + row, row - 2, at, b.start, kCompute, "compute");
      s += box(x0, scale, y + row, row - 2, b.start, b.end, kBlocked, "blocked on communication");
      at = std::max(at, b.end);
    }
    if (m.last > at) s += box(x0, scale, y + row, row - 2, at, m.last, kCompute, "compute");
  }
  const int legend = height - 10;
  s += str("<text x=\"", width - 8, "\" y=\"", legend - 14, "\" text-anchor=\"end\">", ms(longest),
           "</text>\n");
  int x = label;
  struct Key {
    const char *fill, *name;
    int advance;  // pixels to the next key
  };
  for (const Key& k : {Key{kCompute, "compute", 70}, Key{kCommunication, "communication", 100},
                       Key{kIdle, "idle: waiting for peers", 150},
                       Key{kBlocked, "blocked on communication (measured)", 0}}) {
    s += str("<rect x=\"", x, "\" y=\"", legend - 8, "\" width=\"10\" height=\"10\" fill=\"",
             k.fill, "\"/><text x=\"", x + 14, "\" y=\"", legend, "\">", k.name, "</text>\n");
    x += k.advance;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace tandem::tools
