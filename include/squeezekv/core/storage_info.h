// K/V storage as a registered component, as a token policy or a layer allocator is: what stores a
// layer-head's keys and values, with the parameters it owns, its bytes per token and the bound on
// the bytes a head can reach for a given load. The row kernels of each format stay in ops
// (kv_format.h's table); these records say what the formats cost, so that admission (serve), the
// command line, the saved-cache check (HeadStore::check_loaded) and `squeezekv methods` ask the
// storage instead of restating its sizes.
//
// Adding a per-token format needs no record: the `rows` storage serves every row of kKVFormats.
// A grouped format (as KIVI) is a record of its own: src/core/<id>_storage.cc and one line in
// src/core/registered_storage.h (CONTRIBUTING.md "A K/V storage format").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "squeezekv/ops/kv_format.h"

namespace squeezekv {

// What a storage is built from: the formats of the keys and the values and the storage's own
// parameters, resolved from a cache's configuration by the registry (methods/registry.h:
// storage_params).
struct StorageParams {
  KVType key = KVType::f16;
  KVType value = KVType::f16;
  int head_dim = 0;
  int kivi_group = 32;      // KIVI: tokens per key group (channels per value group)
  int kivi_residual = 128;  // KIVI: newest rows kept in fp16
  int64_t fp16_below = 0;   // positions kept in fp16 (KIVI's pinned sinks)
};

// The most a group of heads (one KV head in each of `layers` layers) can be asked to hold.
struct StorageLoad {
  int64_t layers = 0;
  int64_t live = 0;              // live rows at most, summed over the layers
  bool keeps_every_row = false;  // the full cache: its rows grow with the text
  int64_t seen = 0;              // rows a session can add (its prompt and generated tokens)
  int64_t chunk = 1;             // rows one update adds
};

struct StorageInfo {
  std::string_view id;
  std::string_view summary;
  std::span<const std::string_view> params;  // the cache parameters it owns (read only when in use)
  bool (*stores)(KVType type);               // whether it serves this format
  // Bytes the codes of `slots` slots take (keys when `key`, else values), scales included: what a
  // head's slot arrays hold (they are allocated whole), without any fp16 pool.
  size_t (*slot_bytes)(KVType type, bool key, const StorageParams& params, int64_t slots);
  // Bytes one token takes, amortised over a group where the format groups tokens.
  size_t (*token_bytes)(KVType type, bool key, const StorageParams& params);
  // Slots a group of heads whose keys it stores allocates at most under `load` (a head's slot
  // arrays follow its keys' format).
  int64_t (*slots_bound)(const StorageParams& params, const StorageLoad& load);
  // Rows of fp16 beside the codes (KIVI's open groups, residual and sinks) at most under `load`.
  int64_t (*fp16_rows_bound)(bool key, const StorageParams& params, const StorageLoad& load);
  // The capacity a head of `capacity` slots grows to when an append needs more (HeadStore::append).
  int64_t (*grown)(int64_t capacity, const StorageParams& params);
  // "" when `type` can store these heads, else one message naming the parameter and value.
  std::string (*unfit)(KVType type, bool key, const StorageParams& params);
  // "" when an evicting cache of `budget` rows per head gains from this storage, else one message
  // naming the parameter and value (KIVI with a residual over half the budget compresses nothing).
  std::string (*budget_unfit)(const StorageParams& params, int budget) = nullptr;
};

// Every storage, in registry order (src/core/registered_storage.h).
std::span<const StorageInfo* const> all_storage();
// The storage that serves `type` (every KVType has one).
const StorageInfo& storage_of(KVType type);
// The storage owning a cache parameter (kivi_group, ...); null when no storage does.
const StorageInfo* storage_owning(std::string_view param);
// Whether keys or values of `params` are kept in `storage`.
bool storage_in_use(const StorageInfo& storage, const StorageParams& params);

// The row storage's growth without a cap: a head holding `rows` rows grows to at most this many
// (steps of 1/8, at least 16). Admission bounds every unbounded head by it.
int64_t grown_rows(int64_t rows);
// Bytes of one token in one KV head, key and value.
size_t token_bytes(const StorageParams& params);
// The most bytes a group of heads can hold under `load`: its slots' codes (the keys' storage
// decides the slots) and both fp16 pools.
size_t bytes_bound(const StorageParams& params, const StorageLoad& load);
// The first of the key's and the value's storage messages ("" when both fit).
std::string storage_unfit(const StorageParams& params);
std::string storage_budget_unfit(const StorageParams& params, int budget);

}  // namespace squeezekv
