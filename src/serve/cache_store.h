// CacheStore: a server's --cache-dir (docs/server.md, "Saved caches"). Kept caches are saved here
// by id (POST /caches/{id}?action=save, or when --kv-limit-mib or --kept-caches pushes them out of
// memory) as cache files (engine/cache_file.h), and found again by a prompt that continues them or
// by action=restore, also after a restart: the store reads the folder's files when it opens
// (those of another model, another version or damaged are left alone, named on stderr).
// Not thread-safe: the scheduler calls it under its lock.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "squeezekv/engine/cache_file.h"

namespace squeezekv::serve {

// A kept cache's id: 16 hex digits of a hash of its configuration and the tokens it has seen, so
// the same conversation's cache has the same id after a restart.
std::string cache_id(const KVCacheConfig& config, std::span<const int32_t> seen);

class CacheStore {
 public:
  struct Entry {
    std::string id;
    std::vector<int32_t> seen;
    KVCacheConfig config;  // resolved (Engine::resolved_config)
    uint64_t file_bytes = 0;
  };

  CacheStore(std::string dir, const Model& model);  // dir "": no store (every call but enabled() throws)
  bool enabled() const { return !dir_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(const std::string& id) const;
  // The longest saved sequence `tokens` begins with and goes past, under `config`; null if none.
  const Entry* best_match(std::span<const int32_t> tokens, const KVCacheConfig& config) const;
  // FormatError naming the file when it cannot be written or read.
  const Entry& save(const std::string& id, const ModelCache& cache, std::span<const int32_t> seen);
  LoadedCache load(const std::string& id) const;
  void erase(const std::string& id);
  std::string path_of(const std::string& id) const;

 private:
  std::string dir_;
  const Model* model_;
  std::vector<Entry> entries_;
};

}  // namespace squeezekv::serve
