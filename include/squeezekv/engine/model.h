// Model: a GGUF model ready to run — hyper-parameters from the metadata, a LayerConfig per layer,
// weight views straight into the memory-mapped file (no dequantised copy), and its tokenizer.
// The architectures are the rows of architecture.h's table (llama, qwen2, gemma3).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "squeezekv/engine/architecture.h"
#include "squeezekv/engine/gguf_reader.h"
#include "squeezekv/engine/tokenizer.h"
#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/repacked_weights.h"

namespace squeezekv {

struct ModelConfig {
  std::string arch;            // general.architecture
  std::string name;            // general.name, if any
  int dim = 0;                 // embedding_length
  int n_layers = 0;            // block_count
  int n_heads = 0;             // attention.head_count
  int n_kv_heads = 0;          // attention.head_count_kv (GQA when smaller)
  int head_dim = 0;            // attention.key_length, else dim / n_heads
  int ffn_dim = 0;             // feed_forward_length
  int vocab = 0;               // rows of token_embd
  int context_length = 0;      // context_length (what the file claims)
  int n_rot = 0;               // rope.dimension_count, else head_dim
  float rope_base = 10000.0f;  // rope.freq_base: the global layers' (each layer's in `layers`)
  float norm_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::normal;
  bool tied_embeddings = false;                       // output.weight absent: logits use token_embd
  bool qkv_bias = false;                              // qwen2
  float embed_scale = 0;                              // token embeddings are multiplied by it (0: left as they are)
  const ArchitectureInfo* info = nullptr;             // the architecture's row of the table
  std::vector<LayerConfig> layers;                    // [n_layers]
  int group() const { return n_heads / n_kv_heads; }  // query heads per KV head
  // What the cache holds per layer (core/layer_kind.h): empty when every layer is global.
  std::vector<LayerKind> layer_kinds() const;
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
};

struct LoadOptions {
  // Repack the quantised matrices for this CPU's tiles when it has them (repacked_weights.h): the same
  // results, faster batches and prompts, and still one resident copy of the weights (the file's
  // pages are released as each range is repacked). Costs a read of those matrices at load.
  bool repack = true;
};

class Model {
 public:
  // Opens and checks the file: FormatError naming the key or tensor (and the shape or type
  // expected) for anything missing, malformed or unsupported.
  static Model load(const std::string& path, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const GgufFile& file() const { return file_; }
  const LayerWeights& layer(int l) const { return layers_[size_t(l)]; }
  const WeightMatrix& token_embedding() const { return token_embd_; }  // [vocab, dim]
  const WeightMatrix& output() const { return output_; }               // [vocab, dim]
  const std::vector<float>& output_norm() const { return output_norm_; }

  // Row `token` of the embedding, dequantised into out[0..dim).
  void embed(int32_t token, float* out) const;
  uint64_t n_params() const;      // elements over all tensors
  uint64_t weight_bytes() const;  // bytes of tensor data in the file
  // Matrices repacked at load, and their bytes (0 when nothing was: LoadOptions, or the CPU).
  size_t repacked_matrices() const { return repacked_matrices_; }
  uint64_t repacked_bytes() const { return repacked_bytes_; }

 private:
  Model(GgufFile file, Tokenizer tokenizer) : file_(std::move(file)), tokenizer_(std::move(tokenizer)) {}
  void repack_weights();

  GgufFile file_;
  Tokenizer tokenizer_;
  ModelConfig config_;
  WeightMatrix token_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  RepackedBuffer repacked_;       // every repacked matrix, which its `repacked` points into
  size_t repacked_matrices_ = 0;  // what repack_weights put in repacked_
  uint64_t repacked_bytes_ = 0;
};

}  // namespace squeezekv
