// The list of K/V storages (one line each in registered_storage.h) and what is asked of all of
// them together.
#include <algorithm>

#include "squeezekv/core/storage_info.h"

namespace squeezekv {

#define SQUEEZEKV_STORAGE(id) extern const StorageInfo id##_storage_info;
#include "core/registered_storage.h"
#undef SQUEEZEKV_STORAGE

namespace {

const StorageInfo* const kStorage[] = {
#define SQUEEZEKV_STORAGE(id) &id##_storage_info,
#include "core/registered_storage.h"
#undef SQUEEZEKV_STORAGE
};

}  // namespace

std::span<const StorageInfo* const> all_storage() { return kStorage; }

const StorageInfo& storage_of(KVType type) {
  for (const StorageInfo* s : kStorage) {
    if (s->stores(type)) return *s;
  }
  return *kStorage[0];  // unreachable: every format has one storage (tests/core/storage_test.cc)
}

const StorageInfo* storage_owning(std::string_view param) {
  for (const StorageInfo* s : kStorage) {
    if (std::find(s->params.begin(), s->params.end(), param) != s->params.end()) return s;
  }
  return nullptr;
}

bool storage_in_use(const StorageInfo& storage, const StorageParams& params) {
  return storage.stores(params.key) || storage.stores(params.value);
}

int64_t grown_rows(int64_t rows) { return rows + std::max<int64_t>(rows / 8, 16); }

size_t token_bytes(const StorageParams& params) {
  return storage_of(params.key).token_bytes(params.key, true, params) +
         storage_of(params.value).token_bytes(params.value, false, params);
}

size_t bytes_bound(const StorageParams& params, const StorageLoad& load) {
  if (load.layers == 0) return 0;
  const StorageInfo& keys = storage_of(params.key);
  const StorageInfo& values = storage_of(params.value);
  // Every slot holds its codes (or row) whether live, dead or free: the slot arrays are allocated
  // whole, and the keys' storage decides how many there are.
  const int64_t slots = keys.slots_bound(params, load);
  const int64_t fp16_rows = keys.fp16_rows_bound(true, params, load) + values.fp16_rows_bound(false, params, load);
  return keys.slot_bytes(params.key, true, params, slots) + values.slot_bytes(params.value, false, params, slots) +
         size_t(fp16_rows) * 2 * size_t(params.head_dim);
}

std::string storage_unfit(const StorageParams& params) {
  if (std::string why = storage_of(params.key).unfit(params.key, true, params); !why.empty()) return why;
  return storage_of(params.value).unfit(params.value, false, params);
}

std::string storage_budget_unfit(const StorageParams& params, int budget) {
  for (const StorageInfo* s : kStorage) {
    if (!storage_in_use(*s, params) || s->budget_unfit == nullptr) continue;
    if (std::string why = s->budget_unfit(params, budget); !why.empty()) return why;
  }
  return "";
}

}  // namespace squeezekv
