// A saved cache (docs/cache_file.md): a file that holds a ModelCache's whole state with the
// configuration that built it, the tokens it has seen and the identity of the model that filled
// it, so that a later run, another process or another server continues it exactly as the saved
// cache would have continued (token-identical greedy continuations, identical perplexity).
//
// Loading reads the whole file and checks it before it builds anything: the header (magic, format
// version, byte order), every section's length and checksum, the model (architecture, shapes,
// tokenizer and weights hashes), the configuration (validated as any other); then it builds a cache
// and loads the state into it, which checks every count and index as it reads. Any failure is one
// FormatError naming the file and what does not match; no cache is returned half loaded.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "squeezekv/cache/model_cache.h"
#include "squeezekv/engine/model.h"

namespace squeezekv {

inline constexpr char kCacheFileMagic[8] = {'S', 'Q', 'K', 'V', 'C', 'A', 'C', 'H'};
inline constexpr uint32_t kCacheFileVersion = 1;

// What makes a cache file belong to a model: the shapes the cache has, and hashes of the
// tokenizer's vocabulary and of the weights' metadata (every tensor's name, type and shape, every
// other metadata key), so that another model or another quantisation of it is refused.
struct ModelIdentity {
  std::string arch;
  std::string name;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  std::vector<int> layer_windows;  // per layer: 0 global, else the sliding window
  uint64_t tokenizer_hash = 0;
  uint64_t weights_hash = 0;

  bool operator==(const ModelIdentity&) const = default;
};

ModelIdentity model_identity(const Model& model);
// The first field where `file` (the saved model) and `running` differ, as "field: file's vs
// this model's"; empty when they are the same model.
std::string identity_mismatch(const ModelIdentity& file, const ModelIdentity& running);

// A cache and what it has seen, as saved or loaded.
struct CacheFileContents {
  ModelIdentity model;
  KVCacheConfig config;
  std::vector<int32_t> tokens;  // every token the cache has seen, in order
};

// Writes `cache` (between updates), which has seen exactly `tokens`, to `path`: to a temporary
// file beside it, renamed over `path` once complete (a device such as /dev/full is written in
// place). FormatError naming the path when it cannot be written (a full disk included); nothing
// is left at `path` then. Returns the bytes written.
uint64_t save_cache_file(const std::string& path, const Model& model, const ModelCache& cache,
                         std::span<const int32_t> tokens);

// Throws what save_cache_file would when `path` cannot be written at all (its folder missing, no
// permission): commands check before the work. A full disk shows only when the bytes are written.
void check_cache_file_writable(const std::string& path);

struct LoadedCache {
  std::unique_ptr<ModelCache> cache;
  CacheFileContents contents;
};

// Loads `path` for `model` (FormatError naming the file and the mismatch: another model, another
// format version, a truncated or corrupt file). The cache is built as Engine::make_cache builds
// one for this model.
LoadedCache load_cache_file(const std::string& path, const Model& model);

// The text to feed a loaded cache that has seen `history`: `whole` (the text encoded as a whole
// prompt, BOS included) past the history when it begins with it (the server's kept caches ask the
// same), else `plain` (the text encoded as a continuation, no BOS). May be empty.
std::vector<int32_t> continuation_tokens(std::span<const int32_t> history, std::span<const int32_t> whole,
                                         std::span<const int32_t> plain);

// What a file holds, read without a model (`squeezekv cache info`): the state is loaded into a
// cache of the saved shapes, so every check runs.
// The model, configuration and tokens of a file, its header and every section's checksum checked,
// the state left unread (the server's index of its --cache-dir).
CacheFileContents read_cache_file_contents(const std::string& path);

struct CacheFileInfo {
  uint32_t version = 0;
  uint64_t file_bytes = 0;
  CacheFileContents contents;
  std::unique_ptr<ModelCache> cache;
};
CacheFileInfo read_cache_file_info(const std::string& path);

}  // namespace squeezekv
