// The admission rule's arithmetic: the most K/V bytes a request's cache can ever hold resident
// (HeadStore capacity, growth slack included), computed before it runs. The scheduler admits a
// request only while the promises of all admitted ones fit the limit, so the limit is never
// exceeded as long as every cache keeps its promise (the scheduler checks that after every step).
#pragma once

#include <cstddef>
#include <cstdint>

#include <span>

#include "squeezekv/core/layer_kind.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/engine/model.h"

namespace squeezekv::serve {

struct SessionShape {
  int64_t prompt_tokens = 0;
  int64_t max_tokens = 0;
  int chunk = 1;  // prompt tokens per prefill step
};

// Rows per KV head summed over the layers: the bound behind promised_kv_bytes. Of n_layers
// evicting (global) layers: the method's bound; sliding layers are promised apart below.
int64_t promised_rows(const KVCacheConfig& config, int n_layers, const SessionShape& shape);
// Rows per KV head summed over the sliding layers among `kinds` (core/layer_kind.h): each holds
// its window, plus one append slot and an update's rows, whatever the method.
// `reconstruction`: the rows a context reconstruction adds while it runs (reconstruction_rows).
int64_t promised_sliding_rows(std::span<const LayerKind> kinds, const SessionShape& shape, int64_t reconstruction = 0);
// The rows a context reconstruction (kvzip) adds to every layer while it runs: one chunk and its
// prompt; 0 for a policy that scores otherwise.
int64_t reconstruction_rows(const KVCacheConfig& config, const SessionShape& shape);

// The bytes behind promised_rows: per KV head, the slot arrays of keys and values in their formats
// (KIVI: codes of whole groups, dead rows included) plus KIVI's fp16 pools, x KV heads. kinds: one
// per layer of the model (what every cache the engine makes has), or empty when every layer is
// global; the evicting layers and the sliding ones are promised apart and added.
size_t promised_kv_bytes(const KVCacheConfig& config, const ModelConfig& model, const SessionShape& shape,
                         std::span<const LayerKind> kinds = {});

}  // namespace squeezekv::serve
