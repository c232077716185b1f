// tools/train/svg_chart.cpp — the chart: choose axis ranges and ticks, map data to the plot
// rectangle, emit SVG. Tick steps follow the usual 1-2-5 rule so labels read as round numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "svg_chart.h"

namespace tandem::tools {
namespace {

constexpr double kWidth = 560, kHeight = 320;
constexpr double kLeft = 66, kRight = 18, kTop = 40, kBottom = 50;  // margins around the plot
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

struct Axis {
  double lo = 0, hi = 1;  // data range shown (for a log axis: the values, not their logs)
  std::vector<double> ticks;
  bool log = false;
  double frac(double v) const {  // 0 at lo, 1 at hi
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
};

double nice_step(double range, int target) {
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * magnitude;
}

// Ticks every nice step; the axis starts at a tick, and ends at one too unless `tight_hi` (an x
// axis that ends where the data does, rather than leaving an empty band after the last step).
Axis linear_axis(double lo, double hi, int target, bool integer, bool tight_hi) {
  if (!(hi > lo)) {  // one value (or none): show a band around it
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= integer ? 1 : pad;
    hi += integer ? 1 : pad;
  }
  double step = nice_step(hi - lo, target);
  if (integer) step = std::max(1.0, std::round(step));
  Axis a;
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = tight_hi ? hi : std::ceil(hi / step - 1e-9) * step;
  for (double t = a.lo; t <= a.hi + step * 1e-6; t += step)
    a.ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return a;
}

Axis log_axis(double lo, double hi) {
  Axis a;
  a.log = true;
  double e0 = std::floor(std::log10(lo) + 1e-9), e1 = std::ceil(std::log10(hi) - 1e-9);
  if (e1 <= e0) e1 = e0 + 1;
  a.lo = std::pow(10.0, e0);
  a.hi = std::pow(10.0, e1);
  for (double e = e0; e <= e1; ++e)
    for (double m : {1.0, 2.0, 5.0}) {
      // With few decades, 2× and 5× ticks keep the axis readable.
      if (m != 1 && e1 - e0 > 2) continue;
      const double t = m * std::pow(10.0, e);
      if (t <= a.hi * (1 + 1e-9)) a.ticks.push_back(t);
    }
  return a;
}

std::string tick_label(double v) {
  char buf[32];
  if (v == 0)
    return "0";
  else if (std::abs(v) >= 1000)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string svg_line_chart(const ChartSpec& spec) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double x0 = inf, x1 = -inf, y0 = inf, y1 = -inf;
  for (const ChartSeries& s : spec.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || (spec.log_y && y <= 0)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  const bool empty = x0 > x1;
  if (empty) x0 = 0, x1 = 1, y0 = spec.log_y ? 0.1 : 0, y1 = 1;
  if (spec.y_from_zero && !spec.log_y) y0 = std::min(y0, 0.0);
  const Axis xa = linear_axis(x0, x1, 6, spec.integer_x, /*tight_hi=*/!empty);
  const Axis ya = spec.log_y ? log_axis(y0, y1) : linear_axis(y0, y1, 5, false, false);
  auto px = [&](double x) { return kLeft + xa.frac(x) * kPlotW; };
  auto py = [&](double y) { return kTop + (1 - ya.frac(y)) * kPlotH; };

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + svg_number(kWidth) +
                  " " + svg_number(kHeight) + "\" role=\"img\" aria-label=\"" +
                  html_escape(spec.title) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  s += "<text x=\"" + svg_number(kLeft) + "\" y=\"22\" font-size=\"14\" font-weight=\"bold\">" +
       html_escape(spec.title) + "</text>\n";
  // Grid and tick labels.
  for (double t : ya.ticks) {
    const std::string y = svg_number(py(t));
    s += "<line x1=\"" + svg_number(kLeft) + "\" x2=\"" + svg_number(kLeft + kPlotW) + "\" y1=\"" +
         y + "\" y2=\"" + y + "\" stroke=\"#e5e5e5\"/>\n";
    s += "<text x=\"" + svg_number(kLeft - 6) + "\" y=\"" + svg_number(py(t) + 4) +
         "\" text-anchor=\"end\" fill=\"#444\">" + tick_label(t) + html_escape(spec.y_suffix) +
         "</text>\n";
  }
  for (double t : xa.ticks) {
    const std::string x = svg_number(px(t));
    s += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + svg_number(kTop) + "\" y2=\"" +
         svg_number(kTop + kPlotH) + "\" stroke=\"#f0f0f0\"/>\n";
    s += "<text x=\"" + x + "\" y=\"" + svg_number(kTop + kPlotH + 16) +
         "\" text-anchor=\"middle\" fill=\"#444\">" + tick_label(t) + "</text>\n";
  }
  // Axes and their labels.
  s += "<path d=\"M" + svg_number(kLeft) + " " + svg_number(kTop) + " V" +
       svg_number(kTop + kPlotH) + " H" + svg_number(kLeft + kPlotW) +
       "\" fill=\"none\" stroke=\"#333\"/>\n";
  s += "<text x=\"" + svg_number(kLeft + kPlotW / 2) + "\" y=\"" + svg_number(kHeight - 10) +
       "\" text-anchor=\"middle\">" + html_escape(spec.x_label) + "</text>\n";
  s += "<text transform=\"translate(16 " + svg_number(kTop + kPlotH / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + html_escape(spec.y_label) + "</text>\n";
  if (empty)
    s += "<text x=\"" + svg_number(kLeft + kPlotW / 2) + "\" y=\"" + svg_number(kTop + kPlotH / 2) +
         "\" text-anchor=\"middle\" fill=\"#888\">no data yet</text>\n";

  // Series, then a legend in the title row, right-aligned, so it never covers data.
  double legend_width = 0;
  for (const ChartSeries& series : spec.series)
    legend_width += 34 + 6.5 * double(series.label.size());
  double lx = kLeft + kPlotW - legend_width;
  for (const ChartSeries& series : spec.series) {
    std::string points;
    for (const auto& [x, y] : series.points) {
      if (!std::isfinite(x) || !std::isfinite(y) || (spec.log_y && y <= 0)) continue;
      points += svg_number(px(x)) + "," + svg_number(py(y)) + " ";
      if (series.markers)
        s += "<circle cx=\"" + svg_number(px(x)) + "\" cy=\"" + svg_number(py(y)) +
             "\" r=\"3\" fill=\"" + series.color + "\"/>\n";
    }
    s += "<polyline fill=\"none\" stroke=\"" + series.color +
         "\" stroke-width=\"1.8\" stroke-linejoin=\"round\" points=\"" + points + "\"/>\n";
    if (spec.series.size() > 1) {
      s += "<line x1=\"" + svg_number(lx) + "\" x2=\"" + svg_number(lx + 18) +
           "\" y1=\"18\" y2=\"18\" stroke=\"" + series.color + "\" stroke-width=\"2.5\"/>\n";
      s += "<text x=\"" + svg_number(lx + 24) + "\" y=\"22\" fill=\"#333\">" +
           html_escape(series.label) + "</text>\n";
      lx += 34 + 6.5 * double(series.label.size());
    }
  }
  return s + "</svg>\n";
}

std::string svg_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace tandem::tools
