// tools/train/svg_chart.h — a line chart as inline SVG, for the self-contained training report:
// axes with "nice" tick values (1, 2, 5 × 10^k, or powers of ten on a log axis), labels, a legend,
// one polyline per series. Plain SVG 1.1 text, no JavaScript, no fonts to fetch.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tandem::tools {

struct ChartSeries {
  std::string label;
  std::string color;                              // any CSS color
  std::vector<std::pair<double, double>> points;  // (x, y), in x order
  bool markers = false;                           // a dot on each point (few, sparse points)
};

struct ChartSpec {
  std::string title, x_label, y_label;
  std::vector<ChartSeries> series;
  bool log_y = false;        // a log10 y axis (losses span decades); y values must be > 0
  bool integer_x = false;    // x ticks at whole numbers only (epochs)
  bool y_from_zero = false;  // start the y axis at 0 (rates: no exaggerated dips)
  std::string y_suffix;      // appended to y tick labels ("%")
};

/// The chart as an <svg> element sized 560 × 320 (it scales with its container). With no points
/// at all it shows the axes frame and "no data yet".
std::string svg_line_chart(const ChartSpec& spec);

/// `text` with &, <, >, " escaped for HTML and SVG.
std::string html_escape(const std::string& text);

/// `v` with one decimal, as the charts write coordinates.
std::string svg_number(double v);

}  // namespace tandem::tools
