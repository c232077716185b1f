// parallel/supervisor.cpp — fork, pipes and a poll loop. The loop reads every worker's output
// pipes (writing whole lines with the rank prefix), reaps exited workers with waitpid(WNOHANG),
// forwards signals that arrived through a self-pipe, and enforces the kill grace period. Workers
// get PR_SET_PDEATHSIG, so they die with a supervisor that is SIGKILLed, and a process group
// each, so a stop reaches everything they started. The root cause named at the end is the first
// failure not explained by another failed rank (parallel/failure_record.h).
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <tandem/core/check.h>
#include <tandem/parallel/failure_record.h>
#include <tandem/parallel/supervisor.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>

namespace tandem::parallel::detail {
namespace {

using Clock = std::chrono::steady_clock;

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const char c = char(sig);
  [[maybe_unused]] ssize_t w = ::write(g_signal_pipe[1], &c, 1);
}

struct Stream {
  int fd = -1;
  int out_fd = 1;  // where its lines go: 1 or 2
  std::string partial;
};

struct Child {
  WorkerSpec spec;
  pid_t pid = 0;
  bool running = true;
  int status = 0;
  Stream out, err;
  std::string error_file;       // TANDEM_ERROR_FILE: "peer_rank R" when it failed because of R
  std::optional<int> own_exit;  // the exit code it recorded before a SIGTERM caught it exiting
  int failed_order = -1;        // 0 for the first failure the supervisor reaped, 1 for the next...
  bool stopped_by_us = false;   // reaped after the stop, killed by SIGTERM/SIGKILL
  std::string failed_time;
};

void emit(const std::string& prefix, Stream& s, const char* data, size_t n, bool flush) {
  s.partial.append(data, n);
  std::string lines;
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    lines += prefix + s.partial.substr(start, nl + 1 - start);
  s.partial.erase(0, start);
  if (flush && !s.partial.empty()) {
    lines += prefix + s.partial + "\n";
    s.partial.clear();
  }
  for (size_t off = 0; off < lines.size();) {
    const ssize_t k = ::write(s.out_fd, lines.data() + off, lines.size() - off);
    if (k <= 0 && errno != EINTR) break;
    if (k > 0) off += size_t(k);
  }
}

std::string now_string() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

[[noreturn]] void child_main(const WorkerSpec& spec, int out_w, int err_w, pid_t parent) {
  // Its own process group, so stopping a worker also stops what it started (a shell script's
  // children); terminal signals reach the supervisor, which forwards them.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::_exit(1);  // the supervisor died before prctl
  // Default signal handling again (the supervisor's handlers only write to its pipe).
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, SIG_DFL);
  ::dup2(out_w, 1);
  ::dup2(err_w, 2);
  for (const auto& [k, v] : spec.env) ::setenv(k.c_str(), v.c_str(), 1);
  int code = 1;
  try {
    code = spec.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "unknown exception\n");
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);  // no atexit handlers or static destructors of the parent's copy
}

// A private directory for the workers' error files, removed at the end; none (and no files) when
// /tmp is not writable: the report then names the first failure reaped.
std::string make_error_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/tandem-errors-XXXXXX";
  return ::mkdtemp(templ.data()) != nullptr ? templ : std::string();
}

// The root cause: among the failures in the order they were reaped, the first that neither the
// supervisor's own stop caused nor the worker blamed on another failed rank. A rank blamed by the
// others but stopped by the supervisor (it froze; they saw no heartbeat) is named too: it is
// the cause, even though a signal ended it.
const Child* root_cause(const std::vector<Child>& children) {
  std::vector<const Child*> failed;
  for (const Child& c : children)
    if (c.failed_order >= 0) failed.push_back(&c);
  std::sort(failed.begin(), failed.end(),
            [](const Child* a, const Child* b) { return a->failed_order < b->failed_order; });
  auto failed_rank = [&](int rank) -> const Child* {
    for (const Child* c : failed)
      if (c->spec.rank == rank) return c;
    return nullptr;
  };
  auto blamed = [&](const Child* c) -> const Child* {
    const std::optional<int> peer =
        c->error_file.empty() ? std::nullopt : read_peer_failure(c->error_file);
    return peer && *peer != c->spec.rank ? failed_rank(*peer) : nullptr;
  };
  for (const Child* c : failed) {
    if (c->stopped_by_us) continue;
    // Follow the blame (rank 2 blames 0, which blamed 1) to a rank that blames no failed rank;
    // a cycle ends after as many steps as there are failures.
    for (size_t steps = 0; steps < failed.size(); ++steps) {
      const Child* cause = blamed(c);
      if (cause == nullptr) break;
      c = cause;
    }
    return c;
  }
  return failed.empty() ? nullptr : failed.front();
}

}  // namespace

SupervisorResult supervise(const std::vector<WorkerSpec>& workers,
                           const SupervisorOptions& options) {
  TD_CHECK_VALUE(!workers.empty(), "supervise: no workers to run");
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);  // or buffered output would be written again by every child
  TD_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "supervise: cannot create a pipe");
  struct sigaction sa {
  }, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGHUP, &sa, &old_hup);

  std::vector<Child> children(workers.size());
  const pid_t self = ::getpid();
  const std::string error_dir = make_error_dir();
  for (size_t i = 0; i < workers.size(); ++i) {
    Child& c = children[i];
    c.spec = workers[i];
    if (!error_dir.empty()) {
      c.error_file = error_dir + "/rank" + std::to_string(c.spec.rank);
      c.spec.env.emplace_back(kErrorFileEnv, c.error_file);
    }
    int out[2], err[2];
    TD_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0,
             "supervise: cannot create pipes for rank ", c.spec.rank);
    c.pid = ::fork();
    TD_CHECK(c.pid >= 0, "supervise: fork failed for rank ", c.spec.rank, ": ",
             std::strerror(errno));
    if (c.pid == 0) child_main(c.spec, out[1], err[1], self);
    ::setpgid(c.pid, c.pid);  // also here: no race with the first kill(-pid)
    ::close(out[1]);
    ::close(err[1]);
    c.out = {out[0], 1, ""};
    c.err = {err[0], 2, ""};
  }

  SupervisorResult result;
  int failures = 0;
  std::optional<Clock::time_point> kill_at;  // set once a failure (or a signal) stops the job
  auto stop_all = [&](int sig) {
    for (Child& c : children) ::kill(-c.pid, sig);  // the worker's whole process group
  };
  for (;;) {
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    std::vector<Stream*> streams;
    for (Child& c : children)
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
        }
    bool any_running = false;
    for (const Child& c : children) any_running = any_running || c.running;
    if (!any_running && streams.empty()) break;
    ::poll(fds.data(), fds.size(), 50);
    if (fds[0].revents & POLLIN) {
      char sig = 0;
      while (::read(g_signal_pipe[0], &sig, 1) == 1) {
        stop_all(sig);  // forward; the workers decide how to stop
        if (!kill_at) kill_at = Clock::now() + options.kill_grace;
      }
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      const ssize_t k = ::read(streams[i]->fd, buf, sizeof(buf));
      Child* owner = nullptr;
      for (Child& c : children)
        if (&c.out == streams[i] || &c.err == streams[i]) owner = &c;
      const std::string prefix =
          options.prefix_output ? "[rank" + std::to_string(owner->spec.rank) + "]: " : "";
      if (k > 0) {
        emit(prefix, *streams[i], buf, size_t(k), false);
      } else if (k == 0 || errno != EINTR) {
        emit(prefix, *streams[i], nullptr, 0, true);
        ::close(streams[i]->fd);
        streams[i]->fd = -1;
      }
    }
    for (Child& c : children) {
      if (!c.running || ::waitpid(c.pid, &c.status, WNOHANG) != c.pid) continue;
      c.running = false;
      if (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) continue;
      c.failed_order = failures++;
      c.failed_time = now_string();
      c.stopped_by_us = kill_at.has_value() && WIFSIGNALED(c.status) &&
                        (WTERMSIG(c.status) == SIGTERM || WTERMSIG(c.status) == SIGKILL);
      // Killed while it exited with an error of its own (it recorded the code first): its
      // failure, not our stop.
      if (c.stopped_by_us && !c.error_file.empty())
        if (const std::optional<int> own = read_own_exit(c.error_file)) {
          c.stopped_by_us = false;
          c.own_exit = *own;
        }
      if (c.failed_order == 0 && options.stop_others_on_failure) {
        stop_all(SIGTERM);
        kill_at = Clock::now() + options.kill_grace;
      }
    }
    if (kill_at && Clock::now() >= *kill_at) {
      stop_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGHUP, &old_hup, nullptr);
  ::close(g_signal_pipe[0]);
  ::close(g_signal_pipe[1]);

  if (const Child* root = root_cause(children)) {
    const Child& c = *root;
    result.first_failure =
        WorkerFailure{.rank = c.spec.rank,
                      .local_rank = c.spec.local_rank,
                      .pid = c.pid,
                      .exit_code = c.own_exit            ? *c.own_exit
                                   : WIFEXITED(c.status) ? WEXITSTATUS(c.status)
                                                         : 0,
                      .signal = WIFSIGNALED(c.status) && !c.own_exit ? WTERMSIG(c.status) : 0,
                      .time = c.failed_time};
  }
  if (!error_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(error_dir, ec);
  }
  if (result.first_failure) {
    const WorkerFailure& f = *result.first_failure;
    // The first failure's own status (128 + signal when killed), so scripts can tell a crash from
    // an error exit; torchrun always says 1.
    result.exit_code = f.signal ? 128 + f.signal : (f.exit_code != 0 ? f.exit_code : 1);
    const std::string how =
        f.signal ? "signal " + std::to_string(f.signal) + " (" + ::strsignal(f.signal) + ")"
                 : "exitcode " + std::to_string(f.exit_code);
    result.report =
        str(options.program, " FAILED\nRoot Cause (first observed failure):\n  time: ", f.time,
            "\n  rank: ", f.rank, " (local_rank: ", f.local_rank, ")\n  ", how, " (pid: ", f.pid,
            ")\n");
    std::string others;
    for (const Child& c : children) {
      if (c.pid == f.pid || (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)) continue;
      const std::string how = c.own_exit ? str("exitcode ", *c.own_exit,
                                               " (its own error; the stop reached it as it "
                                               "exited)")
                              : WIFSIGNALED(c.status)
                                  ? "stopped by signal " + std::to_string(WTERMSIG(c.status))
                                  : "exitcode " + std::to_string(WEXITSTATUS(c.status));
      others += str("  rank ", c.spec.rank, ": ", how, "\n");
    }
    result.report += "Other failures:\n" + (others.empty() ? "  <NO_OTHER_FAILURES>\n" : others);
  }
  return result;
}

}  // namespace tandem::parallel::detail
