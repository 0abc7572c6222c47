// Chunked cumulative-score policy (ChunkKV, Liu et al. 2025, arXiv:2502.00299): the H2O score, but
// whole chunks of `chunk_size` consecutive positions are evicted together; a chunk's score is the
// mean of its rows' scores, and a chunk holding a sink or a recent row is never evicted whole
// (when such chunks alone exceed the budget, their other rows go one by one). chunk_size 1 is
// exactly h2o.
#include <algorithm>
#include <utility>
#include <vector>

#include "policy/cumulative_policy.h"
#include "squeezekv/core/component_info.h"

namespace squeezekv {
namespace {

class ChunkedPolicy final : public CumulativePolicy {
 public:
  explicit ChunkedPolicy(const KVCacheConfig& config)
      : CumulativePolicy(config), chunk_size_(config.get_int("chunk_size")) {}
  std::string_view name() const override { return "chunked"; }

  void evict(LayerRows& layer, int budget) override {
    const Protection protect = cumulative_protection(layer.tokens_seen, budget, n_sink_, recent_);
    for (HeadStore& head : layer.heads) evict_head(head, budget, protect);
  }

 private:
  // A run of live rows sharing one chunk index, as a range of `rows_` (ordered by slot within it).
  struct Chunk {
    float mean;
    int64_t index;
    size_t begin, end;
  };

  // Allocation-free after the first call: rows_ and chunks_ keep their capacity across steps.
  void evict_head(HeadStore& head, int budget, Protection protect) {
    if (head.n_live() <= budget) return;
    const int64_t* pos = head.positions();
    rows_.clear();
    for (int s = 0; s < head.n_slots(); ++s) {
      if (pos[s] != HeadStore::kFree) rows_.push_back({pos[s] / chunk_size_, s});
    }
    // By chunk (oldest first), then slot: the order the score sum is taken in.
    std::sort(rows_.begin(), rows_.end());
    chunks_.clear();
    for (size_t begin = 0; begin < rows_.size();) {
      size_t end = begin;
      double sum = 0.0;
      bool protected_chunk = false;
      for (; end < rows_.size() && rows_[end].first == rows_[begin].first; ++end) {
        sum += head.scores()[rows_[end].second];
        protected_chunk |= protect.covers(pos[rows_[end].second]);
      }
      // The mean is taken in float so that a one-row chunk compares exactly like its row (h2o).
      if (!protected_chunk) chunks_.push_back({float(sum / double(end - begin)), rows_[begin].first, begin, end});
      begin = end;
    }
    std::sort(chunks_.begin(), chunks_.end(), [](const Chunk& a, const Chunk& b) {
      return a.mean != b.mean ? a.mean < b.mean : a.index < b.index;
    });
    for (const Chunk& chunk : chunks_) {
      if (head.n_live() <= budget) break;
      for (size_t i = chunk.begin; i < chunk.end; ++i) head.evict(rows_[i].second);
    }
    // Chunks that hold a sink or a recent row can together exceed a small budget; the budget is
    // a promise, so the remaining unprotected rows in them go one by one, lowest score first.
    if (head.n_live() > budget) evict_lowest(head, budget, protect, head.scores());
  }

  std::vector<std::pair<int64_t, int>> rows_;  // (chunk index, slot) of the live rows
  std::vector<Chunk> chunks_;                  // evictable chunks
  int64_t chunk_size_;
};

const ParamSpec kParams[] = {
    {"chunk_size", ParamKind::integer, "8", "chunkkv: positions per evicted chunk (1 = h2o)", 1, double(1 << 30),
     false, {}, {}, true, false, {}, /*label=*/"chunk"},
};

}  // namespace

extern const PolicyInfo chunked_policy_info = {
    "chunked", "cumulative score, evicting whole chunks of consecutive positions", kParams,
    kCumulativeReads, /*scores_rows=*/true,
    [](const KVCacheConfig& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<ChunkedPolicy>(c); }};

}  // namespace squeezekv
