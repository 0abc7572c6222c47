// GeGLU, the gated MLP of Gemma: out[i] = gelu(gate[i]) * up[i], with GELU's tanh approximation
// gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (ggml_gelu_f32's formula, in f32
// rather than ggml's f16 lookup table). A SIMD kernel (Highway, dispatched at run time) and its
// scalar twin, the tests' oracle.
#pragma once

#include <cstdint>

namespace squeezekv {

// out may equal gate or up. SIMD uses Highway's Tanh (a few ulp) where the twin uses std::tanh:
// |geglu - geglu_scalar| <= 1e-6 * (|gelu(gate[i]) * up[i]| + |up[i]| * 1e-6) elementwise.
void geglu(const float* gate, const float* up, int64_t n, float* out);
void geglu_scalar(const float* gate, const float* up, int64_t n, float* out);

}  // namespace squeezekv
