// Per-layer configuration from the GGUF keys (layer_config.h). The sliding-window facts follow
// llama.cpp (src/models/gemma3.cpp, llama-hparams.cpp): with <arch>.attention.sliding_window set,
// layer l is sliding unless l % pattern == pattern - 1 (pattern from
// <arch>.attention.sliding_window_pattern, else the architecture's default), or as a per-layer
// array of booleans when the file gives one; sliding layers turn at <arch>.rope.freq_base_swa,
// else the architecture's sliding base; a query sees the keys less than `window` positions back.
#include "engine/layer_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "squeezekv/base/errors.h"
#include "squeezekv/base/quote.h"

namespace squeezekv {
namespace {

std::string prefix(const ArchitectureInfo& arch) { return std::string(arch.name) + "."; }

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw FormatError("key " + quoted_excerpt(key) + ": " + why);
}

// Which layers slide: none without a window; else the file's per-layer array or its pattern.
std::vector<bool> sliding_layers(const GgufFile& f, const ArchitectureInfo& arch, int n_layers, int window) {
  std::vector<bool> sliding(size_t(n_layers), false);
  if (window == 0) return sliding;
  const std::string key = prefix(arch) + "attention.sliding_window_pattern";
  const GgufValue* value = f.find(key);
  if (value != nullptr && value->type() == GgufType::array) {
    if (value->size() != size_t(n_layers)) {
      refuse(key, "has " + std::to_string(value->size()) + " entries, expected one per layer (" +
                      std::to_string(n_layers) + ")");
    }
    for (size_t l = 0; l < sliding.size(); ++l) sliding[l] = value->integer_at(l) != 0;
    return sliding;
  }
  const uint32_t pattern = value != nullptr ? value->as_u32("key '" + key + "'") : uint32_t(arch.sliding_pattern);
  for (size_t l = 0; l < sliding.size(); ++l) sliding[l] = pattern == 0 || l % pattern < pattern - 1;
  return sliding;
}

}  // namespace

float hyper_parameter(const GgufFile& f, const std::string& key, float fallback, float lo, float hi) {
  const float v = f.find_f32(key).value_or(fallback);
  if (!std::isfinite(v) || v < lo || v > hi) {
    char range[96];
    std::snprintf(range, sizeof range, ": must be a finite number in [%g, %g]", double(lo), double(hi));
    char value[32];
    std::snprintf(value, sizeof value, "%g", double(v));
    refuse(key, value + std::string(range));
  }
  return v;
}

void check_architecture_keys(const GgufFile& f, const ArchitectureInfo& arch) {
  if (arch.keys.empty()) return;
  const std::string a = prefix(arch);
  for (std::string_view key : f.keys()) {
    if (key.substr(0, a.size()) != a) continue;
    const std::string_view rest = key.substr(a.size());
    if (std::find(arch.keys.begin(), arch.keys.end(), rest) == arch.keys.end()) {
      refuse(std::string(key), "not a key squeezekv understands for " + std::string(arch.name) +
                                   " (it cannot honour what it does not know)");
    }
  }
  if (auto type = f.find_string(a + "rope.scaling.type"); type && *type != "none" && *type != "linear") {
    refuse(a + "rope.scaling.type", quoted_excerpt(*type) + ": unsupported (squeezekv runs unscaled RoPE)");
  }
  if (auto factor = f.find_f32(a + "rope.scaling.factor"); factor && *factor != 0.0f && *factor != 1.0f) {
    refuse(a + "rope.scaling.factor", std::to_string(*factor) + ": RoPE scaling is not supported yet");
  }
  if (auto cap = f.find_f32(a + "final_logit_softcapping"); cap && *cap != 0.0f) {
    refuse(a + "final_logit_softcapping", std::to_string(*cap) + ": logit soft-capping is not supported");
  }
  const auto k = f.find_u32(a + "attention.key_length"), v = f.find_u32(a + "attention.value_length");
  if (v && v != k) {
    refuse(a + "attention.value_length", std::to_string(*v) + ": must equal attention.key_length");
  }
}

std::vector<LayerConfig> read_layer_configs(const GgufFile& f, const ArchitectureInfo& arch, const ModelConfig& c) {
  const std::string a = prefix(arch);
  int window = 0;
  if (arch.sliding_pattern > 0) {
    const std::string key = a + "attention.sliding_window";
    if (auto w = f.find_u32(key)) {
      if (*w > (1u << 24)) refuse(key, std::to_string(*w) + ": out of range");
      window = int(*w);
    }
  }
  const std::vector<bool> sliding = sliding_layers(f, arch, c.n_layers, window);
  const float sliding_base =
      window > 0 ? hyper_parameter(f, a + "rope.freq_base_swa", arch.sliding_rope_base, kMinRopeBase, kMaxRopeBase)
                 : arch.sliding_rope_base;
  // llama.cpp's gemma3: 1/sqrt(query_pre_attn_scalar), which is the head dimension but for the
  // 27B model (62 layers), where it is dim / heads.
  const int scalar = arch.qk_norm && c.n_layers == 62 ? c.dim / c.n_heads : c.head_dim;
  std::vector<LayerConfig> layers(size_t(c.n_layers));
  for (size_t l = 0; l < layers.size(); ++l) {
    LayerConfig& lc = layers[l];
    lc.attention = sliding[l] ? AttentionKind::sliding : AttentionKind::global;
    lc.window = sliding[l] ? window : 0;
    lc.rope_base = sliding[l] ? sliding_base : c.rope_base;
    lc.qk_norm = arch.qk_norm;
    lc.post_norms = arch.post_norms;
    lc.activation = arch.activation;
    lc.attention_scale = 1.0f / std::sqrt(float(scalar));
  }
  return layers;
}

}  // namespace squeezekv
