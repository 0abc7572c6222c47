// Rotary position embedding with llama.cpp's arithmetic (ggml_rope_cache_init + rope_yarn with
// no scaling): the angle is built by repeated float multiplication, not by powf per pair, and
// logits only match llama.cpp to ~1e-5 when this is reproduced exactly.
#include <cmath>
#include <vector>

#include "squeezekv/base/errors.h"
#include "squeezekv/ops/model_ops.h"

namespace squeezekv {
namespace {

void check_n_rot(int64_t n_rot) { require(n_rot > 0 && n_rot % 2 == 0, "n_rot", n_rot, "must be even and > 0"); }

}  // namespace

void rope_cache(int64_t pos, int64_t n_rot, float freq_base, float* cos_sin) {
  check_n_rot(n_rot);
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_rot; i += 2) {
    cos_sin[i] = std::cos(theta);
    cos_sin[i + 1] = std::sin(theta);
    theta *= theta_scale;
  }
}

namespace {

// Rotates each pair by the table's angle; sign -1 turns it back (sine negated, cosine kept).
void rotate_pairs(float* x, int64_t n_rot, RopeStyle style, const float* cos_sin, float sign) {
  check_n_rot(n_rot);
  // Pair i is (x[first], x[first + stride]): adjacent for normal, half a rotation apart for NeoX.
  const int64_t stride = style == RopeStyle::normal ? 1 : n_rot / 2;
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const int64_t first = style == RopeStyle::normal ? 2 * i : i;
    const float c = cos_sin[2 * i], s = sign * cos_sin[2 * i + 1];
    const float x0 = x[first], x1 = x[first + stride];
    x[first] = x0 * c - x1 * s;
    x[first + stride] = x0 * s + x1 * c;
  }
}

}  // namespace

void rope_apply(float* x, int64_t n_rot, RopeStyle style, const float* cos_sin) {
  rotate_pairs(x, n_rot, style, cos_sin, 1.0f);
}

void rope_apply_inverse(float* x, int64_t n_rot, RopeStyle style, const float* cos_sin) {
  rotate_pairs(x, n_rot, style, cos_sin, -1.0f);
}

void rope(float* x, int64_t pos, int64_t n_rot, float freq_base, RopeStyle style) {
  check_n_rot(n_rot);
  // Heads are small (n_rot <= 256 in every Llama variant); larger ones take the heap.
  constexpr int64_t stack_floats = 512;
  float stack[stack_floats];
  std::vector<float> heap;
  float* cos_sin = stack;
  if (n_rot > stack_floats) {
    heap.resize(static_cast<size_t>(n_rot));
    cos_sin = heap.data();
  }
  rope_cache(pos, n_rot, freq_base, cos_sin);
  rope_apply(x, n_rot, style, cos_sin);
}

}  // namespace squeezekv
