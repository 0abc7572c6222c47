// Bounded fuzzing with a fixed seed, part of every test run (and so of the ASan/UBSan build): the
// GGUF parser, the model loader and the tokenizers on mutated real files and random bytes. Every
// case must either succeed or raise squeezekv::Error; a crash, a hang or another exception fails.
// Counts and seeds scale for a release run (tests/fuzz_util.h); the server's request handling is
// fuzzed in tests/serve/serve_fuzz_test.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/base/fnv1a.h"
#include "squeezekv/engine/cache_file.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/gguf_reader.h"
#include "squeezekv/engine/gguf_writer.h"
#include "squeezekv/engine/tokenizer.h"
#include "fuzz_util.h"
#include "test_util.h"

namespace squeezekv {
namespace {

std::vector<uint8_t> stories_bytes() {
  std::ifstream in(test::kStoriesModel, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Parses the bytes and, when they parse, builds the tokenizer and exercises it.
void parse_and_tokenize(const std::vector<uint8_t>& bytes, std::mt19937_64& rng) {
  try {
    const GgufFile file = GgufFile::from_bytes(bytes, "fuzz");
    for (const GgufTensor& t : file.tensors()) (void)t.n_bytes;
    const Tokenizer tokenizer(file);
    std::string text(size_t(rng() % 64), '\0');
    for (char& c : text) c = char(rng());
    const std::vector<int32_t> ids = tokenizer.encode(text, true);
    (void)tokenizer.decode(ids);
  } catch (const Error&) {
    // a clear rejection is the expected outcome for most cases
  }
}

TEST(Fuzz, MutatedStoriesModelParsesOrFailsCleanly) {
  const std::vector<uint8_t> original = stories_bytes();
  ASSERT_GT(original.size(), 100000u);
  const GgufFile good = GgufFile::from_bytes(original);
  const size_t header = size_t(good.data_offset());  // the metadata and tensor infos
  std::mt19937_64 rng(test::fuzz_seed(20261130));
  std::vector<uint8_t> bytes = original;
  for (int i = 0; i < test::fuzz_count(1500); ++i) {
    // Mutate 1 to 8 bytes, mostly inside the header where the parser reads.
    std::vector<std::pair<size_t, uint8_t>> undo;
    const int n = 1 + int(rng() % 8);
    for (int k = 0; k < n; ++k) {
      const size_t at = rng() % 8 ? rng() % header : rng() % bytes.size();
      undo.emplace_back(at, bytes[at]);
      const uint64_t how = rng() % 4;
      bytes[at] = how == 0   ? uint8_t(rng())
                  : how == 1 ? uint8_t(bytes[at] ^ (1u << (rng() % 8)))
                  : how == 2 ? uint8_t(0xFF)
                             : uint8_t(0);
    }
    SCOPED_TRACE("case " + std::to_string(i));
    parse_and_tokenize(bytes, rng);
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) bytes[it->first] = it->second;
  }
  // Truncations at random lengths.
  for (int i = 0; i < test::fuzz_count(200); ++i) {
    const std::vector<uint8_t> cut(original.begin(), original.begin() + long(rng() % original.size()));
    parse_and_tokenize(cut, rng);
  }
}

TEST(Fuzz, RandomByteStringsAreRejected) {
  std::mt19937_64 rng(test::fuzz_seed(7));
  for (int i = 0; i < test::fuzz_count(2000); ++i) {
    std::vector<uint8_t> bytes(size_t(rng() % 256));
    for (uint8_t& b : bytes) b = uint8_t(rng());
    if (i % 2 == 0 && bytes.size() >= 8) {  // a valid magic and version half the time
      bytes[0] = 'G', bytes[1] = 'G', bytes[2] = 'U', bytes[3] = 'F';
      bytes[4] = 3, bytes[5] = bytes[6] = bytes[7] = 0;
    }
    EXPECT_THROW(GgufFile::from_bytes(bytes), FormatError) << "case " << i;
  }
}

TEST(Fuzz, SpmTokenizerOnRandomTextAndIds) {
  const GgufFile file = GgufFile::open(test::kStoriesModel);
  const Tokenizer tokenizer(file);
  std::mt19937_64 rng(test::fuzz_seed(11));
  for (int i = 0; i < test::fuzz_count(2000); ++i) {
    std::string text(size_t(rng() % 200), '\0');
    for (char& c : text) c = char(rng() % 3 ? 0x20 + rng() % 95 : rng());  // mostly ASCII
    const std::vector<int32_t> ids = tokenizer.encode(text, i % 2 == 0);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tokenizer.vocab_size());
    (void)tokenizer.decode(ids);
    std::vector<int32_t> random_ids(size_t(rng() % 32));
    for (int32_t& id : random_ids) id = int32_t(rng() % uint64_t(tokenizer.vocab_size()));
    (void)tokenizer.decode(random_ids);
  }
}

// A GPT-2 byte-level BPE vocabulary (the 256 byte characters and a few merges).
std::vector<uint8_t> bpe_model(const std::string& pre) {
  auto byte_char = [](int b) {
    const auto printable = [](int x) {
      return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    };
    int cp = b;
    if (!printable(b)) {
      int n = 0;
      for (int x = 0; x < b; ++x) n += !printable(x);
      cp = 256 + n;
    }
    if (cp < 0x80) return std::string(1, char(cp));
    return std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  };
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_char(b));
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "\xC4\xA0 t"};
  for (const std::string& m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_array("tokenizer.ggml.tokens", std::span<const std::string>(tokens));
  w.add_array("tokenizer.ggml.merges", std::span<const std::string>(merges));
  return w.to_bytes();
}

TEST(Fuzz, BpeTokenizerOnRandomText) {
  std::mt19937_64 rng(test::fuzz_seed(13));
  for (const char* pre : {"gpt2", "llama3", "qwen2"}) {
    const GgufFile file = GgufFile::from_bytes(bpe_model(pre));
    const Tokenizer tokenizer(file);
    for (int i = 0; i < test::fuzz_count(700); ++i) {
      std::string text(size_t(rng() % 120), '\0');
      for (char& c : text) c = char(rng() % 2 ? 0x20 + rng() % 95 : rng());
      const std::vector<int32_t> ids = tokenizer.encode(text, false);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tokenizer.vocab_size());
      EXPECT_EQ(tokenizer.decode(ids), text) << pre << " case " << i;  // byte-level: lossless
    }
    // Its vocabulary mutated: loads or fails cleanly.
    std::vector<uint8_t> bytes = bpe_model(pre);
    for (int i = 0; i < test::fuzz_count(300); ++i) {
      std::vector<uint8_t> mutated = bytes;
      for (int k = 0; k < 4; ++k) mutated[rng() % mutated.size()] = uint8_t(rng());
      parse_and_tokenize(mutated, rng);
    }
  }
}

// The cache file loader (engine/cache_file.h) on mutated saved caches: half of the cases get their
// sections' checksums recomputed, so that the mutation reaches the state's own checks. Every case
// loads or fails with squeezekv::Error; a loaded cache takes one more token.
void fix_checksums(std::vector<uint8_t>& bytes) {
  size_t at = 24;  // the file header
  while (at + 24 <= bytes.size()) {
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at + 8, 8);
    if (length > bytes.size() - at - 24) return;
    const uint64_t sum = fnv1a(bytes.data() + at + 24, size_t(length));
    std::memcpy(bytes.data() + at + 16, &sum, 8);
    at += 24 + size_t(length);
  }
}

TEST(Fuzz, MutatedCacheFilesLoadOrFailCleanly) {
  const Model model = Model::load(test::kStoriesModel);
  Engine engine(model, nullptr);
  const std::string path = (test::temp_dir() / "fuzz_cache.skv").string();
  std::mt19937_64 rng(test::fuzz_seed(20261207));
  for (const char* kv_type : {"f16", "q8_0", "kivi2"}) {
    KVCacheConfig config;
    config.method = "squeeze";
    config.budget = 12;
    config.set("kv_type", kv_type);
    config.kivi_group = 8;
    config.kivi_residual = 0;  // budget 12 holds no fp16 residual of 8 rows beside its codes (validate)
    auto cache = engine.make_cache(config);
    std::vector<int32_t> tokens =
        model.tokenizer().encode("Once upon a time, there was a little girl named Lily.", true);
    std::vector<float> logits;
    engine.forward(tokens, *cache, Logits::last, logits);
    save_cache_file(path, model, *cache, tokens);
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> original{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    for (int i = 0; i < test::fuzz_count(400); ++i) {
      std::vector<uint8_t> bytes = original;
      const int n = 1 + int(rng() % 6);
      for (int k = 0; k < n; ++k) {
        const size_t at = rng() % bytes.size();
        const uint64_t how = rng() % 4;
        bytes[at] = how == 0   ? uint8_t(rng())
                    : how == 1 ? uint8_t(bytes[at] ^ (1u << (rng() % 8)))
                    : how == 2 ? uint8_t(0xFF)
                               : uint8_t(0);
      }
      if (i % 5 == 0) bytes.resize(rng() % bytes.size());
      if (i % 2 == 0) fix_checksums(bytes);
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
      SCOPED_TRACE(std::string(kv_type) + " case " + std::to_string(i));
      try {
        LoadedCache loaded = load_cache_file(path, model);
        const int32_t next = 42;
        engine.forward(std::span(&next, 1), *loaded.cache, Logits::last, logits);
      } catch (const Error&) {
        // a clear rejection
      }
    }
  }
}

}  // namespace
}  // namespace squeezekv
