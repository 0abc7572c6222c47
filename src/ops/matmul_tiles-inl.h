// Prompt products as register tiles on x86 targets with VNNI (vpdpbusd): 16 weight rows x up to
// 8 tokens (Q8_0) or 4 (Q4_0, Q4_1, Q4_K, Q6_K). Included by matmul.cc inside its per-target namespace, after
// the row kernels, whose TokenQ8 and accumulation orders it shares.
//
// Why a panel: in GGUF a block's 32 bytes belong to one row, so a vector of them serves one
// (row, token) pair and needs a horizontal sum per block. Here 16 rows are first regrouped into a
// thread-local panel where one 512-bit vector holds the same 4 columns of all 16 rows (lane r =
// row r); vpdpbusd then multiplies it with one activation dword broadcast from memory, so a block
// is 8 vpdpbusd + 3 float ops per token for 16 rows x 32 columns, with no horizontal sums. The
// panel (a copy of 16 rows, at most a few hundred KiB, in L2) is built once per call and serves
// every token of the call, so it costs little beside the product once a call has a few tokens.
// Calls of up to 16 tokens (a server's batched decode step) build it a few blocks at a time
// instead, interleaved with the products (StreamedRows).
//
// Each lane sums the blocks in the order of the row kernels (see the accumulation orders in
// matmul.cc), so a tile's results are bit for bit those of the one-token path.
#undef SQUEEZEKV_VNNI_TILES
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SQUEEZEKV_VNNI_TILES 1
// AVX-512 CPUs with VNNI but not the rest of AVX3_DL (Cascade Lake) run the AVX3 target, and
// Highway 1.0's AVX3_DL target string names avxvnni (the VEX form) but not avx512vnni, which the
// 512-bit vpdpbusd needs: on both targets the tiles add it, and UseTiles asks the CPU for it.
#define SQUEEZEKV_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
// Lambdas in the tiles must be inlined: their accumulators then stay in registers.
#define SQUEEZEKV_VNNI_LAMBDA __attribute__((always_inline, target(HWY_TARGET_STR ",avx512vnni")))

constexpr int64_t kTileRows = 16;  // one 512-bit lane per row

// Calls with fewer tokens take the row kernels: below this the panel costs more than it saves
// (Q8_0 measured: 3 tokens ~27 -> ~41 tokens/s with the tiles, 2 level; Q4_K at 2 slower).
constexpr int64_t kTileMinTokens = 4, kTileMinTokensQ8_0 = 3;

// 16 rows regrouped for the tiles. bytes: per 32 columns (a Q8_0 block, a Q4_K sub-block, a Q6_K
// x block), 8 vectors, vector g = columns 4g..4g+3 of each row as unsigned bytes. factor: per
// block, d of each row (Q8_0, Q4_0, Q4_1), per sub-block d * scale (Q4_K), per super-block d (Q6_K);
// factor_min: per sub-block, dmin * min (Q4_K), per block m (Q4_1).
// (std::vector would drop __m512i's alignment: GCC ignores a vector type's attributes in template
// arguments.)
template <class T>
class AlignedBuffer {
 public:
  T* reserve(size_t n) {
    if (n > capacity_) {
      data_ = hwy::AllocateAligned<T>(n);
      capacity_ = n;
    }
    return data_.get();
  }
  T* data() const { return data_.get(); }

 private:
  hwy::AlignedFreeUniquePtr<T[]> data_;
  size_t capacity_ = 0;
};

struct Panel {
  AlignedBuffer<__m512i> bytes;
  AlignedBuffer<__m256i> halves;  // Q8_0: per block, the 16 rows' fp16 d (as a repacked matrix holds it)
  AlignedBuffer<__m512> factor;
  AlignedBuffer<__m512> factor_min;
  AlignedBuffer<__m512i> scales;  // Q6_K: per x block, the int8 scales of its two halves per row
};

// Byte offsets of the panel's 16 rows from the first; rows past `valid` repeat the last row, so
// that every load stays inside the matrix (their results are never stored).
HWY_INLINE void RowOffsets(size_t stride, int valid, size_t* offsets) {
  for (int r = 0; r < kTileRows; ++r) offsets[r] = static_cast<size_t>(std::min(r, valid - 1)) * stride;
}

// out[g] lane r = the 4 bytes at src + offsets[r] + 4g, for g < 8: the 16 x 8 transpose of 32
// bytes from each of 16 rows, in registers (rows r and r + 8 share a vector, then an 8 x 8 dword
// transpose runs in both 256-bit halves at once). About a quarter of the cost of 8 gathers.
HWY_INLINE SQUEEZEKV_VNNI void TransposeRows(const uint8_t* src, const size_t* offsets, __m512i* out) {
  __m512i z[8];
  for (int r = 0; r < 8; ++r) {
    const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + offsets[r]));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + offsets[r + 8]));
    z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
  }
  __m512i pairs[8];  // per 128-bit lane: dwords of rows 2i and 2i + 1 interleaved
  for (int i = 0; i < 4; ++i) {
    pairs[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
    pairs[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
  }
  __m512i quads[8];  // quads[4h + c]: rows 4h..4h + 3, dword c (lanes 0, 2) and c + 4 (lanes 1, 3)
  for (int h = 0; h < 2; ++h) {
    const __m512i* p = pairs + 4 * h;
    quads[4 * h] = _mm512_unpacklo_epi64(p[0], p[2]);
    quads[4 * h + 1] = _mm512_unpackhi_epi64(p[0], p[2]);
    quads[4 * h + 2] = _mm512_unpacklo_epi64(p[1], p[3]);
    quads[4 * h + 3] = _mm512_unpackhi_epi64(p[1], p[3]);
  }
  const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);   // 128-bit lanes 0, 2
  const __m512i second = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);  // 128-bit lanes 1, 3
  for (int c = 0; c < 4; ++c) {
    out[c] = _mm512_permutex2var_epi64(quads[c], first, quads[4 + c]);
    out[c + 4] = _mm512_permutex2var_epi64(quads[c], second, quads[4 + c]);
  }
}

// 4 bytes broadcast to every lane straight from memory (a load, or vpdpbusd's {1to16} operand):
// through a general register the broadcast costs a cross-domain move and was the tiles' bottleneck.
HWY_INLINE SQUEEZEKV_VNNI __m512i Broadcast32(const void* p) {
  return _mm512_broadcastd_epi32(_mm_loadu_si32(p));
}

// The integer dots of 16 columns (groups first..first + 3) of the panel with T tokens: s[k] +=
// panel byte * token k's activation byte over them (one broadcast dword per vpdpbusd).
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void BlockHalfDots(const __m512i* w, const TokenQ8* x, int64_t column, int first, __m512i* s) {
  for (int g = first; g < first + 4; ++g) {
    const __m512i wg = _mm512_load_si512(w + g);
    for (int k = 0; k < T; ++k) s[k] = _mm512_dpbusd_epi32(s[k], wg, Broadcast32(x[k].q8 + column + 4 * g));
  }
}

// The same over a whole 32-column block.
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void BlockDots(const __m512i* w, const TokenQ8* x, int64_t column, __m512i* s) {
  BlockHalfDots<T>(w, x, column, 0, s);
  BlockHalfDots<T>(w, x, column, 4, s);
}

// Writes lanes [0, valid) of token k's 16 results to y (rows r0.. of token row t0 + k).
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void StoreTile(const __m512* result, float* y, int64_t n_rows, int64_t t0, int64_t r0, __mmask16 valid) {
  for (int k = 0; k < T; ++k) _mm512_mask_storeu_ps(y + (t0 + k) * n_rows + r0, valid, result[k]);
}

// Adds the tree ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) of 8 products, p_i =
// product(first + i), to acc: the order of the row kernels' TreeSum8, lane by lane.
template <int T, class Product>
HWY_INLINE SQUEEZEKV_VNNI void AddTreeOf8(Product product, int64_t first, __m512* acc) {
  __m512 a[T], b[T], half[2][T];
  for (int h = 0; h < 2; ++h) {
    for (int q = 0; q < 2; ++q) {
      product(first + 4 * h + 2 * q, a);
      product(first + 4 * h + 2 * q + 1, b);
      for (int k = 0; k < T; ++k) {
        const __m512 pair = _mm512_add_ps(a[k], b[k]);
        half[h][k] = q == 0 ? pair : _mm512_add_ps(half[h][k], pair);
      }
    }
  }
  for (int k = 0; k < T; ++k) acc[k] = _mm512_add_ps(acc[k], _mm512_add_ps(half[0][k], half[1][k]));
}

// What the tiles need of each weight type: its unit (a block, or a K-quant super-block), how a
// run of units is packed, its tile, how the two accumulators make the dot, its widest tile (Q8_0's
// registers fit 8 tokens, the others' 4) and the units of a streamed panel (about 300 bytes a row;
// Q4_0's must be runs of 8 blocks, its trees).
//
// Each tile adds a panel of n units to T tokens' accumulators a0, a1 (zero at the start of a
// row, carried from one panel to the next when a row is streamed through several), in the order of
// the type's row kernel; combine turns them into the dots. The panel starts at the tokens' 32-value
// block x0.
// The kinds whose tiles read the whole panel (Q8_0's read a view of its codes and scales, which a
// repacked matrix can give too).
struct PanelView {
  using View = const Panel*;
  static View view(const Panel& panel) { return &panel; }
};

struct Q8_0Tiles {
  static constexpr int64_t kUnitCols = quant::q8_0_elems, kUnitBytes = quant::q8_0_bytes, kStreamUnits = 8;
  static constexpr int kMaxTokens = 8;

  // Q8_0 weights are signed; the panel holds w + 128 (unsigned, for vpdpbusd's unsigned side) and
  // the tiles subtract 128 * (sum of the token's block) to undo it, exactly, in integers. pack_to
  // writes a repacked matrix's group too (repacked_weights.h).
  static HWY_INLINE SQUEEZEKV_VNNI void pack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                                __m512i* bytes, __m256i* halves) {
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int64_t j = 0; j < n_blocks; ++j) {
      const uint8_t* block = rows + j * quant::q8_0_bytes;
      __m512i* out = bytes + j * 8;
      TransposeRows(block + 2, offsets, out);
      for (int g = 0; g < 8; ++g) out[g] = _mm512_xor_si512(out[g], flip);
      HWY_ALIGN uint16_t d[kTileRows];
      for (int r = 0; r < kTileRows; ++r) std::memcpy(&d[r], block + offsets[r], 2);
      halves[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(d));
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                             Panel& panel) {
    pack_to(rows, stride, valid, n_blocks, panel.bytes.reserve(static_cast<size_t>(n_blocks) * 8),
            panel.halves.reserve(static_cast<size_t>(n_blocks)));
  }

  // What a tile reads: a panel's, or a repacked matrix's group's, codes and scales.
  struct View {
    const __m512i* bytes;
    const __m256i* halves;
    View offset(int64_t blocks) const { return {bytes + blocks * 8, halves + blocks}; }
  };
  static View view(const Panel& panel) { return {panel.bytes.data(), panel.halves.data()}; }

  // Repacked (repacked_weights.h): per 16 rows, every block's codes as pack_to writes them, then
  // every block's fp16 d; a call's views point straight into it.
  static constexpr int64_t kRepackedStreamUnits = 4;
  static HWY_INLINE SQUEEZEKV_VNNI void repack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                                  uint8_t* group) {
    pack_to(rows, stride, valid, n_blocks, reinterpret_cast<__m512i*>(group),
            reinterpret_cast<__m256i*>(group + n_blocks * repacked::kQ8_0CodeBytes));
  }
  static HWY_INLINE View repacked_view(const uint8_t* group, int64_t n_blocks, int64_t u0, int64_t, Panel&) {
    return View{reinterpret_cast<const __m512i*>(group),
                reinterpret_cast<const __m256i*>(group + n_blocks * repacked::kQ8_0CodeBytes)}
        .offset(u0);
  }
  using WholeKind = Q8_0Tiles;
  static HWY_INLINE View whole_view(const uint8_t* group, int64_t n_blocks, Panel& panel) {
    return repacked_view(group, n_blocks, 0, n_blocks, panel);
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t n_blocks, int64_t u0, int64_t u1) {
    constexpr int64_t kCode = repacked::kQ8_0CodeBytes, kHalf = repacked::kQ8_0HalfBytes;
    for (int64_t b = u0 * kCode; b < u1 * kCode; b += 64) _mm_prefetch(reinterpret_cast<const char*>(group) + b, _MM_HINT_T1);
    const auto* halves = reinterpret_cast<const char*>(group + n_blocks * kCode);
    for (int64_t b = u0 * kHalf; b < u1 * kHalf; b += 64) _mm_prefetch(halves + b, _MM_HINT_T1);
  }

  // Q8_0: block j fused into a[j % 2], as the row kernel (AccumulateInOrder); panels of an even
  // number of blocks keep the parity.
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_blocks, const TokenQ8* x, int64_t x0,
                                             __m512* a0, __m512* a1) {
    const auto* const bytes_ptr = panel.bytes;
    const auto* const halves_ptr = panel.halves;
    auto block = [&](int64_t j, __m512* acc) SQUEEZEKV_VNNI_LAMBDA {
      __m512i s[T];
      for (int k = 0; k < T; ++k) s[k] = Broadcast32(x[k].q8_0_offset + x0 + j);
      BlockDots<T>(bytes_ptr + j * 8, x, (x0 + j) * quant::q8_0_elems, s);
      const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(halves_ptr + j));
      for (int k = 0; k < T; ++k) {
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[x0 + j])), acc[k]);
      }
    };
    int64_t j = 0;
    for (; j + 2 <= n_blocks; j += 2) {
      block(j, a0);
      block(j + 1, a1);
    }
    if (j < n_blocks) block(j, a0);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_add_ps(a0, a1); }
};

// The nibble formats' panel (Q4_0, Q4_1): each row's block decoded to 32 code bytes (0..15) in a
// small buffer, then regrouped; factor: each row's d; factor_min: each row's m (Q4_1, whose blocks
// hold it at kMinOffset; 0: none).
template <int64_t kBlockBytes, int64_t kQsOffset, int64_t kMinOffset>
HWY_INLINE SQUEEZEKV_VNNI void PackNibbleRows(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                              Panel& panel) {
  panel.bytes.reserve(static_cast<size_t>(n_blocks) * 8);
  panel.factor.reserve(static_cast<size_t>(n_blocks));
  if (kMinOffset > 0) panel.factor_min.reserve(static_cast<size_t>(n_blocks));
  size_t offsets[kTileRows], code_offsets[kTileRows];
  RowOffsets(stride, valid, offsets);
  for (int r = 0; r < kTileRows; ++r) code_offsets[r] = static_cast<size_t>(r) * 32;
  HWY_ALIGN uint8_t codes[kTileRows][32];
  for (int64_t j = 0; j < n_blocks; ++j) {
    const uint8_t* block = rows + j * kBlockBytes;
    HWY_ALIGN uint16_t d[kTileRows], m[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(codes[r]), NibbleCodes(block + offsets[r] + kQsOffset));
      std::memcpy(&d[r], block + offsets[r], 2);
      if (kMinOffset > 0) std::memcpy(&m[r], block + offsets[r] + kMinOffset, 2);
    }
    TransposeRows(codes[0], code_offsets, panel.bytes.data() + j * 8);
    panel.factor.data()[j] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
    if (kMinOffset > 0) {
      panel.factor_min.data()[j] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m)));
    }
  }
}

// p[k] = float(block j's integer dot with token k, plus Q4_0's offset -8 * (the block sum) when
// kOffset) * (d * the token's block scale), for the nibble panels.
template <int T, bool kOffset>
HWY_INLINE SQUEEZEKV_VNNI void NibbleProducts(const Panel& panel, const TokenQ8* x, int64_t x0, int64_t j, __m512* p) {
  __m512i s[T];
  for (int k = 0; k < T; ++k) {
    s[k] = kOffset ? _mm512_srai_epi32(Broadcast32(x[k].q8_0_offset + x0 + j), 4) : _mm512_setzero_si512();
  }
  BlockDots<T>(panel.bytes.data() + j * 8, x, (x0 + j) * 32, s);
  const __m512 d = panel.factor.data()[j];
  for (int k = 0; k < T; ++k) {
    p[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[x0 + j])));
  }
}

struct Q4_0Tiles : PanelView {
  static constexpr int64_t kUnitCols = quant::q4_0_elems, kUnitBytes = quant::q4_0_bytes, kStreamUnits = 16;
  static constexpr int kMaxTokens = 4;

  // Q4_0: the nibble panel; the tiles add -8 * (the token's block sum).
  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                             Panel& panel) {
    PackNibbleRows<quant::q4_0_bytes, 2, 0>(rows, stride, valid, n_blocks, panel);
  }

  // Q4_0: runs of 8 blocks as trees, then the remaining blocks one by one, as its row kernel (a
  // streamed row's panels are runs of 8 until the last). The offset term is Q8_0's shifted right by
  // 4 (-8 instead of -128 times the block sum; exact).
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_blocks, const TokenQ8* x, int64_t x0,
                                             __m512* a0, __m512*) {
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA { NibbleProducts<T, true>(*panel, x, x0, j, p); };
    int64_t j = 0;
    for (; j + 8 <= n_blocks; j += 8) AddTreeOf8<T>(product, j, a0);
    for (; j < n_blocks; ++j) {
      __m512 p[T];
      product(j, p);
      for (int k = 0; k < T; ++k) a0[k] = _mm512_add_ps(a0[k], p[k]);
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512) { return a0; }
};

struct Q4_1Tiles : PanelView {
  static constexpr int64_t kUnitCols = quant::q4_1_elems, kUnitBytes = quant::q4_1_bytes, kStreamUnits = 16;
  static constexpr int kMaxTokens = 4;

  // Q4_1: the nibble panel with the rows' minimum m as factor_min.
  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks,
                                             Panel& panel) {
    PackNibbleRows<quant::q4_1_bytes, quant::q4_1_qs_offset, 2>(rows, stride, valid, n_blocks, panel);
  }

  // Q4_1: the code term into a0 and the minimum term into a1, each as its row kernel sums it (runs
  // of 8 blocks as trees, then the remaining blocks one by one; a streamed row's panels are runs of
  // 8 until the last).
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_blocks, const TokenQ8* x, int64_t x0,
                                             __m512* a0, __m512* a1) {
    const auto* const min_ptr = panel->factor_min.data();
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA { NibbleProducts<T, false>(*panel, x, x0, j, p); };
    auto minimum = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      for (int k = 0; k < T; ++k) p[k] = _mm512_mul_ps(min_ptr[j], _mm512_set1_ps(x[k].scaled_sum[x0 + j]));
    };
    int64_t j = 0;
    for (; j + 8 <= n_blocks; j += 8) {
      AddTreeOf8<T>(product, j, a0);
      AddTreeOf8<T>(minimum, j, a1);
    }
    for (; j < n_blocks; ++j) {
      __m512 p[T], q[T];
      product(j, p);
      minimum(j, q);
      for (int k = 0; k < T; ++k) {
        a0[k] = _mm512_add_ps(a0[k], p[k]);
        a1[k] = _mm512_add_ps(a1[k], q[k]);
      }
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_add_ps(a0, a1); }
};

struct Q4_KTiles : PanelView {
  static constexpr int64_t kUnitCols = quant::q4_k_elems, kUnitBytes = quant::q4_k_bytes, kStreamUnits = 2;
  static constexpr int kMaxTokens = 4;

  // The low (sub-block 2p) or high (sub-block 2p + 1) nibbles of a packed vector, one per byte.
  static HWY_INLINE SQUEEZEKV_VNNI __m512i Nibbles(__m512i v, bool high) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    return _mm512_and_si512(high ? _mm512_srli_epi16(v, 4) : v, low4);
  }

  // 8 vectors of a pair of sub-blocks' regrouped qs bytes into the panel's 16: the low nibbles
  // (the first sub-block), then the high ones.
  static HWY_INLINE SQUEEZEKV_VNNI void SplitNibbles(const __m512i* packed, __m512i* out) {
    for (int g = 0; g < 8; ++g) {
      const __m512i v = _mm512_load_si512(packed + g);
      out[g] = Nibbles(v, false);
      out[8 + g] = Nibbles(v, true);
    }
  }

  // Q4_K nibbles are unsigned already; the panel holds them one per byte. Its factors are computed
  // as the row kernel computes them (d times the 6-bit value, each rounded once).
  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                             Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(n_super) * 64);
    panel.factor.reserve(static_cast<size_t>(n_super) * 8);
    panel.factor_min.reserve(static_cast<size_t>(n_super) * 8);
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* block = rows + b * quant::q4_k_bytes;
      __m512i* out = panel.bytes.data() + b * 64;
      for (int pair = 0; pair < 4; ++pair) {  // 32 bytes: sub-block 2 * pair low, 2 * pair + 1 high
        __m512i packed[8];
        TransposeRows(block + quant::q4_k_qs_offset + 32 * pair, offsets, packed);
        SplitNibbles(packed, out + pair * 16);
      }
      HWY_ALIGN float factor[8][kTileRows], factor_min[8][kTileRows];
      for (int r = 0; r < kTileRows; ++r) {
        const uint8_t* row_block = block + offsets[r];
        const float d = LoadHalf(row_block), dmin = LoadHalf(row_block + 2);
        uint8_t scale[8], min[8];
        quant::q4_k_unpack_scales(row_block + quant::q4_k_scales_offset, scale, min);
        for (int s = 0; s < 8; ++s) {
          factor[s][r] = d * static_cast<float>(scale[s]);
          factor_min[s][r] = dmin * static_cast<float>(min[s]);
        }
      }
      for (int s = 0; s < 8; ++s) {
        panel.factor.data()[b * 8 + s] = _mm512_load_ps(factor[s]);
        panel.factor_min.data()[b * 8 + s] = _mm512_load_ps(factor_min[s]);
      }
    }
  }

  // Q4_K: the scales' term into a0, the mins' into a1 (the dot is a0 - a1).
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_super, const TokenQ8* x, int64_t x0,
                                             __m512* a0, __m512* a1) {
    const auto* const bytes_ptr = panel->bytes.data();
    const auto* const factor_ptr = panel->factor.data();
    const auto* const factor_min_ptr = panel->factor_min.data();
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      __m512i s[T];
      for (int k = 0; k < T; ++k) s[k] = _mm512_setzero_si512();
      BlockDots<T>(bytes_ptr + j * 8, x, (x0 + j) * 32, s);
      const __m512 factor = factor_ptr[j];
      for (int k = 0; k < T; ++k) {
        p[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(factor, _mm512_set1_ps(x[k].scale[x0 + j])));
      }
    };
    // The mins' term needs no weight bytes: its own pass, so that each pass holds few registers.
    auto min_product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      const __m512 factor_min = factor_min_ptr[j];
      for (int k = 0; k < T; ++k) p[k] = _mm512_mul_ps(factor_min, _mm512_set1_ps(x[k].scaled_sum[x0 + j]));
    };
    const int64_t n_sub = n_super * 8;
    for (int64_t j = 0; j < n_sub; j += 8) AddTreeOf8<T>(product, j, a0);
    for (int64_t j = 0; j < n_sub; j += 8) AddTreeOf8<T>(min_product, j, a1);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_sub_ps(a0, a1); }
};

// Repacked Q4_K (repacked_weights.h), per super-block of 16 rows: its 128 qs bytes regrouped as
// the panel regroups them but still two nibbles a byte (32 vectors: per pair of sub-blocks, 8),
// the rows' d and dmin (16 fp16 each), then the 12 packed scale bytes as 3 dwords (3 vectors, lane
// = row): 2304 bytes, the 16 rows' own 16 x 144. Its tile reads the matrix itself: the nibbles are
// split and the 6-bit scales and mins decoded in registers, 16 rows at a time, with no panel (on
// Zen 4 a 512-bit store costs two cycles: writing the split bytes to a panel cost more than the
// products for one token). The arithmetic and its order are Q4_KTiles'.
struct Q4_KRepackedTiles {
  static constexpr int64_t kUnitCols = quant::q4_k_elems, kUnitBytes = repacked::kQ4_KUnitBytes;
  static constexpr int kMaxTokens = 4;
  static constexpr int64_t kRepackedStreamUnits = 2;
  using View = const uint8_t*;

  static HWY_INLINE SQUEEZEKV_VNNI void repack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                                  uint8_t* group) {
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* block = rows + b * quant::q4_k_bytes;
      uint8_t* out = group + b * kUnitBytes;
      for (int pair = 0; pair < 4; ++pair) {
        TransposeRows(block + quant::q4_k_qs_offset + 32 * pair, offsets, reinterpret_cast<__m512i*>(out) + pair * 8);
      }
      auto* halves = reinterpret_cast<uint16_t*>(out + repacked::kQ4_KHalves);
      auto* words = reinterpret_cast<uint32_t*>(out + repacked::kQ4_KWords);
      for (int r = 0; r < kTileRows; ++r) {
        std::memcpy(&halves[r], block + offsets[r], 2);
        std::memcpy(&halves[kTileRows + r], block + offsets[r] + 2, 2);
        for (int k = 0; k < 3; ++k) {
          std::memcpy(&words[k * kTileRows + r], block + offsets[r] + quant::q4_k_scales_offset + 4 * k, 4);
        }
      }
    }
  }

  // A super-block's d * scale and dmin * min per sub-block, 16 rows each: q4_k_unpack_scales on
  // the rows' words at once, then the products Q4_KTiles::pack computes (each rounded once).
  static HWY_INLINE SQUEEZEKV_VNNI void factors(const uint8_t* unit, __m512* factor, __m512* factor_min) {
    const auto* halves = reinterpret_cast<const __m256i*>(unit + repacked::kQ4_KHalves);
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(halves)), dmin = _mm512_cvtph_ps(_mm256_load_si256(halves + 1));
    const auto* w = reinterpret_cast<const __m512i*>(unit + repacked::kQ4_KWords);
    const __m512i w0 = _mm512_load_si512(w), w1 = _mm512_load_si512(w + 1), w2 = _mm512_load_si512(w + 2);
    const __m512i low6 = _mm512_set1_epi32(0x3f3f3f3f), low4 = _mm512_set1_epi32(0x0f0f0f0f),
                  low2 = _mm512_set1_epi32(0x03030303), byte = _mm512_set1_epi32(0xff);
    const __m512i words[4] = {  // the bytes of scales 0-3, scales 4-7, mins 0-3, mins 4-7
        _mm512_and_si512(w0, low6),
        _mm512_or_si512(_mm512_and_si512(w2, low4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), low2), 4)),
        _mm512_and_si512(w1, low6),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), low2), 4))};
    for (int sub = 0; sub < 8; ++sub) {
      const int shift = 8 * (sub % 4);
      const __m512i scale = _mm512_and_si512(_mm512_srli_epi32(words[sub / 4], shift), byte);
      const __m512i min = _mm512_and_si512(_mm512_srli_epi32(words[2 + sub / 4], shift), byte);
      factor[sub] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale));
      factor_min[sub] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min));
    }
  }

  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View units, int64_t n_super, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512* a1) {
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* unit = units + b * kUnitBytes;
      __m512 factor[8], factor_min[8];
      factors(unit, factor, factor_min);
      const auto* packed = reinterpret_cast<const __m512i*>(unit);
      const int64_t first = x0 + b * 8;  // the activation block of sub-block 0
      // A sub-block's product: its integer dot times d * scale times the token's block scale.
      auto scaled = [&](__m512i dot, int64_t j, int k) SQUEEZEKV_VNNI_LAMBDA {
        return _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(factor[j], _mm512_set1_ps(x[k].scale[first + j])));
      };
      if constexpr (T == 1) {
        // One token (a decode step): each packed vector is loaded once and feeds both of its
        // sub-blocks, where the general tile loads it once per nibble. Integer sums are exact in
        // any order, and the products and their tree are the general tile's, so the bits are too.
        // Unrolled so that the 8 accumulators stay in registers.
        __m512i s[8];
        for (int j = 0; j < 8; ++j) s[j] = _mm512_setzero_si512();
        const int8_t* xq = x[0].q8 + first * 32;
#pragma GCC unroll 4
        for (int pair = 0; pair < 4; ++pair) {
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) {
            const __m512i v = _mm512_load_si512(packed + pair * 8 + g);
            s[2 * pair] = _mm512_dpbusd_epi32(s[2 * pair], Q4_KTiles::Nibbles(v, false), Broadcast32(xq + 64 * pair + 4 * g));
            s[2 * pair + 1] =
                _mm512_dpbusd_epi32(s[2 * pair + 1], Q4_KTiles::Nibbles(v, true), Broadcast32(xq + 64 * pair + 32 + 4 * g));
          }
        }
        AddTreeOf8<1>([&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA { p[0] = scaled(s[j], j, 0); }, 0, a0);
      } else {
        auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
          __m512i s[T];
          for (int k = 0; k < T; ++k) s[k] = _mm512_setzero_si512();
          const int64_t column = (first + j) * 32;
          for (int g = 0; g < 8; ++g) {
            const __m512i wg = Q4_KTiles::Nibbles(_mm512_load_si512(packed + (j / 2) * 8 + g), (j & 1) != 0);
            for (int k = 0; k < T; ++k) s[k] = _mm512_dpbusd_epi32(s[k], wg, Broadcast32(x[k].q8 + column + 4 * g));
          }
          for (int k = 0; k < T; ++k) p[k] = scaled(s[k], j, k);
        };
        AddTreeOf8<T>(product, 0, a0);
      }
      auto min_product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
        for (int k = 0; k < T; ++k) p[k] = _mm512_mul_ps(factor_min[j], _mm512_set1_ps(x[k].scaled_sum[first + j]));
      };
      AddTreeOf8<T>(min_product, 0, a1);
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512 a1) { return _mm512_sub_ps(a0, a1); }

  static HWY_INLINE View repacked_view(const uint8_t* group, int64_t, int64_t u0, int64_t, Panel&) {
    return group + u0 * kUnitBytes;
  }

  // Calls of more than 16 tokens unpack the 16 rows once into Q4_KTiles' panel (its nibbles split,
  // its factors decoded) and run its tiles: the unpacking is then shared by every token, where the
  // fused tile would redo it for every 4.
  using WholeKind = Q4_KTiles;
  static HWY_INLINE SQUEEZEKV_VNNI const Panel* whole_view(const uint8_t* group, int64_t n_super, Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(n_super) * 64);
    panel.factor.reserve(static_cast<size_t>(n_super) * 8);
    panel.factor_min.reserve(static_cast<size_t>(n_super) * 8);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* unit = group + b * kUnitBytes;
      const auto* packed = reinterpret_cast<const __m512i*>(unit);
      __m512i* out = panel.bytes.data() + b * 64;
      for (int pair = 0; pair < 4; ++pair) Q4_KTiles::SplitNibbles(packed + pair * 8, out + pair * 16);
      factors(unit, panel.factor.data() + b * 8, panel.factor_min.data() + b * 8);
    }
    return &panel;
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t, int64_t u0, int64_t u1) {
    for (int64_t b = u0 * kUnitBytes; b < u1 * kUnitBytes; b += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(group) + b, _MM_HINT_T1);
    }
  }
};

struct Q6_KTiles : PanelView {
  static constexpr int64_t kUnitCols = quant::q6_k_elems, kUnitBytes = quant::q6_k_bytes, kStreamUnits = 1;
  static constexpr int kMaxTokens = 4;

  // Q6_K: each row's super-block is first rebuilt as 256 bytes (0..63) by the row kernel's own
  // Q6_KStreams, then regrouped; the -32 offset is undone in integers by the tile.
  static HWY_INLINE SQUEEZEKV_VNNI void pack(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                             Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(n_super) * 64);
    panel.factor.reserve(static_cast<size_t>(n_super));
    panel.scales.reserve(static_cast<size_t>(n_super) * 16);
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    HWY_ALIGN uint8_t values[kTileRows][quant::q6_k_elems];
    size_t value_offsets[kTileRows];
    for (int r = 0; r < kTileRows; ++r) value_offsets[r] = static_cast<size_t>(r) * quant::q6_k_elems;
    for (int64_t b = 0; b < n_super; ++b) {
      HWY_ALIGN uint16_t d[kTileRows];
      HWY_ALIGN int32_t scale[16][kTileRows];  // [sub-block of 16][row]
      for (int r = 0; r < kTileRows; ++r) {
        const uint8_t* block = rows + offsets[r] + b * quant::q6_k_bytes;
        __m256i q[8];
        Q6_KStreams(block, q);
        for (int p = 0; p < 8; ++p) _mm256_store_si256(reinterpret_cast<__m256i*>(values[r] + 32 * p), q[p]);
        std::memcpy(&d[r], block + quant::q6_k_d_offset, 2);
        const auto* sc = reinterpret_cast<const int8_t*>(block + quant::q6_k_scales_offset);
        for (int i = 0; i < 16; ++i) scale[i][r] = sc[i];
      }
      __m512i* out = panel.bytes.data() + b * 64;
      for (int p = 0; p < 8; ++p) TransposeRows(values[0] + 32 * p, value_offsets, out + p * 8);
      panel.factor.data()[b] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
      for (int i = 0; i < 16; ++i) panel.scales.data()[b * 16 + i] = _mm512_load_si512(scale[i]);
    }
  }

  // Q6_K: per x block, the dots of its two 16-column halves (each started at -32 * the half's
  // activation sum), times the halves' int8 scales, summed in integers: the row kernel's exact dot.
  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View panel, int64_t n_super, const TokenQ8* x, int64_t x0,
                                             __m512* a0, __m512*) {
    const auto* const bytes_ptr = panel->bytes.data();
    const auto* const factor_ptr = panel->factor.data();
    const auto* const scales_ptr = panel->scales.data();
    const int64_t n_blocks = n_super * 8;
    auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
      const __m512i* w = bytes_ptr + j * 8;
      __m512i lo[T], hi[T];
      for (int k = 0; k < T; ++k) {
        lo[k] = Broadcast32(x[k].q6_k_offset + 2 * (x0 + j));
        hi[k] = Broadcast32(x[k].q6_k_offset + 2 * (x0 + j) + 1);
      }
      BlockHalfDots<T>(w, x, (x0 + j) * 32, 0, lo);
      BlockHalfDots<T>(w, x, (x0 + j) * 32, 4, hi);
      const __m512i scale_lo = scales_ptr[2 * j], scale_hi = scales_ptr[2 * j + 1];
      const __m512 d = factor_ptr[j / 8];
      for (int k = 0; k < T; ++k) {
        const __m512i dot = _mm512_add_epi32(_mm512_mullo_epi32(lo[k], scale_lo), _mm512_mullo_epi32(hi[k], scale_hi));
        p[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[x0 + j])));
      }
    };
    for (int64_t j = 0; j < n_blocks; j += 8) AddTreeOf8<T>(product, j, a0);
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512) { return a0; }
};

// Repacked Q6_K (repacked_weights.h), per super-block of 16 rows a unit of 3328 bytes: the ql bytes
// regrouped as the panel regroups bytes (4 runs of 32 bytes, 8 vectors each), the qh bytes likewise
// (2 runs, 16 vectors), the 16 int8 scales as 4 dwords (4 vectors, lane = row); after every unit of
// the group, the rows' fp16 d (32 bytes per super-block). Its tile rebuilds the 6-bit values from
// ql and qh in registers, as Q6_KStreams does per row (bytewise, so the regrouping does not change
// the formula), and sign-extends the scales it needs: Q6_KTiles' arithmetic, with no panel.
struct Q6_KRepackedTiles {
  static constexpr int64_t kUnitCols = quant::q6_k_elems, kUnitBytes = repacked::kQ6_KUnitBytes;
  static constexpr int kMaxTokens = 4;
  static constexpr int64_t kRepackedStreamUnits = 1;
  struct View {
    const uint8_t* units;
    const __m256i* halves;
  };

  static HWY_INLINE SQUEEZEKV_VNNI void repack_to(const uint8_t* rows, size_t stride, int valid, int64_t n_super,
                                                  uint8_t* group) {
    size_t offsets[kTileRows];
    RowOffsets(stride, valid, offsets);
    auto* halves = reinterpret_cast<uint16_t*>(group + n_super * kUnitBytes);
    for (int64_t b = 0; b < n_super; ++b) {
      const uint8_t* block = rows + b * quant::q6_k_bytes;
      auto* out = reinterpret_cast<__m512i*>(group + b * kUnitBytes);
      for (int run = 0; run < 6; ++run) TransposeRows(block + 32 * run, offsets, out + 8 * run);  // ql, then qh
      auto* words = reinterpret_cast<uint32_t*>(out + repacked::kQ6_KWords / 64);
      for (int r = 0; r < kTileRows; ++r) {
        for (int k = 0; k < 4; ++k) {
          std::memcpy(&words[k * kTileRows + r], block + offsets[r] + quant::q6_k_scales_offset + 4 * k, 4);
        }
        std::memcpy(&halves[b * kTileRows + r], block + offsets[r] + quant::q6_k_d_offset, 2);
      }
    }
  }

  // Vector g of x blocks 4h..4h + 3 (elements 32j..32j + 31 of x block j) of a unit: Q6_KStreams'
  // streams 4h..4h + 3, regrouped, from one load of each ql and qh vector.
  static HWY_INLINE SQUEEZEKV_VNNI void values4(const __m512i* unit, int h, int g, __m512i* out) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    const __m512i a = _mm512_load_si512(unit + 2 * h * 8 + g), c = _mm512_load_si512(unit + (2 * h + 1) * 8 + g);
    const __m512i high = _mm512_load_si512(unit + repacked::kQ6_KQh / 64 + h * 8 + g);
    out[0] = _mm512_or_si512(_mm512_and_si512(a, low4), _mm512_and_si512(_mm512_slli_epi16(high, 4), bits45));
    out[1] = _mm512_or_si512(_mm512_and_si512(c, low4), _mm512_and_si512(_mm512_slli_epi16(high, 2), bits45));
    out[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), low4), _mm512_and_si512(high, bits45));
    out[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(c, 4), low4),
                             _mm512_and_si512(_mm512_srli_epi16(high, 2), bits45));
  }

  // Scale i of the unit's 16 rows (byte i % 4 of word i / 4), sign-extended.
  static HWY_INLINE SQUEEZEKV_VNNI __m512i scale(const __m512i* unit, int i) {
    const __m512i word = _mm512_load_si512(unit + repacked::kQ6_KWords / 64 + i / 4);
    return _mm512_srai_epi32(_mm512_slli_epi32(word, 24 - 8 * (i % 4)), 24);
  }

  template <int T>
  static HWY_INLINE SQUEEZEKV_VNNI void tile(View view, int64_t n_super, const TokenQ8* x, int64_t x0, __m512* a0,
                                             __m512*) {
    for (int64_t b = 0; b < n_super; ++b) {
      const auto* unit = reinterpret_cast<const __m512i*>(view.units + b * kUnitBytes);
      const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(view.halves + b));
      const int64_t first = x0 + b * 8;  // the activation block of x block 0
      // An x block's product: the int8 scales of its two halves times their integer dots, summed
      // in integers (the row kernel's exact dot), times d times the token's block scale.
      auto scaled = [&](__m512i lo, __m512i hi, int64_t j, int k) SQUEEZEKV_VNNI_LAMBDA {
        const __m512i scale_lo = scale(unit, static_cast<int>(2 * j)), scale_hi = scale(unit, static_cast<int>(2 * j + 1));
        const __m512i dot = _mm512_add_epi32(_mm512_mullo_epi32(lo, scale_lo), _mm512_mullo_epi32(hi, scale_hi));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[first + j])));
      };
      if constexpr (T == 1) {
        // One token (a decode step): each ql and qh vector is loaded once for the x blocks it
        // feeds (ql: 2, qh: 4), where the general tile reloads it per x block. The integer dots
        // are exact in any order and the products and tree are the general tile's: same bits.
        // Unrolled so that the 16 accumulators stay in registers (indexed by a loop counter, GCC
        // kept them on the stack).
        __m512i lo[8], hi[8];
        for (int j = 0; j < 8; ++j) {
          lo[j] = Broadcast32(x[0].q6_k_offset + 2 * (first + j));
          hi[j] = Broadcast32(x[0].q6_k_offset + 2 * (first + j) + 1);
        }
        const int8_t* xq = x[0].q8 + first * 32;
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
          for (int g = 0; g < 8; ++g) {
            __m512i w[4];
            values4(unit, h, g, w);
            for (int part = 0; part < 4; ++part) {
              const int j = 4 * h + part;
              __m512i& acc = g < 4 ? lo[j] : hi[j];
              acc = _mm512_dpbusd_epi32(acc, w[part], Broadcast32(xq + 32 * j + 4 * g));
            }
          }
        }
        AddTreeOf8<1>([&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA { p[0] = scaled(lo[j], hi[j], j, 0); }, 0, a0);
      } else {
        auto product = [&](int64_t j, __m512* p) SQUEEZEKV_VNNI_LAMBDA {
          __m512i lo[T], hi[T];
          for (int k = 0; k < T; ++k) {
            lo[k] = Broadcast32(x[k].q6_k_offset + 2 * (first + j));
            hi[k] = Broadcast32(x[k].q6_k_offset + 2 * (first + j) + 1);
          }
          const int64_t column = (first + j) * 32;
          for (int g = 0; g < 8; ++g) {
            __m512i w[4];
            values4(unit, static_cast<int>(j / 4), g, w);  // only stream j % 4 is kept
            for (int k = 0; k < T; ++k) {
              __m512i& s = g < 4 ? lo[k] : hi[k];
              s = _mm512_dpbusd_epi32(s, w[j % 4], Broadcast32(x[k].q8 + column + 4 * g));
            }
          }
          for (int k = 0; k < T; ++k) p[k] = scaled(lo[k], hi[k], j, k);
        };
        AddTreeOf8<T>(product, 0, a0);
      }
    }
  }

  static HWY_INLINE SQUEEZEKV_VNNI __m512 combine(__m512 a0, __m512) { return a0; }

  static HWY_INLINE View repacked_view(const uint8_t* group, int64_t n_super, int64_t u0, int64_t, Panel&) {
    return View{group + u0 * kUnitBytes, reinterpret_cast<const __m256i*>(group + n_super * kUnitBytes) + u0};
  }

  // Super-blocks [u0, u0 + count) of the 16 rows rebuilt into Q6_KTiles' panel, whose tiles then
  // share the rebuilding across their tokens: for 4 tokens or more the fused tile, which redoes it
  // for every 4, is slower (`ops_bench` matmul/Q6_K/.../repacked/tokens:16).
  static HWY_INLINE SQUEEZEKV_VNNI const Panel* unpack(const uint8_t* group, int64_t n_super, int64_t u0,
                                                       int64_t count, Panel& panel) {
    panel.bytes.reserve(static_cast<size_t>(count) * 64);
    panel.factor.reserve(static_cast<size_t>(count));
    panel.scales.reserve(static_cast<size_t>(count) * 16);
    const View view = repacked_view(group, n_super, u0, count, panel);
    for (int64_t b = 0; b < count; ++b) {
      const auto* unit = reinterpret_cast<const __m512i*>(view.units + b * kUnitBytes);
      for (int h = 0; h < 2; ++h) {
        for (int g = 0; g < 8; ++g) {
          __m512i w[4];
          values4(unit, h, g, w);
          for (int part = 0; part < 4; ++part) panel.bytes.data()[b * 64 + (4 * h + part) * 8 + g] = w[part];
        }
      }
      panel.factor.data()[b] = _mm512_cvtph_ps(_mm256_load_si256(view.halves + b));
      for (int i = 0; i < 16; ++i) panel.scales.data()[b * 16 + i] = scale(unit, i);
    }
    return &panel;
  }
  using WholeKind = Q6_KTiles;
  static HWY_INLINE SQUEEZEKV_VNNI const Panel* whole_view(const uint8_t* group, int64_t n_super, Panel& panel) {
    return unpack(group, n_super, 0, n_super, panel);
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t n_super, int64_t u0, int64_t u1) {
    const auto* bytes = reinterpret_cast<const char*>(group);
    for (int64_t b = u0 * kUnitBytes; b < u1 * kUnitBytes; b += 64) _mm_prefetch(bytes + b, _MM_HINT_T1);
    const char* halves = bytes + n_super * kUnitBytes;
    for (int64_t b = u0 * 32; b < u1 * 32; b += 64) _mm_prefetch(halves + b, _MM_HINT_T1);
  }
};

// Repacked Q6_K for calls of 4 to 16 tokens: each streamed piece rebuilt into the panel
// (Q6_KRepackedTiles::unpack), then Q6_KTiles' own tiles.
struct Q6_KPanelPieces : Q6_KTiles {
  static constexpr int64_t kRepackedStreamUnits = 1;
  using WholeKind = Q6_KTiles;
  static HWY_INLINE SQUEEZEKV_VNNI View repacked_view(const uint8_t* group, int64_t n_super, int64_t u0,
                                                      int64_t count, Panel& panel) {
    return Q6_KRepackedTiles::unpack(group, n_super, u0, count, panel);
  }
  static HWY_INLINE SQUEEZEKV_VNNI View whole_view(const uint8_t* group, int64_t n_super, Panel& panel) {
    return Q6_KRepackedTiles::whole_view(group, n_super, panel);
  }
  static HWY_INLINE void repacked_prefetch(const uint8_t* group, int64_t n_super, int64_t u0, int64_t u1) {
    Q6_KRepackedTiles::repacked_prefetch(group, n_super, u0, u1);
  }
};

// Every token of the call against the panel, T tokens at a time; tile(k, tokens, result) runs one
// tile of k = std::integral_constant<int, T> tokens.
template <int T, class Tile>
HWY_INLINE SQUEEZEKV_VNNI int64_t TokenTiles(Tile tile, const detail::MatmulInput& in, int64_t t, int64_t n, float* y,
                                             int64_t n_rows, int64_t r0, __mmask16 valid) {
  for (; t + T <= in.n_tok; t += T) {
    TokenQ8 tokens[T];
    for (int k = 0; k < T; ++k) tokens[k] = token_q8(*in.quantized, t + k, n);
    __m512 result[T];
    tile(std::integral_constant<int, T>{}, tokens, result);
    StoreTile<T>(result, y, n_rows, t, r0, valid);
  }
  return t;
}

// All the call's tokens: tiles of kMaxTokens (8 or 4), then of 4, 2 and 1 for the rest.
template <int kMaxTokens, class Tile>
HWY_INLINE SQUEEZEKV_VNNI void EveryToken(Tile tile, const detail::MatmulInput& in, int64_t n, float* y,
                                          int64_t n_rows, int64_t r0, __mmask16 valid) {
  int64_t t = 0;
  if constexpr (kMaxTokens == 8) t = TokenTiles<8>(tile, in, t, n, y, n_rows, r0, valid);
  t = TokenTiles<4>(tile, in, t, n, y, n_rows, r0, valid);
  t = TokenTiles<2>(tile, in, t, n, y, n_rows, r0, valid);
  TokenTiles<1>(tile, in, t, n, y, n_rows, r0, valid);
}

// Calls of at most kStreamedMaxTokens tokens (a server's batched decode step) stream each 16 rows
// through small panels of Kind::kStreamUnits units (a few KiB, in L1) that every token uses
// before the next is built: reading the rows from memory then overlaps the products, where one
// whole-row panel first reads all of them and then computes with memory idle (1B Q8_0 model,
// `squeezekv bench -p 8,16`: 8-token steps ~79 -> ~95-117 tokens/s, 16-token ~127 -> ~140-165).
// The accumulators carry from panel to panel, so per-token arithmetic and its order are unchanged:
// that needs Q8_0's panels to hold an even number of blocks (its two chains alternate) and Q4_0's
// whole runs of 8 (its trees).
constexpr int64_t kStreamedMaxTokens = 16;
static_assert(Q8_0Tiles::kStreamUnits % 2 == 0 && Q4_0Tiles::kStreamUnits % 8 == 0 && Q4_1Tiles::kStreamUnits % 8 == 0,
              "streamed panels must keep the row kernels' accumulation order");

// Tiles of T of the tokens from t on against a panel of n units from block x0; returns the next
// token.
template <class Kind, int T>
HWY_INLINE SQUEEZEKV_VNNI int64_t PanelTiles(typename Kind::View panel, int64_t n, const TokenQ8* tokens, int64_t x0,
                                             int64_t t, int64_t n_tok, __m512* a0, __m512* a1) {
  for (; t + T <= n_tok; t += T) {
    __m512 b0[T], b1[T];
    for (int k = 0; k < T; ++k) {
      b0[k] = a0[t + k];
      b1[k] = a1[t + k];
    }
    Kind::template tile<T>(panel, n, tokens + t, x0, b0, b1);
    for (int k = 0; k < T; ++k) {
      a0[t + k] = b0[k];
      a1[t + k] = b1[k];
    }
  }
  return t;
}

// source(u0, n): the view of units [u0, u0 + n) of the 16 rows (packed then, or repacked already),
// in pieces of kUnits.
template <class Kind, int64_t kUnits, class Source>
HWY_INLINE SQUEEZEKV_VNNI void StreamedRows(Source source, int64_t n_units, const TokenQ8* tokens, int64_t n_tok,
                                            float* y, int64_t n_rows, int64_t r0, __mmask16 mask) {
  __m512 a0[kStreamedMaxTokens], a1[kStreamedMaxTokens];
  for (int64_t t = 0; t < n_tok; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
  for (int64_t u0 = 0; u0 < n_units; u0 += kUnits) {
    const int64_t n = std::min(n_units, u0 + kUnits) - u0;
    const typename Kind::View panel = source(u0, n);
    const int64_t x0 = u0 * (Kind::kUnitCols / detail::activation_block);
    int64_t t = 0;
    if constexpr (Kind::kMaxTokens == 8) t = PanelTiles<Kind, 8>(panel, n, tokens, x0, t, n_tok, a0, a1);
    t = PanelTiles<Kind, 4>(panel, n, tokens, x0, t, n_tok, a0, a1);
    t = PanelTiles<Kind, 2>(panel, n, tokens, x0, t, n_tok, a0, a1);
    PanelTiles<Kind, 1>(panel, n, tokens, x0, t, n_tok, a0, a1);
  }
  for (int64_t t = 0; t < n_tok; ++t) _mm512_mask_storeu_ps(y + t * n_rows + r0, mask, Kind::combine(a0[t], a1[t]));
}

// Every token of the call against the whole view of the 16 rows, in tiles.
template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void WholeRows(typename Kind::View panel, int64_t n_units, const detail::MatmulInput& in,
                                         int64_t n, float* y, int64_t n_rows, int64_t r0, __mmask16 mask) {
  auto tile = [&](auto k, const TokenQ8* x, __m512* out) SQUEEZEKV_VNNI_LAMBDA {
    constexpr int T = decltype(k)::value;
    __m512 a0[T], a1[T];
    for (int i = 0; i < T; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    Kind::template tile<T>(panel, n_units, x, 0, a0, a1);
    for (int i = 0; i < T; ++i) out[i] = Kind::combine(a0[i], a1[i]);
  };
  EveryToken<Kind::kMaxTokens>(tile, in, n, y, n_rows, r0, mask);
}

// Whether rows of `type` take the tiles for a call of n_tok tokens.
// AVX512-VNNI is asked of the CPU here too rather than trusted to Highway's target check.
HWY_INLINE bool HasVnni() {
  static const bool has_vnni = __builtin_cpu_supports("avx512vnni");
  return has_vnni;
}

// Q5_0 has no tiles: its calls of any size take the row kernels (DotNibbleTokens).
HWY_INLINE bool UseTiles(TensorType type, int64_t n_tok) {
  if (type == TensorType::q8_0) return HasVnni() && n_tok >= kTileMinTokensQ8_0;
  return HasVnni() && n_tok >= kTileMinTokens &&
         (type == TensorType::q4_0 || type == TensorType::q4_1 || type == TensorType::q4_k ||
          type == TensorType::q6_k);
}

// What both kinds of weights share: for each 16 rows, a call of more than 16 tokens takes the
// whole view whole(r0, valid) of WholeKind and runs every token over it; a smaller call streams
// the pieces of kUnits units that piece(r0, valid, u0, count) gives.
template <class Kind, int64_t kUnits, class WholeKind, class Whole, class Piece>
HWY_INLINE SQUEEZEKV_VNNI void GroupRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                         int64_t row_end, float* HWY_RESTRICT y, Whole whole, Piece piece) {
  const int64_t n = w.n_cols, n_units = n / Kind::kUnitCols;
  const bool streamed = in.n_tok <= kStreamedMaxTokens;
  TokenQ8 tokens[kStreamedMaxTokens];
  for (int64_t t = 0; streamed && t < in.n_tok; ++t) tokens[t] = token_q8(*in.quantized, t, n);
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int valid = static_cast<int>(std::min(kTileRows, row_end - r0));
    const auto mask = static_cast<__mmask16>((1u << valid) - 1u);
    if (!streamed) {
      WholeRows<WholeKind>(whole(r0, valid), n_units, in, n, y, w.n_rows, r0, mask);
      continue;
    }
    auto source = [&](int64_t u0, int64_t count) SQUEEZEKV_VNNI_LAMBDA { return piece(r0, valid, u0, count); };
    StreamedRows<Kind, kUnits>(source, n_units, tokens, in.n_tok, y, w.n_rows, r0, mask);
  }
}

// GGUF rows: each view is a panel packed for this call.
template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void KindRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                        int64_t row_end, Panel& panel, float* HWY_RESTRICT y) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols);
  const int64_t n_units = w.n_cols / Kind::kUnitCols;
  auto rows = [&](int64_t r0) { return base + static_cast<size_t>(r0) * stride; };
  auto whole = [&](int64_t r0, int valid) SQUEEZEKV_VNNI_LAMBDA {
    Kind::pack(rows(r0), stride, valid, n_units, panel);
    return Kind::view(panel);
  };
  auto piece = [&](int64_t r0, int valid, int64_t u0, int64_t count) SQUEEZEKV_VNNI_LAMBDA {
    // The next panel's lines, asked of L2 first so that they arrive while this one is packed and
    // used (measured on Q8_0: into L1, two panels ahead, or a line per block as it is packed were
    // slower).
    const int64_t u1 = u0 + count, next_end = std::min(n_units, u1 + Kind::kStreamUnits);
    for (int r = 0; r < valid && u1 < n_units; ++r) {
      const auto* next = reinterpret_cast<const char*>(rows(r0) + static_cast<size_t>(r) * stride);
      for (int64_t b = u1 * Kind::kUnitBytes; b < next_end * Kind::kUnitBytes; b += 64) {
        _mm_prefetch(next + b, _MM_HINT_T1);
      }
    }
    Kind::pack(rows(r0) + u0 * Kind::kUnitBytes, stride, valid, count, panel);
    return Kind::view(panel);
  };
  GroupRows<Kind, Kind::kStreamUnits, Kind>(w, in, row_begin, row_end, y, whole, piece);
}

// Rows of a repacked matrix (repacked_weights.h), for calls of any number of tokens: each view
// points into the matrix itself, so no call regroups rows. Small calls stream pieces with the lines
// of the piece two ahead asked of L2 (1B Q8_0, `bench -p 8,16`: pp16 ~150 without the prefetch, ~180
// with pieces of 8 blocks, ~200 with 4; pieces of 2 or 16, one piece ahead or four, or into L1 were
// slower).
static_assert(Q8_0Tiles::kRepackedStreamUnits % 2 == 0, "streamed Q8_0 pieces must keep the row kernels' order");

// The pieces [first, first + count) after the current one, asked of the cache while it is used:
// two ahead for most kinds; Q6_K's one-token pieces ask for the next two, so every line is asked
// twice (the output projection of the 1B Q4_K_M model read from memory, `ops_bench
// --benchmark_filter=matmul_from_memory/Q6_K/.*/repacked`, three alternated runs on AMD EPYC: one
// thread 15.0 / 14.9 / 14.2 -> 16.6 / 16.6 / 15.8 GB/s, two 22.6 / 20.8 / 20.2 -> 23.1 / 25.2 /
// 23.4; no gain for Q8_0 or Q4_K, and windows of 3 or 4 pieces were slower).
template <class Kind>
struct PrefetchWindow {
  static constexpr int64_t first = 2, count = 1;
};
template <>
struct PrefetchWindow<Q6_KRepackedTiles> {
  static constexpr int64_t first = 1, count = 2;
};

template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void RepackedKindRows(const WeightMatrix& w, const detail::MatmulInput& in,
                                                int64_t row_begin, int64_t row_end, Panel& panel,
                                                float* HWY_RESTRICT y) {
  const int64_t n_units = w.n_cols / Kind::kUnitCols;
  const size_t group_bytes = repacked_group_bytes(w.type, w.n_cols);
  auto group = [&](int64_t r0) {
    return static_cast<const uint8_t*>(w.repacked) + static_cast<size_t>(r0 / kTileRows) * group_bytes;
  };
  auto whole = [&](int64_t r0, int) SQUEEZEKV_VNNI_LAMBDA { return Kind::whole_view(group(r0), n_units, panel); };
  auto piece = [&](int64_t r0, int, int64_t u0, int64_t count) SQUEEZEKV_VNNI_LAMBDA {
    // The window runs on into the next 16 rows of the call, so that their first pieces are in
    // flight too (a 2048-column Q4_K group is 4 pieces: stopping at its end left 2 of them unasked).
    const int64_t p0 = u0 + PrefetchWindow<Kind>::first * count, p1 = p0 + PrefetchWindow<Kind>::count * count;
    if (p0 < n_units) Kind::repacked_prefetch(group(r0), n_units, p0, std::min(p1, n_units));
    if (p1 > n_units && r0 + kTileRows < row_end) {
      Kind::repacked_prefetch(group(r0 + kTileRows), n_units, std::max<int64_t>(p0 - n_units, 0),
                              std::min(p1 - n_units, n_units));
    }
    return Kind::repacked_view(group(r0), n_units, u0, count, panel);
  };
  GroupRows<Kind, Kind::kRepackedStreamUnits, typename Kind::WholeKind>(w, in, row_begin, row_end, y, whole, piece);
}

SQUEEZEKV_VNNI void RepackedRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin,
                                 int64_t row_end, float* HWY_RESTRICT y) {
  thread_local Panel panel;
  switch (w.type) {
    case TensorType::q8_0:
      return RepackedKindRows<Q8_0Tiles>(w, in, row_begin, row_end, panel, y);
    case TensorType::q6_k:
      if (in.n_tok >= kTileMinTokens) return RepackedKindRows<Q6_KPanelPieces>(w, in, row_begin, row_end, panel, y);
      return RepackedKindRows<Q6_KRepackedTiles>(w, in, row_begin, row_end, panel, y);
    default:  // q4_k (can_repack admits no other)
      return RepackedKindRows<Q4_KRepackedTiles>(w, in, row_begin, row_end, panel, y);
  }
}

// Groups [g0, g1) of w's repacked layout (repacked_weights.h) into out; the padding after a
// group's last unit, if any, zeroed (defined bytes).
template <class Kind>
HWY_INLINE SQUEEZEKV_VNNI void RepackKindGroups(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols), group_bytes = repacked_group_bytes(w.type, w.n_cols);
  const size_t used = row_bytes(w.type, w.n_cols) * kTileRows;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t r0 = g * kTileRows;
    const int valid = static_cast<int>(std::min(kTileRows, w.n_rows - r0));
    uint8_t* group = out + static_cast<size_t>(g) * group_bytes;
    Kind::repack_to(base + static_cast<size_t>(r0) * stride, stride, valid, w.n_cols / Kind::kUnitCols, group);
    std::memset(group + used, 0, group_bytes - used);
  }
}

SQUEEZEKV_VNNI void RepackGroupsVnni(const WeightMatrix& w, int64_t g0, int64_t g1, uint8_t* out) {
  switch (w.type) {
    case TensorType::q8_0:
      return RepackKindGroups<Q8_0Tiles>(w, g0, g1, out);
    case TensorType::q6_k:
      return RepackKindGroups<Q6_KRepackedTiles>(w, g0, g1, out);
    default:  // q4_k
      return RepackKindGroups<Q4_KRepackedTiles>(w, g0, g1, out);
  }
}

SQUEEZEKV_VNNI void TiledRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
                              float* HWY_RESTRICT y) {
  thread_local Panel panel;
  switch (w.type) {
    case TensorType::q8_0:
      return KindRows<Q8_0Tiles>(w, in, row_begin, row_end, panel, y);
    case TensorType::q4_0:
      return KindRows<Q4_0Tiles>(w, in, row_begin, row_end, panel, y);
    case TensorType::q4_1:
      return KindRows<Q4_1Tiles>(w, in, row_begin, row_end, panel, y);
    case TensorType::q6_k:
      return KindRows<Q6_KTiles>(w, in, row_begin, row_end, panel, y);
    default:  // q4_k (UseTiles admits no other type)
      return KindRows<Q4_KTiles>(w, in, row_begin, row_end, panel, y);
  }
}
#else
#define SQUEEZEKV_VNNI_TILES 0
#endif
