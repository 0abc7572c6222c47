// What the K/V formats' table (squeezekv/ops/kv_format.h) answers beyond its inline helpers.
#include "squeezekv/ops/kv_format.h"

#include <string>

#include "ops/kv_format_kernels.h"
#include "squeezekv/base/errors.h"

namespace squeezekv {

const char* kv_type_unfit(KVType type, size_t head_dim) {
  const KVRowKernels* kernels = kv_format(type).kernels;
  return kernels != nullptr ? kernels->unfit(head_dim) : "";
}

void throw_no_row_format(KVType type) {
  throw InvalidArgument(
      invalid_value("kv type", std::string(kv_format(type).name), "is no row format: only HeadStore reads it"));
}

}  // namespace squeezekv
