// Read-only view of a GGUF model file (versions 2 and 3). The file is memory-mapped; metadata
// strings, arrays and tensor data are views into the mapping, valid while the GgufFile lives.
// Nothing in the file is trusted: every malformed field raises FormatError naming the field and
// its value, in the manner of llama.cpp's gguf.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "squeezekv/engine/gguf_value.h"
#include "squeezekv/ops/tensor_type.h"

namespace squeezekv {

// One tensor of the file. `ne` is in GGUF order: ne[0] is the contiguous (row) dimension.
struct GgufTensor {
  std::string_view name;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  uint32_t type_id = 0;  // GGUF/ggml type id
  uint64_t offset = 0;   // from the start of the data section
  const void* data = nullptr;
  uint64_t n_bytes = 0;

  std::span<const int64_t> dims() const { return {ne.data(), static_cast<size_t>(n_dims)}; }
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // True when squeezekv can compute with the type (block_layout(type_id) is known).
  bool supported() const;
  // The type; FormatError "tensor 'x' has type Q2_K, which squeezekv does not support" if not.
  TensorType type() const;
  std::string_view type_name() const;
};

class GgufFile {
 public:
  // Maps and parses the file. FormatError("cannot open model 'path': No such file or directory")
  // and the like when it cannot be read; FormatError naming the field for any malformed content.
  static GgufFile open(const std::string& path);
  // Parses a copy of an in-memory image (tests, fuzzing); `name` stands for the path in messages.
  static GgufFile from_bytes(std::span<const uint8_t> bytes, std::string name = "<memory>");

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // byte where tensor data begins

  // Metadata, keys in file order.
  const std::vector<std::string_view>& keys() const { return keys_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;  // nullptr when absent
  const GgufValue& get(std::string_view key) const;   // FormatError "missing key 'x'"

  // Typed getters: find_* return nullopt when the key is absent, get_* throw "missing key 'x'";
  // both throw "key 'x' has type string, expected uint32" on a type mismatch.
  std::optional<uint32_t> find_u32(std::string_view key) const;
  std::optional<uint64_t> find_u64(std::string_view key) const;
  std::optional<int32_t> find_i32(std::string_view key) const;
  std::optional<float> find_f32(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<std::string_view> find_string(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::string_view get_string(std::string_view key) const;
  const GgufValue& get_array(std::string_view key) const;  // any array
  std::span<const std::string_view> get_strings(std::string_view key) const;
  std::vector<float> get_f32s(std::string_view key) const;
  std::vector<int32_t> get_i32s(std::string_view key) const;

  // Tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;  // nullptr when absent

  // Drops the mapped pages wholly inside [begin, begin + bytes) from this process's resident memory
  // (madvise MADV_DONTNEED; they are read again from the file if touched). For a range whose
  // contents live elsewhere now (a repacked matrix). Nothing for a file held in memory.
  void release_pages(const void* begin, size_t bytes) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  void release() noexcept;

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;  // base_ is an mmap region (else owned_ holds the bytes)
  std::unique_ptr<uint8_t[]> owned_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string_view> keys_;
  std::vector<GgufValue> values_;  // parallel to keys_
  std::unordered_map<std::string_view, size_t> key_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace squeezekv
