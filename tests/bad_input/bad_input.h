// tests/bad_input/bad_input.h — the bad-input table's row type and what its rows share. Each row
// is one bad input and what a user gets back: the error (its type, or the command's exit code)
// and the words the message must contain (the file, tensor, shape, rank, step or port it is
// about). Where a file was being written, the row also checks that nothing was lost. The rows are
// in files_test.cpp (formats and datasets), training_test.cpp (`tandem train`) and
// distributed_test.cpp (launcher, store, ranks).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <tandem/tandem.h>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "data/temp_dir.h"

namespace tandem::bad_input {

using testing::TempDir;

/// What came back: an exception's type name and message, or a command's exit code and output.
struct Outcome {
  std::string error;  // "DataError", ...; "exit N" for a command; "none" when nothing failed
  std::string message;
};

struct Row {
  const char* name;                            // gtest's name for the row
  std::function<Outcome(const TempDir&)> run;  // makes the bad input and feeds it
  std::string error;                           // the expected Outcome::error
  std::vector<std::string> says;               // substrings of the message ({dir}: the dir)
  std::function<void(const TempDir&)> nothing_lost = nullptr;  // checks after the failure
};

/// Runs `fn`, catching what it throws as the nearest Tandem error type.
inline Outcome thrown(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return {"DataError", e.what()};
  } catch (const ShapeError& e) {
    return {"ShapeError", e.what()};
  } catch (const IndexError& e) {
    return {"IndexError", e.what()};
  } catch (const ValueError& e) {
    return {"ValueError", e.what()};
  } catch (const DistributedError& e) {
    return {"DistributedError", e.what()};
  } catch (const Error& e) {
    return {"Error", e.what()};
  }
  return {"none", ""};
}

/// Runs `tandem <args>` (the built command), its output captured in dir/cli.log.
inline Outcome tandem_cli(const TempDir& dir, const std::string& args) {
  const std::string log = dir.file("cli.log");
  // TANDEM_CLI_PATH overrides the build's path: tools/gpu-check.sh runs these from a bundle.
  const char* path = std::getenv("TANDEM_CLI_PATH");
  const std::string cmd =
      std::string(path != nullptr ? path : TANDEM_CLI) + " " + args + " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return {"exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1),
          testing::read_bytes(log)};
}

/// A tiny MNIST-format dataset (IDX, raw) in `dir`: n train and n test images of 28×28.
inline void write_dataset(const std::string& dir, int64_t n, int64_t labels = -1) {
  data::IdxImages images{.count = n, .rows = 28, .cols = 28, .pixels = {}};
  images.pixels.resize(size_t(n * 28 * 28));
  for (size_t i = 0; i < images.pixels.size(); ++i) images.pixels[i] = uint8_t(i * 7 % 251);
  std::vector<int64_t> y(size_t(labels < 0 ? n : labels));
  for (size_t i = 0; i < y.size(); ++i) y[i] = int64_t(i % 10);
  for (const char* split : {"train", "t10k"}) {
    data::write_idx_images(dir + "/" + split + "-images-idx3-ubyte", images);
    data::write_idx_labels(dir + "/" + split + "-labels-idx1-ubyte", y);
  }
}

/// Checks one row: the outcome, its message, and that nothing was lost.
inline void check(const Row& row) {
  TempDir dir;
  const Outcome got = row.run(dir);
  EXPECT_EQ(got.error, row.error) << got.message;
  for (std::string want : row.says) {
    if (const size_t at = want.find("{dir}"); at != std::string::npos)
      want.replace(at, 5, dir.str());
    EXPECT_THAT(got.message, ::testing::HasSubstr(want));
  }
  if (row.nothing_lost) row.nothing_lost(dir);
}

/// How gtest prints a row (its name, not its bytes).
inline void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

/// gtest's name for a row.
inline std::string row_name(const ::testing::TestParamInfo<Row>& info) { return info.param.name; }

}  // namespace tandem::bad_input
