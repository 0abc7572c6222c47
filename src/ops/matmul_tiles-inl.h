// Prompt products as register tiles on x86 targets with VNNI (vpdpbusd): 16 weight rows x up to
// 8 tokens. Included by matmul.cc inside its per-target namespace, after the row kernels, whose
// TokenQ8 and accumulation order (AccumulateInOrder) it shares.
//
// Why a panel: in GGUF a block's 32 bytes belong to one row, so a vector of them serves one
// (row, token) pair and needs a horizontal sum per block. Here 16 rows are first regrouped into a
// thread-local panel where one 512-bit vector holds the same 4 columns of all 16 rows (lane r =
// row r); vpdpbusd then multiplies it with one activation dword broadcast from memory, so a block
// is 8 vpdpbusd + 3 float ops per token for 16 rows x 32 columns, with no horizontal sums. The
// panel (a copy of 16 rows, at most a few hundred KiB, in L2) is built once per call and serves
// every token of the call, so it costs little beside the product once a call has a few tokens.
//
// Each lane walks the blocks in the order of the row kernels (fused into acc[block % 2], result
// acc[0] + acc[1]), so a tile's results are bit for bit those of the one-token path.
#undef SQUEEZEKV_VNNI_TILES
#if HWY_TARGET == HWY_AVX3_DL
#define SQUEEZEKV_VNNI_TILES 1
// Highway 1.0's AVX3_DL target string names avxvnni (the VEX form) but not avx512vnni, which the
// 512-bit vpdpbusd needs: the tiles add it, and UseTiles checks the CPU for it.
#define SQUEEZEKV_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

constexpr int64_t kTileRows = 16;  // one 512-bit lane per row

// Calls with fewer tokens take the row kernels: below this the panel costs more than it saves.
constexpr int64_t kTileMinTokens = 4;

// 16 rows regrouped for the tiles. bytes: per block (Q8_0) or sub-block (Q4_K), 8 vectors, vector
// g = columns 4g..4g+3 of each row as unsigned bytes. factor: per block, d of each row (Q8_0) or,
// per sub-block, d * scale (Q4_K); factor_min: per sub-block, dmin * min (Q4_K).
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
  AlignedBuffer<__m512> factor;
  AlignedBuffer<__m512> factor_min;
};

// Byte offsets of the panel's 16 rows from the first; lanes past `valid` repeat the last row, so
// that every load stays inside the matrix (their results are never stored).
HWY_INLINE SQUEEZEKV_VNNI __m512i RowOffsets(size_t stride, int valid, int32_t* offsets) {
  for (int r = 0; r < kTileRows; ++r) offsets[r] = static_cast<int32_t>(static_cast<size_t>(std::min(r, valid - 1)) * stride);
  return _mm512_loadu_si512(offsets);
}

// Q8_0 weights are signed; the panel holds w + 128 (unsigned, for vpdpbusd's unsigned side) and
// the tiles subtract 128 * (sum of the token's block) to undo it, exactly, in integers.
HWY_INLINE SQUEEZEKV_VNNI void PackQ8_0(const uint8_t* rows, size_t stride, int valid, int64_t n_blocks, Panel& panel) {
  panel.bytes.reserve(static_cast<size_t>(n_blocks) * 8);
  panel.factor.reserve(static_cast<size_t>(n_blocks));
  HWY_ALIGN int32_t offsets[kTileRows];
  const __m512i index = RowOffsets(stride, valid, offsets);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t j = 0; j < n_blocks; ++j) {
    const uint8_t* block = rows + j * quant::q8_0_bytes;
    __m512i* out = panel.bytes.data() + j * 8;
    for (int g = 0; g < 8; ++g) out[g] = _mm512_xor_si512(_mm512_i32gather_epi32(index, block + 2 + 4 * g, 1), flip);
    HWY_ALIGN uint16_t d[kTileRows];
    for (int r = 0; r < kTileRows; ++r) std::memcpy(&d[r], block + offsets[r], 2);
    panel.factor.data()[j] = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
  }
}

// Q4_K nibbles are unsigned already; the panel holds them one per byte. Its factors are computed
// as the row kernel computes them (d times the 6-bit value, each rounded once).
HWY_INLINE SQUEEZEKV_VNNI void PackQ4_K(const uint8_t* rows, size_t stride, int valid, int64_t n_super, Panel& panel) {
  panel.bytes.reserve(static_cast<size_t>(n_super) * 64);
  panel.factor.reserve(static_cast<size_t>(n_super) * 8);
  panel.factor_min.reserve(static_cast<size_t>(n_super) * 8);
  HWY_ALIGN int32_t offsets[kTileRows];
  const __m512i index = RowOffsets(stride, valid, offsets);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < n_super; ++b) {
    const uint8_t* block = rows + b * quant::q4_k_bytes;
    __m512i* out = panel.bytes.data() + b * 64;
    for (int pair = 0; pair < 4; ++pair) {  // 32 bytes: sub-block 2 * pair low, 2 * pair + 1 high
      for (int g = 0; g < 8; ++g) {
        const __m512i packed = _mm512_i32gather_epi32(index, block + quant::q4_k_qs_offset + 32 * pair + 4 * g, 1);
        out[(2 * pair) * 8 + g] = _mm512_and_si512(packed, low4);
        out[(2 * pair + 1) * 8 + g] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
      }
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

// The integer dots of one 32-column block of the panel with T tokens: s[k] += sum over the
// block's columns of panel byte * token k's activation byte (one broadcast dword per vpdpbusd).
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void BlockDots(const __m512i* w, const TokenQ8* x, int64_t column, __m512i* s) {
  for (int g = 0; g < 8; ++g) {
    const __m512i wg = _mm512_load_si512(w + g);
    for (int k = 0; k < T; ++k) {
      int32_t xv;
      std::memcpy(&xv, x[k].q8 + column + 4 * g, 4);
      s[k] = _mm512_dpbusd_epi32(s[k], wg, _mm512_set1_epi32(xv));
    }
  }
}

// Writes lanes [0, valid) of token k's 16 results to y (rows r0.. of token row t0 + k).
template <int T>
HWY_INLINE SQUEEZEKV_VNNI void StoreTile(const __m512* result, float* y, int64_t n_rows, int64_t t0, int64_t r0, __mmask16 valid) {
  for (int k = 0; k < T; ++k) _mm512_mask_storeu_ps(y + (t0 + k) * n_rows + r0, valid, result[k]);
}

template <int T>
HWY_INLINE SQUEEZEKV_VNNI void TileQ8_0(const Panel& panel, int64_t n_blocks, const TokenQ8* x, __m512* result) {
  __m512 acc0[T], acc1[T];
  for (int k = 0; k < T; ++k) acc0[k] = acc1[k] = _mm512_setzero_ps();
  auto block = [&](int64_t j, __m512* acc) SQUEEZEKV_VNNI {
    __m512i s[T];
    for (int k = 0; k < T; ++k) s[k] = _mm512_set1_epi32(-128 * x[k].sum[j]);
    BlockDots<T>(panel.bytes.data() + j * 8, x, j * quant::q8_0_elems, s);
    const __m512 d = panel.factor.data()[j];
    for (int k = 0; k < T; ++k) {
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(d, _mm512_set1_ps(x[k].scale[j])), acc[k]);
    }
  };
  int64_t j = 0;
  for (; j + 2 <= n_blocks; j += 2) {
    block(j, acc0);
    block(j + 1, acc1);
  }
  if (j < n_blocks) block(j, acc0);
  for (int k = 0; k < T; ++k) result[k] = _mm512_add_ps(acc0[k], acc1[k]);
}

template <int T>
HWY_INLINE SQUEEZEKV_VNNI void TileQ4_K(const Panel& panel, int64_t n_sub, const TokenQ8* x, __m512* result) {
  __m512 acc0[T], acc1[T], min0[T], min1[T];
  for (int k = 0; k < T; ++k) acc0[k] = acc1[k] = min0[k] = min1[k] = _mm512_setzero_ps();
  auto sub_block = [&](int64_t j, __m512* acc, __m512* acc_min) SQUEEZEKV_VNNI {
    __m512i s[T];
    for (int k = 0; k < T; ++k) s[k] = _mm512_setzero_si512();
    BlockDots<T>(panel.bytes.data() + j * 8, x, j * 32, s);
    const __m512 factor = panel.factor.data()[j];
    const __m512 factor_min = panel.factor_min.data()[j];
    for (int k = 0; k < T; ++k) {
      acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[k]), _mm512_mul_ps(factor, _mm512_set1_ps(x[k].scale[j])), acc[k]);
      acc_min[k] = _mm512_fmadd_ps(factor_min, _mm512_set1_ps(x[k].scaled_sum[j]), acc_min[k]);
    }
  };
  for (int64_t j = 0; j < n_sub; j += 2) {  // 8 sub-blocks a super-block: always even
    sub_block(j, acc0, min0);
    sub_block(j + 1, acc1, min1);
  }
  for (int k = 0; k < T; ++k) result[k] = _mm512_sub_ps(_mm512_add_ps(acc0[k], acc1[k]), _mm512_add_ps(min0[k], min1[k]));
}

// Every token of the call against the panel, T tokens at a time.
template <int T, class Tile>
HWY_INLINE SQUEEZEKV_VNNI int64_t TokenTiles(Tile tile, const detail::MatmulInput& in, int64_t t, int64_t n, float* y, int64_t n_rows,
                             int64_t r0, __mmask16 valid) {
  for (; t + T <= in.n_tok; t += T) {
    TokenQ8 tokens[T];
    for (int k = 0; k < T; ++k) tokens[k] = token_q8(*in.quantized, t + k, n);
    __m512 result[T];
    tile(tokens, result);
    StoreTile<T>(result, y, n_rows, t, r0, valid);
  }
  return t;
}

// Whether rows of `type` take the tiles for a call of n_tok tokens.
// AVX512-VNNI is asked of the CPU here too rather than trusted to Highway's target check.
HWY_INLINE bool UseTiles(TensorType type, int64_t n_tok) {
  static const bool has_vnni = __builtin_cpu_supports("avx512vnni");
  return has_vnni && n_tok >= kTileMinTokens && (type == TensorType::q8_0 || type == TensorType::q4_k);
}

SQUEEZEKV_VNNI void TiledRows(const WeightMatrix& w, const detail::MatmulInput& in, int64_t row_begin, int64_t row_end,
               float* HWY_RESTRICT y) {
  thread_local Panel panel;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const size_t stride = row_bytes(w.type, w.n_cols);
  const int64_t n = w.n_cols;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int valid = static_cast<int>(std::min(kTileRows, row_end - r0));
    const auto mask = static_cast<__mmask16>((1u << valid) - 1u);
    const uint8_t* rows = base + static_cast<size_t>(r0) * stride;
    int64_t t = 0;
    if (w.type == TensorType::q8_0) {
      const int64_t n_blocks = n / quant::q8_0_elems;
      PackQ8_0(rows, stride, valid, n_blocks, panel);
      auto tile = [&](auto k_tag) SQUEEZEKV_VNNI {
        constexpr int K = decltype(k_tag)::value;
        return [&](const TokenQ8* x, __m512* out) SQUEEZEKV_VNNI { TileQ8_0<K>(panel, n_blocks, x, out); };
      };
      t = TokenTiles<8>(tile(std::integral_constant<int, 8>{}), in, t, n, y, w.n_rows, r0, mask);
      t = TokenTiles<4>(tile(std::integral_constant<int, 4>{}), in, t, n, y, w.n_rows, r0, mask);
      t = TokenTiles<2>(tile(std::integral_constant<int, 2>{}), in, t, n, y, w.n_rows, r0, mask);
      TokenTiles<1>(tile(std::integral_constant<int, 1>{}), in, t, n, y, w.n_rows, r0, mask);
    } else {
      const int64_t n_super = n / quant::q4_k_elems;
      PackQ4_K(rows, stride, valid, n_super, panel);
      auto tile = [&](auto k_tag) SQUEEZEKV_VNNI {
        constexpr int K = decltype(k_tag)::value;
        return [&](const TokenQ8* x, __m512* out) SQUEEZEKV_VNNI { TileQ4_K<K>(panel, n_super * 8, x, out); };
      };
      t = TokenTiles<4>(tile(std::integral_constant<int, 4>{}), in, t, n, y, w.n_rows, r0, mask);
      t = TokenTiles<2>(tile(std::integral_constant<int, 2>{}), in, t, n, y, w.n_rows, r0, mask);
      TokenTiles<1>(tile(std::integral_constant<int, 1>{}), in, t, n, y, w.n_rows, r0, mask);
    }
  }
}
#else
#define SQUEEZEKV_VNNI_TILES 0
#endif
