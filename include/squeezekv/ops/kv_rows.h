// Kernels over cached K/V rows (row-major [n_rows, head_dim], each row kv_row_bytes(type, head_dim)
// bytes, in one of the per-token formats of kv_format.h): storing rows, dot products of a query
// against every row, weighted sums of rows, their blocked multi-query forms, the RoPE turn-back of
// keys and the attention probabilities over them. Both the cache's key-proxy scoring and the
// engine's attention run on these. Each kernel has a scalar twin (`*_scalar`) that the tests use as
// the oracle. Every kernel reads its format's row of the formats' table (its codec and kernels in
// src/ops/kv_format_<name>.cc); the files by job: kv_row_codecs.cc, kv_row_dots.cc,
// kv_rope_turn.cc, kv_attention_probs.cc.
//
// Quantized rows (q8_0, q4_0) are read directly: the SIMD kernels decode codes and scales in
// registers inside the dot product and the weighted sum; no dequantized copy of the rows is built.
#pragma once

#include <cstddef>
#include <cstdint>

#include "squeezekv/ops/kv_format.h"
#include "squeezekv/ops/prompt_attention_dots.h"  // (callers of kv_rows.h found it here)

namespace squeezekv {

// dst = src (f32) stored as `type`: n elements in rows of head_dim elements (0: one row of n);
// block formats quantize each row's blocks as llama.cpp's quantize_row_q8_0_ref /
// quantize_row_q4_0_ref do.
void store_rows(const float* src, void* dst, KVType type, size_t n, size_t head_dim = 0);
// dst (f32) = src: n elements of `type` in rows of head_dim elements (0: one row of n).
void load_rows(const void* src, KVType type, float* dst, size_t n, size_t head_dim = 0);

// out[j] = dot(q, row j) for j < n_rows; rows are head_dim apart.
void row_dots(const float* q, const void* rows, KVType type, size_t n_rows, size_t head_dim, float* out);
void row_dots_scalar(const float* q, const void* rows, KVType type, size_t n_rows, size_t head_dim, float* out);

// out[0..head_dim) += sum_j w[j] * row j; rows with w[j] == 0 are skipped.
void rows_weighted_sum(const float* w, const void* rows, KVType type, size_t n_rows, size_t head_dim, float* out);
void rows_weighted_sum_scalar(const float* w, const void* rows, KVType type, size_t n_rows, size_t head_dim,
                              float* out);

// The same for a group of n_q queries sharing the rows (the query heads of one GQA group): each
// row is loaded once for all of them. out[g * ld_out + j] = dot(q + g * ld_q, row j). Every
// output is computed exactly as row_dots computes it (same lanes, same order): bit-identical.
void row_dots_group(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                    size_t head_dim, float* out, size_t ld_out);
void row_dots_group_scalar(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                           size_t head_dim, float* out, size_t ld_out);

// out[g * ld_out + i] += sum_j w[g * ld_w + j] * row j for g < n_w: each row loaded once for the
// whole group. Rows whose weights are all zero are skipped; a zero weight otherwise adds 0 * row.
void rows_weighted_sum_group(const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type, size_t n_rows,
                             size_t head_dim, float* out, size_t ld_out);
void rows_weighted_sum_group_scalar(const float* w, size_t n_w, size_t ld_w, const void* rows, KVType type,
                                    size_t n_rows, size_t head_dim, float* out, size_t ld_out);

// Fused form of rotate_rows_back + query_probs for keys of any type: float rows are decoded and
// turned back by their shifts in registers as they are dotted with the n_q queries; block formats
// a tile of rows at a time on the stack (never a copy of all the rows); then the masked softmax
// as query_probs. Each logit equals query_probs on rotate_rows_back's output bit for bit (the
// same products, summed in the same order; tested).
bool query_probs_rotated(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, const int32_t* shifts,
                         size_t n_rows, size_t head_dim, size_t n_rot, bool neox, const float* turns,
                         const uint8_t* mask, float scale, float* probs, size_t ld);
// The logits alone: out[g * ld_out + j] = dot(q + g * ld_q, row j turned back by shifts[j]).
void row_dots_rotated(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, const int32_t* shifts,
                      size_t n_rows, size_t head_dim, size_t n_rot, bool neox, const float* turns, float* out,
                      size_t ld_out);
void row_dots_rotated_scalar(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type,
                             const int32_t* shifts, size_t n_rows, size_t head_dim, size_t n_rot, bool neox,
                             const float* turns, float* out, size_t ld_out);

// Keys rotated back by their shifts (positions inside the cache, docs/positions.md): out row j
// (f32 [n_rows, head_dim]) = row j with its first n_rot elements turned back by shifts[j] RoPE
// positions, the rest as stored; rows with shift <= 0 are only converted. `turns` holds 2 * n_rot
// floats per shift s (rope_turn_row of rope_cache(s)): per element a cosine, then a signed sine,
// so out[i] = x[i] * cos[i] + x[partner i] * sin[i], partner i = i ^ 1 (normal RoPE) or
// i +- n_rot/2 (NeoX). SIMD and scalar twin round alike (multiply, multiply, add). f32 rows may
// be turned in place (out == rows).
void rotate_rows_back(const void* rows, KVType type, const int32_t* shifts, size_t n_rows, size_t head_dim,
                      size_t n_rot, bool neox, const float* turns, float* out);
void rotate_rows_back_scalar(const void* rows, KVType type, const int32_t* shifts, size_t n_rows, size_t head_dim,
                             size_t n_rot, bool neox, const float* turns, float* out);
// One shift's row of `turns` from rope_cache's (cos, sin) pairs.
void rope_turn_row(const float* cos_sin, size_t n_rot, bool neox, float* turn);

// x[0..n) = exp(scale * x - max) / sum over the entries with mask[j] != 0 (max over the same);
// masked entries become 0. Returns false (and leaves zeros) when no entry is unmasked. The scaled
// form is query_probs' softmax, bit for bit.
bool masked_softmax(float* x, const uint8_t* mask, size_t n, float scale = 1.0f);

// Queries against kept rows, the step every attention-like score takes: for each of n_q queries,
// probs[g * ld + j] = softmax_j(scale * dot(q + g * ld_q, row j)) over the rows j < n_rows that
// `mask` marks (the others come out 0). The engine's attention and every policy that scores rows
// with a query (key-proxy, TOVA, SnapKV) run this one kernel. Returns false when the mask marks no
// row (the probabilities are then all 0).
bool query_probs(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows, size_t head_dim,
                 const uint8_t* mask, float scale, float* probs, size_t ld);

// Rows read through other keys than the stored ones: keys (f32 [count, head_dim]) replace the
// stored keys of slots[0..count) in the dot products (slots >= n_rows are ignored). The engine
// reads the rows a span-rule cache holds beyond its distance so (docs/positions.md).
struct RowPatches {
  const float* keys = nullptr;
  const int32_t* slots = nullptr;
  size_t count = 0;
};
// query_probs with those rows' logits computed from their patch keys (the same dot kernel), the
// others bit-identical to query_probs.
bool query_probs_patched(const float* q, size_t n_q, size_t ld_q, const void* rows, KVType type, size_t n_rows,
                         size_t head_dim, const uint8_t* mask, float scale, float* probs, size_t ld,
                         RowPatches patches);

}  // namespace squeezekv
