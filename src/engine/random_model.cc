// Random-weight GGUF models of any architecture in architecture.h's table. Each row of each tensor has its own generator state,
// derived from (seed, tensor index, row), so rows can be produced in parallel and in any chunking
// while the bytes stay the same everywhere.
#include "squeezekv/engine/random_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/engine/architecture.h"

namespace squeezekv {

namespace {

// splitmix64 (Steele, Lea, Flood 2014): tiny, fully specified, good enough for test weights.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// What one tensor's values look like: uniform in [center - half_width, center + half_width).
struct Fill {
  float center;
  float half_width;
};

// Writes one row of n values; every step is exact IEEE float arithmetic on integers < 2^24.
void random_row(uint64_t seed, uint64_t tensor, uint64_t row, Fill fill, float* out, int64_t n) {
  uint64_t state = seed;
  state = splitmix64(state) ^ (tensor * 0xD1B54A32D192ED03ull);
  state = splitmix64(state) ^ (row * 0x8CB92BA72F3D8DD7ull);
  for (int64_t i = 0; i < n; ++i) {
    auto u24 = static_cast<float>(splitmix64(state) >> 40);  // [0, 2^24)
    float unit = u24 * (2.0f / 16777216.0f) - 1.0f;          // [-1, 1)
    out[i] = fill.center + fill.half_width * unit;
  }
}

uint32_t file_type_of(TensorType t) { return llama_file_type(t); }  // llama_ftype, from the traits table

// <unk>, <s>, </s>, <0x00>..<0xFF>, then pieces in order of length: the 95 printable ASCII
// characters with "▁" for space, then all strings over {▁, a..z} of length 2, 3, ... Scores
// fall with the index, so shorter pieces merge first, as in a trained SentencePiece model.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

Vocab synthetic_vocab(int64_t size) {
  Vocab v;
  auto add = [&v](std::string text, float score, int32_t type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0, 6);
  }
  const std::string space = "\xE2\x96\x81";
  std::vector<std::string> pieces;
  pieces.push_back(space);
  for (char c = '!'; c <= '~'; ++c) pieces.emplace_back(1, c);
  std::vector<std::string> alphabet{space};
  for (char c = 'a'; c <= 'z'; ++c) alphabet.emplace_back(1, c);
  std::vector<std::string> level{""};  // all strings of the current length
  while (static_cast<int64_t>(v.tokens.size() + pieces.size()) < size) {
    std::vector<std::string> next;
    for (const std::string& p : level) {
      for (const std::string& c : alphabet) next.push_back(p + c);
    }
    if (!level[0].empty()) pieces.insert(pieces.end(), next.begin(), next.end());  // length 1: above
    level = std::move(next);
  }
  for (size_t i = 0; static_cast<int64_t>(v.tokens.size()) < size; ++i) {
    add(pieces[i], -static_cast<float>(i), 1);
  }
  return v;
}

int64_t head_dim_of(const RandomModelSpec& s) { return s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads; }

void check_spec(const RandomModelSpec& s) {
  require(find_architecture(s.arch) != nullptr, "arch", s.arch, "must be one of " + architecture_names());
  // Bounds far above any real model, checked before the vocabulary or a tensor is allocated.
  require(s.dim > 0 && s.dim <= (1 << 16), "dim", s.dim, "must lie in [1, 65536]");
  require(s.n_layers > 0 && s.n_layers <= 4096, "n_layers", s.n_layers, "must lie in [1, 4096]");
  require(s.n_heads > 0 && s.n_heads <= 4096 && (s.head_dim > 0 || s.dim % s.n_heads == 0), "n_heads", s.n_heads,
          "must lie in [1, 4096] and divide dim (unless head_dim is given)");
  require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "n_kv_heads", s.n_kv_heads, "must divide n_heads");
  require(s.head_dim >= 0 && s.head_dim <= 4096, "head_dim", s.head_dim, "must lie in [0, 4096] (0: dim / n_heads)");
  require(head_dim_of(s) % 2 == 0, "head_dim", head_dim_of(s), "must be even (RoPE)");
  require(s.sliding_window >= 0 && s.sliding_window <= (1 << 24), "sliding_window", s.sliding_window,
          "must lie in [0, 16777216]");
  require(s.ffn_dim > 0 && s.ffn_dim <= (1 << 18), "ffn_dim", s.ffn_dim, "must lie in [1, 262144]");
  require(s.vocab >= 259 && s.vocab <= (1 << 21), "vocab", s.vocab,
          "must lie in [259, 2097152] (3 special + 256 byte tokens at least)");
  require(s.context_length > 0 && s.context_length <= (1u << 24), "context_length", s.context_length,
          "must lie in [1, 16777216]");
  require(!s.k_quant_mix || s.weight_type == TensorType::q4_k, "k_quant_mix", "true",
          "needs weight_type Q4_K (the Q4_K_M recipe)");
  int64_t block = block_layout(s.weight_type).block_elems;
  require(s.dim % block == 0, "dim", s.dim, "must be a multiple of the weight type's block size");
  require(head_dim_of(s) * s.n_heads % block == 0, "head_dim", head_dim_of(s),
          "times n_heads must be a multiple of the weight type's block size");
  require(s.ffn_dim % block == 0, "ffn_dim", s.ffn_dim, "must be a multiple of the weight type's block size");
}

// Produces rows of one tensor in parallel: floats from random_row, then quantised.
GgufWriter::RowFiller make_filler(uint64_t seed, uint64_t tensor, int64_t ne0, TensorType type, Fill fill) {
  return [=](int64_t first, int64_t n_rows, std::span<uint8_t> out) {
    size_t row = row_bytes(type, ne0);
    auto work = [&](int64_t begin, int64_t end) {
      std::vector<float> values(static_cast<size_t>(ne0));
      for (int64_t r = begin; r < end; ++r) {
        random_row(seed, tensor, static_cast<uint64_t>(first + r), fill, values.data(), ne0);
        quantize_row(type, values.data(), out.data() + static_cast<size_t>(r) * row, ne0);
      }
    };
    int64_t n_threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
    n_threads = std::min(n_threads, std::max<int64_t>(1, n_rows * ne0 / 65536));
    if (n_threads == 1) return work(0, n_rows);
    std::vector<std::thread> threads;
    for (int64_t t = 0; t < n_threads; ++t) {
      threads.emplace_back(work, n_rows * t / n_threads, n_rows * (t + 1) / n_threads);
    }
    for (auto& th : threads) th.join();
  };
}

}  // namespace

GgufWriter random_model_writer(const RandomModelSpec& s) {
  check_spec(s);
  const ArchitectureInfo& arch = *find_architecture(s.arch);
  const std::string& a = s.arch;
  const int64_t head_dim = head_dim_of(s);
  const int64_t q_dim = head_dim * s.n_heads;
  const int64_t kv_dim = head_dim * s.n_kv_heads;

  GgufWriter w;
  w.add_string("general.architecture", a);
  w.add_string("general.name", "squeezekv random " + a);
  w.add_u32("general.file_type", file_type_of(s.weight_type));
  w.add_u32(a + ".context_length", s.context_length);
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(s.dim));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(s.n_layers));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.ffn_dim));
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  if (s.head_dim > 0) {
    w.add_u32(a + ".attention.key_length", static_cast<uint32_t>(head_dim));
    w.add_u32(a + ".attention.value_length", static_cast<uint32_t>(head_dim));
  }
  w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.add_f32(a + ".rope.freq_base", arch.rope_base);
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", arch.norm_eps);
  if (arch.sliding_pattern > 0 && s.sliding_window > 0) {
    w.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  }
  w.add_u32(a + ".vocab_size", static_cast<uint32_t>(s.vocab));

  Vocab vocab = synthetic_vocab(s.vocab);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_array("tokenizer.ggml.tokens", std::span<const std::string>(vocab.tokens));
  w.add_array("tokenizer.ggml.scores", std::span<const float>(vocab.scores));
  w.add_array("tokenizer.ggml.token_type", std::span<const int32_t>(vocab.types));
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_bool("tokenizer.ggml.add_eos_token", false);

  uint64_t index = 0;  // tensor number: part of each row's generator state
  // A matrix [fan_in, rows] of `type` with variance 1/fan_in; a vector [n] of F32 near `center`.
  auto add_matrix = [&](const std::string& name, int64_t fan_in, int64_t rows, TensorType type) {
    float half = std::sqrt(3.0f / static_cast<float>(fan_in));
    w.add_tensor(name, {fan_in, rows}, type, make_filler(s.seed, index++, fan_in, type, {0, half}));
  };
  auto add_vector = [&](const std::string& name, int64_t n, Fill fill) {
    w.add_tensor(name, {n}, TensorType::f32, make_filler(s.seed, index++, n, TensorType::f32, fill));
  };
  const Fill norm{1.0f, 0.1f};
  const Fill bias{0.0f, 0.02f};
  auto extent = [&](Extent e) -> int64_t {
    switch (e) {
      case Extent::one:
        return 1;
      case Extent::dim:
        return s.dim;
      case Extent::head_dim:
        return head_dim;
      case Extent::q_dim:
        return q_dim;
      case Extent::kv_dim:
        return kv_dim;
      case Extent::ffn_dim:
        return s.ffn_dim;
    }
    return 0;
  };

  // Q4_K_M: the output matrix (token_embd when tied) and some layers' attn_v / ffn_down in Q6_K.
  const TensorType more_bits = s.k_quant_mix ? TensorType::q6_k : s.weight_type;
  auto favoured = [&](int64_t l) {
    const int64_t eighth = s.n_layers / 8;
    return l < eighth || l >= 7 * s.n_layers / 8 || (l - eighth) % 3 == 2;
  };
  add_matrix("token_embd.weight", s.dim, s.vocab, s.tied_embeddings ? more_bits : s.weight_type);
  add_vector("output_norm.weight", s.dim, norm);
  if (!s.tied_embeddings) add_matrix("output.weight", s.dim, s.vocab, more_bits);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const BlockTensor& t : block_tensors()) {
      if (!arch.has(t.part)) continue;
      const std::string name = p + std::string(t.name);
      if (t.matrix != nullptr) {
        add_matrix(name, extent(t.cols), extent(t.rows), t.more_bits && favoured(l) ? more_bits : s.weight_type);
      } else {
        add_vector(name, extent(t.cols), t.part == BlockPart::qkv_bias ? bias : norm);
      }
    }
  }
  return w;
}

void write_random_model(const std::string& path, const RandomModelSpec& spec) { random_model_writer(spec).write(path); }

RandomModelSpec llama_1b_spec(TensorType weight_type) {
  RandomModelSpec s;
  s.dim = 2048;
  s.n_layers = 16;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.ffn_dim = 8192;
  s.vocab = 128256;
  s.weight_type = weight_type;
  s.tied_embeddings = true;
  s.context_length = 8192;
  return s;
}

RandomModelSpec gemma3_270m_spec(TensorType weight_type) {
  RandomModelSpec s;
  s.arch = "gemma3";
  s.dim = 640;
  s.n_layers = 18;
  s.n_heads = 4;
  s.n_kv_heads = 1;
  s.head_dim = 256;
  s.ffn_dim = 2048;
  s.vocab = 262144;
  s.weight_type = weight_type;
  s.tied_embeddings = true;
  s.context_length = 32768;
  s.sliding_window = 512;
  return s;
}

}  // namespace squeezekv
