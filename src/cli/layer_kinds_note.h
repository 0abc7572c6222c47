// What the text outputs say about a model's sliding layers (core/layer_kind.h); nothing when every
// layer is global, so those outputs stay as they were. --json always gives the per-layer windows
// and the bytes of both kinds.
#pragma once

#include <span>
#include <string>

namespace squeezekv::cli {

// "layers: 15 sliding (window 512), 3 global (5, 11, 17): the method governs the global ones";
// "" when no window is set. windows: one per layer, 0 for a global one.
std::string sliding_note(std::span<const int> windows);

// "KV resident of the sliding layers 12.0 KiB, of the evicting layers 40.0 KiB"; "" when no
// window is set.
std::string sliding_bytes_note(std::span<const int> windows, double sliding_bytes, double evicting_bytes);

}  // namespace squeezekv::cli
