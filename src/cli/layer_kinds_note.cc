#include "cli/layer_kinds_note.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace squeezekv::cli {
namespace {

bool any_sliding(std::span<const int> windows) {
  return std::any_of(windows.begin(), windows.end(), [](int w) { return w > 0; });
}

}  // namespace

std::string sliding_note(std::span<const int> windows) {
  if (!any_sliding(windows)) return "";
  std::set<int> sizes;
  std::string globals;
  int n_sliding = 0;
  for (size_t l = 0; l < windows.size(); ++l) {
    if (windows[l] > 0) {
      ++n_sliding;
      sizes.insert(windows[l]);
    } else {
      globals += (globals.empty() ? "" : ", ") + std::to_string(l);
    }
  }
  std::string list;
  for (const int w : sizes) list += (list.empty() ? "" : ", ") + std::to_string(w);
  const size_t n_global = windows.size() - size_t(n_sliding);
  return "layers: " + std::to_string(n_sliding) + " sliding (window " + list + "), " + std::to_string(n_global) +
         " global" + (n_global > 0 ? " (" + globals + ")" : "") + ": the method governs the global ones";
}

std::string sliding_bytes_note(std::span<const int> windows, double sliding_bytes, double evicting_bytes) {
  if (!any_sliding(windows)) return "";
  char line[160];
  std::snprintf(line, sizeof line, "KV resident of the sliding layers %.1f KiB, of the evicting layers %.1f KiB",
                sliding_bytes / 1024.0, evicting_bytes / 1024.0);
  return line;
}

}  // namespace squeezekv::cli
