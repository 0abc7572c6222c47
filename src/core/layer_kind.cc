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

std::vector<LayerKind> layer_kinds_from_windows(std::span<const int32_t> windows, int n_layers) {
  std::vector<LayerKind> kinds;
  if (windows.empty()) return kinds;
  require(int64_t(windows.size()) == int64_t(n_layers), "sliding_windows.size()", windows.size(),
          "must equal n_layers = " + std::to_string(n_layers) + " (one window per layer, 0 for a global one)");
  for (size_t i = 0; i < windows.size(); ++i) {
    const int32_t w = windows[i];
    require(w >= 0 && w <= kMaxSlidingWindow, "sliding_windows[" + std::to_string(i) + "]", w,
            "must be 0 (a global layer) or a window in [1, " + std::to_string(kMaxSlidingWindow) + "]");
    kinds.push_back(w == 0 ? LayerKind::global() : LayerKind::sliding(w));
  }
  return kinds;
}

std::vector<int> sliding_windows_of(std::span<const LayerKind> kinds) {
  std::vector<int> windows;
  for (const LayerKind& kind : kinds) windows.push_back(kind.is_sliding() ? kind.window : 0);
  return windows;
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
