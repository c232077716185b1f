// Stale temporaries (issue 55): a save killed part way leaves `<path>.tmp.<pid>` (or, for tandem
// train's pair, `<path>.next.tmp.<pid>`) that nothing removed, a whole checkpoint each. The next
// save of the file, or a resume calling remove_stale_temporaries, removes those of dead writers
// and never one of a live writer: this process, or another that may be writing now.
#include <tandem/core/serialize/atomic_file.h>
#include <tandem/core/serialize/safetensors.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fstream>

#include <sys/wait.h>
#include <unistd.h>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::ScratchDir;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

namespace {

// The pid of a process that has exited and been reaped: what a killed writer's pid becomes.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A child that lives until the object is destroyed: a writer in another process, still running.
class LiveProcess {
 public:
  LiveProcess() {
    if (::pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
    pid_ = ::fork();
    if (pid_ == 0) {  // waits for the parent to close its end, then exits
      ::close(fds_[1]);
      char c;
      while (::read(fds_[0], &c, 1) < 0 && errno == EINTR) {
      }
      ::_exit(0);
    }
    ::close(fds_[0]);
  }
  ~LiveProcess() {
    ::close(fds_[1]);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  int fds_[2] = {-1, -1};
  pid_t pid_ = -1;
};

void touch(const std::string& path, size_t bytes = 16) {
  std::ofstream(path, std::ios::binary) << std::string(bytes, 'x');
}

std::string temp_of(const std::string& path, pid_t pid) {
  return path + ".tmp." + std::to_string(pid);
}

}  // namespace

TEST(StaleTemporaries, ASaveRemovesThoseOfDeadWritersAndKeepsThoseOfLiveOnes) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  const pid_t dead = dead_pid();
  ASSERT_TRUE(::kill(dead, 0) == -1 && errno == ESRCH) << "pid " << dead << " was reused";
  const LiveProcess other;
  const std::string self = std::to_string(::getpid()), live = std::to_string(other.pid());
  // Dead writers of the file itself and of tandem train's model.safetensors.next.
  touch(temp_of(path, dead), 1 << 20);
  touch(temp_of(path + ".next", dead));
  touch(temp_of(path, dead) + ".3");  // data/file_io's naming: a counter after the pid
  // Live writers: another process, and this one (another thread writing the .next file).
  touch(temp_of(path, other.pid()));
  touch(temp_of(path + ".next", ::getpid()));
  // Not temporaries of this file, or not a pid: never touched.
  touch(temp_of(dir.file("optimizer.safetensors"), dead));
  touch(temp_of(dir.file("model.safetensors2"), dead));
  touch(path + ".tmp.abc");
  touch(path + ".tmp.0");
  touch(path + ".tmp.99999999999");

  save_safetensors(path, {{"w", ones({4})}});

  EXPECT_EQ(load_safetensors(path).at("w").to_vector<double>(), std::vector<double>(4, 1.0));
  EXPECT_THAT(dir.entries(),
              UnorderedElementsAre("model.safetensors", "model.safetensors.tmp." + live,
                                   "model.safetensors.next.tmp." + self,
                                   "optimizer.safetensors.tmp." + std::to_string(dead),
                                   "model.safetensors2.tmp." + std::to_string(dead),
                                   "model.safetensors.tmp.abc", "model.safetensors.tmp.0",
                                   "model.safetensors.tmp.99999999999"));
}

// What a resume calls before it reads: the same clean-up, without a save, and it says what it
// removed. The checkpoint itself and a directory holding none are left alone.
TEST(StaleTemporaries, AResumeCanRemoveThemWithoutSaving) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", zeros({2})}});
  const pid_t dead = dead_pid();
  touch(temp_of(path + ".next", dead));
  touch(temp_of(path, ::getpid()));

  EXPECT_THAT(remove_stale_temporaries(path), ElementsAre(temp_of(path + ".next", dead)));
  EXPECT_THAT(dir.entries(), ElementsAre("model.safetensors",
                                         "model.safetensors.tmp." + std::to_string(::getpid())));
  EXPECT_THAT(remove_stale_temporaries(path), IsEmpty());
  EXPECT_THAT(remove_stale_temporaries(dir.file("no/such/dir/model.safetensors")), IsEmpty());
}

// Only plain files: a directory or a symbolic link with a temporary's name is not a writer's.
TEST(StaleTemporaries, OnlyPlainFilesAreRemoved) {
  ScratchDir dir;
  const std::string path = dir.file("model.safetensors");
  const pid_t dead = dead_pid();
  std::filesystem::create_directories(temp_of(path, dead) + "/inside");
  touch(dir.file("target"));
  std::filesystem::create_symlink(dir.file("target"), temp_of(path + ".next", dead));
  EXPECT_THAT(remove_stale_temporaries(path), IsEmpty());
  EXPECT_TRUE(std::filesystem::exists(temp_of(path, dead) + "/inside"));
  EXPECT_TRUE(std::filesystem::exists(dir.file("target")));
}
