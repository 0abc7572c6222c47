// Random-weight GGUF models with the tensor names and metadata llama.cpp writes, for tests and
// benchmarks at any shape (up to 1B-class models, streamed to disk).
#pragma once

#include <cstdint>
#include <string>

#include "squeezekv/engine/gguf_writer.h"
#include "squeezekv/ops/tensor_type.h"

namespace squeezekv {

struct RandomModelSpec {
  std::string arch = "llama";  // a row of architecture.h's table: llama, qwen2 (q/k/v biases), gemma3
  int64_t dim = 64;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t head_dim = 0;          // 0: dim / n_heads (else written as attention.key_length, as gemma3's 256)
  int64_t sliding_window = 512;  // architectures with sliding layers (gemma3): their window
  int64_t ffn_dim = 128;
  int64_t vocab = 512;                       // at least 259: <unk>, <s>, </s> and the 256 byte tokens
  TensorType weight_type = TensorType::f32;  // matrices and token_embd; norms/biases stay F32
  // llama.cpp's Q4_K_M recipe on top of weight_type: Q6_K for token_embd / output and for
  // attn_v and ffn_down in the layers it gives more bits (the first and last eighth, and every
  // third layer between), so a random model reads as many bytes per token as a real Q4_K_M file.
  bool k_quant_mix = false;
  bool tied_embeddings = false;  // true: no output.weight
  uint64_t seed = 1;
  uint32_t context_length = 2048;
};

// A writer holding the whole model; tensor data is generated while it writes. The weights depend
// only on the spec (the generator is fully specified here, identical on every platform).
// InvalidArgument when the spec is inconsistent (e.g. dim not a multiple of the block size).
GgufWriter random_model_writer(const RandomModelSpec& spec);

void write_random_model(const std::string& path, const RandomModelSpec& spec);

// The shape of Llama-3.2-1B (dim 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256,
// tied embeddings, context 8192), with the given weight type: the benchmarks' 1B model.
RandomModelSpec llama_1b_spec(TensorType weight_type);

// The shape of Gemma 3 270M (gemma3: dim 640, 18 layers, 4 heads, 1 KV head, head_dim 256, FFN
// 2048, vocab 262144, tied embeddings, context 32768, sliding window 512). 640-wide rows: the weight
// type's blocks must divide 640 (not the K-quants).
RandomModelSpec gemma3_270m_spec(TensorType weight_type);

}  // namespace squeezekv
