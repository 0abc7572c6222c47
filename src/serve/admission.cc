#include "serve/admission.h"

#include <algorithm>

#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kivi_rows.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv::serve {
namespace {

// A head that grows without a cap (HeadStore::append: steps of 1/8, at least 16 rows) to hold
// `rows` ends with at most this capacity.
int64_t grown_capacity(int64_t rows) { return rows + std::max<int64_t>(rows / 8, 16); }

}  // namespace

int64_t promised_rows(const KVCacheConfig& config, int n_layers, const SessionShape& shape) {
  const int64_t seen = shape.prompt_tokens + shape.max_tokens;  // every row the session can add
  const int64_t unbounded = grown_capacity(seen);
  const auto layers = int64_t(n_layers);
  if (resolved_policy(config) == "full") return layers * unbounded;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(shape.chunk, std::max<int64_t>(1, shape.prompt_tokens)));
  // Once a layer's budget b is final its slots stop at b + 1 between updates (LayerCache::settle),
  // and an update of c rows needs at most b + 1 + c. The layer budgets sum to layers x budget
  // (the allocators conserve the total; a fixed one gives each layer the average or less).
  int64_t rows = layers * (int64_t(config.budget) + 1 + chunk);
  // A measuring allocator keeps the first chunk whole in every layer until the schedule is
  // published (growth without a cap).
  if (!resolved_allocator_info(config).measures.empty()) rows = std::max(rows, layers * grown_capacity(chunk));
  // A policy that acts once at the end of the prompt (snapkv) holds the whole prompt until then.
  if (resolved_policy(config) == "snapkv") {
    rows = std::max(rows, layers * (grown_capacity(shape.prompt_tokens) + 1 + chunk));
  }
  return std::min(rows, layers * unbounded);  // no head holds more than it is ever given
}

size_t promised_kv_bytes(const KVCacheConfig& config, const ModelConfig& model, const SessionShape& shape) {
  // Per row, a bound on what any format holds: f32 4 bytes a value, the block formats and KIVI's
  // fp16 rows at most 2. KIVI that evicts may hold dead rows inside its quantized key groups, up to
  // a group per live row: its keys are promised G rows of codes each.
  const auto hd = size_t(model.head_dim);
  auto row_bound = [&](KVType t, bool key) -> size_t {
    if (t == KVType::f32) return 4 * hd;
    if (key && kv_kivi(t) && resolved_policy(config) != "full") {
      return std::max(2 * hd, kivi_key_group_bytes(kivi_bits(t), size_t(config.kivi_group), hd));
    }
    return 2 * hd;
  };
  const size_t per_row = row_bound(config.key_type(), true) + row_bound(config.value_type(), false);
  return size_t(promised_rows(config, model.n_layers, shape)) * size_t(model.n_kv_heads) * per_row;
}

}  // namespace squeezekv::serve
