// GGUF reader and writer: the real stories260K header, a writer round trip of every value type,
// random models, one handcrafted broken file per fault, and a bounded mutation fuzz.
// Suite names start with "gguf" so that `ctest -R gguf` selects them.
#include "squeezekv/engine/gguf_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/gguf_writer.h"
#include "squeezekv/engine/random_model.h"
#include "real_models.h"
#include "test_util.h"

namespace squeezekv {
namespace {

const char* const kModel = test::kStoriesModel;

std::string temp_path(const std::string& name) {
  return (test::temp_dir() / ("squeezekv_gguf_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Runs f and returns the FormatError message; fails the test when f does not throw one.
std::string format_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a FormatError";
  return "";
}

std::string parse_error(const std::vector<uint8_t>& bytes) {
  return format_error([&] { GgufFile::from_bytes(bytes, "broken.gguf"); });
}

// ---------------------------------------------------------------------------------------------
// The real model (facts from ../shared/models/README.md).

TEST(gguf, Stories260kHeader) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << "required shared file missing: " << kModel;
  GgufFile f = GgufFile::open(kModel);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.file_size(), 1185376u);
  EXPECT_EQ(f.keys().size(), 19u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), 14176u);
  EXPECT_FALSE(f.has("general.alignment"));

  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("general.name"), "llama");
  EXPECT_EQ(f.get_u32("llama.context_length"), 2048u);
  EXPECT_EQ(f.get_u32("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_u32("llama.feed_forward_length"), 172u);
  EXPECT_EQ(f.get_u32("llama.block_count"), 5u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count"), 8u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f.get_u32("llama.rope.dimension_count"), 8u);
  EXPECT_FLOAT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_FALSE(f.find_f32("llama.rope.freq_base").has_value());
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");

  auto tokens = f.get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[13], "<0x0A>");
  EXPECT_EQ(tokens[258], "<0xFF>");
  std::vector<float> scores = f.get_f32s("tokenizer.ggml.scores");
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_EQ(scores[0], 0.0f);
  EXPECT_EQ(scores[259], 0.0f);
  EXPECT_EQ(scores[260], -1.0f);
  EXPECT_EQ(scores[511], -252.0f);
  std::vector<int32_t> types = f.get_i32s("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(std::count(types.begin(), types.end(), 1), 253);
  EXPECT_EQ(std::count(types.begin(), types.end(), 2), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), 3), 2);
  EXPECT_EQ(std::count(types.begin(), types.end(), 6), 256);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.unknown_token_id"), 0u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.seperator_token_id"), 4294967295u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.padding_token_id"), 4294967295u);
}

TEST(gguf, Stories260kTensors) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << "required shared file missing: " << kModel;
  GgufFile f = GgufFile::open(kModel);
  const auto& ts = f.tensors();
  ASSERT_EQ(ts.size(), 48u);
  EXPECT_EQ(ts[0].name, "token_embd.weight");
  EXPECT_EQ(ts[1].name, "output_norm.weight");
  EXPECT_EQ(ts[2].name, "output.weight");
  const char* block_order[] = {"attn_q",   "attn_k",   "attn_v", "attn_output", "attn_norm",
                               "ffn_gate", "ffn_down", "ffn_up", "ffn_norm"};
  for (int l = 0; l < 5; ++l) {
    for (int j = 0; j < 9; ++j) {
      EXPECT_EQ(ts[static_cast<size_t>(3 + 9 * l + j)].name,
                "blk." + std::to_string(l) + "." + block_order[j] + ".weight");
    }
  }
  int64_t elements = 0;
  uint64_t expected_offset = 0;
  for (const GgufTensor& t : ts) {
    EXPECT_EQ(t.type_id, 0u) << t.name;
    EXPECT_TRUE(t.supported());
    EXPECT_EQ(t.type(), TensorType::f32);
    EXPECT_EQ(t.type_name(), "F32");
    EXPECT_EQ(t.n_bytes, static_cast<uint64_t>(t.n_elements()) * 4);
    EXPECT_EQ(t.offset, expected_offset) << t.name;
    expected_offset = (t.offset + t.n_bytes + 31) / 32 * 32;
    elements += t.n_elements();
  }
  EXPECT_EQ(elements, 292800);
  EXPECT_EQ(f.data_offset() + ts.back().offset + ts.back().n_bytes, f.file_size());
  EXPECT_EQ(static_cast<const uint8_t*>(ts[1].data) - static_cast<const uint8_t*>(ts[0].data), 64 * 512 * 4);

  auto dims = [&](const char* name) {
    const GgufTensor* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? std::vector<int64_t>(t->dims().begin(), t->dims().end()) : std::vector<int64_t>{};
  };
  EXPECT_EQ(dims("token_embd.weight"), (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(dims("output_norm.weight"), (std::vector<int64_t>{64}));
  EXPECT_EQ(dims("output.weight"), (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(dims("blk.0.attn_q.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(dims("blk.4.attn_k.weight"), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(dims("blk.2.attn_v.weight"), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(dims("blk.1.ffn_gate.weight"), (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(dims("blk.3.ffn_down.weight"), (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(f.find_tensor("blk.5.attn_q.weight"), nullptr);
  // output.weight is a copy of token_embd.weight in this file.
  EXPECT_EQ(std::memcmp(f.find_tensor("output.weight")->data, f.find_tensor("token_embd.weight")->data, 64 * 512 * 4),
            0);
}

TEST(gguf, TypedGetterErrors) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << "required shared file missing: " << kModel;
  GgufFile f = GgufFile::open(kModel);
  EXPECT_NE(format_error([&] {
              f.get_u32("general.architecture");
            }).find("key 'general.architecture' has type string, expected uint32"),
            std::string::npos);
  EXPECT_NE(format_error([&] { f.get_u32("llama.block_countx"); }).find("missing key 'llama.block_countx'"),
            std::string::npos);
  EXPECT_NE(format_error([&] { f.get_string("llama.block_count"); }).find("has type uint32, expected string"),
            std::string::npos);
  EXPECT_NE(format_error([&] {
              f.get_strings("tokenizer.ggml.scores");
            }).find("has type array of float32, expected array of string"),
            std::string::npos);
  EXPECT_FALSE(f.find_u32("nope").has_value());
  EXPECT_EQ(f.find_u32("llama.block_count"), 5u);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_NE(f.get("tokenizer.ggml.tokens").to_string(3).find("\"<unk>\", \"<s>\", \"</s>\", ..."), std::string::npos);
}

TEST(gguf, MissingFileIsAnError) {
  std::string msg = format_error([] { GgufFile::open("../shared/models/no-such-model.gguf"); });
  EXPECT_EQ(msg, "cannot open model '../shared/models/no-such-model.gguf': No such file or directory");
  EXPECT_NE(format_error([] { GgufFile::open("../shared/models"); }).find("Is a directory"), std::string::npos);
}

TEST(gguf, MoveKeepsViewsValid) {
  ASSERT_TRUE(std::filesystem::exists(kModel)) << "required shared file missing: " << kModel;
  GgufFile a = GgufFile::open(kModel);
  const void* data = a.tensors()[0].data;
  GgufFile b = std::move(a);
  GgufFile c = GgufFile::open(kModel);
  c = std::move(b);
  EXPECT_EQ(c.tensors()[0].data, data);
  EXPECT_EQ(c.get_string("general.architecture"), "llama");
  EXPECT_EQ(c.find_tensor("output.weight")->name, "output.weight");
}

// ---------------------------------------------------------------------------------------------
// Writer round trip.

TEST(gguf, WriterRoundTripsEveryValueType) {
  GgufWriter w;
  w.add_u8("v.u8", 200);
  w.add_i8("v.i8", -100);
  w.add_u16("v.u16", 60000);
  w.add_i16("v.i16", -30000);
  w.add_u32("v.u32", 4000000000u);
  w.add_i32("v.i32", -2000000000);
  w.add_u64("v.u64", 18000000000000000000ull);
  w.add_i64("v.i64", -9000000000000000000ll);
  w.add_f32("v.f32", 1.5f);
  w.add_f64("v.f64", -2.25);
  w.add_bool("v.bool", true);
  w.add_string("v.string", "h\xC3\xA9llo");
  w.add_string("v.empty", "");
  w.add_array("a.u8", std::vector<uint8_t>{1, 2, 255});
  w.add_array("a.i8", std::vector<int8_t>{-1, 2});
  w.add_array("a.u16", std::vector<uint16_t>{65535});
  w.add_array("a.i16", std::vector<int16_t>{-5, 5});
  w.add_array("a.u32", std::vector<uint32_t>{7, 4294967295u});
  w.add_array("a.i32", std::vector<int32_t>{-7, 7, 0});
  w.add_array("a.u64", std::vector<uint64_t>{1ull << 60});
  w.add_array("a.i64", std::vector<int64_t>{-(1ll << 60)});
  w.add_array("a.f32", std::vector<float>{0.5f, -0.25f});
  w.add_array("a.f64", std::vector<double>{1e300});
  w.add_bool_array("a.bool", {true, false, true});
  w.add_array("a.string", std::vector<std::string>{"a", "", "b c"});
  w.add_array("a.nested", std::vector<std::vector<std::string>>{{"x", "y"}, {}, {"z"}});
  w.add_array("a.empty", std::vector<float>{});
  std::vector<float> values{1, 2, 3, 4, 5, 6};
  w.add_tensor("t.f32", {3, 2}, values);
  w.add_tensor("t.f16", {4}, TensorType::f16, std::vector<uint8_t>{0, 0x3C, 0, 0xC0, 0, 0, 0, 0x7C});
  w.add_tensor("t.rows", {2, 3}, TensorType::f32, [](int64_t first, int64_t n, std::span<uint8_t> out) {
    for (int64_t r = 0; r < n; ++r) {
      float row[2] = {static_cast<float>(first + r), -static_cast<float>(first + r)};
      std::memcpy(out.data() + r * 8, row, 8);
    }
  });
  EXPECT_EQ(w.key_count(), 27u);
  EXPECT_EQ(w.tensor_count(), 3u);

  std::string path = temp_path("roundtrip.gguf");
  w.write(path);
  std::vector<uint8_t> bytes = w.to_bytes();
  EXPECT_EQ(std::filesystem::file_size(path), bytes.size());
  for (int pass = 0; pass < 2; ++pass) {
    GgufFile f = pass == 0 ? GgufFile::open(path) : GgufFile::from_bytes(bytes);
    EXPECT_EQ(f.version(), 3u);
    ASSERT_EQ(f.keys().size(), 27u);
    EXPECT_EQ(f.keys()[0], "v.u8");
    EXPECT_EQ(f.keys()[26], "a.empty");
    EXPECT_EQ(f.get("v.u8").type(), GgufType::u8);
    EXPECT_EQ(f.get_u32("v.u8"), 200u);
    EXPECT_EQ(f.get_i32("v.i8"), -100);
    EXPECT_EQ(f.get_u32("v.u16"), 60000u);
    EXPECT_EQ(f.get_i32("v.i16"), -30000);
    EXPECT_EQ(f.get_u32("v.u32"), 4000000000u);
    EXPECT_EQ(f.get_i32("v.i32"), -2000000000);
    EXPECT_EQ(f.get_u64("v.u64"), 18000000000000000000ull);
    EXPECT_EQ(f.get("v.i64").as_i64(), -9000000000000000000ll);
    EXPECT_EQ(f.get_f32("v.f32"), 1.5f);
    EXPECT_EQ(f.get("v.f64").as_f64(), -2.25);
    EXPECT_EQ(f.get("v.f64").type(), GgufType::f64);
    EXPECT_TRUE(f.get_bool("v.bool"));
    EXPECT_EQ(f.get_string("v.string"), "h\xC3\xA9llo");
    EXPECT_EQ(f.get_string("v.empty"), "");
    // Range checks of the integer getters.
    EXPECT_NE(format_error([&] { f.get_u32("v.i8"); }).find("must not be negative"), std::string::npos);
    EXPECT_NE(format_error([&] { f.get_i32("v.u32"); }).find("does not fit int32"), std::string::npos);
    EXPECT_NE(format_error([&] { f.get_u32("v.u64"); }).find("does not fit uint32"), std::string::npos);

    const GgufValue& u8s = f.get_array("a.u8");
    EXPECT_EQ(u8s.array_type(), GgufType::u8);
    ASSERT_EQ(u8s.size(), 3u);
    EXPECT_EQ(u8s.integer_at(2), 255);
    EXPECT_EQ(f.get_i32s("a.i8"), (std::vector<int32_t>{-1, 2}));
    EXPECT_EQ(f.get_i32s("a.u16"), (std::vector<int32_t>{65535}));
    EXPECT_EQ(f.get_i32s("a.i16"), (std::vector<int32_t>{-5, 5}));
    EXPECT_EQ(f.get_array("a.u32").integer_at(1), 4294967295);
    EXPECT_EQ(f.get_i32s("a.i32"), (std::vector<int32_t>{-7, 7, 0}));
    EXPECT_EQ(f.get_array("a.u64").integer_at(0), 1ll << 60);
    EXPECT_EQ(f.get_array("a.i64").integer_at(0), -(1ll << 60));
    EXPECT_EQ(f.get_f32s("a.f32"), (std::vector<float>{0.5f, -0.25f}));
    EXPECT_EQ(f.get_array("a.f64").number_at(0), 1e300);
    EXPECT_EQ(f.get_array("a.bool").array_type(), GgufType::boolean);
    EXPECT_EQ(f.get_array("a.bool").integer_at(1), 0);
    EXPECT_EQ(f.get_array("a.bool").to_string(), "[true, false, true]");
    auto strings = f.get_strings("a.string");
    ASSERT_EQ(strings.size(), 3u);
    EXPECT_EQ(strings[0], "a");
    EXPECT_EQ(strings[1], "");
    EXPECT_EQ(strings[2], "b c");
    auto nested = f.get("a.nested").items();
    ASSERT_EQ(nested.size(), 3u);
    EXPECT_EQ(nested[0].strings().size(), 2u);
    EXPECT_EQ(nested[0].strings()[1], "y");
    EXPECT_EQ(nested[1].strings().size(), 0u);
    EXPECT_EQ(nested[2].strings()[0], "z");
    EXPECT_EQ(f.get("a.nested").to_string(), R"([["x", "y"], [], ["z"]])");
    EXPECT_EQ(f.get_f32s("a.empty").size(), 0u);

    ASSERT_EQ(f.tensors().size(), 3u);
    const GgufTensor* t = f.find_tensor("t.f32");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->n_dims, 2);
    EXPECT_EQ(t->ne[0], 3);
    EXPECT_EQ(t->ne[1], 2);
    EXPECT_EQ(t->n_bytes, 24u);
    EXPECT_EQ(std::memcmp(t->data, values.data(), 24), 0);
    const GgufTensor* h = f.find_tensor("t.f16");
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->type(), TensorType::f16);
    EXPECT_EQ(h->offset, 32u);
    float decoded[4];
    dequantize_row(TensorType::f16, h->data, decoded, 4);
    EXPECT_EQ(decoded[0], 1.0f);
    EXPECT_EQ(decoded[1], -2.0f);
    EXPECT_EQ(decoded[2], 0.0f);
    EXPECT_TRUE(std::isinf(decoded[3]));
    const GgufTensor* rows = f.find_tensor("t.rows");
    ASSERT_NE(rows, nullptr);
    const auto* rv = static_cast<const float*>(rows->data);
    EXPECT_EQ(std::vector<float>(rv, rv + 6), (std::vector<float>{0, -0.0f, 1, -1, 2, -2}));
    EXPECT_EQ(f.data_offset() % 32, 0u);
  }
  std::filesystem::remove(path);
}

TEST(gguf, WriterAlignment) {
  GgufWriter w(64);
  w.add_tensor("a", {3}, std::vector<float>{1, 2, 3});
  w.add_tensor("b", {5}, std::vector<float>{1, 2, 3, 4, 5});
  GgufFile f = GgufFile::from_bytes(w.to_bytes());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_u32("general.alignment"), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.find_tensor("b")->offset, 64u);
  EXPECT_THROW(GgufWriter(48), InvalidArgument);
  // Setting the key on a default writer changes the padding too, so the file stays valid.
  GgufWriter k;
  k.add_u32("general.alignment", 128);
  k.add_tensor("a", {3}, std::vector<float>{1, 2, 3});
  k.add_tensor("b", {1}, std::vector<float>{4});
  GgufFile g = GgufFile::from_bytes(k.to_bytes());
  EXPECT_EQ(g.data_offset() % 128, 0u);
  EXPECT_EQ(g.find_tensor("b")->offset, 128u);
  EXPECT_THROW(k.add_u32("general.alignment", 64), InvalidArgument);  // a second time
  GgufWriter bad;
  EXPECT_THROW(bad.add_u32("general.alignment", 3), InvalidArgument);
}

TEST(gguf, WriterRefusesBadInput) {
  GgufWriter w;
  w.add_u32("k", 1);
  EXPECT_THROW(w.add_u32("k", 2), InvalidArgument);
  EXPECT_THROW(w.add_string("", "x"), InvalidArgument);
  w.add_tensor("t", {2}, std::vector<float>{1, 2});
  EXPECT_THROW(w.add_tensor("t", {2}, std::vector<float>{1, 2}), InvalidArgument);
  EXPECT_THROW(w.add_tensor("u", {3}, std::vector<float>{1, 2}), InvalidArgument);
  EXPECT_THROW(w.add_tensor("q", {33}, TensorType::q8_0, std::vector<uint8_t>(36)), InvalidArgument);
  EXPECT_THROW(w.add_tensor("v", {1, 1, 1, 1, 1}, std::vector<float>{1}), InvalidArgument);
  // The refused tensors left nothing behind.
  EXPECT_EQ(w.tensor_count(), 1u);
  EXPECT_NO_THROW(w.add_tensor("u", {2}, std::vector<float>{1, 2}));
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), Error);
}

// ---------------------------------------------------------------------------------------------
// Random models.

TEST(gguf, RandomLlamaModel) {
  RandomModelSpec spec;
  spec.dim = 64;
  spec.n_layers = 2;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 96;
  spec.vocab = 400;
  GgufFile f = GgufFile::from_bytes(random_model_writer(spec).to_bytes());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.embedding_length"), 64u);
  EXPECT_EQ(f.get_u32("llama.block_count"), 2u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.get_u32("llama.feed_forward_length"), 96u);
  EXPECT_EQ(f.get_u32("llama.rope.dimension_count"), 16u);
  EXPECT_EQ(f.get_u32("llama.context_length"), 2048u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  auto tokens = f.get_strings("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 400u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[258], "<0xFF>");
  EXPECT_EQ(tokens[259], "\xE2\x96\x81");
  EXPECT_EQ(f.get_f32s("tokenizer.ggml.scores").size(), 400u);
  EXPECT_EQ(f.tensors().size(), 3u + 2 * 9);
  EXPECT_EQ(f.tensors()[0].name, "token_embd.weight");
  EXPECT_NE(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias"), nullptr);
  auto shape = [&](const char* name) {
    const GgufTensor* t = f.find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? std::vector<int64_t>(t->dims().begin(), t->dims().end()) : std::vector<int64_t>{};
  };
  EXPECT_EQ(shape("token_embd.weight"), (std::vector<int64_t>{64, 400}));
  EXPECT_EQ(shape("blk.1.attn_k.weight"), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(shape("blk.1.ffn_down.weight"), (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(shape("blk.0.ffn_norm.weight"), (std::vector<int64_t>{64}));
  // Matrix weights have variance about 1/fan_in; norms sit near 1.
  const GgufTensor* q = f.find_tensor("blk.0.attn_q.weight");
  const auto* w = static_cast<const float*>(q->data);
  double sum2 = 0;
  for (int64_t i = 0; i < q->n_elements(); ++i) sum2 += double(w[i]) * w[i];
  EXPECT_NEAR(sum2 / static_cast<double>(q->n_elements()), 1.0 / 64, 0.1 / 64);
  const auto* norm = static_cast<const float*>(f.find_tensor("output_norm.weight")->data);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(norm[i], 1.0f, 0.1f);
}

TEST(gguf, RandomModelIsDeterministic) {
  RandomModelSpec spec;
  spec.weight_type = TensorType::q8_0;
  std::vector<uint8_t> a = random_model_writer(spec).to_bytes();
  EXPECT_EQ(a, random_model_writer(spec).to_bytes());
  spec.seed = 2;
  EXPECT_NE(a, random_model_writer(spec).to_bytes());
  GgufFile f = GgufFile::from_bytes(a);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type(), TensorType::q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.attn_norm.weight")->type(), TensorType::f32);
  EXPECT_EQ(f.get_u32("general.file_type"), 7u);
}

// Fixed values: the generator is specified bit for bit, so these hold on every platform; a change
// to it must be deliberate.
TEST(gguf, RandomModelGolden) {
  GgufFile f = GgufFile::from_bytes(random_model_writer(RandomModelSpec{}).to_bytes());
  auto bits = [&](const char* name, int i) {
    uint32_t b = 0;
    std::memcpy(&b, static_cast<const float*>(f.find_tensor(name)->data) + i, 4);
    return b;
  };
  EXPECT_EQ(bits("blk.0.attn_q.weight", 0), 0xbe251062u);
  EXPECT_EQ(bits("blk.0.attn_q.weight", 1), 0x3e1db345u);
  EXPECT_EQ(bits("blk.0.attn_q.weight", 2), 0x39cd2051u);
  EXPECT_EQ(bits("output_norm.weight", 0), 0x3f7ec177u);
}

TEST(gguf, RandomQwen2ModelTied) {
  RandomModelSpec spec;
  spec.arch = "qwen2";
  spec.tied_embeddings = true;
  spec.weight_type = TensorType::f16;
  spec.vocab = 300;
  GgufFile f = GgufFile::from_bytes(random_model_writer(spec).to_bytes());
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f.get_u32("qwen2.block_count"), 2u);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  ASSERT_NE(f.find_tensor("blk.1.attn_q.bias"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.1.attn_k.bias")->type(), TensorType::f32);
  EXPECT_EQ(f.find_tensor("blk.1.attn_v.bias")->ne[0], 32);
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type(), TensorType::f16);
  EXPECT_EQ(f.tensors().size(), 2u + 2 * 12);
}

// llama.cpp's Q4_K_M recipe over 16 layers: Q6_K attn_v / ffn_down in layers 0-1 and 14-15 (the
// first and last eighth) and 4, 7, 10, 13 (every third between); the tied embedding in Q6_K.
TEST(gguf, RandomModelQ4_KMRecipe) {
  RandomModelSpec spec;
  spec.dim = 256;
  spec.ffn_dim = 256;
  spec.n_layers = 16;
  spec.vocab = 300;
  spec.weight_type = TensorType::q4_k;
  spec.k_quant_mix = true;
  spec.tied_embeddings = true;
  GgufFile f = GgufFile::from_bytes(random_model_writer(spec).to_bytes());
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type(), TensorType::q6_k);
  const std::set<int> favoured = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int l = 0; l < 16; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const TensorType expected = favoured.count(l) ? TensorType::q6_k : TensorType::q4_k;
    EXPECT_EQ(f.find_tensor(p + "attn_v.weight")->type(), expected) << l;
    EXPECT_EQ(f.find_tensor(p + "ffn_down.weight")->type(), expected) << l;
    EXPECT_EQ(f.find_tensor(p + "attn_q.weight")->type(), TensorType::q4_k) << l;
    EXPECT_EQ(f.find_tensor(p + "ffn_up.weight")->type(), TensorType::q4_k) << l;
  }
  spec.tied_embeddings = false;
  f = GgufFile::from_bytes(random_model_writer(spec).to_bytes());
  EXPECT_EQ(f.find_tensor("token_embd.weight")->type(), TensorType::q4_k);
  EXPECT_EQ(f.find_tensor("output.weight")->type(), TensorType::q6_k);
  spec.weight_type = TensorType::q8_0;  // the recipe is for Q4_K only
  EXPECT_THROW(random_model_writer(spec), InvalidArgument);
}

TEST(gguf, Llama1BSpecIsLlama32Shaped) {
  const RandomModelSpec s = llama_1b_spec(TensorType::q8_0);
  EXPECT_EQ(s.dim, 2048);
  EXPECT_EQ(s.n_layers, 16);
  EXPECT_EQ(s.n_heads, 32);
  EXPECT_EQ(s.n_kv_heads, 8);
  EXPECT_EQ(s.ffn_dim, 8192);
  EXPECT_EQ(s.vocab, 128256);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_EQ(s.weight_type, TensorType::q8_0);
}

TEST(gguf, RandomModelSpecChecked) {
  RandomModelSpec spec;
  spec.weight_type = TensorType::q4_k;  // dim 64 is not a multiple of 256
  EXPECT_THROW(random_model_writer(spec), InvalidArgument);
  spec = RandomModelSpec{};
  spec.n_kv_heads = 3;
  EXPECT_THROW(random_model_writer(spec), InvalidArgument);
  spec = RandomModelSpec{};
  spec.vocab = 100;
  EXPECT_THROW(random_model_writer(spec), InvalidArgument);
  spec = RandomModelSpec{};
  spec.arch = "gpt2";
  EXPECT_THROW(random_model_writer(spec), InvalidArgument);
}

TEST(gguf, RandomModelWritesToDisk) {
  RandomModelSpec spec;
  spec.dim = 256;
  spec.ffn_dim = 512;
  spec.n_heads = 8;
  spec.n_kv_heads = 4;
  spec.vocab = 2000;
  spec.weight_type = TensorType::q4_k;
  std::string path = temp_path("random.gguf");
  write_random_model(path, spec);
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down.weight")->type(), TensorType::q4_k);
  EXPECT_EQ(f.get_strings("tokenizer.ggml.tokens").size(), 2000u);
  EXPECT_EQ(f.data_offset() + f.tensors().back().offset + f.tensors().back().n_bytes, f.file_size());
  std::filesystem::remove(path);
}

// ---------------------------------------------------------------------------------------------
// One handcrafted broken file per fault. The base file has distinctive names so each field can be
// found by searching the bytes.

std::vector<uint8_t> base_file(uint32_t q_type_id = 0) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("general.alignment", 32);
  w.add_u32("dup.a", 1);
  w.add_u32("dup.b", 2);
  w.add_bool("flag.x", true);
  w.add_array("list.s", std::vector<std::string>{"one", "two"});
  w.add_tensor("ta.weight", {8, 2}, std::vector<float>(16, 1.0f));
  if (q_type_id == 0) {
    w.add_tensor("tb.weight", {4}, std::vector<float>{1, 2, 3, 4});
  } else {
    w.add_raw_tensor("tb.weight", {256}, q_type_id, std::vector<uint8_t>(84, 0));
  }
  return w.to_bytes();
}

size_t find(const std::vector<uint8_t>& bytes, std::string_view s) {
  auto it = std::search(bytes.begin(), bytes.end(), s.begin(), s.end());
  EXPECT_NE(it, bytes.end()) << s;
  return static_cast<size_t>(it - bytes.begin());
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t at, T v) {
  ASSERT_LE(at + sizeof v, bytes.size());
  std::memcpy(bytes.data() + at, &v, sizeof v);
}

// Byte position of tensor `name`'s fields: n_dims, ne[0], then (for 1-d/2-d) type and offset.
size_t tensor_field(const std::vector<uint8_t>& bytes, std::string_view name) {
  return find(bytes, name) + name.size();
}

#define EXPECT_CONTAINS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(ggufCorrupt, BaseFileIsValid) {
  GgufFile f = GgufFile::from_bytes(base_file());
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.keys().size(), 6u);
}

TEST(ggufCorrupt, TruncatedAtEveryOffset) {
  std::vector<uint8_t> bytes = base_file();
  // Every prefix that ends before the last tensor's data does is malformed (the padding after
  // it is optional).
  GgufFile good = GgufFile::from_bytes(bytes);
  uint64_t end = good.data_offset() + good.tensors().back().offset + good.tensors().back().n_bytes;
  ASSERT_LT(end, bytes.size());
  EXPECT_NO_THROW(GgufFile::from_bytes(std::span(bytes).first(end)));
  for (size_t n = 0; n < end; ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    std::string msg = parse_error(cut);
    EXPECT_TRUE(msg.find("unexpected end of file") != std::string::npos ||
                msg.find("extends past the end of the file") != std::string::npos ||
                msg.find("impossible") != std::string::npos || msg.find("exceeds") != std::string::npos)
        << n << ": " << msg;
  }
  EXPECT_CONTAINS(parse_error({}), "unexpected end of file reading the magic at byte 0");
  EXPECT_CONTAINS(parse_error({'G', 'G', 'U', 'F', 3, 0}), "reading the version");
}

TEST(ggufCorrupt, TruncatedOnDisk) {
  std::vector<uint8_t> bytes = base_file();
  GgufFile good = GgufFile::from_bytes(bytes);
  uint64_t end = good.data_offset() + good.tensors().back().offset + good.tensors().back().n_bytes;
  std::string path = temp_path("truncated.gguf");
  for (size_t n : {size_t{0}, size_t{3}, size_t{20}, static_cast<size_t>(end - 1)}) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    if (n) std::fwrite(bytes.data(), 1, n, f);
    std::fclose(f);
    std::string msg = format_error([&] { GgufFile::open(path); });
    EXPECT_CONTAINS(msg, "model '" + path + "'");
  }
  std::filesystem::remove(path);
}

TEST(ggufCorrupt, WrongMagic) {
  std::vector<uint8_t> bytes = base_file();
  bytes[0] = 'X';
  EXPECT_CONTAINS(parse_error(bytes), "header: bad magic 'XGUF', expected 'GGUF'");
}

TEST(ggufCorrupt, Version1And99) {
  std::vector<uint8_t> bytes = base_file();
  poke<uint32_t>(bytes, 4, 1);
  EXPECT_CONTAINS(parse_error(bytes), "version 1 is not supported");
  poke<uint32_t>(bytes, 4, 99);
  EXPECT_CONTAINS(parse_error(bytes), "version 99 is not supported");
  poke<uint32_t>(bytes, 4, 0x03000000);  // a big-endian v3 file
  EXPECT_CONTAINS(parse_error(bytes), "big-endian");
  poke<uint32_t>(bytes, 4, 2);  // v2 has the same layout as v3
  EXPECT_EQ(GgufFile::from_bytes(bytes).version(), 2u);
}

TEST(ggufCorrupt, TensorPastEndOfFile) {
  std::vector<uint8_t> bytes = base_file();
  GgufFile good = GgufFile::from_bytes(bytes);
  uint64_t begin = good.data_offset() + good.find_tensor("tb.weight")->offset;
  bytes.resize(begin + 12);  // 4 of its 16 bytes missing
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'tb.weight': data [" + std::to_string(begin) + ", " +
                                          std::to_string(begin + 16) + ") extends past the end of the file (" +
                                          std::to_string(bytes.size()) + " bytes)");
  // A larger shape runs past the end too.
  bytes = base_file();
  poke<int64_t>(bytes, tensor_field(bytes, "tb.weight") + 4, 4000);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'tb.weight': data [");
}

TEST(ggufCorrupt, OverflowingCountsAndSizes) {
  std::vector<uint8_t> bytes = base_file();
  poke<uint64_t>(bytes, 8, 1ull << 62);  // tensor count
  EXPECT_CONTAINS(parse_error(bytes), "tensor count 4611686018427387904 is impossible");
  bytes = base_file();
  poke<uint64_t>(bytes, 16, ~0ull);  // key count
  EXPECT_CONTAINS(parse_error(bytes), "key count 18446744073709551615 is impossible");
  bytes = base_file();
  poke<uint64_t>(bytes, find(bytes, "list.s") + 6 + 4 + 4, 1ull << 61);  // string array length
  EXPECT_CONTAINS(parse_error(bytes), "key 'list.s': array of string length 2305843009213693952");
  // Element count overflow: ne = [2^62, 4].
  bytes = base_file();
  size_t ta = tensor_field(bytes, "ta.weight");
  poke<int64_t>(bytes, ta + 4, 1ll << 62);
  poke<int64_t>(bytes, ta + 12, 4);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'ta.weight': element count of [4611686018427387904, 4] overflows int64");
  // Byte count overflow: 2^62 F32 elements fit int64 but not 2^64 bytes.
  bytes = base_file();
  poke<int64_t>(bytes, ta + 4, 1ll << 62);
  poke<int64_t>(bytes, ta + 12, 1);
  EXPECT_CONTAINS(parse_error(bytes), "byte size of [4611686018427387904, 1] F32 overflows");
  bytes = base_file();
  poke<int64_t>(bytes, ta + 4, -8);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'ta.weight': ne[0] = -8 is negative");
}

TEST(ggufCorrupt, HugeStringLength) {
  std::vector<uint8_t> bytes = base_file();
  size_t key = find(bytes, "general.architecture") - 8;
  poke<uint64_t>(bytes, key, 1ull << 60);
  EXPECT_CONTAINS(parse_error(bytes), "key #0: the key name length 1152921504606846976 exceeds the");
  bytes = base_file();
  poke<uint64_t>(bytes, find(bytes, "llama") - 8, ~0ull);
  EXPECT_CONTAINS(parse_error(bytes),
                  "key 'general.architecture': the string value length 18446744073709551615 exceeds");
  bytes = base_file();
  poke<uint64_t>(bytes, find(bytes, "ta.weight") - 8, 1ull << 40);
  EXPECT_CONTAINS(parse_error(bytes), "tensor #0: the tensor name length 1099511627776 exceeds");
}

TEST(ggufCorrupt, DuplicateKey) {
  std::vector<uint8_t> bytes = base_file();
  bytes[find(bytes, "dup.b") + 4] = 'a';
  EXPECT_CONTAINS(parse_error(bytes), "key 'dup.a': duplicate key");
}

TEST(ggufCorrupt, EmptyKeyAndTensorName) {
  std::vector<uint8_t> bytes = base_file();
  // A zero-length key: the parser stops at once, before misreading the rest.
  poke<uint64_t>(bytes, find(bytes, "dup.a") - 8, 0);
  EXPECT_CONTAINS(parse_error(bytes), "key #2: empty key name");
  bytes = base_file();
  poke<uint64_t>(bytes, find(bytes, "tb.weight") - 8, 0);
  EXPECT_CONTAINS(parse_error(bytes), "tensor #1: empty tensor name");
}

TEST(ggufCorrupt, DuplicateTensorName) {
  std::vector<uint8_t> bytes = base_file();
  bytes[find(bytes, "tb.weight") + 1] = 'a';
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'ta.weight': duplicate tensor name");
}

TEST(ggufCorrupt, BadAlignment) {
  std::vector<uint8_t> bytes = base_file();
  size_t value = find(bytes, "general.alignment") + 17 + 4;
  poke<uint32_t>(bytes, value, 0);
  EXPECT_CONTAINS(parse_error(bytes), "key 'general.alignment': alignment 0 is not a nonzero power of two");
  poke<uint32_t>(bytes, value, 3);
  EXPECT_CONTAINS(parse_error(bytes), "alignment 3 is not a nonzero power of two");
  poke<uint32_t>(bytes, value - 4, static_cast<uint32_t>(GgufType::i32));
  poke<uint32_t>(bytes, value, 32);
  EXPECT_CONTAINS(parse_error(bytes), "key 'general.alignment': has type int32, expected uint32");
}

TEST(ggufCorrupt, MisalignedOrScatteredOffset) {
  std::vector<uint8_t> bytes = base_file();
  size_t offset = tensor_field(bytes, "tb.weight") + 4 + 8 + 4;  // n_dims, ne[0], type
  uint64_t good = 0;
  std::memcpy(&good, bytes.data() + offset, 8);
  EXPECT_EQ(good, 64u);
  poke<uint64_t>(bytes, offset, good + 4);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'tb.weight': offset 68 is not a multiple of the alignment 32");
  poke<uint64_t>(bytes, offset, good + 32);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'tb.weight': offset 96, expected 64");
  poke<uint64_t>(bytes, offset, 0);  // overlaps ta.weight
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'tb.weight': offset 0, expected 64");
}

// A real Q5_0 tensor (Gemma 3 270M's blk.0.attn_k.weight, 640 x 256) dequantised as the gguf
// Python package dequantises it (gguf 0.19.0, numpy):
//   r = gguf.GGUFReader("gemma-3-270m-q4_k_m.gguf"); t = [t for t in r.tensors if t.name == "blk.0.attn_k.weight"][0]
//   y = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
//   y[i] for the indices below ("%.9g"), y.astype(np.float64).sum() and np.abs(...).sum()
TEST(gguf, Gemma3Q5_0TensorMatchesTheGgufPackage) {
  const GgufFile f = GgufFile::open(test::real_model_path(test::kGemma3File));
  const GgufTensor* t = f.find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type(), TensorType::q5_0);
  ASSERT_EQ(t->n_dims, 2);
  ASSERT_EQ(t->ne[0], 640);
  ASSERT_EQ(t->ne[1], 256);
  const int64_t n = t->ne[0] * t->ne[1];
  ASSERT_EQ(t->n_bytes, static_cast<uint64_t>(n / 32 * 22));
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(TensorType::q5_0, t->data, y.data(), n);  // rows are contiguous whole blocks
  const struct {
    size_t index;
    float value;
  } expected[] = {{0, 0.0f},
                  {1, -0.027557373f},
                  {15, -0.0472412109f},
                  {16, 0.0118103027f},
                  {17, -0.027557373f},
                  {31, 0.00393676758f},
                  {32, -0.032409668f},
                  {100, -0.07421875f},
                  {639, -0.0305480957f},
                  {640, 0.00379943848f},
                  {40000, 0.0417480469f},
                  {163839, 0.0240478516f}};
  for (const auto& e : expected) EXPECT_EQ(y[e.index], e.value) << e.index;
  double sum = 0.0, sum_abs = 0.0;
  for (const float v : y) {
    sum += v;
    sum_abs += std::fabs(v);
  }
  EXPECT_NEAR(sum, 32.072463989257812, 1e-9);
  EXPECT_NEAR(sum_abs, 4768.7292938232422, 1e-9);
}

TEST(ggufCorrupt, UnsupportedTypeIsReportedByName) {
  // Q2_K (10) is a real ggml type squeezekv cannot compute on: the file still loads (for
  // `info`), and asking for the tensor's type names it.
  GgufFile f = GgufFile::from_bytes(base_file(10), "q2k.gguf");
  const GgufTensor* t = f.find_tensor("tb.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->supported());
  EXPECT_EQ(t->type_name(), "Q2_K");
  EXPECT_EQ(t->n_bytes, 84u);
  std::string msg = format_error([&] { (void)t->type(); });
  EXPECT_CONTAINS(msg, "tensor 'tb.weight' has type Q2_K, which squeezekv does not support");
  // An id ggml never had is malformed.
  std::vector<uint8_t> bytes = base_file();
  poke<uint32_t>(bytes, tensor_field(bytes, "tb.weight") + 4 + 8, 99);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'tb.weight': invalid tensor type id 99");
  poke<uint32_t>(bytes, tensor_field(bytes, "tb.weight") + 4 + 8, 4);  // retired Q4_2
  EXPECT_CONTAINS(parse_error(bytes), "invalid tensor type id 4");
  // ne[0] must be whole blocks: 4 elements of Q8_0 (block 32).
  poke<uint32_t>(bytes, tensor_field(bytes, "tb.weight") + 4 + 8, 8);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'tb.weight': ne[0] = 4 is not a multiple of the block size 32 of Q8_0");
}

TEST(ggufCorrupt, BadDimensionCount) {
  std::vector<uint8_t> bytes = base_file();
  poke<uint32_t>(bytes, tensor_field(bytes, "ta.weight"), 5);
  EXPECT_CONTAINS(parse_error(bytes), "tensor 'ta.weight': dimension count 5 exceeds 4");
}

TEST(ggufCorrupt, UnknownValueTypes) {
  std::vector<uint8_t> bytes = base_file();
  size_t type = find(bytes, "dup.a") + 5;
  poke<uint32_t>(bytes, type, 13);
  EXPECT_CONTAINS(parse_error(bytes), "key 'dup.a': unknown value type 13");
  bytes = base_file();
  poke<uint32_t>(bytes, find(bytes, "list.s") + 6 + 4, 77);
  EXPECT_CONTAINS(parse_error(bytes), "key 'list.s': unknown array element type 77");
  bytes = base_file();
  bytes[find(bytes, "flag.x") + 6 + 4] = 2;
  EXPECT_CONTAINS(parse_error(bytes), "key 'flag.x': bool value 2 is not 0 or 1");
}

TEST(ggufCorrupt, DeeplyNestedArrays) {
  // key "n", type array, then 100 levels of "array of array, 1 element".
  std::vector<uint8_t> bytes = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  auto put64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(v >> (8 * i)));
  };
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes.push_back(uint8_t(v >> (8 * i)));
  };
  put64(0);
  put64(1);
  put64(1);
  bytes.push_back('n');
  put32(9);
  for (int i = 0; i < 100; ++i) {
    put32(9);
    put64(1);
  }
  EXPECT_CONTAINS(parse_error(bytes), "key 'n': arrays nested deeper than 8 levels");
}

// Mutations of a valid small file must give a valid file or a FormatError, never a crash (this
// test also runs under ASan/UBSan). Successful parses are read in full to catch stray pointers.
std::vector<uint8_t> fuzz_base() {
  GgufWriter w(64);
  w.add_string("general.architecture", "llama");
  w.add_i8("a", -3);
  w.add_f64("b", 0.5);
  w.add_bool("c", true);
  w.add_array("d", std::vector<int16_t>{1, -2, 3});
  w.add_array("e", std::vector<std::string>{"x", "yy"});
  w.add_array("f", std::vector<std::vector<std::string>>{{"p"}, {"q", "r"}});
  w.add_bool_array("g", {true, false});
  w.add_tensor("t0", {4, 2}, std::vector<float>(8, 0.5f));
  w.add_tensor("t1", {32}, TensorType::q8_0, std::vector<uint8_t>(34, 1));
  w.add_raw_tensor("t2", {256}, 10, std::vector<uint8_t>(84, 2));
  return w.to_bytes();
}

TEST(ggufFuzz, MutatedHeadersNeverCrash) {
  std::vector<uint8_t> base = fuzz_base();
  ASSERT_NO_THROW(GgufFile::from_bytes(base));
  std::mt19937_64 rng(20240611);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const uint64_t extremes[] = {0,          1,          0x7f,       0xff,  0xffff,    0x7fffffff,
                               0xffffffff, 1ull << 32, 1ull << 62, ~0ull, 1ull << 63};
  int ok = 0;
  int refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> bytes = base;
    int n_mutations = 1 + static_cast<int>(pick(4));
    for (int m = 0; m < n_mutations; ++m) {
      size_t at = pick(bytes.size());
      switch (pick(4)) {
        case 0:
          bytes[at] = static_cast<uint8_t>(rng());
          break;
        case 1:
          bytes[at] ^= static_cast<uint8_t>(1u << pick(8));
          break;
        case 2: {  // an extreme 8-byte value over a length/count/offset field
          uint64_t v = extremes[pick(std::size(extremes))];
          size_t n = std::min<size_t>(8, bytes.size() - at);
          std::memcpy(bytes.data() + at, &v, n);
          break;
        }
        default:
          bytes.resize(at);
          break;  // truncate
      }
      if (bytes.empty()) break;
    }
    try {
      GgufFile f = GgufFile::from_bytes(bytes, "fuzz.gguf");
      for (size_t i = 0; i < f.keys().size(); ++i) (void)f.get(f.keys()[i]).to_string(1000);
      unsigned sum = 0;
      for (const GgufTensor& t : f.tensors()) {
        const auto* p = static_cast<const uint8_t*>(t.data);
        for (uint64_t b = 0; b < t.n_bytes; ++b) sum += p[b];
        (void)t.type_name();
      }
      (void)sum;
      ++ok;
    } catch (const FormatError&) {
      ++refused;
    }
  }
  std::cout << "[ fuzz ] " << ok << " parsed, " << refused << " refused\n";
  EXPECT_EQ(ok + refused, 3000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace squeezekv
