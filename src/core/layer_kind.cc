#include "squeezekv/core/layer_kind.h"

#include "squeezekv/base/errors.h"

namespace squeezekv {

void validate(const LayerKind& kind, std::string_view field) {
  if (kind.is_sliding()) {
    require(kind.window >= 1 && kind.window <= kMaxSlidingWindow, field, kind.window,
            "a sliding layer's window must lie in [1, " + std::to_string(kMaxSlidingWindow) + "]");
  } else {
    require(kind.attention == AttentionKind::global, field, int(kind.attention), "unknown attention kind");
    require(kind.window == 0, field, kind.window, "a global layer has no window (0)");
  }
}

void validate_layer_kinds(std::span<const LayerKind> kinds, int n_layers) {
  if (kinds.empty()) return;
  require(int64_t(kinds.size()) == int64_t(n_layers), "layer_kinds.size()", kinds.size(),
          "must equal n_layers = " + std::to_string(n_layers) + " (or 0: every layer global)");
  for (size_t i = 0; i < kinds.size(); ++i) {
    validate(kinds[i], "layer_kinds[" + std::to_string(i) + "].window");
  }
}

std::vector<LayerKind> periodic_layer_kinds(int n_layers, int window, int period) {
  require(n_layers >= 0, "n_layers", n_layers, "must be >= 0");
  require(period >= 1, "period", period, "must be >= 1 (1: every layer global)");
  std::vector<LayerKind> kinds;
  for (int l = 0; l < n_layers; ++l) {
    kinds.push_back(l % period == period - 1 ? LayerKind::global() : LayerKind::sliding(window));
    validate(kinds.back(), "window");
  }
  return kinds;
}

std::string to_string(AttentionKind kind) { return kind == AttentionKind::sliding ? "sliding" : "global"; }

std::string to_string(const LayerKind& kind) {
  return kind.is_sliding() ? "sliding:" + std::to_string(kind.window) : "global";
}

}  // namespace squeezekv
