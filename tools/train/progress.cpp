// tools/train/progress.cpp — the progress line. The bar is drawn with the eighth-block characters
// tqdm uses, so it advances smoothly; rates and the ETA come from the epoch's elapsed time.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "progress.h"

namespace tandem::tools {
namespace {

constexpr int kBarWidth = 20;
constexpr double kMinRedraw = 0.1;  // seconds between redraws (tqdm's mininterval)

// A bar of kBarWidth cells, `frac` of it filled, with a partial eighth block at the edge.
std::string bar(double frac) {
  static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const int eighths = int(frac * kBarWidth * 8);
  std::string out;
  for (int i = 0; i < eighths / 8; ++i) out += "█";
  int cells = eighths / 8;
  if (cells < kBarWidth && eighths % 8) {
    out += kEighths[eighths % 8];
    ++cells;
  }
  out.append(size_t(kBarWidth - cells), ' ');
  return out;
}

}  // namespace

bool progress_is_interactive(bool no_progress) {
  if (no_progress || !isatty(STDERR_FILENO) || std::getenv("CI") != nullptr) return false;
  const char* term = std::getenv("TERM");
  return term == nullptr || std::strcmp(term, "dumb") != 0;
}

std::string format_duration(double seconds) {
  const long s = seconds > 0 ? long(seconds + 0.5) : 0;
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

ProgressLine::ProgressLine(bool interactive, int64_t epoch, int64_t total_steps)
    : interactive_(interactive),
      epoch_(epoch),
      total_(total_steps),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

double ProgressLine::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressLine::update(int64_t step, double loss, double acc, const std::string& note) {
  if (!interactive_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && step < total_ &&
      std::chrono::duration<double>(now - last_draw_).count() < kMinRedraw)
    return;
  last_draw_ = now;
  drawn_ = true;
  const double t = elapsed(), rate = t > 0 ? double(step) / t : 0;
  const double remaining = rate > 0 ? double(total_ - step) / rate : 0;
  const double frac = total_ > 0 ? double(step) / double(total_) : 1;
  // \r, then the line, then erase anything left over from a longer previous line.
  std::fprintf(stderr,
               "\rEpoch %lld: %3.0f%%|%s| %lld/%lld [%s<%s, %.1fit/s, loss=%.3f, acc=%.3f%s]\033[K",
               (long long)epoch_, 100 * frac, bar(frac).c_str(), (long long)step, (long long)total_,
               format_duration(t).c_str(), format_duration(remaining).c_str(), rate, loss, acc,
               note.c_str());
  std::fflush(stderr);
}

void ProgressLine::log(int64_t step, double loss, double acc, double samples_per_s,
                       const std::string& note) {
  if (interactive_) return;
  const double t = elapsed();
  const double eta = step > 0 ? t / double(step) * double(total_ - step) : 0;
  std::printf("epoch %lld step %lld/%lld (%.0f%%) loss %.4f acc %.3f %.1f img/s eta %s%s\n",
              (long long)epoch_, (long long)step, (long long)total_,
              100.0 * double(step) / double(total_), loss, acc, samples_per_s,
              format_duration(eta).c_str(), note.c_str());
  std::fflush(stdout);
}

void ProgressLine::finish() {
  if (interactive_ && drawn_) std::fprintf(stderr, "\r\033[K");
  drawn_ = false;
}

}  // namespace tandem::tools
