// Hostile input to the engine: messages quoting a corrupt file stay short and escaped, a header
// must match its tensors, and NaN weights are an error naming the layer, not a NaN perplexity.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/engine.h"
#include "squeezekv/engine/gguf_reader.h"
#include "squeezekv/engine/gguf_writer.h"
#include "squeezekv/engine/model.h"
#include "squeezekv/engine/random_model.h"
#include "test_util.h"

namespace squeezekv {
namespace {

std::string temp_path(const std::string& name) {
  return (test::temp_dir() / ("squeezekv_hardening_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <typename F>
std::string format_error(F f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FormatError";
  return {};
}

TEST(Hardening, CorruptKeyIsQuotedAsAShortEscapedExcerpt) {
  // A key name of 1 MiB of raw bytes followed by an unknown value type.
  std::vector<uint8_t> bytes = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  auto put64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(v >> (8 * i)));
  };
  put64(0);  // tensors
  put64(1);  // keys
  const size_t n = size_t(1) << 20;
  put64(n);
  for (size_t i = 0; i < n; ++i) bytes.push_back(uint8_t(0x80 + i % 100));
  for (int i = 0; i < 4; ++i) bytes.push_back(0xEE);  // value type 0xEEEEEEEE
  const std::string msg = format_error([&] { GgufFile::from_bytes(bytes); });
  EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
  EXPECT_NE(msg.find("\\x80\\x81"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(first 64 of 1048576 bytes)"), std::string::npos) << msg;
  for (char c : msg) EXPECT_LT(static_cast<unsigned char>(c), 0x80u);
}

TEST(Hardening, BlockCountMustMatchTheBlocksStored) {
  RandomModelSpec spec;
  spec.n_layers = 3;
  std::vector<uint8_t> bytes = random_model_writer(spec).to_bytes();
  // llama.block_count is a u32 key: its name, the type id (4), then the value.
  const std::string key = "llama.block_count";
  auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(it, bytes.end());
  const size_t at = size_t(it - bytes.begin()) + key.size() + 4;
  uint32_t count = 0;
  std::memcpy(&count, bytes.data() + at, 4);
  ASSERT_EQ(count, 3u);
  const std::string path = temp_path("blocks.gguf");
  write_bytes(path, bytes);
  EXPECT_NO_THROW(Model::load(path));
  count = 1;  // the header claims 1 block, the file holds 3
  std::memcpy(bytes.data() + at, &count, 4);
  write_bytes(path, bytes);
  const std::string msg = format_error([&] { Model::load(path); });
  EXPECT_NE(msg.find("tensor 'blk.1."), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama.block_count"), std::string::npos) << msg;
  count = 4;  // more blocks declared than stored: a missing tensor
  std::memcpy(bytes.data() + at, &count, 4);
  write_bytes(path, bytes);
  EXPECT_NE(format_error([&] { Model::load(path); }).find("missing tensor 'blk.3."), std::string::npos);
  std::filesystem::remove(path);
}

// Every float hyper-parameter the loader reads is finite and in range, or the load fails naming
// its key (a Gemma 3 with an infinite epsilon generated <pad> tokens and a perplexity of 262144).
TEST(Hardening, FloatHyperParametersMustBeFiniteAndSane) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::string path = temp_path("hyper.gguf");
  for (const std::string arch : {"llama", "gemma3"}) {
    RandomModelSpec spec;
    spec.arch = arch;
    if (arch == "gemma3") spec.head_dim = 32;
    for (const std::string key : {"rope.freq_base", "attention.layer_norm_rms_epsilon"}) {
      for (const float bad : {inf, -inf, nan, 1e-30f, 0.0f, -1.0f, 1e30f}) {
        std::vector<uint8_t> bytes = random_model_writer(spec).to_bytes();
        const std::string name = arch + "." + key;
        auto it = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
        ASSERT_NE(it, bytes.end()) << name;
        const size_t at = size_t(it - bytes.begin()) + name.size() + 4;  // past the type id (6: f32)
        std::memcpy(bytes.data() + at, &bad, 4);
        write_bytes(path, bytes);
        const std::string msg = format_error([&] { Model::load(path); });
        EXPECT_NE(msg.find("key '" + name + "'"), std::string::npos) << bad << ": " << msg;
        EXPECT_NE(msg.find("must be a finite number in"), std::string::npos) << bad << ": " << msg;
      }
    }
  }
  for (const float bad : {inf, nan, 1e-30f}) {  // the sliding layers' own base
    RandomModelSpec spec;
    spec.arch = "gemma3";
    spec.head_dim = 32;
    GgufWriter w = random_model_writer(spec);
    w.add_f32("gemma3.rope.freq_base_swa", bad);
    write_bytes(path, w.to_bytes());
    const std::string msg = format_error([&] { Model::load(path); });
    EXPECT_NE(msg.find("key 'gemma3.rope.freq_base_swa'"), std::string::npos) << bad << ": " << msg;
  }
  RandomModelSpec spec;  // in range still loads
  write_bytes(path, random_model_writer(spec).to_bytes());
  EXPECT_NO_THROW(Model::load(path));
  std::filesystem::remove(path);
}

// stories260K with one f32 tensor's data overwritten by NaN.
std::string model_with_nan(const std::string& tensor) {
  std::vector<uint8_t> bytes = read_bytes(test::kStoriesModel);
  const GgufFile file = GgufFile::from_bytes(bytes);
  const GgufTensor* t = file.find_tensor(tensor);
  EXPECT_NE(t, nullptr) << tensor;
  if (!t) return {};
  EXPECT_EQ(t->type(), TensorType::f32);
  const size_t at = size_t(file.data_offset() + t->offset);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < size_t(t->n_bytes) / 4; ++i) std::memcpy(bytes.data() + at + 4 * i, &nan, 4);
  const std::string path = temp_path("nan.gguf");
  write_bytes(path, bytes);
  return path;
}

TEST(Hardening, NanWeightsAreAnErrorNamingTheLayer) {
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  for (const auto& [tensor, where] : std::vector<std::pair<std::string, std::string>>{
           {"blk.2.ffn_norm.weight", "after layer 2"}, {"output_norm.weight", "the logits"}}) {
    const std::string path = model_with_nan(tensor);
    const Model model = Model::load(path);
    Engine engine(model, nullptr);
    auto cache = engine.make_cache(KVCacheConfig{.method = "full"});
    std::vector<float> logits;
    const std::string msg = format_error([&] { engine.forward(tokens, *cache, Logits::last, logits); });
    EXPECT_NE(msg.find(where), std::string::npos) << tensor << ": " << msg;
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace squeezekv
