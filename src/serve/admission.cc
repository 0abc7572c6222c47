#include "serve/admission.h"

#include <algorithm>
#include <optional>

#include "squeezekv/engine/reconstruction.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kivi_rows.h"
#include "squeezekv/ops/kv_rows.h"

namespace squeezekv::serve {
namespace {

// A head that grows without a cap (HeadStore::append: steps of 1/8, at least 16 rows) to hold
// `rows` ends with at most this capacity.
int64_t grown_capacity(int64_t rows) { return rows + std::max<int64_t>(rows / 8, 16); }

int64_t round_up(int64_t x, int64_t step) { return (x + step - 1) / step * step; }

// Rows a KIVI fp16 pool may stand free beside its live ones: settle_kivi trims a pool with more
// than 8 free rows, and an update's takes allocate 4 rows at a time before the next trim.
constexpr int64_t kPoolSlack = 12;

}  // namespace

int64_t reconstruction_rows(const KVCacheConfig& config, const SessionShape& shape) {
  const std::optional<ReconstructionPlan> plan = context_reconstruction(config);
  if (!plan || shape.prompt_tokens <= 0) return 0;
  return std::min<int64_t>(shape.prompt_tokens, plan->chunk) + kReconstructionPromptMost;
}

int64_t promised_rows(const KVCacheConfig& config, int n_layers, const SessionShape& shape) {
  const int64_t seen = shape.prompt_tokens + shape.max_tokens;  // every row the session can add
  const int64_t unbounded = grown_capacity(seen);
  const auto layers = int64_t(n_layers);
  if (keeps_every_row(config)) return layers * unbounded;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(shape.chunk, std::max<int64_t>(1, shape.prompt_tokens)));
  // Once a layer's budget b is final its slots stop at b + 1 between updates (LayerCache::settle),
  // and an update of c rows needs at most b + 1 + c. The layer budgets sum to layers x budget
  // (the allocators conserve the total; a fixed one gives each layer the average or less).
  int64_t rows = layers * (int64_t(config.budget) + 1 + chunk);
  // A measuring allocator keeps the first chunk whole in every layer until the schedule is
  // published (growth without a cap).
  if (schedule_waits_for_measurement(config)) rows = std::max(rows, layers * grown_capacity(chunk));
  // A policy that acts once at the end of the prompt (snapkv) holds the whole prompt until then.
  if (holds_prompt_until_end(config)) {
    rows = std::max(rows, layers * (grown_capacity(shape.prompt_tokens) + 1 + chunk));
  }
  // A policy that scores by reconstruction (kvzip) holds the prompt and one chunk's
  // reconstruction while the pass runs.
  if (const int64_t r = reconstruction_rows(config, shape); r > 0) {
    return std::max(rows, layers * (grown_capacity(shape.prompt_tokens + r) + 1));
  }
  return std::min(rows, layers * unbounded);  // no head holds more than it is ever given
}

int64_t promised_sliding_rows(std::span<const LayerKind> kinds, const SessionShape& shape, int64_t reconstruction) {
  const int64_t seen = shape.prompt_tokens + shape.max_tokens;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(shape.chunk, std::max<int64_t>(1, shape.prompt_tokens)));
  int64_t rows = 0;
  for (const LayerKind& kind : kinds) {
    // A sliding layer's budget (its window) is final from the start, so its slots stop at
    // window + 1 between updates and window + chunk during one, and never pass what grows to
    // hold every row it is given.
    if (!kind.is_sliding()) continue;
    int64_t held = std::min(int64_t(kind.window) + 1 + chunk, grown_capacity(seen));
    // During a reconstruction it evicts nothing: its window of the prompt and the pass's rows.
    if (reconstruction > 0) {
      held = std::max(held, grown_capacity(std::min(int64_t(kind.window), shape.prompt_tokens) + reconstruction) + 1);
    }
    rows += held;
  }
  return rows;
}

namespace {

// Bytes per KV head of `layers` layers that hold at most `live` rows per KV head in all; `full`:
// they keep every row (the method's full cache).
size_t group_bytes(const KVCacheConfig& config, size_t hd, int64_t layers, int64_t live, bool full,
                   const SessionShape& shape) {
  if (layers == 0) return 0;
  const KVType k = config.key_type(), v = config.value_type();
  const int64_t seen = shape.prompt_tokens + shape.max_tokens;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(shape.chunk, std::max<int64_t>(1, shape.prompt_tokens)));
  const int64_t G = config.kivi_group;
  // Slots (allocated rows) per KV head, summed over the layers. Row formats: the live bound, as
  // HeadStore's capacity follows it. KIVI keys come in whole groups and grow by 1/64 (at least a
  // group); an evicting head also keeps the dead rows of its quantized groups, and grows only
  // when each of those is more than half live (it reopens the others first), so its slots stay
  // under twice its live rows plus the growth step and the rounding to groups.
  int64_t slots = live;
  if (kv_kivi(k)) {
    const int64_t unbounded = layers * round_up(seen + std::max(seen / 64, G), G);
    slots = full ? unbounded : std::min(unbounded, 2 * live + 2 * live / 64 + layers * 2 * G);
  }
  // Every slot holds its codes (or row) whether live, dead or free: the slot arrays are allocated whole.
  const size_t key_bytes = kv_kivi(k) ? size_t((slots + G - 1) / G) * kivi_key_group_bytes(kivi_bits(k), size_t(G), hd)
                                      : size_t(slots) * kv_row_bytes(k, hd);
  const size_t value_row = kv_kivi(v) ? kivi_value_row_bytes(kivi_bits(v), size_t(G), hd) : kv_row_bytes(v, hd);
  // KIVI's fp16 pools come on top of the codes. Keys: a full cache quantizes every full group once
  // the residual (at least a group) waits, so it holds fewer than max(residual, G) + G waiting
  // keys plus an update's rows and the pinned sinks; an evicting one may keep every live key in
  // fp16 (open groups, and reopened groups' keys stay fp16). Values: the newest residual, an
  // update's rows and the sinks, never more than the live rows.
  const int64_t pinned = config.kivi_sinks();
  const int64_t residual = config.kivi_residual;
  int64_t pool_rows = 0;
  if (kv_kivi(k)) {
    pool_rows += full ? layers * std::min(seen, std::max(residual, G) + G + chunk + pinned) : live;
    pool_rows += layers * kPoolSlack;
  }
  if (kv_kivi(v)) pool_rows += std::min(live, layers * (residual + chunk + pinned)) + layers * kPoolSlack;
  return key_bytes + size_t(slots) * value_row + size_t(pool_rows) * 2 * hd;
}

}  // namespace

size_t promised_kv_bytes(const KVCacheConfig& config, const ModelConfig& model, const SessionShape& shape,
                         std::span<const LayerKind> kinds) {
  validate_layer_kinds(kinds, model.n_layers);
  int64_t n_sliding = 0;
  for (const LayerKind& kind : kinds) n_sliding += kind.is_sliding() ? 1 : 0;
  const int64_t n_evicting = int64_t(model.n_layers) - n_sliding;
  const auto hd = size_t(model.head_dim);
  // The method governs the evicting layers alone; a sliding layer evicts its oldest row per step.
  const size_t per_head =
      group_bytes(config, hd, n_evicting, promised_rows(config, int(n_evicting), shape), keeps_every_row(config),
                  shape) +
      group_bytes(config, hd, n_sliding, promised_sliding_rows(kinds, shape, reconstruction_rows(config, shape)), false,
                  shape);
  return per_head * size_t(model.n_kv_heads);
}

}  // namespace squeezekv::serve
