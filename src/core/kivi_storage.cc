// KIVI (kivi2, kivi4; docs/semantics.md "K/V storage"): keys quantized per channel over groups of
// kivi_group tokens, values per token in groups of channels, the newest kivi_residual rows (and
// the pinned sinks) in fp16 pools beside the codes (core/head_store.h, ops/kivi_rows.h).
#include <algorithm>
#include <array>

#include "squeezekv/base/errors.h"
#include "squeezekv/core/storage_info.h"
#include "squeezekv/ops/kivi_rows.h"

namespace squeezekv {
namespace {

constexpr std::array<std::string_view, 3> kKiviParams = {"kivi_group", "kivi_residual", "kivi_fp16_sinks"};

// Rows an fp16 pool may stand free beside its live ones: settle_kivi trims a pool with more than
// 8 free rows, and an update's takes allocate 4 rows at a time before the next trim.
constexpr int64_t kPoolSlack = 12;

int64_t round_up(int64_t x, int64_t step) { return (x + step - 1) / step * step; }

bool stores_kivi(KVType type) { return kv_kivi(type); }

size_t kivi_slot_bytes(KVType type, bool key, const StorageParams& p, int64_t slots) {
  const auto G = size_t(p.kivi_group), hd = size_t(p.head_dim);
  if (key) return (size_t(slots) + G - 1) / G * kivi_key_group_bytes(kivi_bits(type), G, hd);  // whole groups
  return size_t(slots) * kivi_value_row_bytes(kivi_bits(type), G, hd);
}

size_t kivi_token_bytes(KVType type, bool key, const StorageParams& p) {
  const auto G = size_t(p.kivi_group), hd = size_t(p.head_dim);
  return key ? kivi_key_group_bytes(kivi_bits(type), G, hd) / G : kivi_value_row_bytes(kivi_bits(type), G, hd);
}

// Keys come in whole groups and grow by 1/64 (at least a group). An evicting head also keeps the
// dead rows of its quantized groups, and grows only when each of those is more than half live (it
// reopens the others first), so its slots stay under twice its live rows plus the growth step and
// the rounding to groups.
int64_t kivi_slots_bound(const StorageParams& p, const StorageLoad& load) {
  const int64_t G = p.kivi_group;
  const int64_t unbounded = load.layers * round_up(load.seen + std::max(load.seen / 64, G), G);
  if (load.keeps_every_row) return unbounded;
  return std::min(unbounded, 2 * load.live + 2 * load.live / 64 + load.layers * 2 * G);
}

// Keys: a full cache quantizes every full group once the residual (at least a group) waits, so it
// holds fewer than max(residual, G) + G waiting keys plus an update's rows and the pinned sinks;
// an evicting one may keep every live key in fp16 (open groups, and reopened groups' keys stay
// fp16). Values: the newest residual, an update's rows and the sinks, never more than the live rows.
int64_t kivi_fp16_rows_bound(bool key, const StorageParams& p, const StorageLoad& load) {
  const int64_t pinned = p.fp16_below, residual = p.kivi_residual, G = p.kivi_group;
  if (key) {
    const int64_t waiting = load.keeps_every_row
                                ? load.layers * std::min(load.seen, std::max(residual, G) + G + load.chunk + pinned)
                                : load.live;
    return waiting + load.layers * kPoolSlack;
  }
  return std::min(load.live, load.layers * (residual + load.chunk + pinned)) + load.layers * kPoolSlack;
}

// Keys grow by 1/64 (at least a group): a copy per 1/64 still amortises, and the resident bytes
// stay near what the text needs.
int64_t kivi_grown(int64_t capacity, const StorageParams& p) {
  return capacity + std::max<int64_t>(capacity / 64, p.kivi_group);
}

std::string kivi_unfit_message(KVType type, bool, const StorageParams& p) {
  const std::string why = kivi_unfit(kivi_bits(type), size_t(p.kivi_group), size_t(p.head_dim));
  if (!why.empty()) {
    return invalid_value(
        "kivi_group", p.kivi_group,
        why + " (" + std::string(kv_format(type).name) + ", head_dim = " + std::to_string(p.head_dim) + ")");
  }
  if (p.kivi_residual % p.kivi_group != 0) {
    return invalid_value("kivi_residual", p.kivi_residual,
                         "must be a multiple of kivi_group = " + std::to_string(p.kivi_group));
  }
  return "";
}

// The newest kivi_residual rows stay fp16 and keys are quantized a whole group at a time, so a
// residual of more than half the budget, or a group larger than the budget, leaves (nearly) every
// kept row in fp16: the cache would hold more bytes than plain f16.
std::string kivi_budget_unfit(const StorageParams& p, int budget) {
  const int group = p.kivi_group;
  if (2 * int64_t(p.kivi_residual) > budget) {
    const int most = budget / 2 / group * group;
    return invalid_value("kivi_residual", p.kivi_residual,
                         "more than half of budget = " + std::to_string(budget) +
                             ": the newest kivi_residual rows stay in fp16, so KIVI would quantize (nearly) nothing "
                             "and hold more bytes than f16 (choose kivi_residual <= " +
                             std::to_string(most) + ", a multiple of kivi_group = " + std::to_string(group) +
                             ", or a larger budget)");
  }
  if (kv_kivi(p.key) && group > budget) {
    return invalid_value("kivi_group", group,
                         "more than budget = " + std::to_string(budget) +
                             ": a key group would never fill, so no key would be quantized (choose a kivi_group "
                             "<= the budget, or a larger budget)");
  }
  return "";
}

}  // namespace

extern const StorageInfo kivi_storage_info;
const StorageInfo kivi_storage_info{
    .id = "kivi",
    .summary =
        "KIVI (kivi2, kivi4): keys per channel over groups of tokens, values per token; the newest "
        "kivi_residual rows in fp16",
    .params = kKiviParams,
    .stores = stores_kivi,
    .slot_bytes = kivi_slot_bytes,
    .token_bytes = kivi_token_bytes,
    .slots_bound = kivi_slots_bound,
    .fp16_rows_bound = kivi_fp16_rows_bound,
    .grown = kivi_grown,
    .unfit = kivi_unfit_message,
    .budget_unfit = kivi_budget_unfit,
};

}  // namespace squeezekv
