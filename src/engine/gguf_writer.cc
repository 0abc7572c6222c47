// GgufWriter: serialises metadata eagerly, tensors lazily (see gguf_writer.h).
#include "squeezekv/engine/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "squeezekv/base/errors.h"

namespace squeezekv {

namespace {

constexpr uint64_t kChunkBytes = 8u << 20;  // rows produced per RowFiller call, about this much

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.append(1, '\'').append(s).append(1, '\'');
  return out;
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  require(alignment != 0 && (alignment & (alignment - 1)) == 0, "alignment", alignment,
          "must be a nonzero power of two");
  if (alignment != 32) add_u32("general.alignment", alignment);
}

template <typename T>
void GgufWriter::put(T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  kv_.insert(kv_.end(), p, p + sizeof v);
}

void GgufWriter::put_string(std::string_view s) {
  put<uint64_t>(s.size());
  kv_.insert(kv_.end(), s.begin(), s.end());
}

void GgufWriter::begin_key(std::string_view key, GgufType type) {
  if (key.empty()) throw InvalidArgument("GGUF key: must not be empty");
  if (!keys_.emplace(key).second) throw InvalidArgument("GGUF key " + quoted(key) + ": added twice");
  put_string(key);
  put(static_cast<uint32_t>(type));
  ++n_kv_;
}

void GgufWriter::add_u8(std::string_view key, uint8_t v) {
  begin_key(key, GgufType::u8);
  put(v);
}
void GgufWriter::add_i8(std::string_view key, int8_t v) {
  begin_key(key, GgufType::i8);
  put(v);
}
void GgufWriter::add_u16(std::string_view key, uint16_t v) {
  begin_key(key, GgufType::u16);
  put(v);
}
void GgufWriter::add_i16(std::string_view key, int16_t v) {
  begin_key(key, GgufType::i16);
  put(v);
}
void GgufWriter::add_u32(std::string_view key, uint32_t v) {
  const bool alignment = key == "general.alignment";  // the key sets the padding used here
  if (alignment) {
    require(v != 0 && (v & (v - 1)) == 0, "general.alignment", v, "must be a nonzero power of two");
  }
  begin_key(key, GgufType::u32);
  put(v);
  if (alignment) alignment_ = v;
}
void GgufWriter::add_i32(std::string_view key, int32_t v) {
  begin_key(key, GgufType::i32);
  put(v);
}
void GgufWriter::add_u64(std::string_view key, uint64_t v) {
  begin_key(key, GgufType::u64);
  put(v);
}
void GgufWriter::add_i64(std::string_view key, int64_t v) {
  begin_key(key, GgufType::i64);
  put(v);
}
void GgufWriter::add_f32(std::string_view key, float v) {
  begin_key(key, GgufType::f32);
  put(v);
}
void GgufWriter::add_f64(std::string_view key, double v) {
  begin_key(key, GgufType::f64);
  put(v);
}
void GgufWriter::add_bool(std::string_view key, bool v) {
  begin_key(key, GgufType::boolean);
  put<uint8_t>(v ? 1 : 0);
}
void GgufWriter::add_string(std::string_view key, std::string_view v) {
  begin_key(key, GgufType::string);
  put_string(v);
}

template <typename T>
void GgufWriter::add_numeric_array(std::string_view key, GgufType elem, std::span<const T> v) {
  begin_key(key, GgufType::array);
  put(static_cast<uint32_t>(elem));
  put<uint64_t>(v.size());
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  kv_.insert(kv_.end(), p, p + v.size_bytes());
}

void GgufWriter::add_array(std::string_view key, std::span<const uint8_t> v) {
  add_numeric_array(key, GgufType::u8, v);
}
void GgufWriter::add_array(std::string_view key, std::span<const int8_t> v) { add_numeric_array(key, GgufType::i8, v); }
void GgufWriter::add_array(std::string_view key, std::span<const uint16_t> v) {
  add_numeric_array(key, GgufType::u16, v);
}
void GgufWriter::add_array(std::string_view key, std::span<const int16_t> v) {
  add_numeric_array(key, GgufType::i16, v);
}
void GgufWriter::add_array(std::string_view key, std::span<const uint32_t> v) {
  add_numeric_array(key, GgufType::u32, v);
}
void GgufWriter::add_array(std::string_view key, std::span<const int32_t> v) {
  add_numeric_array(key, GgufType::i32, v);
}
void GgufWriter::add_array(std::string_view key, std::span<const uint64_t> v) {
  add_numeric_array(key, GgufType::u64, v);
}
void GgufWriter::add_array(std::string_view key, std::span<const int64_t> v) {
  add_numeric_array(key, GgufType::i64, v);
}
void GgufWriter::add_array(std::string_view key, std::span<const float> v) { add_numeric_array(key, GgufType::f32, v); }
void GgufWriter::add_array(std::string_view key, std::span<const double> v) {
  add_numeric_array(key, GgufType::f64, v);
}

void GgufWriter::add_bool_array(std::string_view key, const std::vector<bool>& v) {
  begin_key(key, GgufType::array);
  put(static_cast<uint32_t>(GgufType::boolean));
  put<uint64_t>(v.size());
  for (bool b : v) put<uint8_t>(b ? 1 : 0);
}

void GgufWriter::add_array(std::string_view key, std::span<const std::string> v) {
  begin_key(key, GgufType::array);
  put(static_cast<uint32_t>(GgufType::string));
  put<uint64_t>(v.size());
  for (const std::string& s : v) put_string(s);
}

void GgufWriter::add_array(std::string_view key, const std::vector<std::vector<std::string>>& v) {
  begin_key(key, GgufType::array);
  put(static_cast<uint32_t>(GgufType::array));
  put<uint64_t>(v.size());
  for (const auto& inner : v) {
    put(static_cast<uint32_t>(GgufType::string));
    put<uint64_t>(inner.size());
    for (const std::string& s : inner) put_string(s);
  }
}

void GgufWriter::check_tensor_name(std::string_view name) const {
  if (name.empty()) throw InvalidArgument("GGUF tensor name: must not be empty");
  if (tensor_names_.count(std::string(name))) {
    throw InvalidArgument("GGUF tensor " + quoted(name) + ": added twice");
  }
}

GgufWriter::Tensor& GgufWriter::add_checked(std::string_view name, std::vector<int64_t> ne, TensorType type) {
  check_tensor_name(name);
  if (ne.empty() || ne.size() > 4) {
    throw InvalidArgument(
        invalid_value("GGUF tensor " + quoted(name) + " dimension count", ne.size(), "must be 1 to 4"));
  }
  uint64_t rows = 1;
  for (int64_t d : ne) require(d > 0, "GGUF tensor " + quoted(name) + " dimension", d, "must be > 0");
  for (size_t d = 1; d < ne.size(); ++d) rows *= static_cast<uint64_t>(ne[d]);
  BlockLayout layout = block_layout(type);
  require(ne[0] % layout.block_elems == 0, "GGUF tensor " + quoted(name) + " ne[0]", ne[0],
          "must be a multiple of the type's block size");
  uint64_t row = row_bytes(type, ne[0]);
  tensor_names_.emplace(name);
  tensors_.push_back(
      Tensor{std::string(name), std::move(ne), static_cast<uint32_t>(type), row * rows, row, {}, nullptr});
  return tensors_.back();
}

void GgufWriter::add_tensor(std::string_view name, std::vector<int64_t> ne, TensorType type,
                            std::vector<uint8_t> bytes) {
  uint64_t expected = 0;
  {
    // Validate before committing: add_checked records the tensor.
    Tensor& t = add_checked(name, std::move(ne), type);
    expected = t.n_bytes;
    if (bytes.size() != expected) {
      tensors_.pop_back();
      tensor_names_.erase(std::string(name));
      throw InvalidArgument(
          invalid_value("GGUF tensor " + quoted(name) + " byte count", bytes.size(),
                        "does not match its shape and type (" + std::to_string(expected) + " expected)"));
    }
    t.bytes = std::move(bytes);
  }
}

void GgufWriter::add_tensor(std::string_view name, std::vector<int64_t> ne, std::span<const float> values) {
  const auto* p = reinterpret_cast<const uint8_t*>(values.data());
  add_tensor(name, std::move(ne), TensorType::f32, std::vector<uint8_t>(p, p + values.size_bytes()));
}

void GgufWriter::add_tensor(std::string_view name, std::vector<int64_t> ne, TensorType type, RowFiller fill) {
  require(static_cast<bool>(fill), "GGUF tensor " + quoted(name) + " filler", "empty", "must be callable");
  add_checked(name, std::move(ne), type).fill = std::move(fill);
}

void GgufWriter::add_raw_tensor(std::string_view name, std::vector<int64_t> ne, uint32_t type_id,
                                std::vector<uint8_t> bytes) {
  check_tensor_name(name);
  tensor_names_.emplace(name);
  uint64_t n = bytes.size();
  tensors_.push_back(Tensor{std::string(name), std::move(ne), type_id, n, 0, std::move(bytes), nullptr});
}

std::vector<uint8_t> GgufWriter::header() const {
  std::vector<uint8_t> out;
  auto put_raw = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  };
  auto put_u32 = [&](uint32_t v) { put_raw(&v, 4); };
  auto put_u64 = [&](uint64_t v) { put_raw(&v, 8); };
  put_raw("GGUF", 4);
  put_u32(3);
  put_u64(tensors_.size());
  put_u64(n_kv_);
  out.insert(out.end(), kv_.begin(), kv_.end());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_u64(t.name.size());
    put_raw(t.name.data(), t.name.size());
    put_u32(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put_raw(&d, 8);
    put_u32(t.type_id);
    put_u64(offset);
    offset = align_up(offset + t.n_bytes, alignment_);
  }
  out.resize(align_up(out.size(), alignment_), 0);
  return out;
}

void GgufWriter::emit(const std::function<void(const uint8_t*, size_t)>& sink) const {
  std::vector<uint8_t> head = header();
  sink(head.data(), head.size());
  std::vector<uint8_t> chunk;
  static const uint8_t kZeros[256] = {};
  for (const Tensor& t : tensors_) {
    if (!t.fill) {
      sink(t.bytes.data(), t.bytes.size());
    } else {
      int64_t rows = static_cast<int64_t>(t.n_bytes / t.row_bytes);
      int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / t.row_bytes));
      for (int64_t r = 0; r < rows; r += per_chunk) {
        int64_t n = std::min(per_chunk, rows - r);
        chunk.assign(static_cast<size_t>(n) * t.row_bytes, 0);
        t.fill(r, n, chunk);
        sink(chunk.data(), chunk.size());
      }
    }
    for (uint64_t pad = align_up(t.n_bytes, alignment_) - t.n_bytes; pad > 0;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof kZeros));
      sink(kZeros, n);
      pad -= n;
    }
  }
}

void GgufWriter::write(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) throw Error("cannot write model " + quoted(path) + ": " + std::strerror(errno));
  emit([&](const uint8_t* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, file.get()) != n) {
      throw Error("cannot write model " + quoted(path) + ": " + std::strerror(errno));
    }
  });
  if (std::fclose(file.release()) != 0) {
    throw Error("cannot write model " + quoted(path) + ": " + std::strerror(errno));
  }
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out;
  emit([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

}  // namespace squeezekv
