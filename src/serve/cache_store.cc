#include "serve/cache_store.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "squeezekv/base/errors.h"
#include "squeezekv/base/fnv1a.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::serve {

namespace fs = std::filesystem;

std::string cache_id(const KVCacheConfig& config, std::span<const int32_t> seen) {
  uint64_t h = kFnv1aSeed;
  for (const ParamSpec* spec : all_params()) {
    h = fnv1a(spec->name, h);
    h = fnv1a(config.get_text(spec->name), h);
  }
  h = fnv1a(seen.data(), seen.size_bytes(), h);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

CacheStore::CacheStore(std::string dir, const Model& model) : dir_(std::move(dir)), model_(&model) {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  require(fs::is_directory(dir_), "--cache-dir", dir_, "is not a folder that can be created");
  const ModelIdentity self = model_identity(model);
  fs::directory_iterator files(dir_, ec);
  require(!ec, "--cache-dir", dir_, "cannot be read: " + ec.message());
  for (const fs::directory_entry& file : files) {
    if (file.path().extension() != ".skv" || !file.is_regular_file(ec)) continue;
    try {
      CacheFileContents contents = read_cache_file_contents(file.path().string());
      const std::string mismatch = identity_mismatch(contents.model, self);
      if (!mismatch.empty()) throw FormatError("saved for another model: " + mismatch);
      entries_.push_back({file.path().stem().string(), std::move(contents.tokens), std::move(contents.config),
                          uint64_t(file.file_size(ec))});
    } catch (const Error& e) {
      std::fprintf(stderr, "squeezekv serve: --cache-dir: %s left alone: %s\n", file.path().c_str(), e.what());
    }
  }
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
}

std::string CacheStore::path_of(const std::string& id) const { return (fs::path(dir_) / (id + ".skv")).string(); }

const CacheStore::Entry* CacheStore::find(const std::string& id) const {
  for (const Entry& e : entries_) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

const CacheStore::Entry* CacheStore::best_match(std::span<const int32_t> tokens, const KVCacheConfig& config) const {
  const Entry* best = nullptr;
  for (const Entry& e : entries_) {
    if (e.seen.size() >= tokens.size() || !(e.config == config)) continue;
    if (!std::equal(e.seen.begin(), e.seen.end(), tokens.begin())) continue;
    if (best == nullptr || e.seen.size() > best->seen.size()) best = &e;
  }
  return best;
}

const CacheStore::Entry& CacheStore::save(const std::string& id, const ModelCache& cache,
                                          std::span<const int32_t> seen) {
  const uint64_t bytes = save_cache_file(path_of(id), *model_, cache, seen);
  std::erase_if(entries_, [&](const Entry& e) { return e.id == id; });
  entries_.push_back({id, {seen.begin(), seen.end()}, cache.config(), bytes});
  return entries_.back();
}

LoadedCache CacheStore::load(const std::string& id) const { return load_cache_file(path_of(id), *model_); }

void CacheStore::erase(const std::string& id) {
  std::erase_if(entries_, [&](const Entry& e) { return e.id == id; });
  std::error_code ec;
  fs::remove(path_of(id), ec);
}

}  // namespace squeezekv::serve
