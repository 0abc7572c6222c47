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

// Where progress goes and when a plain line is due off a terminal: once `every` has passed since
// the start or the last line.
class LineSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  LineSchedule(FILE* out, Clock::duration every) : out_(out), tty_(isatty(fileno(out)) != 0), every_(every) {}

  FILE* out() const { return out_; }
  bool tty() const { return tty_; }
  // Whether a line is due at `now`; if so, `now` becomes the last line's time.
  bool line_due(Clock::time_point now) {
    if (now - last_line_ < every_) return false;
    last_line_ = now;
    return true;
  }

 private:
  FILE* out_;
  bool tty_;
  Clock::duration every_;
  Clock::time_point last_line_ = Clock::now();
};

class Progress {
 public:
  using Clock = LineSchedule::Clock;

  explicit Progress(std::string what, FILE* out = stderr, Clock::duration line_every = std::chrono::minutes(1))
      : what_(std::move(what)), lines_(out, line_every) {}
  ~Progress() {
    if (lines_.tty() && drawn_) std::fprintf(lines_.out(), "\n");
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void operator()(int done, int total) {
    if (total <= 0) return;
    const Clock::time_point now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double eta = done > 0 ? elapsed / done * (total - done) : 0.0;
    if (lines_.tty()) {
      const int width = 30, filled = int(double(width) * done / total);
      std::fprintf(lines_.out(), "\r%s [%s%s] %d/%d, %.0f s elapsed, ETA %.0f s ", what_.c_str(),
                   std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(), done,
                   total, elapsed, eta);
    } else if (lines_.line_due(now) || (done >= total && drawn_)) {
      std::fprintf(lines_.out(), "%s %d/%d, %.0f s elapsed, ETA %.0f s\n", what_.c_str(), done, total, elapsed, eta);
    } else {
      return;  // off a terminal, nothing due yet
    }
    drawn_ = true;
    std::fflush(lines_.out());
  }

 private:
  std::string what_;
  LineSchedule lines_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
};

// Milestone lines on stderr for library calls that report steps rather than counts (bench's
// "filled ... to depth ...", one line a row): every line on a terminal; elsewhere a line only
// once line_every has passed since the start or the last line printed, with the same policy as
// Progress: a long run under nohup shows it is alive, a short one prints nothing.
class MilestoneLog {
 public:
  explicit MilestoneLog(std::string what, FILE* out = stderr,
                        LineSchedule::Clock::duration line_every = std::chrono::minutes(1))
      : what_(std::move(what)), lines_(out, line_every) {}

  void operator()(const std::string& line) {
    if (!lines_.tty() && !lines_.line_due(LineSchedule::Clock::now())) return;
    std::fprintf(lines_.out(), "%s: %s\n", what_.c_str(), line.c_str());
    std::fflush(lines_.out());
  }

 private:
  std::string what_;
  LineSchedule lines_;
};

}  // namespace squeezekv::cli
