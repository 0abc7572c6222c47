// store_rows and load_rows: each format's codec, picked from its row of the formats' table.
#include "ops/kv_format_kernels.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv {

void store_rows(const float* src, void* dst, KVType type, size_t n, size_t head_dim) {
  kv_row_kernels(type).store(src, dst, n, head_dim == 0 ? n : head_dim);
}

void load_rows(const void* src, KVType type, float* dst, size_t n, size_t head_dim) {
  kv_row_kernels(type).load(src, dst, n, head_dim == 0 ? n : head_dim);
}

}  // namespace squeezekv
