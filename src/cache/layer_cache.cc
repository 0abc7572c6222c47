#include "squeezekv/cache/layer_cache.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/alloc/head_split.h"
#include "squeezekv/cache/conserved_schedule.h"
#include "squeezekv/cache/coordinator.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/ops/thread_pool.h"
#include "cache/exclusive.h"
#include "cache/sliding_window.h"

namespace squeezekv {

LayerCache::LayerCache(const KVCacheConfig& config, const StorageParams& storage, HeadSplitRule split, int layer_index,
                       int n_kv_heads, int n_batch, int budget, std::unique_ptr<TokenPolicy> policy,
                       BudgetCoordinator* coordinator, std::atomic<bool>* shared_busy)
    : config_(config),
      layer_index_(layer_index),
      budget_{coordinator == nullptr ? BudgetPhase::own : BudgetPhase::measuring, budget, budget, budget, {}},
      policy_(std::move(policy)),
      split_(split),
      coordinator_(coordinator),
      storage_(storage),
      busy_(shared_busy ? shared_busy : &own_busy_) {
  require(n_kv_heads >= 1 && n_kv_heads <= kMaxCacheHeads, "n_kv_heads", n_kv_heads,
          "must lie in [1, " + std::to_string(kMaxCacheHeads) + "]");
  require(n_batch >= 1 && n_batch <= kMaxCacheBatch, "n_batch", n_batch,
          "must lie in [1, " + std::to_string(kMaxCacheBatch) + "]");
  require(budget >= 1, "budget", budget, "must be at least 1");
  if (const std::string unfit = storage_unfit(storage); !unfit.empty()) throw InvalidArgument(unfit);
  rows_.n_batch = n_batch;
  rows_.n_kv_heads = n_kv_heads;
  const KiviLayout kivi{storage.kivi_group, storage.kivi_residual, storage.fp16_below};
  rows_.heads.assign(size_t(n_batch) * size_t(n_kv_heads),
                     HeadStore(storage.head_dim, storage.key, storage.value, kivi));
  update_.slots.resize(rows_.heads.size());
  if (coordinator_) {
    coordinator_->attach(layer_index, [this](int b) { apply_budget(b, true); });
  }
}

LayerCache::LayerCache(const KVCacheConfig& config, const CacheParts& parts, int layer_index, int n_kv_heads,
                       int n_batch, int budget, BudgetCoordinator* coordinator, std::atomic<bool>* shared_busy)
    : LayerCache(config, parts.storage, parts.head_split, layer_index, n_kv_heads, n_batch, budget, parts.make_policy(),
                 coordinator, shared_busy) {}

namespace {

// The window of a sliding kind (its budget), checked before the layer is built.
int sliding_window(const LayerKind& kind) {
  require(kind.is_sliding(), "kind", to_string(kind),
          "this constructor builds a sliding layer (a global layer takes a budget and a policy)");
  validate(kind, "window");
  return kind.window;
}

}  // namespace

// A window holds the same newest rows in every head: no head split.
LayerCache::LayerCache(const KVCacheConfig& config, const CacheParts& parts, int layer_index, int n_kv_heads,
                       int n_batch, LayerKind window_kind, std::atomic<bool>* shared_busy)
    : LayerCache(config, parts.storage, HeadSplitRule::uniform, layer_index, n_kv_heads, n_batch,
                 sliding_window(window_kind), make_sliding_window_rows(), nullptr, shared_busy) {
  kind_ = window_kind;
}

void LayerCache::check_finite(const float* data, size_t n, const char* what) const {
  // An f16 cache would store a finite f32 beyond 65504 as inf, silently; the block formats keep
  // their scales in fp16 and take the same range.
  const bool f32 = storage_.key == KVType::f32 && storage_.value == KVType::f32;
  const float limit = f32 ? std::numeric_limits<float>::max() : 65504.0f;
  for (size_t i = 0; i < n; ++i) {
    if (!(std::fabs(data[i]) <= limit)) {  // also catches NaN
      const bool finite = std::isfinite(data[i]);
      throw InvalidArgument(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(data[i]) +
                            (finite ? ": beyond the fp16 range (|x| <= 65504) of the " + to_string(storage_.key) + "/" +
                                          to_string(storage_.value) + " cache (layer "
                                    : ": keys and values must be finite (layer ") +
                            std::to_string(layer_index_) + ")");
    }
  }
}

template <class Fn>
void LayerCache::for_each_head(ThreadPool* pool, bool worth_it, const Fn& fn) {
  const size_t n = rows_.heads.size();
  if (pool != nullptr && worth_it && n > 1 && pool->num_workers() > 1) {
    // One task per worker, a contiguous run of heads each: a task is claimed through one shared
    // atomic, so a claim per head would cost as much as a small head's work.
    const size_t tasks = std::min(n, pool->num_workers());
    pool->parallel_for(tasks, [&](size_t t, size_t) {
      for (size_t h = t * n / tasks; h < (t + 1) * n / tasks; ++h) fn(h);
    });
  } else {
    for (size_t h = 0; h < n; ++h) fn(h);
  }
}

int64_t LayerCache::total_slots() const {
  int64_t slots = 0;
  for (const HeadStore& head : rows_.heads) slots += head.n_slots();
  return slots;
}

void LayerCache::begin_update(const float* keys, const float* values, int n_tokens, ThreadPool* pool) {
  if (in_update_) throw InvalidArgument("begin_update: the previous update was not ended (call end_update)");
  require(n_tokens >= 1, "n_tokens", n_tokens, "an update needs at least one token");
  require(keys != nullptr && values != nullptr, "keys", "null", "keys and values must be given");
  const int dim = config_.head_dim;
  const size_t n = rows_.heads.size() * size_t(n_tokens) * size_t(dim);
  check_finite(keys, n, "keys");
  check_finite(values, n, "values");
  // A measuring allocator that reads keys measures the first update; nothing else is computed.
  if (!stored_any_ && coordinator_ && coordinator_->allocator().source() == MeasureSource::keys) {
    concentration_ = coordinator_->allocator().measure_keys(keys, n_heads(), n_tokens, dim);
  }
  // Until the budget is final the layer keeps everything, so it grows without a cap; after that
  // its slots stop at budget + 1 (room for one append before the eviction).
  // Under a head split, each head stops at its own share + 1 (a head may hold more than the
  // layer's budget), else at the conserved budget once this update is in.
  const int growth = budget_.final() && policy_->bounded() ? budget_at(rows_.tokens_seen + n_tokens) : 0;
  update_.keys = keys;
  update_.n_new = n_tokens;
  update_.first_pos = rows_.tokens_seen;
  const size_t per_head = size_t(n_tokens) * size_t(dim);
  // Storing goes with the values stored (a prompt chunk), except that KIVI's storage also regroups
  // held rows, work that goes with the slots.
  const bool worth_it = int64_t(n) >= kParallelHeadValues || (grouped_storage() && total_slots() >= kParallelHeadSlots);
  for_each_head(pool, worth_it, [&](size_t h) {
    update_.slots[h].clear();
    rows_.heads[h].append(keys + h * per_head, values + h * per_head, n_tokens, rows_.tokens_seen,
                          growth > 0 ? std::max(growth, head_budget(h)) + 1 : 0, update_.slots[h]);
  });
  rows_.tokens_seen += n_tokens;
  policy_->score_keys(rows_, update_);
  in_update_ = true;
}

void LayerCache::add_attention(int h, const float* probs, int n_queries) {
  if (!in_update_) throw InvalidArgument("add_attention: call it between begin_update and end_update");
  // Messages are built only on failure: this runs per head per decode step.
  if (h < 0 || h >= n_heads()) require(false, "head", h, "out of range [0, " + std::to_string(n_heads()) + ")");
  if (n_queries < 0 || n_queries > update_.n_new) {
    require(false, "n_queries", n_queries,
            "must lie in [0, " + std::to_string(update_.n_new) + "] (the update's tokens)");
  }
  // NaN or negative probabilities would poison the scores that choose what is evicted.
  const size_t n_probs = size_t(n_queries) * size_t(head(h).n_slots());
  if (n_probs > 0 && probs == nullptr) require(false, "probs", "null", "attention probabilities must be given");
  // One reduction over every probability (no branch per value); the bad one is found only then.
  bool all_ok = true;
  for (size_t i = 0; i < n_probs; ++i) all_ok &= (probs[i] >= 0.0f) & (probs[i] <= std::numeric_limits<float>::max());
  for (size_t i = 0; !all_ok && i < n_probs; ++i) {
    if (!(probs[i] >= 0.0f && probs[i] <= std::numeric_limits<float>::max())) {
      require(false, "probs[" + std::to_string(i) + "]", probs[i],
              "attention probabilities must be finite and >= 0 (layer " + std::to_string(layer_index_) + ", head " +
                  std::to_string(h) + ")");
    }
  }
  if (rows_.reconstruction) {
    policy_->score_reconstruction(rows_, h, probs, n_queries, head(h).n_slots());
  } else {
    policy_->score_attention(rows_, h, probs, n_queries, head(h).n_slots());
  }
}

void LayerCache::add_queries(const UpdateQueries& queries) {
  require(queries.q != nullptr && queries.n >= 0 && queries.n_heads >= 1, "queries", "null or empty",
          "an update's queries must be given");
  if (wants_queries()) policy_->add_queries(rows_, queries);
}

void LayerCache::begin_reconstruction(int64_t first, int64_t end) {
  if (in_update_) throw InvalidArgument("begin_reconstruction: an update is in progress (call end_update)");
  if (rows_.reconstruction) throw InvalidArgument("begin_reconstruction: a reconstruction is under way already");
  if (!(first >= 0 && first < end && end <= rows_.tokens_seen)) {
    std::string range = "[";
    range += std::to_string(first);
    range += ", ";
    range += std::to_string(end);
    range += ")";
    require(false, "reconstruction chunk", range,
            "must be a non-empty range of the " + std::to_string(rows_.tokens_seen) + " positions the cache has seen");
  }
  static std::atomic<uint64_t> next_id{1};
  rows_.reconstruction = ReconstructionSpan{
      config_.n_sink, first, end, rows_.tokens_seen, policy_->weighs_reconstruction_by_output(), next_id++};
}

void LayerCache::end_reconstruction() {
  if (in_update_) throw InvalidArgument("end_reconstruction: an update is in progress (call end_update)");
  if (!rows_.reconstruction) throw InvalidArgument("end_reconstruction: no reconstruction under way");
  const int64_t from = rows_.reconstruction->from;
  for (HeadStore& head : rows_.heads) {
    for (int s = 0; s < head.n_slots(); ++s) {
      if (head.positions()[s] >= from) head.evict(s);
    }
    head.apply_evictions();  // the reconstruction's rows were the newest: no kept row shifts
  }
  rows_.tokens_seen = from;
  rows_.reconstruction.reset();
}

void LayerCache::pin_head_budgets(std::vector<int> counts) {
  require(counts.size() == rows_.heads.size(), "counts.size()", counts.size(),
          "one per head (" + std::to_string(rows_.heads.size()) + ")");
  int64_t rows = 0;
  for (const int c : counts) {
    require(c >= 1, "head budget", c, "must be at least 1");
    rows += c;
  }
  const auto heads = int64_t(counts.size());
  budget_.per_head = std::move(counts);
  budget_.phase = BudgetPhase::pinned;
  // What the layer holds per head on average is its budget now (accounting).
  budget_.scheduled = budget_.now = int((rows + heads - 1) / heads);
}

void LayerCache::end_update(ThreadPool* pool) {
  if (!in_update_) throw InvalidArgument("end_update: no update in progress (call begin_update)");
  in_update_ = false;
  if (!stored_any_) {
    stored_any_ = true;
    if (prompt_ == PromptPhase::unseen) prompt_ = PromptPhase::ending;  // the first update was the prompt
    if (coordinator_ && coordinator_->allocator().source() == MeasureSource::keys) {
      coordinator_->report(layer_index_, concentration_);  // may publish every layer's budget
    }
  }
  settle(pool);
}

void LayerCache::rotate_keys_to_origin(int64_t upto, int64_t n_rot, RopeStyle style, float rope_base) {
  for (HeadStore& head : rows_.heads) head.rotate_keys_to_origin(upto, n_rot, style, rope_base);
}

void LayerCache::update(const float* keys, const float* values, int n_tokens) {
  Exclusive only(*busy_, "update");
  begin_update(keys, values, n_tokens);
  end_update();
}

void LayerCache::update(const KVBlockView& keys, const KVBlockView& values) {
  auto check = [&](const KVBlockView& block, const char* name) {
    const std::string n(name);
    require(block.data != nullptr, n, "null", "no data");
    require(block.head_dim == config_.head_dim, n + ".head_dim", block.head_dim,
            "the cache was configured with head_dim = " + std::to_string(config_.head_dim));
    require(block.batch == rows_.n_batch, n + ".batch", block.batch,
            "the cache holds batch = " + std::to_string(rows_.n_batch));
    require(block.heads == rows_.n_kv_heads, n + ".heads", block.heads,
            "the cache holds " + std::to_string(rows_.n_kv_heads) + " KV heads");
    require(block.seq >= 1, n + ".seq", block.seq, "an update needs at least one token");
  };
  check(keys, "keys");
  check(values, "values");
  require(values.seq == keys.seq, "values.seq", values.seq, "must equal keys.seq = " + std::to_string(keys.seq));
  update(keys.data, values.data, keys.seq);
}

FetchedRows LayerCache::fetch(int h) const {
  Exclusive only(*busy_, "fetch");
  require(h >= 0 && h < n_heads(), "head", h, "out of range [0, " + std::to_string(n_heads()) + ")");
  const HeadStore& store = head(h);
  const size_t dim = size_t(store.head_dim());
  FetchedRows out;
  const std::vector<int> order = store.slots_by_position();
  out.keys.resize(order.size() * dim);
  out.values.resize(order.size() * dim);
  for (size_t i = 0; i < order.size(); ++i) {
    store.load_key(order[i], out.keys.data() + i * dim);
    store.load_value(order[i], out.values.data() + i * dim);
    out.positions.push_back(store.positions()[order[i]]);
  }
  return out;
}

void LayerCache::begin_prompt() {
  Exclusive only(*busy_, "begin_prompt");
  if (!stored_any_ && prompt_ == PromptPhase::unseen) prompt_ = PromptPhase::open;
}

void LayerCache::end_prompt() {
  Exclusive only(*busy_, "end_prompt");
  if (prompt_ != PromptPhase::open) return;  // the first update already was the prompt
  prompt_ = PromptPhase::ending;
  settle();
}

void LayerCache::set_budget(int budget) { apply_budget(budget, false); }

void LayerCache::apply_budget(int budget, bool scheduled) {
  require(budget >= 1, "budget", budget, "must be at least 1");
  budget_.scheduled = budget_.now = budget;
  budget_.phase = scheduled ? BudgetPhase::scheduled : BudgetPhase::own;
  budget_.per_head.clear();  // shares of the old budget: the next split shares the new one
  if (!in_update_) settle();
}

bool LayerCache::ages_rows() const {
  // A sliding layer holds its window whatever the rule (the model reads no row beyond it).
  return config_.positions == PositionRule::span && config_.max_distance > 0 && policy_->bounded() && !sliding();
}

void LayerCache::follow_schedule(ConservedSchedule* schedule) {
  schedule_ = schedule;
  // A measuring layer follows it once the coordinator publishes (apply_budget).
  if (budget_.phase == BudgetPhase::own) budget_.phase = BudgetPhase::scheduled;
}

int LayerCache::budget_at(int64_t tokens) {
  // A layer that has seen nothing holds nothing: its budget is the schedule's.
  if (budget_.phase != BudgetPhase::scheduled || schedule_ == nullptr || schedule_->empty() || tokens <= 0) {
    return budget_.scheduled;
  }
  // What this layer can hold: every row it has seen, or, when rows age out, its span and sinks.
  int64_t cap = tokens;
  if (ages_rows()) cap = std::min(cap, int64_t(config_.max_distance) + config_.n_sink);
  return schedule_->budget(layer_index_, cap);
}

void LayerCache::settle(ThreadPool* pool) {
  if (!budget_.final()) return;      // keep the whole prompt until the schedule is known
  if (rows_.reconstruction) return;  // the reconstruction's rows leave at its end; nothing else moves
  const bool prompt_end = prompt_ == PromptPhase::ending;
  // A prompt ended before anything was stored leaves the next update to be the prompt.
  if (prompt_end) prompt_ = stored_any_ ? PromptPhase::done : PromptPhase::unseen;
  // Rows older than the span go first, so the policy fills its budget from rows within it.
  const bool age = ages_rows();
  const int64_t before = rows_.tokens_seen - config_.max_distance;
  if (budget_.phase == BudgetPhase::pinned) {  // each head to the count a ranking across layers gave it
    for (size_t h = 0; h < rows_.heads.size(); ++h) {
      if (age) evict_aged(rows_.heads[h], before);
      policy_->evict_head(rows_, int(h), head_budget(h));
    }
    if (prompt_end) policy_->finish_prompt(rows_, std::max(1, tokens_kept()));  // no head exceeds it
    for_each_head(pool, total_slots() >= kParallelHeadSlots,
                  [&](size_t h) { settle_head(rows_.heads[h], prompt_end, head_budget(h)); });
    return;
  }
  const int now = budget_at(rows_.tokens_seen);
  if (now != budget_.now) budget_.per_head.clear();  // the last split shared another budget
  budget_.now = now;
  // Eviction scans every slot of a head, so it pays for the pool from kParallelHeadSlots on; an
  // unbounded policy's step leaves nothing to do but KIVI's regrouping.
  const bool worth_it = (policy_->bounded() || grouped_storage() || prompt_end) && total_slots() >= kParallelHeadSlots;
  if (split_ != HeadSplitRule::uniform && (policy_->bounded() || prompt_end)) {
    if (age) {
      for (HeadStore& head : rows_.heads) evict_aged(head, before);
    }
    settle_split(pool, prompt_end, worth_it);
    return;
  }
  if (!prompt_end && policy_->heads_independent()) {
    // Each head alone, the same steps in the same order as below (the heads share nothing).
    for_each_head(pool, worth_it, [&](size_t h) {
      if (age) evict_aged(rows_.heads[h], before);
      policy_->evict_head(rows_, int(h), budget_.now);
      settle_head(rows_.heads[h], prompt_end, budget_.now);
    });
    return;
  }
  if (age) {
    for (HeadStore& head : rows_.heads) evict_aged(head, before);
  }
  if (prompt_end) {
    policy_->finish_prompt(rows_, budget_.now);
  } else {
    policy_->evict(rows_, budget_.now);
  }
  for_each_head(pool, worth_it, [&](size_t h) { settle_head(rows_.heads[h], prompt_end, budget_.scheduled); });
}

void LayerCache::settle_split(ThreadPool* pool, bool prompt_end, bool worth_it) {
  // The split evicts the rows it leaves out itself rather than handing each head's count to the
  // policy's own selection: the kept set is then exactly the layer's top rows by priority, and a
  // policy that evicts in blocks (chunked) cannot undershoot the count the split gave a head.
  const auto n_kv = size_t(rows_.n_kv_heads);
  const int64_t layer_rows = int64_t(budget_.now) * rows_.n_kv_heads;
  const int floor_rows = head_floor_rows(config_.head_floor, budget_.now);
  priorities_.resize(rows_.heads.size());
  std::vector<HeadPriorities> views(n_kv);
  for (size_t first = 0; first < rows_.heads.size(); first += n_kv) {  // one sequence (batch item) at a time
    int64_t live = 0;
    for (size_t h = first; h < first + n_kv; ++h) live += rows_.heads[h].n_live();
    if (live <= layer_rows) continue;  // the sequence holds no more than its heads' rows together
    bool scored = true;
    for (size_t h = first; h < first + n_kv && scored; ++h) {
      scored = policy_->keep_priorities(rows_, int(h), budget_.now, prompt_end, priorities_[h]);
    }
    if (!scored) {  // nothing to split by now (snapkv after its prompt): each head keeps its count
      for (size_t h = first; h < first + n_kv; ++h) policy_->evict_head(rows_, int(h), head_budget(h));
      continue;
    }
    for (size_t i = 0; i < n_kv; ++i) {
      const HeadStore& head = rows_.heads[first + i];
      views[i] = {head.positions(), priorities_[first + i].data(), head.n_slots()};
    }
    const HeadSplit split = split_heads(views, layer_rows, floor_rows);
    if (budget_.per_head.empty()) budget_.per_head.assign(rows_.heads.size(), budget_.now);
    for (size_t i = 0; i < n_kv; ++i) {
      for (const int s : split.evict[i]) rows_.heads[first + i].evict(s);
      budget_.per_head[first + i] = split.kept[i];
    }
  }
  if (prompt_end) {
    // The policy's own end of the prompt (snapkv turns to its decode rule), with a budget no head
    // exceeds: the split has chosen the rows.
    policy_->finish_prompt(rows_, std::max(1, tokens_kept()));
  }
  for_each_head(pool, worth_it, [&](size_t h) { settle_head(rows_.heads[h], prompt_end, head_budget(h)); });
}

void LayerCache::settle_head(HeadStore& head, bool prompt_end, int budget) {
  head.apply_evictions();  // shifts current before the next query reads them
  // KIVI's held rows (dead rows inside quantized key groups) and whole groups count as needed.
  if (policy_->bounded()) {
    const int target = head.capacity_for(std::max(budget + 1, head.n_live()) + head.held());
    if (head.capacity() > target) head.compact(target);
  } else if (prompt_end && head.capacity() > head.capacity_for(head.rows_needed())) {
    head.compact(head.rows_needed());
  }
  head.settle_kivi();  // after the evictions: KIVI's groups form from the rows that stay
}

void LayerCache::evict_aged(HeadStore& head, int64_t before) const {
  const auto n_sink = int64_t(config_.n_sink);
  if (before <= n_sink) return;  // nothing is older than the span yet (a prompt within the span)
  // In slot order: heads that append and evict alike keep matching slots (tova).
  for (int s = 0; s < head.n_slots(); ++s) {
    const int64_t p = head.positions()[s];
    if (p != HeadStore::kFree && p >= n_sink && p < before) head.evict(s);
  }
}

void LayerCache::reset() {
  Exclusive only(*busy_, "reset");
  clear();
}

void LayerCache::clear() {
  for (HeadStore& h : rows_.heads) h.clear();
  rows_.tokens_seen = 0;
  policy_->reset();
  in_update_ = stored_any_ = false;
  prompt_ = PromptPhase::unseen;
  budget_.per_head.clear();
  rows_.reconstruction.reset();
  if (budget_.phase == BudgetPhase::pinned) {  // the budget pin_head_budgets replaced comes back
    budget_.scheduled = budget_.now = budget_.initial;
    budget_.phase = coordinator_ ? BudgetPhase::measuring : schedule_ ? BudgetPhase::scheduled : BudgetPhase::own;
  }
  concentration_ = 0.0;
  if (coordinator_) {
    // One layer's reset keeps a published schedule (its next report is ignored, so clearing it
    // would leave the layer without a budget forever); ModelCache::reset clears the coordinator
    // first, so there every layer falls back and measures again.
    const bool published = coordinator_->is_final();
    budget_.phase = published ? BudgetPhase::scheduled : BudgetPhase::measuring;
    budget_.scheduled = budget_.now = published ? coordinator_->budgets()[size_t(layer_index_)] : budget_.initial;
  }
}

int LayerCache::tokens_kept() const {
  int most = 0;
  for (const HeadStore& h : rows_.heads) most = std::max(most, h.n_live());
  return most;
}

int LayerCache::rows_per_head() const {
  int64_t rows = 0;
  for (const HeadStore& h : rows_.heads) rows += h.n_live();
  const auto heads = int64_t(rows_.heads.size());
  return int((rows + heads - 1) / heads);
}

size_t LayerCache::kept_bytes() const {
  size_t bytes = 0;
  for (const HeadStore& h : rows_.heads) bytes += h.resident_bytes();
  return bytes;
}

size_t LayerCache::full_bytes() const {
  // A sliding layer's unevicted cache is its window (what llama.cpp holds for it too).
  const int64_t rows = sliding() ? std::min<int64_t>(rows_.tokens_seen, kind_.window) : rows_.tokens_seen;
  return rows_.heads.size() * size_t(rows) * token_bytes(storage_);  // the resolved formats
}

double LayerCache::compression_ratio() const {
  const size_t kept = kept_bytes();
  return kept == 0 ? 1.0 : double(full_bytes()) / double(kept);
}

}  // namespace squeezekv
