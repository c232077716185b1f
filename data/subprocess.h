// data/subprocess.h — running an external command (npm, sha256sum, tar) for the dataset fetcher,
// with its output captured so a failure can be reported with what the command said.
#pragma once

#include <string>
#include <vector>

namespace tandem::data::detail {

struct ProcessResult {
  int exit_code = 0;   // the exit status, or 128 + the signal number if it was killed
  std::string output;  // stdout and stderr, interleaved as written
};

/// Runs argv[0] (searched on PATH) with arguments argv[1:] in directory `cwd`, stdin from
/// /dev/null, and waits for it. Error naming the program when it cannot be started (not on PATH,
/// not executable); a non-zero exit is returned, not thrown, for the caller to explain.
ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd);

/// The last `max_chars` characters of `output`, for quoting a failed command in an error.
std::string output_tail(const std::string& output, size_t max_chars = 2000);

}  // namespace tandem::data::detail
