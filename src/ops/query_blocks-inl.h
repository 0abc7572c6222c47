// Included by the K/V row kernels (kv_format_*.cc) and kivi_rows.cc inside their per-target namespace (each target pass
// includes it again, hence no include guard): the kernels' lambdas then keep the target's
// attributes and are inlined, so their accumulators stay in registers.

// Accumulator vectors a pass may keep in registers: half the register file (32 registers on
// AVX-512 and Arm, 16 on AVX2), leaving room for the loads, decoded codes and broadcasts.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr size_t kAccumulators = 8;
#else
constexpr size_t kAccumulators = 16;
#endif

// The widest of 8, 4, 2 and 1 vectors per query whose accumulators for G queries fit.
template <size_t G>
constexpr size_t kVectorsPerQuery = kAccumulators / G >= 8   ? 8
                                    : kAccumulators / G >= 4 ? 4
                                    : kAccumulators / G >= 2 ? 2
                                                             : 1;

// Whether any of G queries weighs row j (a weighted sum skips rows every query weighs 0: masked
// slots, which may hold stale bits).
template <size_t G>
HWY_INLINE bool AnyWeight(const float* w, size_t ld_w, size_t j) {
  bool any = false;
  for (size_t g = 0; g < G; ++g) any = any || w[g * ld_w + j] != 0.0f;
  return any;
}

// Calls pass(std::integral_constant<size_t, Q>, first) over n queries: blocks of Q = 4, then one
// block of the 1 to 3 left, so the passes keep Q accumulators per vector in registers.
template <class Pass>
HWY_INLINE void InBlocksOfFour(size_t n, const Pass& pass) {
  size_t g = 0;
  for (; g + 4 <= n; g += 4) pass(std::integral_constant<size_t, 4>(), g);
  if (n - g == 3) pass(std::integral_constant<size_t, 3>(), g);
  if (n - g == 2) pass(std::integral_constant<size_t, 2>(), g);
  if (n - g == 1) pass(std::integral_constant<size_t, 1>(), g);
}

// The weighted sums of n_w queries over n_rows rows of rb bytes. More than 4 queries read the rows
// once per pass of four, so then the rows go in tiles of about 32 KiB, each tile's passes before
// the next: the passes after the first find it in L1 rather than read the rows from memory again
// (a prompt block of 16 queries over 8,704 f16 rows of 256 read 4.4 MiB four times; Gemma 3 pp512
// at depth 8192: attention 1.56 -> 1.39 ms a token). Each element still adds its rows in row
// order: the same bits as one span. pass(std::integral_constant<size_t, G>, weights of the pass's
// first query at the tile's first row, tile, rows in it, its first query's output).
template <class Pass>
HWY_INLINE void WeightedSumsInTiles(const float* w, size_t n_w, size_t ld_w, const void* rows, size_t n_rows, size_t rb,
                                    float* out, size_t ld_out, const Pass& pass) {
  constexpr size_t kRowTileBytes = size_t(32) << 10;
  const size_t tile_rows = n_w <= 4 ? n_rows : std::max<size_t>(16, kRowTileBytes / rb);
  for (size_t j0 = 0; j0 < n_rows; j0 += tile_rows) {
    const size_t count = std::min(tile_rows, n_rows - j0);
    const uint8_t* tile = static_cast<const uint8_t*>(rows) + j0 * rb;
    InBlocksOfFour(n_w, [&](auto block, size_t g) { pass(block, w + g * ld_w + j0, tile, count, out + g * ld_out); });
  }
}
