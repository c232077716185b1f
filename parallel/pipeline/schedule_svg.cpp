// parallel/pipeline/schedule_svg.cpp — boxes on rows, in plain SVG.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule_svg.h>
#include <algorithm>
#include <cstdio>

namespace tandem::parallel {
namespace {

using A = PipelineAction;

const char* fill(A::Kind kind) {
  switch (kind) {
    case A::Forward:
      return "#4e79a7";
    case A::Backward:
      return "#59a14f";
    case A::BackwardInput:
      return "#8cd17d";
    case A::BackwardWeight:
      return "#b07aa1";
    default:
      return "none";
  }
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::vector<std::vector<TimedAction>> timelines(const Simulation& sim) {
  std::vector<std::vector<TimedAction>> out;
  for (const SimulatedRank& r : sim.ranks) out.push_back(r.timeline);
  return out;
}

std::string schedule_svg(const std::vector<std::vector<TimedAction>>& ranks,
                         const std::string& caption, int width) {
  double first = 0, last = 0;
  bool any = false;
  std::vector<bool> several(ranks.size(), false);  // rank holds more than one stage: label them
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const TimedAction& t : ranks[r]) {
      if (!t.action.is_compute()) continue;
      first = any ? std::min(first, t.start) : t.start;
      last = any ? std::max(last, t.end) : t.end;
      any = true;
      several[r] = several[r] || t.action.stage != ranks[r].front().action.stage;
    }
  const int label = 56, row = 26, top = 24;
  const double span = any && last > first ? last - first : 1;
  const double scale = double(width - label - 8) / span;
  const int height = top + row * int(ranks.size()) + 22;
  std::string s = str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"",
                      height, "\" font-family=\"sans-serif\" font-size=\"10\">\n");
  s += str("<text x=\"0\" y=\"14\" font-size=\"12\">", escape(caption), "</text>\n");
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int y = top + row * int(r);
    s += str("<text x=\"0\" y=\"", y + 16, "\">rank ", r, "</text>\n");
    s += str("<rect x=\"", label, "\" y=\"", y + 2, "\" width=\"", width - label - 8,
             "\" height=\"", row - 4, "\" fill=\"#f2f2f2\"/>\n");
    for (const TimedAction& t : ranks[r]) {
      if (!t.action.is_compute()) continue;
      const double x = label + (t.start - first) * scale,
                   w = std::max(0.5, (t.end - t.start) * scale);
      const A& a = t.action;
      s += str("<rect x=\"", num(x), "\" y=\"", y + 2, "\" width=\"", num(w), "\" height=\"",
               row - 4, "\" fill=\"", fill(a.kind),
               "\" stroke=\"white\" stroke-width=\"0.5\"><title>", escape(to_string(a)),
               "</title></rect>\n");
      if (w < 9) continue;  // too narrow for a number
      const std::string text = a.micro_batch == A::kAll ? "W*" : std::to_string(a.micro_batch);
      s += str("<text x=\"", num(x + w / 2), "\" y=\"", y + (several[r] ? 13 : 16),
               "\" text-anchor=\"middle\" fill=\"white\">", text, "</text>\n");
      if (several[r] && w >= 12)
        s +=
            str("<text x=\"", num(x + w / 2), "\" y=\"", y + 21,
                "\" text-anchor=\"middle\" fill=\"white\" font-size=\"7\">s", a.stage, "</text>\n");
    }
  }
  const int legend = top + row * int(ranks.size()) + 14;
  int x = label;
  for (const auto& [kind, name] :
       std::vector<std::pair<A::Kind, const char*>>{{A::Forward, "F forward"},
                                                    {A::Backward, "B backward"},
                                                    {A::BackwardInput, "I input grad"},
                                                    {A::BackwardWeight, "W weight grad"}}) {
    s += str("<rect x=\"", x, "\" y=\"", legend - 8, "\" width=\"10\" height=\"10\" fill=\"",
             fill(kind), "\"/><text x=\"", x + 14, "\" y=\"", legend, "\">", name, "</text>\n");
    x += 110;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace tandem::parallel
