// Repacked Q8_0, Q4_0, Q4_1, Q5_0, Q4_K and Q6_K matrices (repacked_weights.h): products read from the repacked layout equal, bit
// for bit, those read from the GGUF rows, for every token count, row counts that leave a partial
// group, 1 and 2 threads and every target; rows read back exactly; sizes and bad input.
#include "squeezekv/ops/repacked_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ops/hwy_targets.h"
#include "ops/test_matrix.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {
namespace {

using testing::make_matrix;
using testing::random_x;
using testing::TestMatrix;

int64_t groups_of(const WeightMatrix& w) { return (w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows; }

// A repacked copy of m, built in `pieces` calls of repack_groups, whose own `data` is a copy of m's
// rows that poison() zeroes: a product that read the GGUF rows instead of the repacked ones would
// then be wrong.
struct Repacked {
  RepackedBuffer buffer;
  std::vector<uint8_t> rows;
  WeightMatrix view;

  Repacked(const TestMatrix& m, int64_t pieces) : buffer(allocate_repacked(m.view)), rows(m.bytes) {
    view = m.view;
    view.data = rows.data();
    const int64_t groups = groups_of(view);
    for (int64_t p = 0; p < pieces; ++p)
      repack_groups(view, groups * p / pieces, groups * (p + 1) / pieces, buffer.get());
    view.repacked = buffer.get();
  }
  void poison() { std::fill(rows.begin(), rows.end(), uint8_t{0}); }
};

// Poisons a Repacked's rows for a scope when the target reads the repacked layout, and gives them
// back at its end (also when an assertion leaves it early, so the next target is not misled).
class Poisoned {
 public:
  Poisoned(Repacked& repacked, bool reads_repacked) : repacked_(repacked), active_(reads_repacked) {
    if (!active_) return;
    saved_ = repacked_.rows;
    repacked_.poison();
  }
  ~Poisoned() {
    if (active_) repacked_.rows = saved_;
  }
  Poisoned(const Poisoned&) = delete;
  Poisoned& operator=(const Poisoned&) = delete;

 private:
  Repacked& repacked_;
  bool active_;
  std::vector<uint8_t> saved_;
};

const TensorType kRepackable[] = {TensorType::q8_0, TensorType::q4_0, TensorType::q4_1,
                                  TensorType::q5_0, TensorType::q4_k, TensorType::q6_k};

std::string name(TensorType type) { return std::string(tensor_type_name(static_cast<uint32_t>(type))); }

// Column counts: the 32-column blocks 3 (no run of 8), 17 (runs and a tail), 32; the K-quants 1,
// 3 and 9 super-blocks (odd counts leave a streamed piece of one; Q6_K's odd counts pad the group).
std::vector<int64_t> columns(TensorType type) {
  if (block_layout(type).block_elems == 32) return {96, 544, 1024};
  return {256, 768, 2304};
}

// The types this CPU repacks: all six on x86 CPUs with AVX2 (the VNNI tiles or the half-group
// tiles), none elsewhere.
std::vector<TensorType> repackable_here() {
  std::vector<TensorType> types;
  for (const TensorType type : kRepackable) {
    if (can_repack(WeightMatrix{nullptr, type, 16, columns(type)[0]})) types.push_back(type);
  }
  return types;
}

constexpr const char* kNothingRepacked = "this CPU repacks no type (it has neither AVX-512 VNNI nor AVX2)";

TEST(ops_repacked_weights, ProductsEqualThoseOfTheGgufRows) {
  const std::vector<TensorType> types = repackable_here();
  if (types.empty()) GTEST_SKIP() << kNothingRepacked;
  ThreadPool pool2(2);
  uint32_t seed = 1;
  // Every token count a call can have: 1 to 3 are the row kernels' calls without repacking, up
  // to 16 streamed pieces, above 16 whole groups (the half-group tiles: 4 tokens at a time in
  // chunks of 32).
  for (const TensorType type : types) {
    for (const int64_t n_cols : columns(type)) {
      for (const int64_t n_rows : {1, 15, 16, 17, 70}) {
        const TestMatrix m = make_matrix(type, n_rows, n_cols, ++seed);
        Repacked repacked(m, 3);
        for (const int64_t n_tok : {1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 31, 40}) {
          SCOPED_TRACE(name(type) + " cols " + std::to_string(n_cols) + " rows " + std::to_string(n_rows) + " tokens " +
                       std::to_string(n_tok));
          const std::vector<float> x = random_x(n_tok * n_cols, ++seed);
          testing::for_each_target([&] {
            std::vector<float> expected(static_cast<size_t>(n_tok * n_rows));  // each target its own
            matmul(m.view, x.data(), n_tok, expected.data(), nullptr);
            const Poisoned poisoned(repacked, can_repack(repacked.view));
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
              std::vector<float> y(expected.size());
              matmul(repacked.view, x.data(), n_tok, y.data(), pool);
              ASSERT_EQ(y, expected);
            }
          });
        }
      }
    }
  }
}

// The fused entry points of the engine (q/k/v in one region, gate/up with SwiGLU) on repacked
// matrices, split across a pool.
TEST(ops_repacked_weights, FusedProductsEqualThoseOfTheGgufRows) {
  const std::vector<TensorType> types = repackable_here();
  if (types.empty()) GTEST_SKIP() << kNothingRepacked;
  ThreadPool pool2(2);
  const int64_t n_cols = 1024;
  for (const TensorType type : types) {
    const TestMatrix gate = make_matrix(type, 301, n_cols, 7), up = make_matrix(type, 301, n_cols, 8);
    Repacked gate_r(gate, 1), up_r(up, 2);
    gate_r.poison();
    up_r.poison();
    for (const int64_t n_tok : {1, 5, 16, 33}) {
      SCOPED_TRACE(name(type) + " tokens " + std::to_string(n_tok));
      const std::vector<float> x = random_x(n_tok * n_cols, 9);
      const size_t n = static_cast<size_t>(n_tok * 301);
      std::vector<float> g(n), u(n), expected_g(n), expected_u(n);
      const MatmulOutput plain[2] = {{&gate.view, expected_g.data()}, {&up.view, expected_u.data()}};
      matmul_many(plain, x.data(), n_tok, nullptr);
      const MatmulOutput repacked[2] = {{&gate_r.view, g.data()}, {&up_r.view, u.data()}};
      matmul_many(repacked, x.data(), n_tok, &pool2);
      EXPECT_EQ(g, expected_g);
      EXPECT_EQ(u, expected_u);
      swiglu(expected_g.data(), expected_u.data(), static_cast<int64_t>(n), expected_g.data());
      std::vector<float> fused(n), scratch(n);
      matmul_swiglu(gate_r.view, up_r.view, x.data(), n_tok, fused.data(), scratch.data(), &pool2);
      EXPECT_EQ(fused, expected_g);
    }
  }
}

TEST(ops_repacked_weights, RowsReadBackAsTheGgufRows) {
  const std::vector<TensorType> types = repackable_here();
  if (types.empty()) GTEST_SKIP() << kNothingRepacked;
  for (const TensorType type : types) {
    const int64_t n_cols = columns(type)[1];
    for (const int64_t n_rows : {1, 17, 40}) {
      SCOPED_TRACE(name(type) + " rows " + std::to_string(n_rows));
      const TestMatrix m = make_matrix(type, n_rows, n_cols, static_cast<uint32_t>(n_rows));
      Repacked repacked(m, 1);
      repacked.poison();
      std::vector<float> row(static_cast<size_t>(n_cols));
      for (int64_t r = 0; r < n_rows; ++r) {
        dequantize_repacked_row(repacked.view, r, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), m.dequantized.data() + r * n_cols, row.size() * sizeof(float)))
            << "row " << r;
      }
    }
  }
}

// Groups written one call at a time, in any order, give the same bytes as one call.
TEST(ops_repacked_weights, PiecesGiveTheSameBytes) {
  const std::vector<TensorType> types = repackable_here();
  if (types.empty()) GTEST_SKIP() << kNothingRepacked;
  for (const TensorType type : types) {
    SCOPED_TRACE(name(type));
    const TestMatrix m = make_matrix(type, 70, columns(type)[1], 3);
    Repacked whole(m, 1);
    RepackedBuffer pieces = allocate_repacked(m.view);
    for (int64_t g = groups_of(m.view) - 1; g >= 0; --g) repack_groups(m.view, g, g + 1, pieces.get());
    EXPECT_EQ(0, std::memcmp(whole.buffer.get(), pieces.get(), repacked_bytes(m.view)));
  }
}

// Every target that repacks a type writes the same bytes (the AVX-512 transposes on the VNNI
// targets, plain copies on AVX2), so a layout written on one target is read right on another.
TEST(ops_repacked_weights, EveryTargetWritesTheSameBytes) {
  const std::vector<TensorType> types = repackable_here();
  if (types.empty()) GTEST_SKIP() << kNothingRepacked;
  for (const TensorType type : types) {
    for (const int64_t n_cols : columns(type)) {
      SCOPED_TRACE(name(type) + " cols " + std::to_string(n_cols));
      const TestMatrix m = make_matrix(type, 37, n_cols, static_cast<uint32_t>(n_cols));
      const Repacked best(m, 1);
      int targets_repacking = 0;
      testing::for_each_target([&] {
        if (!can_repack(m.view)) return;
        ++targets_repacking;
        RepackedBuffer bytes = allocate_repacked(m.view);
        repack_groups(m.view, 0, groups_of(m.view), bytes.get());
        EXPECT_EQ(0, std::memcmp(best.buffer.get(), bytes.get(), repacked_bytes(m.view)));
      });
      EXPECT_GE(targets_repacking, 1);
    }
  }
}

TEST(ops_repacked_weights, SizesAreWholeGroupsOfWholeCacheLines) {
  // 17 columns' worth of blocks: 3 blocks x (512 + 32) = 1632 bytes, rounded up to 1664.
  EXPECT_EQ(repacked_group_bytes(TensorType::q8_0, 96), 1664u);
  EXPECT_EQ(repacked_group_bytes(TensorType::q8_0, 2048), 64u * 544u);
  EXPECT_EQ(repacked_bytes(WeightMatrix{nullptr, TensorType::q8_0, 17, 96}), 2u * 1664u);
  EXPECT_EQ(repacked_bytes(WeightMatrix{nullptr, TensorType::q8_0, 16, 2048}), 64u * 544u);
  // Q4_K: 16 rows x 144 bytes per super-block, already whole lines.
  EXPECT_EQ(repacked_group_bytes(TensorType::q4_k, 768), 3u * 2304u);
  EXPECT_EQ(repacked_bytes(WeightMatrix{nullptr, TensorType::q4_k, 33, 256}), 3u * 2304u);
  // Q6_K: 16 x 210 = 3360 bytes per super-block, 52.5 lines: odd counts are padded.
  EXPECT_EQ(repacked_group_bytes(TensorType::q6_k, 256), 3392u);
  EXPECT_EQ(repacked_group_bytes(TensorType::q6_k, 512), 2u * 3360u);
  EXPECT_THROW(repacked_group_bytes(TensorType::q8_0, 48), InvalidArgument);
  EXPECT_THROW(repacked_group_bytes(TensorType::q4_k, 128), InvalidArgument);
  // The nibble formats: 16 rows x 18, 20 or 22 bytes per block (Q4_0, Q4_1, Q5_0), rounded up.
  EXPECT_EQ(repacked_group_bytes(TensorType::q4_0, 96), 896u);  // 3 x 288 = 864
  EXPECT_EQ(repacked_group_bytes(TensorType::q4_1, 96), 3u * 320u);
  EXPECT_EQ(repacked_group_bytes(TensorType::q5_0, 96), 1088u);  // 3 x 352 = 1056
  EXPECT_EQ(repacked_group_bytes(TensorType::q5_0, 2048), 64u * 352u);
  EXPECT_THROW(repacked_group_bytes(TensorType::f16, 256), InvalidArgument);
  EXPECT_THROW(repacked_bytes(WeightMatrix{nullptr, TensorType::q8_0, 0, 32}), InvalidArgument);
}

TEST(ops_repacked_weights, LargeMatricesStartOnAHugePage) {
  if (repackable_here().empty()) GTEST_SKIP() << kNothingRepacked;
  // 4096 x 1024 Q4_K (every CPU that repacks repacks it): 256 groups of 4 x 2304 bytes, 2.25 MiB;
  // 32 x 1024: 18 KiB.
  const WeightMatrix large{nullptr, TensorType::q4_k, 4096, 1024};
  const WeightMatrix small{nullptr, TensorType::q4_k, 32, 1024};
  ASSERT_GE(repacked_bytes(large), kRepackedHugePageBytes);
  ASSERT_LT(repacked_bytes(small), kRepackedHugePageBytes);
  for (int i = 0; i < 3; ++i) {
    const RepackedBuffer a = allocate_repacked(large);
    const RepackedBuffer b = allocate_repacked(small);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % kRepackedHugePageBytes, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
    std::memset(a.get(), 0xa5, repacked_bytes(large));  // every byte is the caller's (ASan checks)
    std::memset(b.get(), 0x5a, repacked_bytes(small));
  }
}

TEST(ops_repacked_weights, BadInputIsRefused) {
  const TestMatrix f16 = make_matrix(TensorType::f16, 16, 256, 1);
  EXPECT_FALSE(can_repack(f16.view));
  EXPECT_THROW(allocate_repacked(f16.view), InvalidArgument);
  if (repackable_here().empty()) GTEST_SKIP() << kNothingRepacked;
  const TestMatrix m = make_matrix(TensorType::q4_k, 20, 256, 2);
  RepackedBuffer buffer = allocate_repacked(m.view);
  EXPECT_THROW(repack_groups(m.view, 0, 3, buffer.get()), InvalidArgument);  // 2 groups
  EXPECT_THROW(repack_groups(m.view, 2, 1, buffer.get()), InvalidArgument);
  EXPECT_THROW(repack_groups(m.view, -1, 1, buffer.get()), InvalidArgument);
  EXPECT_THROW(repack_groups(m.view, 0, 1, nullptr), InvalidArgument);
  std::vector<float> row(256);
  EXPECT_THROW(dequantize_repacked_row(m.view, 0, row.data()), InvalidArgument);  // not repacked
  WeightMatrix view = m.view;
  view.repacked = buffer.get();
  repack_groups(view, 0, 2, buffer.get());
  EXPECT_THROW(dequantize_repacked_row(view, 20, row.data()), InvalidArgument);
  EXPECT_THROW(dequantize_repacked_row(view, -1, row.data()), InvalidArgument);
}

}  // namespace
}  // namespace squeezekv
