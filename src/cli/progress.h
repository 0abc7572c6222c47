// Progress with ETA on stderr for long library calls (use as their progress callback): a bar
// redrawn in place on a terminal; elsewhere (a log, nohup) a plain line at most once a minute and
// a last one when the run ends, so that a long run shows it is alive and a short one (tests, CI
// logs) prints nothing.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace squeezekv::cli {

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Progress(std::string what, FILE* out = stderr, Clock::duration line_every = std::chrono::minutes(1))
      : what_(std::move(what)), out_(out), tty_(isatty(fileno(out)) != 0), line_every_(line_every) {}
  ~Progress() {
    if (tty_ && drawn_) std::fprintf(out_, "\n");
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void operator()(int done, int total) {
    if (total <= 0) return;
    const Clock::time_point now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double eta = done > 0 ? elapsed / done * (total - done) : 0.0;
    if (tty_) {
      const int width = 30, filled = int(double(width) * done / total);
      std::fprintf(out_, "\r%s [%s%s] %d/%d, %.0f s elapsed, ETA %.0f s ", what_.c_str(),
                   std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(), done,
                   total, elapsed, eta);
    } else if (now - last_line_ >= line_every_ || (done >= total && drawn_)) {
      last_line_ = now;
      std::fprintf(out_, "%s %d/%d, %.0f s elapsed, ETA %.0f s\n", what_.c_str(), done, total, elapsed, eta);
    } else {
      return;  // off a terminal, nothing due yet
    }
    drawn_ = true;
    std::fflush(out_);
  }

 private:
  std::string what_;
  FILE* out_;
  bool tty_;
  Clock::duration line_every_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_line_ = start_;
};

// Milestone lines on stderr for library calls that report steps rather than counts (bench's
// "filled ... to depth ...", one line a row): every line on a terminal; elsewhere a line only
// once line_every has passed since the start or the last line printed, with the same policy as
// Progress: a long run under nohup shows it is alive, a short one prints nothing.
class MilestoneLog {
 public:
  using Clock = std::chrono::steady_clock;

  explicit MilestoneLog(std::string what, FILE* out = stderr, Clock::duration line_every = std::chrono::minutes(1))
      : what_(std::move(what)), out_(out), tty_(isatty(fileno(out)) != 0), line_every_(line_every) {}

  void operator()(const std::string& line) {
    const Clock::time_point now = Clock::now();
    if (!tty_ && now - last_line_ < line_every_) return;
    last_line_ = now;
    std::fprintf(out_, "%s: %s\n", what_.c_str(), line.c_str());
    std::fflush(out_);
  }

 private:
  std::string what_;
  FILE* out_;
  bool tty_;
  Clock::duration line_every_;
  Clock::time_point last_line_ = Clock::now();
};

}  // namespace squeezekv::cli
