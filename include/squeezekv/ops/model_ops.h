// Element-wise and vector kernels of a Llama forward pass, with llama.cpp's semantics. Every
// SIMD kernel (Highway, dispatched at run time) has a *_scalar twin that tests use as oracle.
// Pointers need no alignment; in-place use (out == x) is allowed where a parameter says so.
#pragma once

#include <cstdint>

namespace squeezekv {

// ------------------------------ normalisation and activations

// out[i] = (x[i] * scale) * weight[i], scale = 1 / sqrtf(mean(x^2) + eps), the squares summed in
// double as ggml_rms_norm does. out may equal x. SIMD vs scalar: scale may differ in the last bit.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);
void rms_norm_scalar(const float* x, const float* weight, int64_t n, float eps, float* out);

// x[i] = exp(x[i] - max x) / sum_j exp(x[j] - max x), the sum taken in double. n >= 1.
// SIMD uses Highway's Exp (1 ulp): relative difference to the scalar twin <= 1e-6.
void softmax_inplace(float* x, int64_t n);
void softmax_inplace_scalar(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may equal gate or up.
void swiglu(const float* gate, const float* up, int64_t n, float* out);
void swiglu_scalar(const float* gate, const float* up, int64_t n, float* out);

// ------------------------------ basic vector ops (bit-identical to their scalar twins, except dot)

void add_inplace(float* dst, const float* src, int64_t n);  // dst[i] += src[i]
void add_inplace_scalar(float* dst, const float* src, int64_t n);
void mul_inplace(float* dst, const float* src, int64_t n);  // dst[i] *= src[i]
void mul_inplace_scalar(float* dst, const float* src, int64_t n);
void scale_inplace(float* x, int64_t n, float s);  // x[i] *= s
void scale_inplace_scalar(float* x, int64_t n, float s);
// dst[i] += a * src[i], multiply then add, unfused (attention: out += p * v).
void axpy(float* dst, const float* src, int64_t n, float a);
void axpy_scalar(float* dst, const float* src, int64_t n, float a);

// sum a[i] * b[i] in f32 (attention scores q . k); SIMD sums in a different order:
// |dot - dot_scalar| <= 1e-6 * sum |a[i] * b[i]| for n up to a few thousand.
float dot(const float* a, const float* b, int64_t n);
float dot_scalar(const float* a, const float* b, int64_t n);

// Index of the largest value (first on ties); n >= 1. Greedy sampling.
int64_t argmax(const float* x, int64_t n);

// log(sum exp(x[i])) in double (negative log-likelihoods for perplexity). n >= 1.
double logsumexp(const float* x, int64_t n);

// ------------------------------ rotary position embedding (llama.cpp's ggml_rope, no scaling)

enum class RopeStyle {
  normal,  // llama.cpp rope type 0: rotates adjacent pairs (x[2i], x[2i+1])
  neox,    // rope type 2 (GPT-NeoX): rotates (x[i], x[i + n_rot/2])
};

// Rotates the first n_rot elements of one head vector x in place for position pos; elements
// from n_rot on are left as they are. Pair i turns by theta_i = pos * freq_base^(-2i/n_rot),
// computed exactly as llama.cpp does: theta_scale = powf(freq_base, -2.0f / n_rot), theta
// starts at (float)pos and is multiplied by theta_scale in float per pair, cosf/sinf in float.
// n_rot must be even and > 0.
void rope(float* x, int64_t pos, int64_t n_rot, float freq_base, RopeStyle style);

// The same in two steps, for many heads at one position: rope_cache fills cos_sin[2i] = cos
// theta_i and cos_sin[2i + 1] = sin theta_i (n_rot floats, like llama.cpp's rope cache);
// rope_apply then rotates with it. rope() is exactly rope_cache + rope_apply, so both give
// bit-identical results.
void rope_cache(int64_t pos, int64_t n_rot, float freq_base, float* cos_sin);
void rope_apply(float* x, int64_t n_rot, RopeStyle style, const float* cos_sin);
// The inverse rotation with the same table: rope_apply_inverse(cos_sin of pos) turns x back by
// pos (positions inside the cache rotate a kept key back by its shift, docs/positions.md).
void rope_apply_inverse(float* x, int64_t n_rot, RopeStyle style, const float* cos_sin);

}  // namespace squeezekv
