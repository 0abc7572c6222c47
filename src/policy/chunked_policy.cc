// Chunked cumulative-score policy (ChunkKV, Liu et al. 2025, arXiv:2502.00299): the H2O score, but
// whole chunks of `chunk_size` consecutive positions are evicted together; a chunk's score is the
// mean of its rows' scores, and a chunk holding a sink or a recent row is never evicted whole
// (when such chunks alone exceed the budget, their other rows go one by one). chunk_size 1 is
// exactly h2o.
#include <algorithm>
#include <map>

#include "policy/cumulative_policy.h"
#include "policy/policies.h"

namespace squeezekv {
namespace {

class ChunkedPolicy final : public CumulativePolicy {
 public:
  explicit ChunkedPolicy(const KVCacheConfig& config)
      : CumulativePolicy(config), chunk_size_(config.chunk_size) {}
  std::string_view name() const override { return "chunked"; }

  void evict(LayerRows& layer, int budget) override {
    const Protection protect = cumulative_protection(layer.tokens_seen, budget, n_sink_, recent_);
    for (HeadStore& head : layer.heads) evict_head(head, budget, protect);
  }

 private:
  struct Chunk {
    double sum = 0.0;
    int rows = 0;
    bool protected_ = false;
    std::vector<int> slots;
  };

  void evict_head(HeadStore& head, int budget, Protection protect) const {
    if (head.n_live() <= budget) return;
    std::map<int64_t, Chunk> chunks;  // ordered by chunk index = age
    const int64_t* pos = head.positions();
    for (int s = 0; s < head.n_slots(); ++s) {
      if (pos[s] == HeadStore::kFree) continue;
      Chunk& chunk = chunks[pos[s] / chunk_size_];
      chunk.sum += head.scores()[s];
      ++chunk.rows;
      chunk.protected_ |= protect.covers(pos[s]);
      chunk.slots.push_back(s);
    }
    struct Candidate {
      float mean;
      int64_t index;
      const Chunk* chunk;
    };
    std::vector<Candidate> order;
    for (const auto& [index, chunk] : chunks) {
      // The mean is taken in float so that a one-row chunk compares exactly like its row (h2o).
      if (!chunk.protected_) order.push_back({float(chunk.sum / chunk.rows), index, &chunk});
    }
    std::sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) {
      return a.mean != b.mean ? a.mean < b.mean : a.index < b.index;
    });
    for (const Candidate& candidate : order) {
      if (head.n_live() <= budget) break;
      evict_slots(head, candidate.chunk->slots);
    }
    // Chunks that hold a sink or a recent row can together exceed a small budget; the budget is
    // a promise, so the remaining unprotected rows in them go one by one, lowest score first.
    if (head.n_live() > budget) evict_slots(head, select_lowest(head, budget, protect, head.scores()));
  }

  int chunk_size_;
};

}  // namespace

std::unique_ptr<TokenPolicy> make_chunked_policy(const KVCacheConfig& config) {
  return std::make_unique<ChunkedPolicy>(config);
}

}  // namespace squeezekv
