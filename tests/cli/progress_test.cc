// The progress reporters off a terminal (a log file, nohup): plain lines no more often than asked,
// a last line only for a run that printed one before, nothing for a run without a total; bench's
// milestone lines under the same interval.
#include "cli/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace squeezekv::cli {
namespace {

struct Log {
  std::unique_ptr<FILE, int (*)(FILE*)> file{std::tmpfile(), &std::fclose};

  std::vector<std::string> lines() {
    std::rewind(file.get());
    std::string text;
    for (int c; (c = std::fgetc(file.get())) != EOF;) text += char(c);
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
};

TEST(Progress, OffATerminalEveryCallPastTheIntervalIsOneLine) {
  Log log;
  ASSERT_NE(log.file, nullptr);
  {
    Progress progress("sweep: chunk passes", log.file.get(), std::chrono::seconds(0));
    progress(1, 4);
    progress(4, 4);
  }
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind("sweep: chunk passes 1/4, ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(" s elapsed, ETA "), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("sweep: chunk passes 4/4, ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("ETA 0 s"), std::string::npos) << lines[1];  // nothing left at the end
}

TEST(Progress, AShortRunOffATerminalPrintsNothing) {
  Log log;
  ASSERT_NE(log.file, nullptr);
  {
    Progress progress("needle: samples", log.file.get(), std::chrono::hours(1));
    for (int i = 0; i <= 10; ++i) progress(i, 10);  // ends before the first line is due
  }
  EXPECT_TRUE(log.lines().empty());
}

TEST(Progress, NoTotalNoLine) {
  Log log;
  ASSERT_NE(log.file, nullptr);
  {
    Progress progress("synth: configurations", log.file.get(), std::chrono::seconds(0));
    progress(0, 0);
    progress(3, -1);
  }
  EXPECT_TRUE(log.lines().empty());
}

TEST(MilestoneLog, OffATerminalALineOnlyOnceTheIntervalHasPassed) {
  Log log;
  ASSERT_NE(log.file, nullptr);
  MilestoneLog often("bench", log.file.get(), std::chrono::seconds(0));
  often("filled full to depth 16 with 1 thread(s) in 0.5 s");
  often("tg4 @ d16, 1 thread(s), full: 12.5 tokens/s");
  MilestoneLog rarely("bench", log.file.get(), std::chrono::hours(1));
  rarely("tg4 @ d0, 1 thread(s), full: 13.0 tokens/s");  // within the hour: not printed
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "bench: filled full to depth 16 with 1 thread(s) in 0.5 s");
  EXPECT_EQ(lines[1], "bench: tg4 @ d16, 1 thread(s), full: 12.5 tokens/s");
}

}  // namespace
}  // namespace squeezekv::cli
