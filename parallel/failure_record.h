// parallel/failure_record.h — how a failed worker tells the supervisor that its failure was a
// consequence of another rank's. When rank 1 exits with an error, rank 0 sees its peer gone a few
// milliseconds later and fails too; the supervisor may reap both in one pass, and the first it
// reaps is not necessarily the first that failed. Like torchrun's TORCHELASTIC_ERROR_FILE, the
// supervisor gives each worker a file (TANDEM_ERROR_FILE); the library writes "peer_rank R" there
// when it gives up because rank R died, failed or went silent, and the supervisor names as the
// root cause the first failure that is not explained by another failed rank.
#pragma once

#include <optional>
#include <string>

namespace tandem::parallel::detail {

inline constexpr const char* kErrorFileEnv = "TANDEM_ERROR_FILE";

/// Records, in the file TANDEM_ERROR_FILE names (if it is set), that this process gives up
/// because of `peer_rank`. Only the first record counts; errors writing it are ignored (the
/// record only sharpens a report).
void record_peer_failure(int peer_rank);

/// The peer a worker's error file names, if the file exists and says so.
std::optional<int> read_peer_failure(const std::string& path);

/// Records, beside that file (its path + ".exit"), that this process is about to exit with
/// `exit_code` of its own accord. When two ranks fail the same check, the supervisor stops the
/// second with SIGTERM as soon as it reaps the first, and the second may be killed while it
/// exits: its record keeps the report from calling its own error "stopped by signal 15".
void record_own_exit(int exit_code);

/// The exit code a worker recorded for itself, if it did.
std::optional<int> read_own_exit(const std::string& error_file);

}  // namespace tandem::parallel::detail
