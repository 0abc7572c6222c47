// Reading a whole text file (a prompt, an evaluation text) with a size cap, so that a huge file or
// a device such as /dev/zero fails with a clear error instead of exhausting memory.
#pragma once

#include <cstdint>
#include <string>

namespace squeezekv {

inline constexpr uint64_t kMaxTextFileBytes = uint64_t(1) << 30;  // 1 GiB

// The file's bytes. FormatError naming `name` and the path when it cannot be opened, is a
// directory, or holds more than max_bytes (a regular file is rejected by its size before reading).
std::string read_text_file(const std::string& path, const std::string& name = "text file",
                           uint64_t max_bytes = kMaxTextFileBytes);

}  // namespace squeezekv
