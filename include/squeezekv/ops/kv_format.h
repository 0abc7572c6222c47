// The storage formats of cached K/V rows, one row each in kKVFormats: name, summary, layout, bits
// per code, block shape and (for per-token formats) the codec and row kernels. Whatever lists or
// sizes the formats (the helpers below, the config's names and messages, `squeezekv methods`,
// the kernels' dispatch in kv_rows.h) reads this table, so that a new per-token format is its
// enum value and row here, its kernel file src/ops/kv_format_<name>.cc (whose opening comment
// gives its bytes) and its test (docs/architecture.md "How to add a K/V format").
//
// Per-token formats store each row of head_dim elements on its own, row-major [n_rows, head_dim],
// kv_row_bytes(type, head_dim) bytes a row: plain ones one value per element (f16, f32), block
// ones blocks of B = kv_block_size(type, head_dim) elements, each a header (q8_0, q4_0: the fp16
// scale d) then the codes (llama.cpp's formats, docs/semantics.md "K/V storage"); B is 32, or
// head_dim when head_dim < 32 (llama.cpp uses 32 only). Grouped formats (kivi2, kivi4: KIVI's
// 2- and 4-bit min-max codes, ops/kivi_rows.h) quantize keys per channel over groups of tokens:
// not a row format, so only HeadStore reads and writes them.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace squeezekv {

enum class KVType : uint8_t { f16, f32, q8_0, q4_0, kivi2, kivi4 };

enum class KVLayout : uint8_t {
  plain,    // one value of code_bits per element
  blocks,   // blocks of `block` elements (the row's when it is shorter): header_bytes, then the codes
  grouped,  // codes grouped over tokens (KIVI): read and written only through HeadStore
};

// The codec and kernels of a per-token format (src/ops/kv_format_kernels.h), defined in the
// format's kernel file.
struct KVRowKernels;
extern const KVRowKernels kv_f16_kernels;
extern const KVRowKernels kv_f32_kernels;
extern const KVRowKernels kv_q8_0_kernels;
extern const KVRowKernels kv_q4_0_kernels;

struct KVFormat {
  KVType type;               // = the row's index
  std::string_view name;     // as --kv-type, --k-type and the config spell it
  std::string_view summary;  // one line for `squeezekv methods`
  KVLayout layout;
  uint8_t code_bits;            // bits per stored value (plain) or per code (blocks, grouped)
  uint8_t header_bytes;         // blocks: bytes before each block's codes (its scales)
  uint16_t block;               // blocks: elements per block when the row is at least that long
  const KVRowKernels* kernels;  // per-token formats; nullptr for grouped ones
};

// clang-format off
inline constexpr KVFormat kKVFormats[] = {
    {KVType::f16, "f16", "IEEE half per value", KVLayout::plain, 16, 0, 1, &kv_f16_kernels},
    {KVType::f32, "f32", "float per value", KVLayout::plain, 32, 0, 1, &kv_f32_kernels},
    {KVType::q8_0, "q8_0", "llama.cpp q8_0: per block an fp16 scale and int8 codes, x = d * q", KVLayout::blocks,
     8, 2, 32, &kv_q8_0_kernels},
    {KVType::q4_0, "q4_0", "llama.cpp q4_0: per block an fp16 scale and 4-bit codes, x = d * (q - 8)",
     KVLayout::blocks, 4, 2, 32, &kv_q4_0_kernels},
    {KVType::kivi2, "kivi2", "KIVI 2-bit: keys per channel over --kivi-group tokens, values per token; x = m + s * q",
     KVLayout::grouped, 2, 0, 1, nullptr},
    {KVType::kivi4, "kivi4", "KIVI 4-bit: as kivi2 with 4-bit codes", KVLayout::grouped, 4, 0, 1, nullptr},
};
// clang-format on
inline constexpr size_t kKVFormatCount = std::size(kKVFormats);

// Checked at compile time: rows in enum order, sizes that make whole bytes. (The kernels
// pointers are not compared: addresses are no constant expressions in position-independent
// sanitizer builds.)
constexpr bool kv_formats_are_consistent() {
  for (size_t i = 0; i < kKVFormatCount; ++i) {
    const KVFormat& f = kKVFormats[i];
    if (size_t(f.type) != i || f.name.empty() || f.code_bits == 0 || f.block == 0) return false;
    if (f.layout == KVLayout::plain && (f.code_bits % 8 != 0 || f.header_bytes != 0 || f.block != 1)) return false;
    if (f.layout == KVLayout::blocks && (8 % f.code_bits != 0 || f.block * f.code_bits % 8 != 0)) return false;
  }
  return true;
}
static_assert(kv_formats_are_consistent(), "kKVFormats: one row per KVType, in order, with whole bytes");

constexpr const KVFormat& kv_format(KVType type) { return kKVFormats[size_t(type)]; }

// Every format's name in table order (the config's choices).
inline constexpr auto kKVTypeNames = [] {
  std::array<std::string_view, kKVFormatCount> names{};
  for (size_t i = 0; i < kKVFormatCount; ++i) names[i] = kKVFormats[i].name;
  return names;
}();

// The format called `name`, if any.
constexpr std::optional<KVType> find_kv_type(std::string_view name) {
  for (const KVFormat& f : kKVFormats) {
    if (f.name == name) return f.type;
  }
  return std::nullopt;
}

// "f16, f32, q8_0, q4_0, kivi2 or kivi4": the names for a message.
inline std::string kv_type_names_text() {
  std::string out;
  for (size_t i = 0; i < kKVFormatCount; ++i) {
    if (i > 0) out += i + 1 == kKVFormatCount ? " or " : ", ";
    out += kKVFormats[i].name;
  }
  return out;
}

// One float per element (f16, f32).
inline bool kv_float(KVType type) { return kv_format(type).layout == KVLayout::plain; }
// The per-row block formats (q8_0, q4_0).
inline bool kv_quantized(KVType type) { return kv_format(type).layout == KVLayout::blocks; }
// The grouped formats (KIVI).
inline bool kv_kivi(KVType type) { return kv_format(type).layout == KVLayout::grouped; }
// Code bits of a KIVI format (0 for the others).
inline int kivi_bits(KVType type) { return kv_kivi(type) ? kv_format(type).code_bits : 0; }
// Bytes per element of the float formats (f16: 2, f32: 4); not defined for the others.
inline size_t kv_type_size(KVType type) { return kv_format(type).code_bits / 8u; }
// Elements per block: 1 for float formats; 32 or head_dim (when smaller) for block formats.
inline size_t kv_block_size(KVType type, size_t head_dim) {
  const KVFormat& f = kv_format(type);
  if (f.layout != KVLayout::blocks) return 1;
  return std::min<size_t>(head_dim, f.block);
}
// Bytes of one block of a block format (header, then the codes) at this head_dim.
inline size_t kv_block_bytes(KVType type, size_t head_dim) {
  const KVFormat& f = kv_format(type);
  return f.header_bytes + kv_block_size(type, head_dim) * f.code_bits / 8;
}
// Bytes of one stored row of head_dim elements (per-token formats; 0 for grouped ones, whose keys
// are grouped over tokens: see kivi_rows.h).
inline size_t kv_row_bytes(KVType type, size_t head_dim) {
  switch (kv_format(type).layout) {
    case KVLayout::plain:
      return head_dim * kv_format(type).code_bits / 8;
    case KVLayout::blocks:
      return head_dim / kv_block_size(type, head_dim) * kv_block_bytes(type, head_dim);
    case KVLayout::grouped:
      break;
  }
  return 0;
}
// Stored bits per value, scales included (q8_0: 8.5 at B = 32, 10 at B = 8). KIVI at group 32:
// the codes with the fp16 min and scale of each group, keys and values averaged (kivi2 3 when
// head_dim >= 32; at head_dim 8 the value groups are 8 channels: keys 3, values 6, so 4.5), its
// fp16 residual not counted.
inline double kv_bits_per_value(KVType type, size_t head_dim) {
  if (kv_kivi(type)) {
    const double value_group = head_dim < 32 ? double(head_dim) : 32.0;
    return double(kivi_bits(type)) + (32.0 / 32.0 + 32.0 / value_group) / 2.0;
  }
  return 8.0 * double(kv_row_bytes(type, head_dim)) / double(head_dim);
}
// Empty when `type` can store rows of head_dim elements, else why not (block formats need
// head_dim a multiple of 32 when it is 32 or more; q4_0 needs an even block). Grouped formats
// have rules of their own (kivi_unfit).
const char* kv_type_unfit(KVType type, size_t head_dim);

}  // namespace squeezekv
