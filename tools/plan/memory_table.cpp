// tools/plan/memory_table.cpp — the memory terms, aligned in columns.
#include <tandem/core/check.h>
#include <algorithm>
#include <cstdio>

#include "memory_table.h"

namespace tandem::tools {
namespace {

std::string mib_cell(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", double(bytes) / double(1 << 20));
  return buf;
}

std::string ms_cell(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", seconds * 1e3);
  return buf;
}

// The rows in aligned columns, two spaces in front of each.
std::string columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c)
      out += "  " + row[c] + std::string(width[c] - row[c].size(), ' ');
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += '\n';
  }
  return out;
}

}  // namespace

std::string memory_table(const std::vector<RankMemory>& predicted,
                         const std::vector<MemoryTerms>& measured) {
  const bool both = !measured.empty();
  std::vector<std::vector<std::string>> rows = {
      {"rank", "placed", "+ optimizer", "+ in step", "= peak (MiB)"}};
  if (both) rows[0].emplace_back("predicted / measured peak");
  if (!both) rows[0].emplace_back("on the wire per step (MB)");
  const auto cell = [&](int64_t p, size_t r, int64_t (*term)(const MemoryTerms&)) {
    return both ? mib_cell(p) + " / " + mib_cell(term(measured[r])) : mib_cell(p);
  };
  for (size_t r = 0; r < predicted.size(); ++r) {
    const MemoryTerms& t = predicted[r].terms;
    std::vector<std::string> row = {
        predicted[r].where.empty() ? std::to_string(predicted[r].rank)
                                   : str(predicted[r].rank, " (", predicted[r].where, ")"),
        cell(t.placed, r, [](const MemoryTerms& m) { return m.placed; }),
        cell(t.optimizer(), r, [](const MemoryTerms& m) { return m.optimizer(); }),
        cell(t.in_step(), r, [](const MemoryTerms& m) { return m.in_step(); }),
        cell(t.peak, r, [](const MemoryTerms& m) { return m.peak; })};
    if (!both) {
      char wire[32];
      std::snprintf(wire, sizeof wire, "%.3f", double(predicted[r].wire_bytes) / 1e6);
      row.emplace_back(wire);
    }
    if (both) {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.3f", double(t.peak) / double(measured[r].peak));
      row.emplace_back(ratio);
    }
    rows.push_back(std::move(row));
  }
  return columns(rows);
}

std::string time_table(const StepTime& time) {
  std::vector<std::vector<std::string>> rows = {
      {"rank", "compute", "communication", "idle", "step ends (ms)"}};
  for (size_t r = 0; r < time.ranks.size(); ++r) {
    const RankTime& t = time.ranks[r];
    rows.push_back({std::to_string(r), ms_cell(t.compute), ms_cell(t.communication),
                    ms_cell(t.idle), ms_cell(t.end)});
  }
  return columns(rows);
}

std::string time_table(const StepTime& time, const std::vector<MeasuredStep>& measured) {
  TD_CHECK_VALUE(measured.size() == time.ranks.size(), "time_table: ", measured.size(),
                 " ranks measured, but ", time.ranks.size(), " predicted");
  std::vector<std::vector<std::string>> rows = {
      {"rank", "compute", "waiting", "step (ms)", "predicted / measured step"}};
  const auto cell = [](double p, double m) { return ms_cell(p) + " / " + ms_cell(m); };
  for (size_t r = 0; r < measured.size(); ++r) {
    const RankTime& t = time.ranks[r];
    const MeasuredStep& m = measured[r];
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f", m.seconds > 0 ? t.end / m.seconds : 0.0);
    rows.push_back({std::to_string(r), cell(t.compute, m.seconds - m.blocked),
                    cell(t.communication + t.idle, m.blocked), cell(t.end, m.seconds), ratio});
  }
  return columns(rows);
}

}  // namespace tandem::tools
