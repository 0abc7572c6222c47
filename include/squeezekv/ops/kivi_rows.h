// KIVI storage kernels (Liu et al. 2024, arXiv 2402.02750): asymmetric min-max codes of b = 2 or
// 4 bits, keys quantized per channel over a group of G tokens, values per token over groups of
// channels. The cache (core/head_store.h) keeps its recent rows in fp16 and hands full groups to
// these kernels; attention reads the codes directly (the dot products and the weighted value sum
// decode in registers: no dequantized copy). Each SIMD kernel has a scalar twin (`*_scalar`) that
// rounds identically (same products, same order, explicit fused multiply-adds): the tests compare
// them bit for bit.
//
// A group of codes: min m and scale s in fp16 (m rounded down and s up, so that m + s * (2^b - 1)
// covers the group's maximum; s = 0 when the range is empty), codes q = clamp(round((x - m) / s),
// 0, 2^b - 1) (0 when s = 0), decoded x^ = m + s * q; |x - x^| <= s / 2 up to float rounding.
//
// Packing of a run of n codes of b bits (n * b a multiple of 8): with nb = n * b / 8 bytes, byte j
// holds codes j + k * nb for k < 8 / b at bits [k * b, k * b + b) (q4_0's nibble order,
// generalised), so a SIMD kernel turns nb consecutive bytes into 8 / b vectors of consecutive
// codes with shifts and masks.
//
// Key group (G token rows of head_dim channels): fp16 min[head_dim], fp16 scale[head_dim], then per
// channel d one run of G codes (token j of the group is code j), G * b / 8 bytes each.
// Value row (one token): head_dim / Gv groups of Gv channels, Gv = kivi_value_group(G, head_dim);
// each group is fp16 min, fp16 scale, then one run of Gv codes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace squeezekv {

// Channels per value group: G, or the whole row when head_dim < G.
inline size_t kivi_value_group(size_t group, size_t head_dim) { return head_dim < group ? head_dim : group; }
inline size_t kivi_key_group_bytes(int bits, size_t group, size_t head_dim) {
  return head_dim * (4 + group * size_t(bits) / 8);
}
inline size_t kivi_value_row_bytes(int bits, size_t group, size_t head_dim) {
  const size_t gv = kivi_value_group(group, head_dim);
  return head_dim / gv * (4 + gv * size_t(bits) / 8);
}
// Empty when KIVI with `bits` and `group` can store heads of head_dim channels, else why not
// (bits 2 or 4; group a multiple of 8 in [8, 1024]; head_dim a multiple of the group when it is
// at least the group; head_dim * bits a multiple of 8).
const char* kivi_unfit(int bits, size_t group, size_t head_dim);

// One key group from `group` rows of f32 keys (row j at rows + j * ld). Rows with include[j] == 0
// (nullptr: every row is included) are left out of each channel's min and max and get code 0.
void kivi_quantize_key_group(const float* rows, size_t ld, const uint8_t* include, int bits, size_t group,
                             size_t head_dim, uint8_t* dst);
// Row j of a key group decoded (f32 [head_dim]).
void kivi_load_key(const uint8_t* key_group, int bits, size_t group, size_t head_dim, size_t j, float* out);
// Rows [first, first + count) of a key group decoded channel by channel, transposed: out[d * ld +
// j] = channel d of row first + j (the same values as kivi_load_key).
void kivi_load_keys_transposed(const uint8_t* key_group, int bits, size_t group, size_t head_dim, size_t first,
                               size_t count, float* out, size_t ld);
// The same rows as rows: out[j * head_dim + d] (f32 [count, head_dim]).
void kivi_load_keys(const uint8_t* key_group, int bits, size_t group, size_t head_dim, size_t first, size_t count,
                    float* out);

void kivi_quantize_value_row(const float* x, int bits, size_t group, size_t head_dim, uint8_t* dst);
void kivi_load_value_row(const uint8_t* row, int bits, size_t group, size_t head_dim, float* out);

// out[g * ld_out + j] = dot(q + g * ld_q, key j of the group) for g < n_q, j < group, computed as
// c_g + a_gj with c_g = sum_d q_d * m_d (fma, d ascending from 0) and
// a_gj = sum_d (q_d * s_d) * code_dj (the product q_d * s_d rounded, then fma, d ascending).
void kivi_key_group_dots(const float* q, size_t n_q, size_t ld_q, const uint8_t* key_group, int bits, size_t group,
                         size_t head_dim, float* out, size_t ld_out);
void kivi_key_group_dots_scalar(const float* q, size_t n_q, size_t ld_q, const uint8_t* key_group, int bits,
                                size_t group, size_t head_dim, float* out, size_t ld_out);

// out[g * ld_out + c] += sum_j w[g * ld_w + j] * value j [c] for g < n_w over n_rows value rows
// (row j at rows + j * kivi_value_row_bytes), computed per query g and value group (row j: min
// m_j, scale s_j, codes q_jc) as out[c] = out[c] + (A_c + M) with
// A_c = sum_j (w_gj * s_j) * q_jc (the product w_gj * s_j rounded, then fma, j ascending from 0)
// and M = sum_j w_gj * m_j (fma, j ascending from 0): one fma per code. Rows whose n_w weights are
// all zero are skipped (left out of both sums); when every row is skipped, out is not written. A
// row with m = s = 0 adds exactly +0 to A and M (finite weights), so it changes nothing.
void kivi_values_weighted_sum_group(const float* w, size_t n_w, size_t ld_w, const uint8_t* rows, int bits,
                                    size_t group, size_t head_dim, size_t n_rows, float* out, size_t ld_out);
void kivi_values_weighted_sum_group_scalar(const float* w, size_t n_w, size_t ld_w, const uint8_t* rows, int bits,
                                           size_t group, size_t head_dim, size_t n_rows, float* out, size_t ld_out);

}  // namespace squeezekv
