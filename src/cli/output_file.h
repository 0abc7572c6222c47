// A file the command writes its results to (--out, --json FILE, --csv FILE): opened before the
// work starts, so an unwritable path fails at once, and every write, flush and close checked, so
// a full disk (/dev/full) is an error (exit 2) instead of a silent loss.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace squeezekv::cli {

class OutputFile {
 public:
  // Nothing is opened for an empty path; `option` names the file in errors (e.g. "--csv").
  // `append`: write after what the file holds (a resumed run) instead of replacing it.
  OutputFile(std::string option, std::string path, bool append = false);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  bool is_open() const { return file_ != nullptr; }
  void write(std::string_view text);
  void flush();  // to the operating system, so that an interrupted run keeps what was written
  void close();  // flushes; throws on any failure

 private:
  void fail(const char* what);
  std::string option_, path_;
  std::FILE* file_ = nullptr;
};

}  // namespace squeezekv::cli
