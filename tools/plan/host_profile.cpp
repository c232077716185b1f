// tools/plan/host_profile.cpp — a host's calibration, to and from its text file.
#include <tandem/core/check.h>
#include <tandem/core/cpu_info.h>
#include <tandem/core/serialize/atomic_file.h>
#include <tandem/core/thread_pool.h>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "host_profile.h"

namespace tandem::tools {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

std::string this_machine() { return str(cpu_info().model, ", ", get_num_threads(), " threads"); }

double HostProfile::rate(int k) const {
  if (k <= 1) return 1;
  auto it = throughput.upper_bound(k);  // the measurement at k, or the nearest below it
  --it;
  return std::min(1.0, it->second / k);
}

void HostProfile::save(const std::string& path) const {
  std::string text = "# tandem plan --calibrate: this host's kernel and link times\n";
  text += "machine\t" + machine + "\n";
  for (const std::string& note : notes) text += "# " + note + "\n";
  for (const auto& [threads, fit] : compute) {
    text += "per_call\t" + std::to_string(threads) + "\t" + number(fit.per_call) + "\n";
    text += "scale\t" + std::to_string(threads) + "\t" + number(fit.scale) + "\n";
  }
  for (const auto& [k, x] : throughput)
    text += "throughput\t" + std::to_string(k) + "\t" + number(x) + "\n";
  text += "collective\t" + number(collective.latency) + "\t" + number(collective.bandwidth) + "\n";
  text += "message\t" + number(message.latency) + "\t" + number(message.bandwidth) + "\n";
  for (const auto& [signature, seconds] : kernels)
    text += "kernel\t" + number(seconds) + "\t" + signature + "\n";
  AtomicFile file(path, "plan --calibrate");
  file.write(text.data(), text.size());
  file.commit();
}

HostProfile HostProfile::load(const std::string& path) {
  std::ifstream in(path);
  TD_CHECK_VALUE(in.good(), "plan: cannot read the profile ", path,
                 " (make one with tandem plan ... --calibrate ", path, ")");
  HostProfile p;
  std::string line;
  int n = 0;
  bool machine = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key;
    std::getline(fields, key, '\t');
    auto read = [&](double& v) {
      std::string f;
      TD_CHECK_VALUE(std::getline(fields, f, '\t'), path, ":", n, ": ", key, " lacks a number");
      size_t used = 0;
      try {
        v = std::stod(f, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      TD_CHECK_VALUE(used == f.size() && used > 0 && v >= 0, path, ":", n, ": '", f,
                     "' is not a number of seconds or bytes");
    };
    if (key == "machine") {
      std::getline(fields, p.machine);
      machine = true;
    } else if (key == "per_call" || key == "scale") {
      double threads = 0, v = 0;
      read(threads);
      read(v);
      TD_CHECK_VALUE(threads >= 1 && threads == double(int(threads)), path, ":", n,
                     ": a thread count of ", threads);
      ComputeFit& fit = p.compute[int(threads)];
      (key == "per_call" ? fit.per_call : fit.scale) = v;
    } else if (key == "throughput") {
      double k = 0, x = 0;
      read(k);
      read(x);
      TD_CHECK_VALUE(k >= 1 && k == double(int(k)) && x > 0, path, ":", n, ": a throughput of ", x,
                     " for ", k, " ranks");
      p.throughput[int(k)] = x;
    } else if (key == "collective" || key == "message") {
      LinkFit& l = key == "collective" ? p.collective : p.message;
      read(l.latency);
      read(l.bandwidth);
    } else if (key == "kernel") {
      double seconds = 0;
      read(seconds);
      std::string signature;
      std::getline(fields, signature);
      TD_CHECK_VALUE(!signature.empty(), path, ":", n, ": a kernel line lacks its signature");
      p.kernels[signature] = seconds;
    } else {
      TD_CHECK_VALUE(false, path, ":", n, ": '", key,
                     "' is not a line of a tandem plan profile (is it one?)");
    }
  }
  TD_CHECK_VALUE(machine, path, " is not a tandem plan profile: it names no machine");
  return p;
}

}  // namespace tandem::tools
