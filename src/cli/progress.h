// A progress bar with ETA on stderr, drawn only when stderr is a terminal (scripts and CI logs
// stay clean). Use as the progress callback of long library calls.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace squeezekv::cli {

class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)), tty_(isatty(STDERR_FILENO) != 0) {}
  ~Progress() {
    if (tty_ && drawn_) std::fprintf(stderr, "\n");
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void operator()(int done, int total) {
    if (!tty_ || total <= 0) return;
    drawn_ = true;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = done > 0 ? elapsed / done * (total - done) : 0.0;
    const int width = 30, filled = int(double(width) * done / total);
    std::fprintf(stderr, "\r%s [%s%s] %d/%d, %.0f s elapsed, ETA %.0f s ", what_.c_str(),
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(width - filled), '.').c_str(), done,
                 total, elapsed, eta);
    std::fflush(stderr);
  }

 private:
  std::string what_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace squeezekv::cli
