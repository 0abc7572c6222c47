// The repacked layouts' sizes and their scalar reader; each type's layout (its SIMD writer, the
// tiles that read it and its unit reader) lives in its kernel file, src/ops/matmul_<type>.cc, and
// its row of the traits table (tensor_type.cc) points at it (repack_groups and can_repack are in
// matmul.cc, which dispatches).
#include "squeezekv/ops/repacked_weights.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "ops/weight_kernels.h"
#include "squeezekv/base/errors.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace squeezekv {

std::string detail::repackable_type_names(std::string_view conjunction) {
  std::string names;
  std::vector<std::string_view> repackable;
  for (const TensorType type : weight_types()) {
    if (has_repacked_layout(type)) repackable.push_back(tensor_type_name(static_cast<uint32_t>(type)));
  }
  for (size_t i = 0; i < repackable.size(); ++i) {
    if (i + 1 == repackable.size() && i > 0) {
      names.append(" ").append(conjunction).append(" ");
    } else if (i > 0) {
      names.append(", ");
    }
    names.append(repackable[i]);
  }
  return names;
}

namespace {

// The largest unit (block or super-block) a repacked layout rebuilds, as dequantize_repacked_row's
// buffer holds it.
constexpr int64_t kMaxUnitBytes = 256;

}  // namespace

bool has_repacked_layout(TensorType type) {
  return block_layout(static_cast<uint32_t>(type)).has_value() && detail::weight_kernels(type).repacked != nullptr;
}

size_t repacked_group_bytes(TensorType type, int64_t n_cols) {
  if (!has_repacked_layout(type)) {
    require(false, "weight type", tensor_type_name(static_cast<uint32_t>(type)),
            "has no repacked layout (" + detail::repackable_type_names("and") + " have)");
  }
  const int64_t elems = block_layout(type).block_elems;
  if (n_cols <= 0 || n_cols % elems != 0) {
    require(false, "n_cols", n_cols, "must be a positive multiple of " + std::to_string(elems));
  }
  const auto units = static_cast<size_t>(n_cols / elems);
  const size_t unit_bytes = row_bytes(type, elems) * kRepackedGroupRows;
  require(units <= std::numeric_limits<size_t>::max() / 2 / unit_bytes, "n_cols", n_cols, "is too large to repack");
  return (units * unit_bytes + 63) / 64 * 64;
}

size_t repacked_bytes(const WeightMatrix& w) {
  require(w.n_rows > 0, "n_rows", w.n_rows, "must be > 0");
  const auto groups = static_cast<size_t>((w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows);
  const size_t group = repacked_group_bytes(w.type, w.n_cols);
  require(groups <= std::numeric_limits<size_t>::max() / group, "n_rows", w.n_rows, "is too large to repack");
  return groups * group;
}

RepackedBuffer allocate_repacked_bytes(size_t bytes) {
  require(bytes > 0, "repacked bytes", bytes, "must be > 0");
  const bool huge = bytes >= kRepackedHugePageBytes;
  void* p = nullptr;
  const int failed = posix_memalign(&p, huge ? kRepackedHugePageBytes : 64, bytes);
  require(failed == 0 && p != nullptr, "repacked bytes", bytes, "could not be allocated");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Advice only: where the kernel refuses (THP off), small pages serve as before.
  if (huge) ::madvise(p, bytes / kRepackedHugePageBytes * kRepackedHugePageBytes, MADV_HUGEPAGE);
#endif
  return RepackedBuffer(static_cast<uint8_t*>(p));
}

RepackedBuffer allocate_repacked(const WeightMatrix& w) {
  if (!can_repack(w)) {
    require(false, "weight type", tensor_type_name(static_cast<uint32_t>(w.type)),
            "cannot be repacked on this CPU (repacking needs " + detail::repackable_type_names("or") +
                " and an x86 CPU with AVX2)");
  }
  return allocate_repacked_bytes(repacked_bytes(w));
}

void dequantize_repacked_row(const WeightMatrix& w, int64_t row, float* out) {
  require(w.repacked != nullptr, "repacked", "null", "the matrix is not repacked");
  if (row < 0 || row >= w.n_rows) {  // the message only on failure: this runs once per token
    require(false, "row", row, "out of range [0, " + std::to_string(w.n_rows) + ")");
  }
  const detail::RepackedLayout* layout = detail::weight_kernels(w.type).repacked;
  require(layout != nullptr, "weight type", tensor_type_name(static_cast<uint32_t>(w.type)), "has no repacked layout");
  const BlockLayout unit = block_layout(w.type);
  require(unit.block_bytes <= kMaxUnitBytes, "block bytes", unit.block_bytes, "exceed the repacked reader's buffer");
  const int64_t n_units = w.n_cols / unit.block_elems;
  const auto lane = static_cast<size_t>(row % kRepackedGroupRows);
  const auto* group = static_cast<const uint8_t*>(w.repacked) +
                      static_cast<size_t>(row / kRepackedGroupRows) * repacked_group_bytes(w.type, w.n_cols);
  uint8_t block[kMaxUnitBytes];  // one GGUF block of the row, rebuilt
  for (int64_t j = 0; j < n_units; ++j) {
    layout->read_unit(group, n_units, j, lane, block);
    dequantize_row(w.type, block, out + j * unit.block_elems, unit.block_elems);
  }
}

void dequantize_weight_row(const WeightMatrix& w, int64_t row, float* out) {
  if (w.repacked != nullptr) return dequantize_repacked_row(w, row, out);
  if (row < 0 || row >= w.n_rows) {  // the message only on failure: this runs once per token
    require(false, "row", row, "out of range [0, " + std::to_string(w.n_rows) + ")");
  }
  const size_t bytes = row_bytes(w.type, w.n_cols);
  dequantize_row(w.type, static_cast<const std::byte*>(w.data) + size_t(row) * bytes, out, w.n_cols);
}

}  // namespace squeezekv
