// Atomic saves: when a save fails (write error, rename onto a directory, missing or read-only
// directory) or the process is SIGKILLed in the middle of writing a 200 MB checkpoint, the
// previous file is still there and loads with its old contents, and no temporary file is left
// behind by a failure that Tandem saw; one left by a killed process goes at the next save.
#include <tandem/core/serialize/safetensors.h>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

const NamedTensorList& old_checkpoint() {
  static const NamedTensorList tensors = {{"w", arange(0, 1000, 1, {.dtype = kFloat32})},
                                          {"step", scalar_tensor(3, {.dtype = kInt64})}};
  return tensors;
}

void expect_old_checkpoint(const std::string& path) {
  const SafetensorsFile f = load_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.at("w").shape(), (Shape{1000}));
  EXPECT_EQ(f.at("w").to_vector<double>(), old_checkpoint()[0].second.to_vector<double>());
  EXPECT_EQ(f.at("step").item<int64_t>(), 3);
}

// Limits the size of files this process may write, so that a write fails with EFBIG as it would
// on a full disk; SIGXFSZ (which would kill the process) is ignored meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace

TEST(SafetensorsAtomic, SaveReplacesTheFileAndLeavesNoTemporaryFile) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", zeros({4})}});
  save_safetensors(path, old_checkpoint());
  expect_old_checkpoint(path);
  EXPECT_THAT(dir.entries(), ElementsAre("model.safetensors"));
}

TEST(SafetensorsAtomic, FailedWriteKeepsTheOldFileAndRemovesTheTemporary) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, old_checkpoint());
  std::string msg;
  {
    FileSizeLimit limit(64 * 1024);  // a "disk" that fills after 64 KiB
    msg = error_message<Error>([&] { save_safetensors(path, {{"big", ones({1 << 20})}}); });
  }
  EXPECT_THAT(msg, HasSubstr("save_safetensors: cannot write " + path));
  EXPECT_THAT(msg, HasSubstr("File too large"));
  expect_old_checkpoint(path);
  EXPECT_THAT(dir.entries(), ElementsAre("model.safetensors"));
}

TEST(SafetensorsAtomic, FailedRenameRemovesTheTemporary) {
  ScratchDir dir;
  // The target is a non-empty directory: everything works until rename(), which must fail.
  const std::string path = dir.file("model.safetensors");
  std::filesystem::create_directories(path + "/inside");
  const std::string msg = error_message<Error>([&] { save_safetensors(path, old_checkpoint()); });
  EXPECT_THAT(msg, HasSubstr("cannot rename the new file over " + path));
  EXPECT_TRUE(std::filesystem::is_directory(path + "/inside"));
  EXPECT_THAT(dir.entries(), ElementsAre("model.safetensors"));
}

TEST(SafetensorsAtomic, MissingDirectoryIsAnErrorNamingThePath) {
  ScratchDir dir;
  const std::string path = dir.file("no/such/dir/model.safetensors");
  const std::string msg = error_message<Error>([&] { save_safetensors(path, old_checkpoint()); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("No such file or directory"));
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsAtomic, ReadOnlyDirectoryKeepsTheOldFile) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "running as root, which ignores directory permissions (the failed-write "
                    "and failed-rename tests cover the same clean-up)";
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, old_checkpoint());
  ::chmod(dir.path().c_str(), 0555);
  const std::string msg = error_message<Error>([&] { save_safetensors(path, {{"w", ones({2})}}); });
  ::chmod(dir.path().c_str(), 0755);
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("Permission denied"));
  expect_old_checkpoint(path);
  EXPECT_THAT(dir.entries(), ElementsAre("model.safetensors"));
}

// The crash test: a child process starts saving a 200 MB checkpoint over a good one and is
// SIGKILLed as soon as its temporary file holds at least 1 MiB. The target must still be the old
// checkpoint; the killed child's temporary file is all that is left of the new one.
TEST(SafetensorsAtomic, ProcessKilledMidSaveLeavesTheOldFile) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, old_checkpoint());
  const Tensor big = full({50'000'000}, 1.5);  // 200 MB of float32, allocated before fork()

  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) {  // only async-signal-safe exits from here: never return into gtest
    try {
      save_safetensors(path, {{"w", big}});
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  const std::string temp = path + ".tmp." + std::to_string(child);
  std::error_code ec;
  uintmax_t seen = 0;
  const auto deadline = start + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    seen = std::filesystem::file_size(temp, ec);
    if (!ec && seen >= (1u << 20)) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  ::kill(child, SIGKILL);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  int status = 0;
  ::waitpid(child, &status, 0);
  const uintmax_t left = std::filesystem::file_size(temp, ec);
  std::cout << "[ crash test ] SIGKILL " << ms << " ms after fork, temporary file at "
            << (ec ? 0 : left) << " bytes (the new file would be " << big.nbytes()
            << " bytes of data plus its header)\n";

  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child finished its save before it was killed (status " << status
      << "); the test did not exercise a crash";
  expect_old_checkpoint(path);
  // The dead process could not clean up; the next save of the file removes its temporary.
  EXPECT_THAT(dir.entries(),
              ElementsAre("model.safetensors", "model.safetensors.tmp." + std::to_string(child)));
  save_safetensors(path, old_checkpoint());
  expect_old_checkpoint(path);
  EXPECT_THAT(dir.entries(), ElementsAre("model.safetensors"));
}
