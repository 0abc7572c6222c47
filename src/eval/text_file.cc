#include "squeezekv/eval/text_file.h"

#include <sys/stat.h>

#include <fstream>

#include "squeezekv/base/errors.h"

namespace squeezekv {

std::string read_text_file(const std::string& path, const std::string& name, uint64_t max_bytes) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw FormatError(invalid_value(name, path, "cannot be opened"));
  if (S_ISDIR(info.st_mode)) throw FormatError(invalid_value(name, path, "is a directory, not a text file"));
  const std::string too_big = "larger than the cap of " + std::to_string(max_bytes) + " bytes";
  if (S_ISREG(info.st_mode) && uint64_t(info.st_size) > max_bytes) {
    throw FormatError(invalid_value(name, path, too_big));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw FormatError(invalid_value(name, path, "cannot be opened"));
  // Devices and pipes have no size: read in blocks and stop at the cap.
  std::string text;
  char block[1 << 16];
  while (file.read(block, sizeof block) || file.gcount() > 0) {
    // Checked before appending, so memory never grows past the cap.
    if (text.size() + size_t(file.gcount()) > max_bytes) throw FormatError(invalid_value(name, path, too_big));
    text.append(block, size_t(file.gcount()));
  }
  if (file.bad()) throw FormatError(invalid_value(name, path, "read error"));
  return text;
}

}  // namespace squeezekv
