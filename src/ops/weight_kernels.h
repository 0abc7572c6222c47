// What the matmul driver (matmul.cc) and the repacked layouts (repacked_weights.cc) need of a
// weight type: defined by the type's kernel file (src/ops/matmul_<type>.cc) and pointed at by its
// row of the traits table (tensor_type.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ops/activation_q8.h"
#include "squeezekv/ops/weight_matrix.h"

namespace squeezekv::detail {

// A type's repacked layout for the tiles (repacked_weights.h), groups of 16 rows.
struct RepackedLayout {
  // Writes groups [group_begin, group_end) of w's layout into out, on the best SIMD target
  // (repack_groups checks can_repack first).
  void (*repack_groups)(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out);
  // Unit j (a block or super-block) of row `lane` of a group of n_units units, rebuilt as GGUF
  // stores it (block_layout(type).block_bytes bytes).
  void (*read_unit)(const uint8_t* group, int64_t n_units, int64_t j, size_t lane, uint8_t* unit);
};

struct WeightKernels {
  // y[t * n_rows + r] = dot(row r of w, token t) for rows [row_begin, row_end) and every token of
  // in, on the best SIMD target: the type's row kernel, or its prompt tiles where it has them and
  // the call is large enough, or its repacked tiles when w.repacked is set and the CPU reads it.
  void (*rows)(const WeightMatrix& w, const MatmulInput& in, int64_t row_begin, int64_t row_end, float* y);
  const RepackedLayout* repacked;  // null: the type has no repacked layout
};

// The types with a repacked layout, by name, for messages: "Q8_0, Q4_0, ... and Q6_K" (conjunction
// "and").
std::string repackable_type_names(std::string_view conjunction);

// The kernels of a type squeezekv computes on; InvalidArgument for any other.
const WeightKernels& weight_kernels(TensorType type);

}  // namespace squeezekv::detail
