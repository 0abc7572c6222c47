// The in-tree fuzzing's knobs and mutator (tests/engine/fuzz_test.cc, tests/serve/serve_fuzz_test.cc).
// Every run is bounded and seeded: CI runs the base counts with the fixed seeds; a release run
// scales them and varies the seed (docs/guide.md, "Fuzzing"):
//   SQUEEZEKV_FUZZ_SCALE=50 SQUEEZEKV_FUZZ_SEED=$RANDOM build/tests/engine/engine_fuzz_test
// A failing case prints its seed and index, so it can be replayed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>

namespace squeezekv::test {

// base x SQUEEZEKV_FUZZ_SCALE (default 1).
inline int fuzz_count(int base) {
  const char* scale = std::getenv("SQUEEZEKV_FUZZ_SCALE");
  const long s = scale ? std::strtol(scale, nullptr, 10) : 1;
  return base * int(s >= 1 && s <= 100000 ? s : 1);
}

// The test's fixed seed, or SQUEEZEKV_FUZZ_SEED mixed into it.
inline uint64_t fuzz_seed(uint64_t fixed) {
  const char* seed = std::getenv("SQUEEZEKV_FUZZ_SEED");
  return seed ? fixed ^ (std::strtoull(seed, nullptr, 10) * 0x9E3779B97F4A7C15ull) : fixed;
}

// One mutation of text: a byte flipped, set to an edge value, deleted or duplicated, a chunk
// copied elsewhere, or a token that parsers get wrong (bad UTF-8, huge numbers, stray brackets,
// escapes) inserted or put in place of a run of bytes.
inline void mutate(std::string& text, std::mt19937_64& rng) {
  static constexpr std::string_view kTokens[] = {"\xff",
                                                 "\xc3",
                                                 "\xed\xa0\x80",
                                                 "\xf4\x90\x80\x80",
                                                 "1e999",
                                                 "-1e400",
                                                 "99999999999999999999",
                                                 "-1",
                                                 "0",
                                                 "null",
                                                 "true",
                                                 "[",
                                                 "]",
                                                 "{",
                                                 "}",
                                                 "\"",
                                                 ",",
                                                 ":",
                                                 "\\u0000",
                                                 "\\ud800",
                                                 "\\",
                                                 "\r\n",
                                                 "\r\n\r\n",
                                                 "Content-Length: -5\r\n",
                                                 "Transfer-Encoding: chunked\r\n",
                                                 std::string_view("\0", 1)};
  const size_t at = text.empty() ? 0 : size_t(rng() % text.size());
  switch (rng() % 6) {
    case 0:
      if (!text.empty()) text[at] = char(text[at] ^ char(1u << (rng() % 8)));
      break;
    case 1:
      if (!text.empty()) text[at] = char(rng() % 2 ? 0xFF : rng() % 256);
      break;
    case 2:
      if (!text.empty()) text.erase(at, 1 + size_t(rng() % 8));
      break;
    case 3: {
      const size_t n = std::min(text.size() - at, size_t(1 + rng() % 16));
      text.insert(text.empty() ? 0 : size_t(rng() % text.size()), text.substr(at, n));
      break;
    }
    case 4:
      text.insert(at, kTokens[rng() % std::size(kTokens)]);
      break;
    default:
      text.replace(at, size_t(rng() % 4), kTokens[rng() % std::size(kTokens)]);
      break;
  }
}

}  // namespace squeezekv::test
