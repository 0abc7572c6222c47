// LayerKind: how one layer of a model attends, which decides what its cache is.
//   global   over every earlier position: the layer's cache evicts under the method (its token
//            policy keeps rows within the budget its allocator gives).
//   sliding  over the newest `window` positions, its own among them (Gemma 2 and 3, Mistral): the
//            layer's cache holds exactly those rows. That is the model's own attention, not an
//            eviction, so no policy runs there and no allocator schedules the layer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace squeezekv {

enum class AttentionKind : uint8_t { global, sliding };

// Far beyond any model's window (Gemma 3: 512 or 1024; Mistral: 4096), and the range of a budget.
inline constexpr int kMaxSlidingWindow = 1 << 30;

struct LayerKind {
  AttentionKind attention = AttentionKind::global;
  int window = 0;  // sliding: the positions a query sees, its own included; global: 0

  static LayerKind global() { return {}; }
  static LayerKind sliding(int window) { return {AttentionKind::sliding, window}; }
  bool is_sliding() const { return attention == AttentionKind::sliding; }
  bool operator==(const LayerKind&) const = default;
};

// Throws InvalidArgument naming `field` (e.g. "layer_kinds[3].window") and the value: a sliding
// window outside [1, kMaxSlidingWindow], or a global layer with a window.
void validate(const LayerKind& kind, std::string_view field);
// The kinds of a model with n_layers layers: empty (every layer global) or one per layer, each
// valid ("layer_kinds" names the vector, "layer_kinds[i].window" a bad window).
void validate_layer_kinds(std::span<const LayerKind> kinds, int n_layers);

// The kinds as the C API and Python give them: one window per layer, 0 for a global layer. Empty
// gives empty (every layer global); otherwise one per layer, each in [0, kMaxSlidingWindow]
// (InvalidArgument naming "sliding_windows.size()" or "sliding_windows[i]").
std::vector<LayerKind> layer_kinds_from_windows(std::span<const int32_t> windows, int n_layers);
// The reverse, for reports: one window per layer, 0 for a global one.
std::vector<int> sliding_windows_of(std::span<const LayerKind> kinds);

// llama.cpp's periodic pattern (set_swa_pattern): the last layer of every `period` is global, the
// others slide over `window` (Gemma 3: period 6, so layers 5, 11, 17, ... are global).
std::vector<LayerKind> periodic_layer_kinds(int n_layers, int window, int period);

std::string to_string(AttentionKind kind);     // "global" | "sliding"
std::string to_string(const LayerKind& kind);  // "global" | "sliding:512"

}  // namespace squeezekv
