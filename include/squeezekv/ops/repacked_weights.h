// Quantised weights (Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K) repacked at load for the AVX-512 VNNI tiles, and for the
// AVX2 half-group tiles of CPUs without VNNI (src/ops/matmul_half_tiles-inl.h) (llama.cpp calls the
// same idea its CPU "repack"). In GGUF a block's 32 bytes belong to one row; the tiles want the
// same 4 columns of 16 rows in one 512-bit vector, and without a repacked copy they regroup every
// 16 rows on every call (about a third of a small batch's time: `ops_bench` matmul 16 tokens; more
// for the K-quants, whose scales are decoded row by row). A repacked matrix is a second layout of
// the same rows, not a second resident copy: the loader releases the mapped pages of each range
// it has repacked (Model::load), and every result is bit for bit the one computed from the GGUF
// rows, so a target that cannot read the layout simply reads WeightMatrix::data.
//
// Layouts, per group of 16 rows (the last group repeats its last row into the missing lanes),
// groups repacked_group_bytes apart, each the size of its 16 GGUF rows (rounded up to 64 bytes):
// - Q8_0: for each 32-column block j, 8 vectors of 64 bytes (vector v, lane r: row r's columns
//   4v..4v+3, each byte w + 128); then for each block the 16 rows' fp16 scales (32 bytes).
// - Q4_K: for each 256-column super-block, 32 vectors (per pair p of sub-blocks, vector v, lane
//   r: row r's qs bytes 32p + 4v..+3, two nibbles each), the 16 rows' fp16 d then dmin (64
//   bytes), and their 12 scale bytes as 3 dwords (3 vectors, lane r = row r): 2304 bytes.
// - Q6_K: for each 256-column super-block a unit of 3328 bytes: its ql bytes in 4 runs of 32 and
//   its qh bytes in 2 (8 vectors a run, vector v, lane r: row r's bytes 4v..4v+3 of the run), its
//   16 int8 scales as 4 dwords (4 vectors); after the group's last unit, each super-block's 16 fp16
//   d (32 bytes).
// - Q4_0, Q4_1, Q5_0 (src/ops/nibble_repacked_layout.h): every block's nibble bytes (4 vectors a
//   block, vector v, lane r: row r's bytes 4v..4v+3, two nibbles each), then Q5_0's qh (a vector
//   a block, lane r = row r), then the 16 rows' fp16 d of every block, then Q4_1's fp16 m.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "squeezekv/ops/tensor_type.h"
#include "squeezekv/ops/weight_matrix.h"

namespace squeezekv {

inline constexpr int64_t kRepackedGroupRows = 16;

// Whether type has a repacked layout (its row of the traits table, tensor_type.cc, says so);
// false for a type squeezekv cannot compute on.
bool has_repacked_layout(TensorType type);

// Bytes of one 16-row group of a `type` matrix with n_cols columns (a multiple of 64, so that
// every group starts on a cache line). InvalidArgument for a type without a repacked layout.
size_t repacked_group_bytes(TensorType type, int64_t n_cols);
// Bytes of the whole repacked matrix.
size_t repacked_bytes(const WeightMatrix& w);

// Whether this CPU and build repack w: a type with a repacked layout (the quantised ones) on an
// x86 target with AVX2 or more (the VNNI tiles where the CPU has AVX-512 VNNI, the half-group
// tiles elsewhere).
bool can_repack(const WeightMatrix& w);

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using RepackedBuffer = std::unique_ptr<uint8_t[], FreeDeleter>;

// A buffer of at least this many bytes is allocated on a huge-page boundary.
inline constexpr size_t kRepackedHugePageBytes = size_t(2) << 20;

// An uninitialised buffer of `bytes` (several matrices' repacked_bytes together: a model keeps all
// of its matrices in one): 64-byte aligned, and from kRepackedHugePageBytes up aligned to it with
// transparent huge pages asked for (Linux) over its whole pages, since a decode step streams every
// weight once and small pages cost a TLB miss every 4 KiB of the stream.
RepackedBuffer allocate_repacked_bytes(size_t bytes);
// allocate_repacked_bytes(repacked_bytes(w)); InvalidArgument if !can_repack(w).
RepackedBuffer allocate_repacked(const WeightMatrix& w);

// Writes groups [group_begin, group_end) of w's repacked layout into out (a buffer of
// repacked_bytes(w)); reads only those groups' rows. InvalidArgument for a bad range or when
// !can_repack(w).
void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out);

// Row `row` of a repacked matrix (w.repacked set), dequantised into out[0..n_cols): the same
// floats as dequantize_row of the GGUF row.
void dequantize_repacked_row(const WeightMatrix& w, int64_t row, float* out);
// Row `row` of w dequantised into out[0..n_cols), from its repacked layout when it has one (the
// GGUF pages of a repacked matrix are given back at load), else from the GGUF row.
void dequantize_weight_row(const WeightMatrix& w, int64_t row, float* out);

}  // namespace squeezekv
