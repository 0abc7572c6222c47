// The float product of prompt attention (engine/prompt_attention.cc): a block of queries against
// a tile of keys decoded and stored transposed. It reads no K/V format.
#pragma once

#include <cstddef>

namespace squeezekv {

// out[i * ld_out + j] = sum_d q[i * ld_q + d] * kt[d * ld_kt + j] for i < m, j < n: many queries
// against keys stored transposed (f32 [head_dim][ld_kt]). ld_kt must be a multiple of 32 and the
// padding columns readable (zero them).
void query_block_dots(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt, size_t n, size_t head_dim,
                      float* out, size_t ld_out);
void query_block_dots_scalar(const float* q, size_t m, size_t ld_q, const float* kt, size_t ld_kt, size_t n,
                             size_t head_dim, float* out, size_t ld_out);

// The row stride of transposed keys for n keys: the first odd multiple of 32 floats from n up. A
// tile reads head_dim rows of the keys once per pass of queries; rows an even multiple of 128
// bytes apart fall into a few L1 sets (4,608 columns: 2 of 64) and leave the cache before the next
// pass, rows 128 bytes times an odd number apart spread over every set.
size_t transposed_keys_stride(size_t n);

}  // namespace squeezekv
