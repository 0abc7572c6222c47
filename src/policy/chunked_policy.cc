// Chunked cumulative-score policy (ChunkKV, Liu et al. 2025, arXiv:2502.00299): the H2O score, but
// whole chunks of `chunk_size` consecutive positions are evicted together; a chunk's score is the
// mean of its rows' scores, and a chunk holding a sink or a recent row is never evicted whole
// (when such chunks alone exceed the budget, their other rows go one by one). chunk_size 1 is
// exactly h2o.
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "policy/cumulative_policy.h"
#include "squeezekv/core/component_info.h"

namespace squeezekv {
namespace {

class ChunkedPolicy final : public CumulativePolicy {
 public:
  explicit ChunkedPolicy(const ComponentParams& params)
      : CumulativePolicy(params), chunk_size_(params.get_int("chunk_size")) {}
  std::string_view name() const override { return "chunked"; }

  void evict_head(LayerRows& layer, int h, int budget) override {
    evict_chunks(layer.heads[size_t(h)], budget, protection(layer, budget));
  }

  // Each row's chunk mean (what evict_chunks orders by: whole chunks go together, the older on
  // equal means); in a chunk that holds a protected row, which is never evicted whole, a row's own
  // score (evict_chunks' last resort), the protected rows themselves +inf. Under the split a
  // layer then holds exactly its rows, where evict_chunks may drop a whole chunk for one row.
  bool keep_priorities(const LayerRows& layer, int h, int budget, bool /*prompt_end*/,
                       std::vector<float>& out) const override {
    const HeadStore& head = layer.heads[size_t(h)];
    const Protection protect = protection(layer, budget);
    const int64_t* pos = head.positions();
    std::vector<std::pair<int64_t, int>> rows;
    out.assign(size_t(head.n_slots()), 0.0f);
    for_each_chunk(head, protect, rows, [&](size_t begin, size_t end, float mean, bool protected_chunk) {
      for (size_t i = begin; i < end; ++i) {
        const int s = rows[i].second;
        out[size_t(s)] = protect.covers(pos[s]) ? std::numeric_limits<float>::infinity()
                         : protected_chunk      ? head.scores()[s]
                                                : mean;
      }
    });
    return true;
  }

 private:
  // A run of live rows sharing one chunk index, as a range of `rows` (ordered by slot within it).
  struct Chunk {
    float mean;
    int64_t index;
    size_t begin, end;
  };

  // Groups the live rows into `rows` as (chunk index, slot), by chunk (oldest first) then slot, the
  // order the score sum is taken in, and calls fn(begin, end, mean, protected_chunk) for each
  // chunk's range of `rows`. The mean is taken in float so that a one-row chunk compares exactly
  // like its row (h2o).
  template <class Fn>
  void for_each_chunk(const HeadStore& head, Protection protect, std::vector<std::pair<int64_t, int>>& rows,
                      Fn fn) const {
    const int64_t* pos = head.positions();
    rows.clear();
    for (int s = 0; s < head.n_slots(); ++s) {
      if (pos[s] != HeadStore::kFree) rows.push_back({pos[s] / chunk_size_, s});
    }
    std::sort(rows.begin(), rows.end());
    for (size_t begin = 0; begin < rows.size();) {
      size_t end = begin;
      double sum = 0.0;
      bool protected_chunk = false;
      for (; end < rows.size() && rows[end].first == rows[begin].first; ++end) {
        sum += head.scores()[rows[end].second];
        protected_chunk |= protect.covers(pos[rows[end].second]);
      }
      fn(begin, end, float(sum / double(end - begin)), protected_chunk);
      begin = end;
    }
  }

  // Allocation-free after a thread's first call: its rows and chunks keep their capacity across
  // steps (per thread, since heads may be evicted at once on several threads).
  void evict_chunks(HeadStore& head, int budget, Protection protect) {
    if (head.n_live() <= budget) return;
    // (chunk index, slot) of the live rows; the evictable chunks.
    thread_local std::vector<std::pair<int64_t, int>> rows;
    thread_local std::vector<Chunk> chunks;
    chunks.clear();
    for_each_chunk(head, protect, rows, [&](size_t begin, size_t end, float mean, bool protected_chunk) {
      if (!protected_chunk) chunks.push_back({mean, rows[begin].first, begin, end});
    });
    std::sort(chunks.begin(), chunks.end(),
              [](const Chunk& a, const Chunk& b) { return a.mean != b.mean ? a.mean < b.mean : a.index < b.index; });
    for (const Chunk& chunk : chunks) {
      if (head.n_live() <= budget) break;
      for (size_t i = chunk.begin; i < chunk.end; ++i) head.evict(rows[i].second);
    }
    // Chunks that hold a sink or a recent row can together exceed a small budget; the budget is
    // a promise, so the remaining unprotected rows in them go one by one, lowest score first.
    if (head.n_live() > budget) evict_lowest(head, budget, protect, head.scores());
  }

  int64_t chunk_size_;
};

const ParamSpec kParams[] = {
    {"chunk_size",
     ParamKind::integer,
     "8",
     "chunkkv: positions per evicted chunk (1 = h2o)",
     1,
     double(1 << 30),
     false,
     {},
     {},
     true,
     false,
     {},
     /*label=*/"chunk"},
};

}  // namespace

extern const PolicyInfo chunked_policy_info = {
    "chunked",
    "cumulative score, evicting whole chunks of consecutive positions",
    kParams,
    kCumulativeReads,
    /*scores_rows=*/true,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<ChunkedPolicy>(c); },
    /*validate=*/nullptr,
    /*methods=*/{},
    /*keeps_every_row=*/false,
    /*holds_prompt_until_end=*/false,
    /*splits_heads=*/true};

}  // namespace squeezekv
