// The per-token formats (f16, f32, q8_0, q4_0): each row stored on its own, kv_row_bytes(type,
// head_dim) bytes, so a head's bytes are its slots times that. A new per-token format is a row of
// kKVFormats (ops/kv_format.h) and this storage serves it.
#include "squeezekv/base/errors.h"
#include "squeezekv/core/storage_info.h"

namespace squeezekv {
namespace {

bool stores_rows(KVType type) { return kv_format(type).layout != KVLayout::grouped; }

size_t row_slot_bytes(KVType type, bool, const StorageParams& params, int64_t slots) {
  return size_t(slots) * kv_row_bytes(type, size_t(params.head_dim));
}

size_t row_token_bytes(KVType type, bool, const StorageParams& params) {
  return kv_row_bytes(type, size_t(params.head_dim));
}

// HeadStore's capacity follows the live rows: its slots never outnumber the rows it may hold.
int64_t row_slots_bound(const StorageParams&, const StorageLoad& load) { return load.live; }

int64_t no_fp16_rows(bool, const StorageParams&, const StorageLoad&) { return 0; }

int64_t row_grown(int64_t capacity, const StorageParams&) { return grown_rows(capacity); }

std::string row_unfit(KVType type, bool key, const StorageParams& params) {
  const std::string why = kv_type_unfit(type, size_t(params.head_dim));
  if (why.empty()) return "";
  return invalid_value(key ? "k_type" : "v_type", std::string(kv_format(type).name),
                       why + " (head_dim = " + std::to_string(params.head_dim) + ")");
}

}  // namespace

extern const StorageInfo rows_storage_info;
const StorageInfo rows_storage_info{
    .id = "rows",
    .summary = "each token's row on its own (f16, f32, q8_0, q4_0): bytes = rows x row bytes",
    .params = {},
    .stores = stores_rows,
    .slot_bytes = row_slot_bytes,
    .token_bytes = row_token_bytes,
    .slots_bound = row_slots_bound,
    .fp16_rows_bound = no_fp16_rows,
    .grown = row_grown,
    .unfit = row_unfit,
};

}  // namespace squeezekv
