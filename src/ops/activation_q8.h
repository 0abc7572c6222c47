// Activations quantised to 8 bits per 32-element block, once per matvec/matmul call, so that
// dots with quantised weights run on integers (as ggml's vec_dot_*_q8_0 does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace squeezekv {
class ThreadPool;
}

namespace squeezekv::detail {

inline constexpr int64_t activation_block = 32;

// Where the per-target quantisers write: QuantizedActivations' arrays.
struct QuantizedCodes {
  int16_t* q;
  int8_t* q8;
  float* scale;
  float* scaled_sum;
  int32_t* q8_0_offset;
  int32_t* q6_k_offset;
};

struct QuantizedActivations {
  // x[i] ~= scale[i / 32] * q[i], |q| <= 127; q is widened to int16 once here so kernels load
  // it directly. As ggml's q8_0 and q8_1 blocks (so that greedy output matches llama.cpp's on
  // quantised files): q = round-half-even(x * 127 / max |x|), scale = max |x| / 127 rounded to
  // f16, scaled_sum = scale * sum(q) rounded to f16 from the unrounded scale.
  std::vector<int16_t> q;         // [n_tok * n_cols]
  std::vector<int8_t> q8;         // the same values as bytes, for kernels that multiply bytes
  std::vector<float> scale;       // [n_tok * n_cols / 32]
  std::vector<float> scaled_sum;  // [n_tok * n_cols / 32]: scale * (sum of q over the block), for the mins
  // The prompt tiles' integer offset terms, stored ready to broadcast from memory: -128 * (sum of
  // q over the block) for Q8_0 weights held as w + 128, and -32 * (sum over each 16-element
  // half) for Q6_K's 6-bit values q + 32.
  std::vector<int32_t> q8_0_offset;  // [n_tok * n_cols / 32]
  std::vector<int32_t> q6_k_offset;  // [n_tok * n_cols / 16]

  // n_cols is a multiple of 32 (of 256 for super_blocks). Keeps capacity across calls.
  // super_blocks: one scale per 256 elements, as ggml's q8_K blocks that it dots with K-quant
  // weights: q = min(127, round-half-even(x * iscale)), iscale = -127 / (the element of largest
  // magnitude), scale = 1 / iscale in f32 (negative when that element is positive), repeated for
  // each of the 8 blocks of 32, and scaled_sum = scale * sum(q) over each block of 32.
  // With a pool, a call of kParallelTokens tokens or more splits them over its workers (a prompt
  // chunk's activations, written in disjoint ranges; every code the same as on one thread).
  void assign(const float* x, int64_t n_tok, int64_t n_cols, bool super_blocks = false, ThreadPool* pool = nullptr);
  static constexpr int64_t kParallelTokens = 16;
  // The same, scalar: the oracle of the per-target codes.
  void assign_scalar(const float* x, int64_t n_tok, int64_t n_cols, bool super_blocks = false);

 private:
  void resize(int64_t n_tok, int64_t n_cols);
  QuantizedCodes codes(size_t first_block);
  void assign_super_blocks(const float* x, size_t n_blocks);
  // Block b's codes q = round-half-even(x * inv) and its integer offsets; returns sum(q).
  int32_t quantize_block(const float* xb, float inv, size_t b);
};

// What the per-target kernels read: x itself for float weights, its quantised form otherwise.
struct MatmulInput {
  const float* x = nullptr;                         // [n_tok, n_cols]
  const QuantizedActivations* quantized = nullptr;  // set for quantised weight types
  int64_t n_tok = 0;
};

}  // namespace squeezekv::detail
