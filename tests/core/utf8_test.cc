// base/utf8.h: repair of invalid UTF-8 and streaming that never splits a character.
#include "squeezekv/base/utf8.h"

#include <gtest/gtest.h>

#include <string>

#include "squeezekv/base/quote.h"

namespace squeezekv {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidTextIsUnchanged) {
  const std::string text = "Once upon a time \xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80.";
  EXPECT_TRUE(is_valid_utf8(text));
  EXPECT_EQ(valid_utf8(text), text);
}

TEST(Utf8, InvalidSequencesBecomeReplacementCharacters) {
  EXPECT_EQ(valid_utf8("a\xFF"
                       "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(valid_utf8("a\xE2\x82"), "a" + kFffd);  // truncated at the end
  EXPECT_EQ(valid_utf8("\xE2\x82"
                       "b"),
            kFffd + "b");                                         // truncated in the middle
  EXPECT_EQ(valid_utf8("\xC0\xAF"), kFffd + kFffd);               // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);   // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80").substr(0, 3), kFffd);  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\x80"));
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, char(b));
    EXPECT_TRUE(is_valid_utf8(valid_utf8(one))) << b;
    EXPECT_TRUE(is_valid_utf8(valid_utf8(one + "\x80\xBF"))) << b;
  }
}

TEST(Utf8, IncompleteTailCountsOnlyAStartThatCouldComplete) {
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("ab\xE2"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("ab\xE2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("ab\xE2\x82\xAC"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("a\xFF"), 0u);  // can never complete: not held back
  EXPECT_EQ(incomplete_utf8_tail("a\xE2\x41"), 0u);
}

TEST(Utf8, StreamNeverSplitsACharacter) {
  // The euro sign and an emoji fed one byte at a time, as byte-fallback tokens arrive.
  const std::string text = "x\xE2\x82\xAC y\xF0\x9F\x98\x80!";
  Utf8Stream stream;
  std::string out;
  for (char c : text) {
    const std::string piece = stream.push(std::string(1, c));
    EXPECT_TRUE(is_valid_utf8(piece)) << out;
    out += piece;
  }
  out += stream.finish();
  EXPECT_EQ(out, text);
  // An incomplete sequence left at the end is replaced, not dropped or printed raw.
  Utf8Stream cut;
  EXPECT_EQ(cut.push("ok\xE2\x82"), "ok");
  EXPECT_EQ(cut.finish(), kFffd);
  EXPECT_EQ(cut.push("\xFF"), kFffd);
}

TEST(Quote, ExcerptIsShortEscapedAscii) {
  EXPECT_EQ(quoted_excerpt("llama"), "'llama'");
  EXPECT_EQ(quoted_excerpt("a\x01\xC3"), "'a\\x01\\xc3'");
  const std::string long_text(100000, 'z');
  const std::string q = quoted_excerpt(long_text);
  EXPECT_LT(q.size(), 120u);
  EXPECT_NE(q.find("(first 64 of 100000 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace squeezekv
