// tools/train/metrics.h — <log-dir>/metrics.jsonl: one JSON object per log line of a training
// run (reference §4.6), flushed as it is written so a crash keeps everything logged so far:
//   {"time":1717171717.25,"epoch":1,"step":450,"split":"train","loss":0.231,"acc":0.912,
//    "lr":0.00195,"samples_per_s":1234.5}
// and with --amp fp16 also "loss_scale":32768,"skipped_steps":3 on train records.
// The records are also kept in memory for the HTML report.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace tandem::tools {

struct MetricRecord {
  double time = 0;           // Unix time, seconds
  int64_t epoch = 0;         // 1-based
  int64_t step = 0;          // optimizer steps since the run began (global)
  std::string split;         // "train" (mean over the steps since the last line) or "eval"
  double loss = 0;           // mean cross-entropy
  double acc = 0;            // fraction correct, 0–1
  double lr = 0;             // lr after the last step (PyTorch's get_last_lr())
  double samples_per_s = 0;  // train: images/s over the interval; eval: evaluation images/s
  // --amp fp16 only (train records): the gradient scaler's scale after the interval, and the
  // steps it skipped (inf/NaN gradients) since the run began. 0 and -1 otherwise (not written).
  double loss_scale = 0;
  int64_t skipped_steps = -1;
};

class MetricsLog {
 public:
  /// Starts `path` afresh, or — for a resumed run, keep_through_epoch >= 0 — keeps the records
  /// of epochs up to keep_through_epoch from the file already there and drops later ones (the
  /// part of an epoch that ran after the last checkpoint). DataError naming the path when it
  /// cannot be written.
  explicit MetricsLog(const std::string& path, int64_t keep_through_epoch = -1);

  /// Appends one record as a JSON line and flushes it.
  void write(const MetricRecord& record);
  const std::vector<MetricRecord>& records() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ofstream out_;
  std::vector<MetricRecord> records_;
};

/// The records in a metrics.jsonl file; lines that do not parse (a line cut short by a crash)
/// are skipped. Empty when the file does not exist.
std::vector<MetricRecord> read_metrics(const std::string& path);

}  // namespace tandem::tools
