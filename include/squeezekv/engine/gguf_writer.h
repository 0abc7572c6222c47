// GgufWriter: builds a GGUF v3 file from metadata and tensors. Metadata is serialised as it is
// added; tensor data is either held (small tensors) or produced row block by row block while the
// file is written, so multi-gigabyte models never sit in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "squeezekv/engine/gguf_value.h"
#include "squeezekv/ops/tensor_type.h"

namespace squeezekv {

class GgufWriter {
 public:
  // Fills out[0, n_rows * row bytes) with rows [first_row, first_row + n_rows) of the tensor.
  using RowFiller = std::function<void(int64_t first_row, int64_t n_rows, std::span<uint8_t> out)>;

  // alignment: a nonzero power of two; when it is not the default 32 the writer also stores
  // general.alignment. Adding general.alignment with add_u32 instead sets it the same way.
  explicit GgufWriter(uint32_t alignment = 32);

  // Scalars. Keys must be nonempty and unique (InvalidArgument otherwise).
  void add_u8(std::string_view key, uint8_t v);
  void add_i8(std::string_view key, int8_t v);
  void add_u16(std::string_view key, uint16_t v);
  void add_i16(std::string_view key, int16_t v);
  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_u64(std::string_view key, uint64_t v);
  void add_i64(std::string_view key, int64_t v);
  void add_f32(std::string_view key, float v);
  void add_f64(std::string_view key, double v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);

  // Arrays.
  void add_array(std::string_view key, std::span<const uint8_t> v);
  void add_array(std::string_view key, std::span<const int8_t> v);
  void add_array(std::string_view key, std::span<const uint16_t> v);
  void add_array(std::string_view key, std::span<const int16_t> v);
  void add_array(std::string_view key, std::span<const uint32_t> v);
  void add_array(std::string_view key, std::span<const int32_t> v);
  void add_array(std::string_view key, std::span<const uint64_t> v);
  void add_array(std::string_view key, std::span<const int64_t> v);
  void add_array(std::string_view key, std::span<const float> v);
  void add_array(std::string_view key, std::span<const double> v);
  void add_bool_array(std::string_view key, const std::vector<bool>& v);
  void add_array(std::string_view key, std::span<const std::string> v);
  void add_array(std::string_view key, const std::vector<std::vector<std::string>>& v);

  // Tensors, written in the order added. ne is in GGUF order (ne[0] contiguous), 1..4 dims.
  // The byte count must equal the type's row bytes times the row count.
  void add_tensor(std::string_view name, std::vector<int64_t> ne, TensorType type, std::vector<uint8_t> bytes);
  void add_tensor(std::string_view name, std::vector<int64_t> ne, std::span<const float> values);
  // Produced while writing; rows are ne[0] elements (ne[1] * ne[2] * ne[3] rows).
  void add_tensor(std::string_view name, std::vector<int64_t> ne, TensorType type, RowFiller fill);
  // Any type id and any bytes, unchecked: lets tests write types squeezekv cannot compute on.
  void add_raw_tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type_id, std::vector<uint8_t> bytes);

  size_t key_count() const { return n_kv_; }
  size_t tensor_count() const { return tensors_.size(); }

  // Writes the file (Error naming the path when it cannot), or returns its bytes.
  void write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    uint32_t type_id;
    uint64_t n_bytes;
    uint64_t row_bytes;  // 0 for raw tensors (written from `bytes` in one piece)
    std::vector<uint8_t> bytes;
    RowFiller fill;
  };

  void begin_key(std::string_view key, GgufType type);
  template <typename T>
  void put(T v);
  void put_string(std::string_view s);
  template <typename T>
  void add_numeric_array(std::string_view key, GgufType elem, std::span<const T> v);
  void check_tensor_name(std::string_view name) const;
  Tensor& add_checked(std::string_view name, std::vector<int64_t> ne, TensorType type);
  std::vector<uint8_t> header() const;  // through the padding before the data section
  void emit(const std::function<void(const uint8_t*, size_t)>& sink) const;

  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;  // serialised key/value pairs
  std::unordered_set<std::string> keys_;
  std::vector<Tensor> tensors_;
  std::unordered_set<std::string> tensor_names_;
};

}  // namespace squeezekv
