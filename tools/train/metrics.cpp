// tools/train/metrics.cpp — the JSONL writer and reader. nlohmann/json prints doubles in their
// shortest round-trip form (0.231, not 0.23100000000000001), so the file stays readable.
#include <tandem/core/check.h>
#include <nlohmann/json.hpp>

#include "metrics.h"

namespace tandem::tools {
namespace {

nlohmann::ordered_json to_json(const MetricRecord& r) {
  // ordered_json keeps the documented key order, which people reading the file rely on.
  nlohmann::ordered_json j;
  j["time"] = r.time;
  j["epoch"] = r.epoch;
  j["step"] = r.step;
  j["split"] = r.split;
  j["loss"] = r.loss;
  j["acc"] = r.acc;
  j["lr"] = r.lr;
  j["samples_per_s"] = r.samples_per_s;
  if (r.skipped_steps >= 0) {
    j["loss_scale"] = r.loss_scale;
    j["skipped_steps"] = r.skipped_steps;
  }
  return j;
}

}  // namespace

std::vector<MetricRecord> read_metrics(const std::string& path) {
  std::vector<MetricRecord> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;  // a line cut short by a crash
    try {
      out.push_back({j.at("time").get<double>(), j.at("epoch").get<int64_t>(),
                     j.at("step").get<int64_t>(), j.at("split").get<std::string>(),
                     j.at("loss").get<double>(), j.at("acc").get<double>(),
                     j.at("lr").get<double>(), j.at("samples_per_s").get<double>(),
                     j.value("loss_scale", 0.0), j.value("skipped_steps", int64_t(-1))});
    } catch (const nlohmann::json::exception&) {
      // A record missing a field is not one of ours; skip it like a truncated line.
    }
  }
  return out;
}

MetricsLog::MetricsLog(const std::string& path, int64_t keep_through_epoch) : path_(path) {
  if (keep_through_epoch >= 0)
    for (MetricRecord& r : read_metrics(path))
      if (r.epoch <= keep_through_epoch) records_.push_back(std::move(r));
  // Rewrite the kept records, then append: the file always equals records_.
  out_.open(path, std::ios::out | std::ios::trunc);
  TD_CHECK_AS(DataError, out_.good(), "train: cannot write the metrics file ", path);
  for (const MetricRecord& r : records_) out_ << to_json(r).dump() << '\n';
  out_.flush();
}

void MetricsLog::write(const MetricRecord& record) {
  out_ << to_json(record).dump() << '\n';
  out_.flush();  // per line: a crash loses at most the line being written
  TD_CHECK_AS(DataError, out_.good(), "train: writing the metrics file ", path_, " failed");
  records_.push_back(record);
}

}  // namespace tandem::tools
