// read_text_file: a size cap before reading, and a directory or a device is an error, not text.
#include "squeezekv/eval/text_file.h"

#include <gtest/gtest.h>

#include <string>

#include "squeezekv/base/errors.h"
#include "test_util.h"

namespace squeezekv {
namespace {

std::string error_of(const std::string& path, uint64_t cap) {
  try {
    read_text_file(path, "-f", cap);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TextFile, ReadsTheWholeFile) {
  const std::string text = read_text_file(test::kTinyStoriesText);
  EXPECT_GT(text.size(), 500000u);
  EXPECT_EQ(text.substr(0, 4), read_text_file(test::kTinyStoriesText, "-f", text.size()).substr(0, 4));
}

TEST(TextFile, DirectoryIsAnError) {
  EXPECT_NE(error_of("tests", kMaxTextFileBytes).find("-f = tests: is a directory"), std::string::npos);
}

TEST(TextFile, MissingFileIsAnError) {
  EXPECT_NE(error_of("no/such/file.txt", kMaxTextFileBytes).find("-f = no/such/file.txt: cannot be opened"),
            std::string::npos);
}

TEST(TextFile, LargerThanTheCapIsAnErrorBeforeReading) {
  EXPECT_NE(error_of(test::kTinyStoriesText, 1000).find("larger than the cap of 1000 bytes"), std::string::npos);
  // A device has no size: reading stops at the cap.
  EXPECT_NE(error_of("/dev/zero", 1 << 20).find("-f = /dev/zero: larger than the cap"), std::string::npos);
}

}  // namespace
}  // namespace squeezekv
