// KVzip (Kim et al. 2025, arXiv:2505.23416; kvpress's KVzipPress): a row matters as much as the model
// needs it to reproduce the context. After the context is prefilled the caller runs a
// reconstruction pass (engine/reconstruction.h): the model is asked to repeat the context, chunk by
// chunk, teacher-forced, and each row of the chunk scores the largest attention weight any
// reconstruction query of its KV group pays it, the softmax taken over the sinks, the chunk and the
// reconstruction's own rows. The scores need no question, so one compression serves every later one.
//
// Rows wait unscored (NaN) until their chunk is reconstructed: over budget, only scored rows are
// evicted, the lowest first, ties to the oldest, the sinks never; so a prompt read once is held
// whole until its scores are in (read once), and a streamed one holds its budget plus the chunk
// being read (streaming). After the prompt, new rows (a question, the answer) score +inf: they stay
// and push out the lowest-scored context rows, the newest first once no context row is left.
// Scores mean the same in every layer, so the global allocator may rank all layers together.
#include <cmath>
#include <limits>

#include "policy/eviction.h"
#include "policy/per_head_policy.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/core/component_info.h"
#include "squeezekv/core/state_stream.h"

namespace squeezekv {
namespace {

constexpr float kUnscored = std::numeric_limits<float>::quiet_NaN();
constexpr float kKept = std::numeric_limits<float>::infinity();

class KVzipPolicy final : public PerHeadPolicy {
 public:
  explicit KVzipPolicy(const ComponentParams& params)
      : n_sink_(params.n_sink), by_output_(params.get_text("kvzip_normalize") == "on") {}
  std::string_view name() const override { return "kvzip"; }
  bool bounded() const override { return done_; }  // the prompt is held until its rows are scored
  bool scores_reconstruction() const override { return true; }
  bool weighs_reconstruction_by_output() const override { return by_output_; }

  void score_keys(LayerRows& layer, const UpdateRows& update) override {
    const float score = done_ ? kKept : kUnscored;
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      float* scores = layer.heads[h].scores();
      for (const int slot : update.slots[h]) scores[slot] = score;
    }
  }

  void score_reconstruction(LayerRows& layer, int head, const float* weights, int n_queries, int n_slots) override {
    if (!layer.reconstruction) return;
    HeadStore& store = layer.heads[size_t(head)];
    float* scores = store.scores();
    const int64_t* pos = store.positions();
    for (int s = 0; s < n_slots; ++s) {
      if (!layer.reconstruction->in_chunk(pos[s])) continue;
      float best = std::isnan(scores[s]) ? 0.0f : scores[s];
      for (int q = 0; q < n_queries; ++q) best = std::max(best, weights[size_t(q) * size_t(n_slots) + size_t(s)]);
      scores[s] = best;
    }
  }

  // Over budget, the lowest-scored rows that are not sinks, while the scored rows alone exceed it.
  void evict_head(LayerRows& layer, int head, int budget) override {
    evict_lowest_scored(layer.heads[size_t(head)], budget, Protection{n_sink_});
  }

  // Read once: every row has been reconstructed (one whose weight underflowed to 0 everywhere, or a
  // cache fed without a reconstruction, counts as scored 0).
  void finish_prompt(LayerRows& layer, int budget) override {
    for (HeadStore& store : layer.heads) {
      float* scores = store.scores();
      for (int s = 0; s < store.n_slots(); ++s) {
        if (std::isnan(scores[s])) scores[s] = 0.0f;
      }
    }
    done_ = true;
    evict(layer, budget);
  }

  // The scores, the sinks +inf. A ranking runs once every row held has been reconstructed (the
  // prompt's end, or right after a streamed chunk's pass): a row still unscored then had no pass
  // (a cache fed without the engine) and ranks as 0, as finish_prompt counts it.
  bool keep_priorities(const LayerRows& layer, int head, int /*budget*/, bool /*prompt_end*/,
                       std::vector<float>& out) const override {
    const HeadStore& store = layer.heads[size_t(head)];
    out.assign(store.scores(), store.scores() + store.n_slots());
    for (int s = 0; s < store.n_slots(); ++s) {
      if (std::isnan(out[size_t(s)])) out[size_t(s)] = 0.0f;
      if (store.live(s) && store.positions()[s] < n_sink_) out[size_t(s)] = kKept;
    }
    return true;
  }

  void reset() override { done_ = false; }

  // Whether the prompt has ended (the rows' scores, unscored ones NaN, are saved with the rows).
  void save_state(StateWriter& out) const override { out.put(uint8_t(done_)); }
  void load_state(StateReader& in, const LayerRows& /*layer*/) override { done_ = in.get_bool("kvzip: prompt ended"); }

 private:
  int64_t n_sink_;
  bool by_output_;
  bool done_ = false;
};

constexpr std::string_view kModes[] = {"read-once", "streaming"};
constexpr std::string_view kSwitch[] = {"on", "off"};

const ParamSpec kParams[] = {
    {"kvzip_chunk",
     ParamKind::integer,
     "512",
     "kvzip: tokens of the context reconstructed per pass (the reconstruction's rows are held beside the cache; 512 "
     "measured better than the reference's 2048 on SmolLM2: a long repeat pays its chunk's end less)",
     16,
     double(1 << 20),
     false,
     {},
     {},
     true,
     false,
     nullptr,
     /*label=*/"chunk",
     /*omit_if=*/"512"},
    {"kvzip_mode",
     ParamKind::choice,
     "read-once",
     "kvzip: read-once (prefill the whole context, score, compress once; peak: the full cache) or streaming "
     "(compress after every chunk; peak: the budget plus one chunk and its reconstruction)",
     0,
     0,
     false,
     kModes,
     {},
     true,
     false,
     nullptr,
     /*label=*/"mode",
     /*omit_if=*/"read-once"},
    {"kvzip_normalize",
     ParamKind::choice,
     "off",
     "kvzip: KVzip+ (on): each weight times the norm of the row's value through the attention output, over the "
     "norm of the querying hidden state",
     0,
     0,
     false,
     kSwitch,
     {},
     true,
     false,
     nullptr,
     /*label=*/"plus",
     /*omit_if=*/"off"},
};

constexpr std::string_view kReads[] = {"n_sink"};

constexpr ParamOverride kStreaming[] = {{"kvzip_mode", "streaming"}};
constexpr ParamOverride kPlus[] = {{"kvzip_normalize", "on"}};

constexpr MethodInfo kMethods[] = {
    {"kvzip", "kvzip", "global",
     "KVzip: keep the rows the model needs to reproduce the context, ranked across every layer and head",
     "Query-agnostic compression: a document read once and asked about later, a chat over it (KVzip's own "
     "setting: one threshold over all layers and heads)"},
    {"kvzip_uniform", "kvzip", "uniform",
     "KVzip's scores with every layer and head at the average budget (kvpress's layerwise)",
     "Query-agnostic compression with the same rows in every layer-head"},
    {"squeeze_kvzip", "kvzip", "squeeze",
     "KVzip's rows within SqueezeAttention's layer budgets (measured from the prompt)",
     "Query-agnostic compression with the squeeze schedule across layers"},
    {"kvzip_stream", "kvzip", "global",
     "KVzip streaming: each chunk prefilled, reconstructed over the rows held, and compressed before the next",
     "Documents longer than memory: the peak is the budget plus one chunk", kStreaming},
    {"kvzip_plus", "kvzip", "global",
     "KVzip+: KVzip's weights times each row's value norm through the attention output, over the query's "
     "hidden-state norm",
     "Query-agnostic compression, the weighting of KVzip's follow-up (kvpress's kvzip_plus)", kPlus},
};

ReconstructionPlan plan(const ComponentParams& params) {
  return {int(params.get_int("kvzip_chunk")), params.get_text("kvzip_mode") == "streaming"};
}

}  // namespace

extern const PolicyInfo kvzip_policy_info = {
    "kvzip",
    "keep the rows a reconstruction of the context attends to most (KVzip, query-agnostic)",
    kParams,
    kReads,
    /*scores_rows=*/false,
    [](const ComponentParams& c) -> std::unique_ptr<TokenPolicy> { return std::make_unique<KVzipPolicy>(c); },
    /*validate=*/nullptr,
    kMethods,
    /*keeps_every_row=*/false,
    /*holds_prompt_until_end=*/true,
    /*splits_heads=*/true,
    plan,
    /*ranks_across_layers=*/true};

}  // namespace squeezekv
