// The cache file (engine/cache_file.h, docs/cache_file.md): a header, then sections, each with its
// tag, length and FNV-1a checksum: the model's identity, the configuration, the tokens, the state.
#include "squeezekv/engine/cache_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "squeezekv/base/fnv1a.h"
#include "squeezekv/core/state_stream.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv {
namespace {

constexpr uint32_t kByteOrder = 0x01020304;
constexpr uint32_t kSectionModel = 0x4c444f4d;   // "MODL"
constexpr uint32_t kSectionConfig = 0x464e4f43;  // "CONF"
constexpr uint32_t kSectionTokens = 0x534b4f54;  // "TOKS"
constexpr uint32_t kSectionState = 0x5453564b;   // "KVST"
constexpr std::array<uint32_t, 4> kSections = {kSectionModel, kSectionConfig, kSectionTokens, kSectionState};
constexpr size_t kHeaderBytes = 24;         // magic, version, byte order, sections, reserved
constexpr size_t kSectionHeaderBytes = 24;  // tag, reserved, length, checksum
constexpr uint64_t kMaxTokens = uint64_t(1) << 32;

std::string tag_name(uint32_t tag) {
  std::string s(4, ' ');
  std::memcpy(s.data(), &tag, 4);
  for (char& c : s) c = (c >= 32 && c < 127) ? c : '?';
  return s;
}

[[noreturn]] void file_error(const std::string& path, const std::string& what) {
  throw FormatError("cache file '" + path + "': " + what);
}

void put_value(StateWriter& out, const ParamValue& v) {
  out.put(uint8_t(v.index()));
  if (const auto* i = std::get_if<int64_t>(&v)) out.put(*i);
  else if (const auto* d = std::get_if<double>(&v)) out.put(*d);
  else out.put_string(std::get<std::string>(v));
}

ParamValue get_value(StateReader& in) {
  const auto kind = in.get<uint8_t>("configuration: value kind");
  if (kind == 0) return in.get<int64_t>("configuration: integer");
  if (kind == 1) return in.get<double>("configuration: number");
  check_state(kind == 2, "configuration", "a value of unknown kind");
  return in.get_string("configuration: text");
}

void put_config(StateWriter& out, const KVCacheConfig& config) {
  const std::span<const ParamSpec> fields = cache_params();
  out.put(uint64_t(fields.size()));
  for (const ParamSpec& spec : fields) {
    out.put_string(spec.name);
    put_value(out, config.get(spec.name));
  }
  out.put(uint64_t(config.params.size()));
  for (const auto& [name, value] : config.params) {
    out.put_string(name);
    put_value(out, value);
  }
}

void set_value(KVCacheConfig& config, const std::string& name, const ParamValue& value) {
  // Text goes through the parser (an optional field's "none", a format's name).
  if (const auto* text = std::get_if<std::string>(&value)) config.set(name, std::string_view(*text));
  else config.set(name, value);
}

KVCacheConfig get_config(StateReader& in) {
  KVCacheConfig config;
  for (int part = 0; part < 2; ++part) {
    const size_t n = in.get_count(9, 4096, "configuration: parameters");
    for (size_t i = 0; i < n; ++i) {
      const std::string name = in.get_string("configuration: name", 256);
      const ParamValue value = get_value(in);
      if (find_param(name) == nullptr) {
        StateReader::fail("configuration", "parameter '" + name + "' is unknown to this build of squeezekv");
      }
      if (part == 1) config.params.erase(name);
      set_value(config, name, value);
    }
  }
  return config;
}

void put_identity(StateWriter& out, const ModelIdentity& id) {
  out.put_string(id.arch);
  out.put_string(id.name);
  for (const int v : {id.n_layers, id.n_heads, id.n_kv_heads, id.head_dim, id.vocab}) out.put(int32_t(v));
  out.put_vector(id.layer_windows);
  out.put(id.tokenizer_hash);
  out.put(id.weights_hash);
}

ModelIdentity get_identity(StateReader& in) {
  ModelIdentity id;
  id.arch = in.get_string("model: architecture", 256);
  id.name = in.get_string("model: name", 4096);
  for (int* v : {&id.n_layers, &id.n_heads, &id.n_kv_heads, &id.head_dim, &id.vocab}) *v = in.get<int32_t>("model");
  check_state(id.n_layers >= 1 && id.n_layers <= kMaxCacheLayers && id.n_kv_heads >= 1 &&
                  id.n_kv_heads <= kMaxCacheHeads && id.head_dim >= 1 && id.head_dim <= 65536 && id.vocab >= 1,
              "model", "shapes out of range");
  id.layer_windows = in.get_vector<int>("model: layer windows", uint64_t(kMaxCacheLayers));
  check_state(id.layer_windows.size() == size_t(id.n_layers), "model", "one window per layer expected");
  id.tokenizer_hash = in.get<uint64_t>("model: tokenizer hash");
  id.weights_hash = in.get<uint64_t>("model: weights hash");
  return id;
}

void append_section(std::vector<std::byte>& file, uint32_t tag, const std::vector<std::byte>& payload) {
  StateWriter head;
  head.put(tag);
  head.put(uint32_t(0));
  head.put(uint64_t(payload.size()));
  head.put(fnv1a(payload.data(), payload.size()));
  file.insert(file.end(), head.bytes().begin(), head.bytes().end());
  file.insert(file.end(), payload.begin(), payload.end());
}

void write_all(const std::string& path, const std::string& target, const std::vector<std::byte>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) file_error(target, std::string("cannot be written: ") + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    file_error(target, std::string("cannot be written: ") + std::strerror(ok ? errno : err) + " (" +
                           std::to_string(bytes.size()) + " bytes)");
  }
}

// The sections of a file, checked: header, tags in order, lengths within the file, checksums.
struct Sections {
  uint32_t version = 0;
  std::array<std::span<const std::byte>, kSections.size()> payload;
};

Sections read_sections(const std::string& path, std::span<const std::byte> bytes) {
  if (bytes.size() < kHeaderBytes)
    file_error(path, "too short for a cache file (" + std::to_string(bytes.size()) + " bytes)");
  if (std::memcmp(bytes.data(), kCacheFileMagic, sizeof kCacheFileMagic) != 0) {
    file_error(path, "not a squeezekv cache file (no SQKVCACH magic)");
  }
  StateReader in(bytes.subspan(sizeof kCacheFileMagic));
  Sections out;
  out.version = in.get<uint32_t>("version");
  if (out.version != kCacheFileVersion) {
    file_error(path, "format version " + std::to_string(out.version) + ", this build reads version " +
                         std::to_string(kCacheFileVersion));
  }
  if (in.get<uint32_t>("byte order") != kByteOrder) file_error(path, "written with another byte order");
  if (in.get<uint32_t>("sections") != kSections.size()) file_error(path, "another section count");
  (void)in.get<uint32_t>("reserved");
  for (size_t i = 0; i < kSections.size(); ++i) {
    if (in.left() < kSectionHeaderBytes) file_error(path, "truncated before section " + tag_name(kSections[i]));
    const auto tag = in.get<uint32_t>("tag");
    (void)in.get<uint32_t>("reserved");
    const auto length = in.get<uint64_t>("length");
    const auto checksum = in.get<uint64_t>("checksum");
    if (tag != kSections[i])
      file_error(path, "section " + tag_name(tag) + " where " + tag_name(kSections[i]) + " belongs");
    if (length > in.left()) {
      file_error(path, "truncated: section " + tag_name(tag) + " holds " + std::to_string(length) + " bytes, " +
                           std::to_string(in.left()) + " remain");
    }
    out.payload[i] = in.take(size_t(length), "section");
    if (fnv1a(out.payload[i].data(), out.payload[i].size()) != checksum) {
      file_error(path, "section " + tag_name(tag) + " fails its checksum (the file is corrupt)");
    }
  }
  if (in.left() != 0) file_error(path, std::to_string(in.left()) + " bytes beyond the last section");
  return out;
}

std::vector<std::byte> read_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) file_error(path, std::string("cannot be read: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) file_error(path, "is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) file_error(path, std::string("cannot be read: ") + std::strerror(errno));
  std::vector<std::byte> bytes(size_t(st.st_size));
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  if (size_t(in.gcount()) != bytes.size()) file_error(path, "could not be read whole");
  return bytes;
}

// The sections parsed: identity, configuration, tokens; the state's bytes are left to the cache.
struct Parsed {
  uint32_t version = 0;
  CacheFileContents contents;
  std::span<const std::byte> state;
};

Parsed parse(const std::string& path, std::span<const std::byte> bytes) {
  const Sections sections = read_sections(path, bytes);
  Parsed out;
  out.version = sections.version;
  try {
    StateReader model(sections.payload[0]);
    out.contents.model = get_identity(model);
    model.expect_end("model");
    StateReader config(sections.payload[1]);
    out.contents.config = get_config(config);
    config.expect_end("configuration");
    out.contents.config.validate();
    check_state(out.contents.config.head_dim == out.contents.model.head_dim, "configuration",
                "head_dim differs from the model's");
    StateReader tokens(sections.payload[2]);
    out.contents.tokens = tokens.get_vector<int32_t>("tokens", kMaxTokens);
    tokens.expect_end("tokens");
    for (const int32_t t : out.contents.tokens) {
      check_state(t >= 0 && t < out.contents.model.vocab, "tokens", "a token id beyond the vocabulary");
    }
  } catch (const Error& e) {
    file_error(path, e.what());
  }
  out.state = sections.payload[3];
  return out;
}

std::vector<LayerKind> kinds_of(const ModelIdentity& id) {
  std::vector<LayerKind> kinds;
  bool any = false;
  for (const int w : id.layer_windows) {
    kinds.push_back(w > 0 ? LayerKind::sliding(w) : LayerKind::global());
    any |= w > 0;
  }
  if (!any) kinds.clear();
  return kinds;
}

// Loads the state into a cache of the file's shapes and checks that it saw exactly its tokens.
std::unique_ptr<ModelCache> build(const std::string& path, const Parsed& parsed) {
  const ModelIdentity& id = parsed.contents.model;
  try {
    auto cache = std::make_unique<ModelCache>(parsed.contents.config, id.n_layers, id.n_kv_heads, 1, kinds_of(id));
    StateReader in(parsed.state);
    cache->load_state(in);
    in.expect_end("state");
    check_state(cache->layer(0).tokens_seen() == int64_t(parsed.contents.tokens.size()), "tokens",
                "their count differs from the tokens the cache has seen");
    return cache;
  } catch (const Error& e) {
    file_error(path, e.what());
  }
}

}  // namespace

uint64_t save_cache_file(const std::string& path, const Model& model, const ModelCache& cache,
                         std::span<const int32_t> tokens) {
  require(cache.layer(0).tokens_seen() == int64_t(tokens.size()), "tokens", tokens.size(),
          "the cache has seen " + std::to_string(cache.layer(0).tokens_seen()) + " tokens");
  const ModelIdentity id = model_identity(model);
  require(cache.n_layers() == id.n_layers && cache.config().head_dim == id.head_dim, "cache", "shape",
          "the cache is not this model's");
  StateWriter model_part, config_part, tokens_part, state_part;
  put_identity(model_part, id);
  put_config(config_part, cache.config());
  tokens_part.put_vector(tokens);
  cache.save_state(state_part);
  StateWriter file;
  file.put_bytes(kCacheFileMagic, sizeof kCacheFileMagic);
  file.put(kCacheFileVersion);
  file.put(kByteOrder);
  file.put(uint32_t(kSections.size()));
  file.put(uint32_t(0));
  std::vector<std::byte>& bytes = file.bytes();
  append_section(bytes, kSectionModel, model_part.bytes());
  append_section(bytes, kSectionConfig, config_part.bytes());
  append_section(bytes, kSectionTokens, tokens_part.bytes());
  append_section(bytes, kSectionState, state_part.bytes());
  // A device (/dev/full, a pipe) is written in place; a file through a temporary one renamed over
  // it, so that a reader never sees half a file and a failed write leaves nothing.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    write_all(path, path, bytes);
    return bytes.size();
  }
  const std::string temp = path + ".partial";
  try {
    write_all(temp, path, bytes);
  } catch (...) {
    std::remove(temp.c_str());
    throw;
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(temp.c_str());
    file_error(path, std::string("cannot be written: ") + std::strerror(err));
  }
  return bytes.size();
}

void check_cache_file_writable(const std::string& path) {
  struct stat st {};
  const bool device = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  const std::string probe = device ? path : path + ".partial";
  std::FILE* f = std::fopen(probe.c_str(), device ? "ab" : "wb");
  if (f == nullptr) file_error(path, std::string("cannot be written: ") + std::strerror(errno));
  std::fclose(f);
  if (!device) std::remove(probe.c_str());
}

LoadedCache load_cache_file(const std::string& path, const Model& model) {
  const std::vector<std::byte> bytes = read_file(path);
  Parsed parsed = parse(path, bytes);
  const std::string mismatch = identity_mismatch(parsed.contents.model, model_identity(model));
  if (!mismatch.empty()) file_error(path, "saved for another model: " + mismatch);
  LoadedCache out;
  out.cache = build(path, parsed);
  out.contents = std::move(parsed.contents);
  return out;
}

std::vector<int32_t> continuation_tokens(std::span<const int32_t> history, std::span<const int32_t> whole,
                                         std::span<const int32_t> plain) {
  if (whole.size() >= history.size() && std::equal(history.begin(), history.end(), whole.begin())) {
    return {whole.begin() + long(history.size()), whole.end()};
  }
  return {plain.begin(), plain.end()};
}

CacheFileContents read_cache_file_contents(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return parse(path, bytes).contents;
}

CacheFileInfo read_cache_file_info(const std::string& path) {
  const std::vector<std::byte> bytes = read_file(path);
  Parsed parsed = parse(path, bytes);
  CacheFileInfo out;
  out.version = parsed.version;
  out.file_bytes = bytes.size();
  out.cache = build(path, parsed);
  out.contents = std::move(parsed.contents);
  return out;
}

}  // namespace squeezekv
