// tools/train/report.cpp — the HTML page. Per-epoch figures are rebuilt from the log records
// alone (so a resumed run's report covers the whole run): a train record holds the mean over the
// steps since the previous one, so an epoch's mean weights each record by the steps it covers.
#include <tandem/core/check.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "report.h"
#include "svg_chart.h"

namespace tandem::tools {
namespace {

constexpr char kTrainColor[] = "#1f77b4", kEvalColor[] = "#e6550d";

struct EpochRow {
  int64_t step = 0;
  double steps = 0, loss = 0, acc = 0, inverse_rate = 0, lr = 0;  // train, step-weighted sums
  bool has_eval = false;
  double eval_loss = 0, eval_acc = 0;
  // Images/s over the epoch: the step-weighted harmonic mean of the intervals' rates.
  double rate() const { return inverse_rate > 0 ? steps / inverse_rate : 0; }
};

std::map<int64_t, EpochRow> epoch_rows(const std::vector<MetricRecord>& records) {
  std::map<int64_t, EpochRow> rows;
  int64_t previous_step = 0;
  for (const MetricRecord& r : records) {
    EpochRow& row = rows[r.epoch];
    if (r.split == "eval") {
      row.has_eval = true, row.eval_loss = r.loss, row.eval_acc = r.acc, row.step = r.step;
      continue;
    }
    const double w = double(std::max<int64_t>(1, r.step - previous_step));
    previous_step = r.step;
    row.steps += w, row.loss += w * r.loss, row.acc += w * r.acc, row.lr = r.lr;
    if (r.samples_per_s > 0) row.inverse_rate += w / r.samples_per_s;
    row.step = std::max(row.step, r.step);
  }
  return rows;
}

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string general(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string key_value_table(const std::vector<std::pair<std::string, std::string>>& rows) {
  std::string s = "<table class=\"kv\">\n";
  for (const auto& [k, v] : rows)
    s += "<tr><th>" + html_escape(k) + "</th><td>" + html_escape(v) + "</td></tr>\n";
  return s + "</table>\n";
}

const char kStyle[] = R"(<style>
body { font-family: sans-serif; color: #222; margin: 24px auto; max-width: 1180px; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 17px; margin: 26px 0 10px; }
.headline { font-size: 18px; margin: 4px 0 18px; }
.meta { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }
table { border-collapse: collapse; font-size: 13px; }
.kv th { text-align: left; font-weight: normal; color: #666; padding: 2px 14px 2px 0; }
.kv td { padding: 2px 0; font-family: monospace; }
.charts { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.charts svg { width: 100%; height: auto; border: 1px solid #ddd; border-radius: 6px; }
.epochs th, .epochs td { padding: 4px 12px; border-bottom: 1px solid #e3e3e3; text-align: right; }
.epochs th { background: #f5f5f5; }
.foot { color: #777; font-size: 12px; margin-top: 24px; }
</style>
)";

// The image classifiers' charts and per-epoch table.
std::string classifier_sections(const ReportInfo& info, const std::vector<MetricRecord>& records) {
  const std::map<int64_t, EpochRow> rows = epoch_rows(records);
  const std::string eval = info.eval_name;

  ChartSeries train_loss{"train", kTrainColor, {}, false}, eval_loss{eval, kEvalColor, {}, true};
  ChartSeries lr{"lr", kTrainColor, {}, false};
  for (const MetricRecord& r : records) {
    if (r.split == "train") {
      train_loss.points.emplace_back(double(r.step), r.loss);
      lr.points.emplace_back(double(r.step), r.lr);
    } else {
      eval_loss.points.emplace_back(double(r.step), r.loss);
    }
  }
  ChartSeries train_acc{"train", kTrainColor, {}, true}, eval_acc{eval, kEvalColor, {}, true};
  ChartSeries rate{"train", kTrainColor, {}, true};
  for (const auto& [epoch, row] : rows) {
    if (row.steps > 0) {
      train_acc.points.emplace_back(double(epoch), 100 * row.acc / row.steps);
      rate.points.emplace_back(double(epoch), row.rate());
    }
    if (row.has_eval) eval_acc.points.emplace_back(double(epoch), 100 * row.eval_acc);
  }
  std::string s = "<h2>Charts</h2>\n<div class=\"charts\">\n";
  s += svg_line_chart({.title = "Loss (log scale)",
                       .x_label = "step",
                       .y_label = "cross-entropy",
                       .series = {train_loss, eval_loss},
                       .log_y = true});
  s += svg_line_chart({.title = "Accuracy",
                       .x_label = "epoch",
                       .y_label = "accuracy",
                       .series = {train_acc, eval_acc},
                       .integer_x = true,
                       .y_suffix = "%"});
  s += svg_line_chart(
      {.title = "Learning rate", .x_label = "step", .y_label = "lr", .series = {lr}});
  s += svg_line_chart({.title = "Training throughput",
                       .x_label = "epoch",
                       .y_label = "images / s",
                       .series = {rate},
                       .integer_x = true,
                       .y_from_zero = true});
  s += "</div>\n<h2>Per epoch</h2>\n<table class=\"epochs\">\n<tr><th>epoch</th><th>step</th>"
       "<th>train loss</th><th>train acc</th><th>" +
       html_escape(eval) + " loss</th><th>" + html_escape(eval) +
       " acc</th><th>images/s</th><th>lr (end)</th></tr>\n";
  for (const auto& [epoch, row] : rows) {
    const bool t = row.steps > 0;
    s += "<tr><td>" + std::to_string(epoch) + "</td><td>" + std::to_string(row.step) + "</td><td>" +
         (t ? fixed(row.loss / row.steps, 4) : "") + "</td><td>" +
         (t ? fixed(100 * row.acc / row.steps, 2) + "%" : "") + "</td><td>" +
         (row.has_eval ? fixed(row.eval_loss, 4) : "") + "</td><td>" +
         (row.has_eval ? fixed(100 * row.eval_acc, 2) + "%" : "") + "</td><td>" +
         (t ? fixed(row.rate(), 0) : "") + "</td><td>" + (t ? general(row.lr) : "") +
         "</td></tr>\n";
  }
  return s + "</table>\n";
}

// A language model's: the training loss as it ran and the two estimates (over fixed training and
// validation batches) at each evaluation, the lr, tokens/s, and a table of the evaluations.
std::string language_model_sections(const std::vector<MetricRecord>& records) {
  ChartSeries train{"train (running)", kTrainColor, {}, false};
  ChartSeries est_train{"train", "#2ca02c", {}, true}, val{"validation", kEvalColor, {}, true};
  ChartSeries lr{"lr", kTrainColor, {}, false}, rate{"train", kTrainColor, {}, false};
  std::map<int64_t, std::pair<double, double>> evals;  // step -> (train, validation) estimates
  for (const MetricRecord& r : records) {
    if (r.split == "train") {
      train.points.emplace_back(double(r.step), r.loss);
      lr.points.emplace_back(double(r.step), r.lr);
      rate.points.emplace_back(double(r.step), r.samples_per_s);
    } else if (r.split == "eval_train") {
      est_train.points.emplace_back(double(r.step), r.loss);
      evals[r.step].first = r.loss;
    } else if (r.split == "eval") {
      val.points.emplace_back(double(r.step), r.loss);
      evals[r.step].second = r.loss;
    }
  }
  std::string s = "<h2>Charts</h2>\n<div class=\"charts\">\n";
  s += svg_line_chart({.title = "Loss",
                       .x_label = "iteration",
                       .y_label = "cross-entropy",
                       .series = {train, est_train, val}});
  s += svg_line_chart(
      {.title = "Learning rate", .x_label = "iteration", .y_label = "lr", .series = {lr}});
  s += svg_line_chart({.title = "Training throughput",
                       .x_label = "iteration",
                       .y_label = "tokens / s",
                       .series = {rate},
                       .y_from_zero = true});
  s += "</div>\n<h2>Evaluations</h2>\n<table class=\"epochs\">\n<tr><th>iteration</th>"
       "<th>train loss</th><th>validation loss</th></tr>\n";
  for (const auto& [step, losses] : evals)
    s += "<tr><td>" + std::to_string(step) + "</td><td>" + fixed(losses.first, 4) + "</td><td>" +
         fixed(losses.second, 4) + "</td></tr>\n";
  return s + "</table>\n";
}

}  // namespace

std::string render_report(const ReportInfo& info, const std::vector<MetricRecord>& records) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  s += "<title>tandem train: " + html_escape(info.title) + "</title>\n" + kStyle +
       "</head>\n<body>\n";
  s += "<h1>tandem train: " + html_escape(info.title) + "</h1>\n";
  s += "<p class=\"headline\">" + html_escape(info.headline) + "</p>\n";
  s += "<div class=\"meta\">\n" + key_value_table(info.run);
  const size_t half = (info.config.size() + 1) / 2;  // the flags in two short columns
  s += key_value_table({info.config.begin(), info.config.begin() + std::ptrdiff_t(half)});
  s += key_value_table({info.config.begin() + std::ptrdiff_t(half), info.config.end()});
  s += "</div>\n";
  s += info.language_model ? language_model_sections(records) : classifier_sections(info, records);
  for (const ReportSection& section : info.sections) {
    s += "<h2>" + html_escape(section.heading) + "</h2>\n<div class=\"charts\">\n";
    for (const std::string& svg : section.svgs) s += svg + "\n";
    s += "</div>\n<p>" + html_escape(section.note) + "</p>\n";
  }
  s += "<p class=\"foot\">Written by <code>tandem train</code>. Every logged line is in "
       "<code>metrics.jsonl</code> beside this file (one JSON object per line).</p>\n";
  return s + "</body>\n</html>\n";
}

void write_report(const std::string& path, const ReportInfo& info,
                  const std::vector<MetricRecord>& records) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::out | std::ios::trunc);
    out << render_report(info, records);
    out.flush();
    TD_CHECK_AS(DataError, out.good(), "train: cannot write the report ", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // atomic on POSIX: readers see old or new
  TD_CHECK_AS(DataError, !ec, "train: cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace tandem::tools
