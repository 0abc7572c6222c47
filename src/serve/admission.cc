#include "serve/admission.h"

#include <algorithm>
#include <optional>

#include "squeezekv/engine/reconstruction.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::serve {

int64_t reconstruction_rows(const KVCacheConfig& config, const SessionShape& shape) {
  const std::optional<ReconstructionPlan> plan = context_reconstruction(config);
  if (!plan || shape.prompt_tokens <= 0) return 0;
  return std::min<int64_t>(shape.prompt_tokens, plan->chunk) + kReconstructionPromptMost;
}

int64_t promised_rows(const KVCacheConfig& config, int n_layers, const SessionShape& shape) {
  const int64_t seen = shape.prompt_tokens + shape.max_tokens;  // every row the session can add
  const int64_t unbounded = grown_rows(seen);
  const auto layers = int64_t(n_layers);
  if (keeps_every_row(config)) return layers * unbounded;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(shape.chunk, std::max<int64_t>(1, shape.prompt_tokens)));
  // Once a layer's budget b is final its slots stop at b + 1 between updates (LayerCache::settle),
  // and an update of c rows needs at most b + 1 + c. The layer budgets sum to layers x budget
  // (the allocators conserve the total; a fixed one gives each layer the average or less).
  int64_t rows = layers * (int64_t(config.budget) + 1 + chunk);
  // A measuring allocator keeps the first chunk whole in every layer until the schedule is
  // published (growth without a cap).
  if (schedule_waits_for_measurement(config)) rows = std::max(rows, layers * grown_rows(chunk));
  // A policy that acts once at the end of the prompt (snapkv) holds the whole prompt until then.
  if (holds_prompt_until_end(config)) {
    rows = std::max(rows, layers * (grown_rows(shape.prompt_tokens) + 1 + chunk));
  }
  // A policy that scores by reconstruction (kvzip) holds the prompt and one chunk's
  // reconstruction while the pass runs.
  if (const int64_t r = reconstruction_rows(config, shape); r > 0) {
    return std::max(rows, layers * (grown_rows(shape.prompt_tokens + r) + 1));
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
    int64_t held = std::min(int64_t(kind.window) + 1 + chunk, grown_rows(seen));
    // During a reconstruction it evicts nothing: its window of the prompt and the pass's rows.
    if (reconstruction > 0) {
      held = std::max(held, grown_rows(std::min(int64_t(kind.window), shape.prompt_tokens) + reconstruction) + 1);
    }
    rows += held;
  }
  return rows;
}

namespace {

// Bytes per KV head of `layers` layers that hold at most `live` rows per KV head in all; `full`:
// they keep every row (the method's full cache). The storage says (core/storage_info.h), at the
// model's head_dim.
size_t group_bytes(const KVCacheConfig& config, int head_dim, int64_t layers, int64_t live, bool full,
                   const SessionShape& shape) {
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(shape.chunk, std::max<int64_t>(1, shape.prompt_tokens)));
  StorageParams storage = storage_params(config);
  storage.head_dim = head_dim;
  return bytes_bound(storage, {layers, live, full, shape.prompt_tokens + shape.max_tokens, chunk});
}

}  // namespace

size_t promised_kv_bytes(const KVCacheConfig& config, const ModelConfig& model, const SessionShape& shape,
                         std::span<const LayerKind> kinds) {
  validate_layer_kinds(kinds, model.n_layers);
  int64_t n_sliding = 0;
  for (const LayerKind& kind : kinds) n_sliding += kind.is_sliding() ? 1 : 0;
  const int64_t n_evicting = int64_t(model.n_layers) - n_sliding;
  // The method governs the evicting layers alone; a sliding layer evicts its oldest row per step.
  const size_t per_head =
      group_bytes(config, model.head_dim, n_evicting, promised_rows(config, int(n_evicting), shape),
                  keeps_every_row(config), shape) +
      group_bytes(config, model.head_dim, n_sliding,
                  promised_sliding_rows(kinds, shape, reconstruction_rows(config, shape)), false, shape);
  return per_head * size_t(model.n_kv_heads);
}

}  // namespace squeezekv::serve
