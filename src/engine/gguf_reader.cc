// GgufFile: maps a GGUF file and parses its header behind one bounded cursor. Every count is
// checked against the bytes left before anything is allocated, every size for overflow, and every
// error names the field and its value (the checks follow llama.cpp's gguf.cpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "squeezekv/base/errors.h"
#include "squeezekv/base/quote.h"
#include "squeezekv/engine/gguf_reader.h"

namespace squeezekv {

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;                            // nested arrays recurse; bound the stack on hostile files
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key length, 1-char key, type, 1 byte
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;  // name, n_dims, type, offset

uint64_t align_up(uint64_t x, uint64_t alignment) { return (x + alignment - 1) / alignment * alignment; }

std::string quoted(std::string_view s) { return quoted_excerpt(s); }

// A path the user gave: shown whole, control bytes escaped.
std::string quoted_path(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

// Parses the image base_[0, size_) into a GgufFile. `context_` names what is being read
// ("header", "key 'x'", "tensor 'y'") so that every error says where it happened.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& file) : f_(file) {}

  void parse() {
    read_header();
    for (uint64_t i = 0; i < n_kv_; ++i) read_kv(i);
    read_alignment();
    for (uint64_t i = 0; i < n_tensors_; ++i) read_tensor_info(i);
    place_tensors();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError("model " + quoted_path(f_.path_) + ": " + context_ + ": " + what);
  }

  uint64_t left() const { return f_.size_ - pos_; }

  // The next n bytes, or an error naming `what` when the file ends first.
  const uint8_t* take(uint64_t n, std::string_view what) {
    if (n > left()) {
      std::ostringstream out;
      out << "unexpected end of file reading " << what << " at byte " << pos_ << ": needs " << n << " bytes, " << left()
          << " left";
      fail(out.str());
    }
    const uint8_t* p = f_.base_ + pos_;
    pos_ += n;
    return p;
  }

  template <typename T>
  T read(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }

  std::string_view read_string(std::string_view what) {
    auto len = read<uint64_t>(what);
    if (len > left()) {
      std::ostringstream out;
      out << what << " length " << len << " exceeds the " << left() << " bytes left in the file";
      fail(out.str());
    }
    return {reinterpret_cast<const char*>(take(len, what)), static_cast<size_t>(len)};
  }

  // Fails unless `count` items of at least `min_bytes` each can fit in the rest of the file.
  void check_count(uint64_t count, uint64_t min_bytes, std::string_view what) {
    if (count > left() / min_bytes) {
      std::ostringstream out;
      out << what << " " << count << " is impossible: at least " << min_bytes << " bytes each, but only " << left()
          << " bytes are left in the file";
      fail(out.str());
    }
  }

  void read_header() {
    context_ = "header";
    const uint8_t* magic = take(4, "the magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      fail("bad magic " + quoted({reinterpret_cast<const char*>(magic), 4}) + ", expected 'GGUF' (not a GGUF file)");
    }
    auto version = read<uint32_t>("the version");
    if (version == 1) fail("version 1 is not supported (GGUF v1 is obsolete; expected 2 or 3)");
    if (version != 2 && version != 3) {
      std::string why = (version & 0xFFFFu) == 0 ? " (a big-endian file?)" : "";
      fail("version " + std::to_string(version) + " is not supported, expected 2 or 3" + why);
    }
    f_.version_ = version;
    n_tensors_ = read<uint64_t>("the tensor count");
    n_kv_ = read<uint64_t>("the key count");
    check_count(n_kv_, kMinKvBytes, "key count");
    check_count(n_tensors_, kMinTensorInfoBytes, "tensor count");
    f_.keys_.reserve(n_kv_);
    f_.values_.reserve(n_kv_);
    f_.tensors_.reserve(n_tensors_);
  }

  void read_kv(uint64_t i) {
    context_ = "key #" + std::to_string(i);
    std::string_view key = read_string("the key name");
    if (key.empty()) fail("empty key name");
    context_ = "key " + quoted(key);
    if (f_.key_index_.count(key)) fail("duplicate key");
    auto type = read<uint32_t>("the value type");
    GgufValue value = read_value(type, 0);
    f_.key_index_.emplace(key, f_.keys_.size());
    f_.keys_.push_back(key);
    f_.values_.push_back(std::move(value));
  }

  GgufValue read_value(uint32_t type_id, int depth) {
    GgufValue v;
    if (type_id > static_cast<uint32_t>(GgufType::f64)) {
      fail("unknown value type " + std::to_string(type_id));
    }
    v.type_ = static_cast<GgufType>(type_id);
    switch (v.type_) {
      case GgufType::u8:
        v.bits_ = read<uint8_t>("the uint8 value");
        break;
      case GgufType::i8:
        v.bits_ = sign_extend(read<int8_t>("the int8 value"));
        break;
      case GgufType::u16:
        v.bits_ = read<uint16_t>("the uint16 value");
        break;
      case GgufType::i16:
        v.bits_ = sign_extend(read<int16_t>("the int16 value"));
        break;
      case GgufType::u32:
        v.bits_ = read<uint32_t>("the uint32 value");
        break;
      case GgufType::i32:
        v.bits_ = sign_extend(read<int32_t>("the int32 value"));
        break;
      case GgufType::u64:
        v.bits_ = read<uint64_t>("the uint64 value");
        break;
      case GgufType::i64:
        v.bits_ = read<uint64_t>("the int64 value");
        break;
      case GgufType::f32:
        v.real_ = read<float>("the float32 value");
        break;
      case GgufType::f64:
        v.real_ = read<double>("the float64 value");
        break;
      case GgufType::boolean: {
        auto b = read<uint8_t>("the bool value");
        if (b > 1) fail("bool value " + std::to_string(b) + " is not 0 or 1");
        v.bits_ = b;
        break;
      }
      case GgufType::string:
        v.str_ = read_string("the string value");
        break;
      case GgufType::array:
        read_array(v, depth);
        break;
    }
    return v;
  }

  void read_array(GgufValue& v, int depth) {
    if (depth >= kMaxArrayDepth) {
      fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    }
    auto elem = read<uint32_t>("the array element type");
    if (elem > static_cast<uint32_t>(GgufType::f64)) {
      fail("unknown array element type " + std::to_string(elem));
    }
    v.elem_type_ = static_cast<GgufType>(elem);
    auto count = read<uint64_t>("the array length");
    std::string what = "array of " + std::string(gguf_type_name(v.elem_type_)) + " length";
    if (size_t size = gguf_scalar_size(v.elem_type_)) {
      check_count(count, size, what);
      v.raw_ = take(count * size, "the array elements");
      v.count_ = static_cast<size_t>(count);
      if (v.elem_type_ == GgufType::boolean) {
        for (size_t i = 0; i < v.count_; ++i) {
          if (v.raw_[i] > 1) {
            fail("bool array element " + std::to_string(i) + " = " + std::to_string(v.raw_[i]) + " is not 0 or 1");
          }
        }
      }
    } else if (v.elem_type_ == GgufType::string) {
      check_count(count, 8, what);
      v.count_ = static_cast<size_t>(count);
      v.strings_.reserve(v.count_);
      for (size_t i = 0; i < v.count_; ++i) v.strings_.push_back(read_string("the array string"));
    } else {
      check_count(count, 4 + 8, what);
      v.count_ = static_cast<size_t>(count);
      v.items_.reserve(v.count_);
      for (size_t i = 0; i < v.count_; ++i) {
        v.items_.push_back(read_value(static_cast<uint32_t>(GgufType::array), depth + 1));
      }
    }
  }

  template <typename T>
  static uint64_t sign_extend(T x) {
    return static_cast<uint64_t>(static_cast<int64_t>(x));
  }

  void read_alignment() {
    context_ = "key 'general.alignment'";
    const GgufValue* a = f_.find("general.alignment");
    if (!a) return;
    if (a->type() != GgufType::u32) {
      fail("has type " + std::string(gguf_type_name(a->type())) + ", expected uint32");
    }
    uint32_t alignment = a->as_u32();
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      fail("alignment " + std::to_string(alignment) + " is not a nonzero power of two");
    }
    f_.alignment_ = alignment;
  }

  void read_tensor_info(uint64_t i) {
    context_ = "tensor #" + std::to_string(i);
    GgufTensor t;
    t.name = read_string("the tensor name");
    if (t.name.empty()) fail("empty tensor name");
    context_ = "tensor " + quoted(t.name);
    if (f_.tensor_index_.count(t.name)) fail("duplicate tensor name");
    auto n_dims = read<uint32_t>("the dimension count");
    if (n_dims > kMaxDims) {
      fail("dimension count " + std::to_string(n_dims) + " exceeds " + std::to_string(kMaxDims));
    }
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      auto ne = read<int64_t>("ne[" + std::to_string(d) + "]");
      if (ne < 0) fail("ne[" + std::to_string(d) + "] = " + std::to_string(ne) + " is negative");
      t.ne[d] = ne;
    }
    // The element count must fit int64 (as ggml requires), even when some dimension is zero.
    int64_t elems = 1;
    for (int64_t ne : t.ne) {
      if (ne != 0 && __builtin_mul_overflow(elems, ne, &elems)) {
        fail("element count of " + shape(t) + " overflows int64");
      }
    }
    t.type_id = read<uint32_t>("the tensor type");
    auto layout = ggml_block_layout(t.type_id);
    if (!layout) fail("invalid tensor type id " + std::to_string(t.type_id));
    if (t.ne[0] % layout->block_elems != 0) {
      fail("ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the block size " +
           std::to_string(layout->block_elems) + " of " + std::string(tensor_type_name(t.type_id)));
    }
    // Bytes = blocks per row * block bytes * rows, checked for overflow.
    auto blocks = static_cast<uint64_t>(t.ne[0] / layout->block_elems);
    auto rows = static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]);
    uint64_t row_bytes = 0;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(layout->block_bytes), &row_bytes) ||
        __builtin_mul_overflow(row_bytes, rows, &t.n_bytes)) {
      fail("byte size of " + shape(t) + " " + std::string(tensor_type_name(t.type_id)) + " overflows");
    }
    t.offset = read<uint64_t>("the data offset");
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(t);
  }

  static std::string shape(const GgufTensor& t) {
    std::string s = "[";
    for (int d = 0; d < t.n_dims; ++d) s += (d ? ", " : "") + std::to_string(t.ne[d]);
    return s + "]";
  }

  // Data starts at the next multiple of the alignment; tensors follow each other in file order,
  // each at an aligned offset, and must lie inside the file.
  void place_tensors() {
    f_.data_offset_ = align_up(pos_, f_.alignment_);
    uint64_t expected = 0;
    for (GgufTensor& t : f_.tensors_) {
      context_ = "tensor " + quoted(t.name);
      if (t.offset % f_.alignment_ != 0) {
        fail("offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(f_.alignment_));
      }
      if (t.offset != expected) {
        fail("offset " + std::to_string(t.offset) + ", expected " + std::to_string(expected) +
             " (tensor data must be contiguous, in the order of the tensor infos)");
      }
      uint64_t begin = f_.data_offset_ + t.offset;
      if (t.offset > f_.size_ || begin > f_.size_ || t.n_bytes > f_.size_ - begin) {
        std::ostringstream out;
        out << "data [" << begin << ", ";
        if (t.offset > f_.size_ || t.n_bytes > std::numeric_limits<uint64_t>::max() - begin) {
          out << "...";
        } else {
          out << begin + t.n_bytes;
        }
        out << ") extends past the end of the file (" << f_.size_ << " bytes)";
        fail(out.str());
      }
      t.data = f_.base_ + begin;
      expected = align_up(t.offset + t.n_bytes, f_.alignment_);
    }
  }

  GgufFile& f_;
  uint64_t pos_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t n_tensors_ = 0;
  std::string context_;
};

// --- GgufTensor ---

bool GgufTensor::supported() const { return block_layout(type_id).has_value(); }

std::string_view GgufTensor::type_name() const { return tensor_type_name(type_id); }

TensorType GgufTensor::type() const {
  if (!supported()) {
    throw FormatError("tensor " + quoted(name) + " has type " + std::string(type_name()) +
                      ", which squeezekv does not support");
  }
  return static_cast<TensorType>(type_id);
}

// --- GgufFile ---

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.path_ = path;
  // A NUL inside the path (from Python or a C++ caller) would open the file named by its prefix.
  require(path.find('\0') == std::string::npos, "path", quoted_path(path), "contains a NUL byte");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError("cannot open model " + quoted_path(path) + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    throw FormatError("cannot open model " + quoted_path(path) + ": " +
                      (err ? std::strerror(err) : "not a regular file"));
  }
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ == 0) {
    ::close(fd);
    f.owned_ = std::make_unique<uint8_t[]>(1);
    f.base_ = f.owned_.get();
  } else {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      throw FormatError("cannot map model " + quoted_path(path) + ": " + std::strerror(err));
    }
    f.base_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
  }
  GgufParser(f).parse();  // on error, f's destructor unmaps
  return f;
}

void GgufFile::release_pages(const void* begin, size_t bytes) const {
  if (!mapped_ || bytes == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(begin), end = start + bytes;
  const uintptr_t first = (start + page - 1) / page * page, last = end / page * page;
  const auto lo = reinterpret_cast<uintptr_t>(base_), hi = lo + size_;
  require(start >= lo && end <= hi, "release range", start - lo, "lies outside the mapped file");
  // Advice only: on failure the pages merely stay resident.
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

GgufFile GgufFile::from_bytes(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.path_ = std::move(name);
  f.size_ = bytes.size();
  f.owned_ = std::make_unique<uint8_t[]>(bytes.size() + 1);
  if (!bytes.empty()) std::memcpy(f.owned_.get(), bytes.data(), bytes.size());
  f.base_ = f.owned_.get();
  GgufParser(f).parse();
  return f;
}

GgufFile::GgufFile(GgufFile&& other) noexcept { *this = std::move(other); }

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
    owned_ = std::move(other.owned_);
    version_ = other.version_;
    alignment_ = other.alignment_;
    data_offset_ = other.data_offset_;
    keys_ = std::move(other.keys_);
    values_ = std::move(other.values_);
    key_index_ = std::move(other.key_index_);
    tensors_ = std::move(other.tensors_);
    tensor_index_ = std::move(other.tensor_index_);
  }
  return *this;
}

GgufFile::~GgufFile() { release(); }

void GgufFile::release() noexcept {
  if (mapped_ && base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  mapped_ = false;
  base_ = nullptr;
  owned_.reset();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &values_[it->second];
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) throw FormatError("model " + quoted_path(path_) + ": missing key " + quoted(key));
  return *v;
}

namespace {
std::string key_label(std::string_view key) { return "key " + quoted(key); }
}  // namespace

std::optional<uint32_t> GgufFile::find_u32(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? std::optional(v->as_u32(key_label(key))) : std::nullopt;
}
std::optional<uint64_t> GgufFile::find_u64(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? std::optional(v->as_u64(key_label(key))) : std::nullopt;
}
std::optional<int32_t> GgufFile::find_i32(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? std::optional(v->as_i32(key_label(key))) : std::nullopt;
}
std::optional<float> GgufFile::find_f32(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? std::optional(v->as_f32(key_label(key))) : std::nullopt;
}
std::optional<bool> GgufFile::find_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? std::optional(v->as_bool(key_label(key))) : std::nullopt;
}
std::optional<std::string_view> GgufFile::find_string(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? std::optional(v->as_string(key_label(key))) : std::nullopt;
}

uint32_t GgufFile::get_u32(std::string_view key) const { return get(key).as_u32(key_label(key)); }
uint64_t GgufFile::get_u64(std::string_view key) const { return get(key).as_u64(key_label(key)); }
int32_t GgufFile::get_i32(std::string_view key) const { return get(key).as_i32(key_label(key)); }
float GgufFile::get_f32(std::string_view key) const { return get(key).as_f32(key_label(key)); }
bool GgufFile::get_bool(std::string_view key) const { return get(key).as_bool(key_label(key)); }
std::string_view GgufFile::get_string(std::string_view key) const { return get(key).as_string(key_label(key)); }

const GgufValue& GgufFile::get_array(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.type() != GgufType::array) {
    throw FormatError(key_label(key) + " has type " + std::string(gguf_type_name(v.type())) + ", expected array");
  }
  return v;
}

std::span<const std::string_view> GgufFile::get_strings(std::string_view key) const {
  return get(key).strings(key_label(key));
}
std::vector<float> GgufFile::get_f32s(std::string_view key) const { return get(key).to_f32s(key_label(key)); }
std::vector<int32_t> GgufFile::get_i32s(std::string_view key) const { return get(key).to_i32s(key_label(key)); }

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace squeezekv
