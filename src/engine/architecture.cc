// The table of architectures (architecture.h).
#include "squeezekv/engine/architecture.h"

#include <array>

namespace squeezekv {
namespace {

using W = LayerWeights;

// In the random-model writer's order: tensor numbers seed the weights, so a new entry goes where
// it changes no existing architecture's files (after the tensors those already have, or in a
// part they lack).
constexpr BlockTensor kBlockTensors[] = {
    {"attn_norm.weight", Extent::dim, Extent::one, BlockPart::always, &W::attn_norm},
    {"attn_q.weight", Extent::dim, Extent::q_dim, BlockPart::always, nullptr, &W::wq},
    {"attn_k.weight", Extent::dim, Extent::kv_dim, BlockPart::always, nullptr, &W::wk},
    {"attn_v.weight", Extent::dim, Extent::kv_dim, BlockPart::always, nullptr, &W::wv, true},
    {"attn_q.bias", Extent::q_dim, Extent::one, BlockPart::qkv_bias, &W::bq},
    {"attn_k.bias", Extent::kv_dim, Extent::one, BlockPart::qkv_bias, &W::bk},
    {"attn_v.bias", Extent::kv_dim, Extent::one, BlockPart::qkv_bias, &W::bv},
    {"attn_q_norm.weight", Extent::head_dim, Extent::one, BlockPart::qk_norm, &W::q_norm},
    {"attn_k_norm.weight", Extent::head_dim, Extent::one, BlockPart::qk_norm, &W::k_norm},
    {"attn_output.weight", Extent::q_dim, Extent::dim, BlockPart::always, nullptr, &W::wo},
    {"post_attention_norm.weight", Extent::dim, Extent::one, BlockPart::post_norms, &W::post_attn_norm},
    {"ffn_norm.weight", Extent::dim, Extent::one, BlockPart::always, &W::ffn_norm},
    {"ffn_gate.weight", Extent::dim, Extent::ffn_dim, BlockPart::always, nullptr, &W::w_gate},
    {"ffn_up.weight", Extent::dim, Extent::ffn_dim, BlockPart::always, nullptr, &W::w_up},
    {"ffn_down.weight", Extent::ffn_dim, Extent::dim, BlockPart::always, nullptr, &W::w_down, true},
    {"post_ffw_norm.weight", Extent::dim, Extent::one, BlockPart::post_norms, &W::post_ffn_norm},
};

// llama.cpp's gemma3 keys (src/models/gemma3.cpp, llama-model.cpp's common hyper-parameters).
constexpr std::string_view kGemma3Keys[] = {
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "rope.freq_base",
    "rope.freq_base_swa",
    "rope.dimension_count",
    "rope.scaling.type",
    "rope.scaling.factor",
    "final_logit_softcapping",
    "vocab_size",
};

constexpr ArchitectureInfo kArchitectures[] = {
    // Llama 2/3, TinyLlama, SmolLM, Mistral without its sliding window.
    {.name = "llama",
     .rope_style = RopeStyle::normal,
     .activation = Activation::silu,
     .qkv_bias = false,
     .qk_norm = false,
     .post_norms = false,
     .embed_scaled = false,
     .sliding_pattern = 0,
     .sliding_rope_base = 0,
     .rope_base = 10000.0f,
     .norm_eps = 1e-5f,
     .keys = {}},
    // Qwen2: q/k/v biases, NeoX-style RoPE.
    {.name = "qwen2",
     .rope_style = RopeStyle::neox,
     .activation = Activation::silu,
     .qkv_bias = true,
     .qk_norm = false,
     .post_norms = false,
     .embed_scaled = false,
     .sliding_pattern = 0,
     .sliding_rope_base = 0,
     .rope_base = 1000000.0f,
     .norm_eps = 1e-6f,
     .keys = {}},
    // Gemma 3: scaled embeddings, Q/K norms, four norms a block, GeGLU, five sliding layers in six.
    {.name = "gemma3",
     .rope_style = RopeStyle::neox,
     .activation = Activation::gelu_tanh,
     .qkv_bias = false,
     .qk_norm = true,
     .post_norms = true,
     .embed_scaled = true,
     .sliding_pattern = 6,
     .sliding_rope_base = 10000.0f,
     .rope_base = 1000000.0f,
     .norm_eps = 1e-6f,
     .keys = kGemma3Keys},
};

}  // namespace

const char* activation_name(Activation activation) {
  return activation == Activation::gelu_tanh ? "gelu_tanh" : "silu";
}

std::span<const BlockTensor> block_tensors() { return kBlockTensors; }

std::span<const ArchitectureInfo> architectures() { return kArchitectures; }

const ArchitectureInfo* find_architecture(std::string_view name) {
  for (const ArchitectureInfo& a : kArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string architecture_names() {
  std::string s;
  for (const ArchitectureInfo& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

}  // namespace squeezekv
