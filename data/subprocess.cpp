// data/subprocess.cpp — posix_spawnp with a pipe for stdout and stderr. posix_spawn (not fork)
// because the caller may have worker threads: a forked child of a threaded process may only call
// async-signal-safe functions, and posix_spawn does the chdir and dup2s for us safely. The pipe's
// descriptors are close-on-exec, so other commands spawned concurrently do not inherit them.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <tandem/core/check.h>
#include <tandem/data/subprocess.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

extern char** environ;

namespace tandem::data::detail {
namespace {

// Owns the spawn attributes so every exit path releases them.
struct FileActions {
  posix_spawn_file_actions_t actions;
  FileActions() { posix_spawn_file_actions_init(&actions); }
  ~FileActions() { posix_spawn_file_actions_destroy(&actions); }
};

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, const std::string& cwd) {
  TD_CHECK_VALUE(!argv.empty(), "run_process: no command given");
  int fds[2];
  TD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "run_process: pipe failed: ", std::strerror(errno));
  FileActions fa;
  posix_spawn_file_actions_addchdir_np(&fa.actions, cwd.c_str());
  posix_spawn_file_actions_addopen(&fa.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa.actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa.actions, fds[1], 2);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &fa.actions, nullptr, args.data(), environ);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    TD_CHECK(rc != ENOENT, "cannot run `", argv[0], "`: not found on PATH");
    tandem::detail::fail<Error>("cannot run `", argv[0], "` in ", cwd, ": ", std::strerror(rc));
  }

  ProcessResult result;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      result.output.append(buf, size_t(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string output_tail(const std::string& output, size_t max_chars) {
  if (output.size() <= max_chars) return output;
  return "..." + output.substr(output.size() - max_chars);
}

}  // namespace tandem::data::detail
