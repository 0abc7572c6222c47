// FNV-1a, 64 bits: the checksum of a saved cache's sections and the hashes of a model's identity
// (engine/cache_file.h). Not cryptographic: it catches truncation, flipped bytes and another
// model's file, which is all a cache file needs (no dependency for it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace squeezekv {

inline constexpr uint64_t kFnv1aSeed = 14695981039346656037ull;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t hash = kFnv1aSeed) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

inline uint64_t fnv1a(std::string_view text, uint64_t hash = kFnv1aSeed) {
  return fnv1a(text.data(), text.size(), hash);
}

}  // namespace squeezekv
