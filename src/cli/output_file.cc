#include "cli/output_file.h"

#include <cerrno>
#include <cstring>

#include "squeezekv/base/errors.h"

namespace squeezekv::cli {

OutputFile::OutputFile(std::string option, std::string path, bool append)
    : option_(std::move(option)), path_(std::move(path)) {
  if (path_.empty()) return;
  file_ = std::fopen(path_.c_str(), append ? "a" : "w");
  if (!file_) fail("cannot open for writing");
}

OutputFile::~OutputFile() {
  if (file_) std::fclose(file_);  // only after an error elsewhere: close() reports its own
}

void OutputFile::fail(const char* what) {
  const std::string reason = std::string(what) + (errno ? std::string(": ") + std::strerror(errno) : "");
  throw InvalidArgument(invalid_value(option_, path_, reason));
}

void OutputFile::write(std::string_view text) {
  if (!file_) return;
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) fail("write failed");
}

void OutputFile::flush() {
  if (!file_) return;
  errno = 0;
  if (std::fflush(file_) != 0 || std::ferror(file_)) fail("write failed");
}

void OutputFile::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  errno = 0;
  const bool flushed = std::fflush(f) == 0 && !std::ferror(f);
  const int saved = errno;
  const bool closed = std::fclose(f) == 0;
  if (!flushed) errno = saved;
  if (!flushed || !closed) fail("write failed");
}

}  // namespace squeezekv::cli
