// autograd/grad_mode.h — whether ops record the graph. Off inside NoGradGuard (optimizer steps,
// evaluation) and while the engine runs backward. Per thread, as in PyTorch.
#pragma once

namespace tandem {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// Disables recording for its scope: `{ NoGradGuard g; opt.step(); }`.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Enables recording for its scope (inside a NoGradGuard, e.g. for checkpoint recomputation).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem
