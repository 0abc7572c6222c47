// The architectures squeezekv runs, as one table (llama.cpp's llama-arch, gemma.cpp's
// LayerConfig): each row gives the GGUF key prefix, what a block is made of (its tensors, their
// shapes and which optional parts it has) and how its forward pass differs from Llama's. The
// loader (model.cc), the random-model writer (random_model.cc) and `info` all read this table, so
// adding an architecture is one row here plus whatever genuinely new operation it brings
// (docs/architecture.md, "Add an architecture").
#pragma once

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "squeezekv/core/layer_kind.h"
#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {

enum class Activation {
  silu,       // SwiGLU: silu(gate) * up
  gelu_tanh,  // GeGLU: gelu(gate) * up, GELU's tanh approximation
};

const char* activation_name(Activation activation);  // "silu", "gelu_tanh"

// How one layer computes, from the file's keys and its architecture's row.
struct LayerConfig {
  // core/layer_kind.h's kinds, which the cache follows too (Engine::make_cache hands them over).
  AttentionKind attention = AttentionKind::global;
  int window = 0;  // sliding: a query at p sees keys at p - window + 1 .. p; 0 when global
  LayerKind kind() const {
    return attention == AttentionKind::sliding ? LayerKind::sliding(window) : LayerKind::global();
  }
  float rope_base = 10000.0f;
  bool qk_norm = false;     // RMS norm of each query and key head before RoPE (weights [head_dim])
  bool post_norms = false;  // RMS norm of the attention's and the MLP's outputs before each residual add
  Activation activation = Activation::silu;
  float attention_scale = 0;  // multiplies q . k before the softmax
};

// One block's tensors (f32 copies of the vectors, views of the matrices in the mapped file).
struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;            // [dim]
  std::vector<float> bq, bk, bv;                     // qkv_bias: [q_dim], [kv_dim] x2
  std::vector<float> q_norm, k_norm;                 // qk_norm: [head_dim]
  std::vector<float> post_attn_norm, post_ffn_norm;  // post_norms: [dim]
  WeightMatrix wq, wk, wv, wo;                       // [q_dim, dim], [kv_dim, dim] x2, [dim, q_dim]
  WeightMatrix w_gate, w_up, w_down;                 // [ffn, dim] x2, [dim, ffn]

  // The seven matrices, for code that treats them alike (repacking, byte counts).
  std::array<const WeightMatrix*, 7> matrices() const { return {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down}; }
  std::array<WeightMatrix*, 7> matrices() { return {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down}; }
};

// Which optional part of a block a tensor belongs to.
enum class BlockPart { always, qkv_bias, qk_norm, post_norms };

// A tensor's extent along one GGUF dimension.
enum class Extent { one, dim, head_dim, q_dim, kv_dim, ffn_dim };

// A tensor of every block, named "blk.<l>.<name>": a matrix [cols, rows] in GGUF order (ne0 =
// cols) or an f32 vector [cols] (rows = Extent::one). In the random-model writer's order.
struct BlockTensor {
  std::string_view name;
  Extent cols, rows;
  BlockPart part;
  std::vector<float> LayerWeights::*vector = nullptr;  // exactly one of these two
  WeightMatrix LayerWeights::*matrix = nullptr;
  bool more_bits = false;  // the Q4_K_M recipe's Q6_K layers (attn_v, ffn_down)
};

// The tensors of a block, every architecture's parts together; a row of the table keeps those
// whose part it has.
std::span<const BlockTensor> block_tensors();

struct ArchitectureInfo {
  std::string_view name;  // general.architecture, also the prefix of its keys ("<name>.")
  RopeStyle rope_style;
  Activation activation;
  bool qkv_bias;      // attn_{q,k,v}.bias
  bool qk_norm;       // attn_q_norm, attn_k_norm
  bool post_norms;    // post_attention_norm, post_ffw_norm
  bool embed_scaled;  // token embeddings times sqrt(dim) (in f32, as llama.cpp's ggml_scale)
  // Sliding-window attention, when the file sets <name>.attention.sliding_window: every layer is
  // sliding but each sliding_pattern-th (llama.cpp's default pattern when the file has none), at
  // rope base sliding_rope_base unless <name>.rope.freq_base_swa says otherwise. 0: never sliding.
  int sliding_pattern;
  float sliding_rope_base;
  // What the random-model writer puts in the file.
  float rope_base;
  float norm_eps;
  // Every "<name>.*" key the loader honours; the loader refuses any other one, naming it. Empty:
  // keys are not checked (llama and qwen2 files carry keys squeezekv has no use for).
  std::span<const std::string_view> keys;

  bool has(BlockPart part) const {
    return part == BlockPart::always || (part == BlockPart::qkv_bias && qkv_bias) ||
           (part == BlockPart::qk_norm && qk_norm) || (part == BlockPart::post_norms && post_norms);
  }
};

std::span<const ArchitectureInfo> architectures();
// The row named `name`, or null.
const ArchitectureInfo* find_architecture(std::string_view name);
// "llama, qwen2, gemma3": for messages.
std::string architecture_names();

}  // namespace squeezekv
