// Saving and loading a cache's state (ModelCache::save_state / load_state and the layer's and
// coordinator's parts): the members that decide what the cache does next, in a fixed order.
#include <string>

#include "cache/exclusive.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/cache/coordinator.h"
#include "squeezekv/cache/model_cache.h"

namespace squeezekv {
namespace {

constexpr uint32_t kStateVersion = 1;
constexpr int kMaxBudget = 1 << 30;  // far beyond any cache, low enough that budget + 1 cannot wrap

}  // namespace

void BudgetCoordinator::save_state(StateWriter& out) const {
  out.put(uint64_t(measured_.size()));
  for (const auto& m : measured_) {
    out.put(uint8_t(m.has_value()));
    out.put(m.value_or(0.0));
  }
  out.put_vector(budgets_);
  out.put(int32_t(max_rows_));
}

void BudgetCoordinator::load_state(StateReader& in) {
  check_state(in.get<uint64_t>("coordinator: layers") == measured_.size(), "coordinator", "layer count differs");
  std::vector<std::optional<double>> measured(measured_.size());
  for (auto& m : measured) {
    const bool has = in.get_bool("coordinator: measured");
    const auto v = in.get<double>("coordinator: measurement");
    if (has) m = v;
  }
  std::vector<int> budgets = in.get_vector<int>("coordinator: budgets", measured_.size());
  const auto max_rows = in.get<int32_t>("coordinator: max rows");
  check_state(budgets.empty() || budgets.size() == measured_.size(), "coordinator", "schedule length differs");
  for (size_t i = 0; i < budgets.size(); ++i) {
    check_state(scheduled_[i] ? budgets[i] >= 1 && budgets[i] <= kMaxBudget : budgets[i] == 0, "coordinator",
                "a budget out of range");
  }
  check_state(max_rows >= 0, "coordinator", "max rows out of range");
  measured_ = std::move(measured);
  budgets_ = std::move(budgets);
  max_rows_ = max_rows;
  if (is_final() && on_schedule_) on_schedule_(budgets_);
}

void LayerCache::save_state(StateWriter& out) const {
  if (in_update_) throw InvalidArgument("save_state: an update is in progress (save between updates)");
  if (rows_.reconstruction) throw InvalidArgument("save_state: a context reconstruction is under way (save after it)");
  out.put(rows_.tokens_seen);
  // The phases as the flags the format has always held (docs/cache_file.md): budget final, follows
  // the schedule (a measuring layer will), first update done, prompt open, prompt ending.
  const BudgetPhase phase = budget_.phase;
  out.put(int32_t(budget_.scheduled));
  out.put(int32_t(budget_.now));
  out.put(uint8_t(budget_.final()));
  out.put(uint8_t(phase == BudgetPhase::scheduled || (phase == BudgetPhase::measuring && schedule_ != nullptr)));
  out.put(uint8_t(stored_any_));
  out.put(uint8_t(prompt_ == PromptPhase::open));
  out.put(uint8_t(prompt_ == PromptPhase::ending));
  out.put(concentration_);
  out.put_vector(budget_.per_head);
  out.put(uint8_t(phase == BudgetPhase::pinned));
  out.put(uint64_t(rows_.heads.size()));
  for (const HeadStore& head : rows_.heads) head.save_state(out);
  policy_->save_state(out);
}

void LayerCache::load_state(StateReader& in) {
  const auto tokens = in.get<int64_t>("layer: tokens seen");
  check_state(tokens >= 0 && tokens < (int64_t(1) << 40), "layer", "tokens seen out of range");
  const auto budget = in.get<int32_t>("layer: budget");
  const auto budget_now = in.get<int32_t>("layer: conserved budget");
  const bool final = in.get_bool("layer: budget final");
  const bool follows = in.get_bool("layer: follows the schedule");
  const bool first_done = in.get_bool("layer: first update done");
  const bool explicit_prompt = in.get_bool("layer: prompt open");
  const bool prompt_pending = in.get_bool("layer: prompt pending");
  const auto concentration = in.get<double>("layer: concentration");
  std::vector<int> head_budgets = in.get_vector<int>("layer: head budgets", rows_.heads.size());
  const bool pinned = in.get_bool("layer: heads pinned");
  check_state(budget >= 1 && budget_now >= 1 && budget <= kMaxBudget && budget_now <= kMaxBudget, "layer",
              "a budget out of range");
  check_state(head_budgets.empty() || head_budgets.size() == rows_.heads.size(), "layer",
              "head budgets differ from the heads");
  check_state(!pinned || !head_budgets.empty(), "layer", "pinned heads without their counts");
  for (const int b : head_budgets) check_state(b >= 0 && b <= kMaxBudget, "layer", "a head budget out of range");
  check_state(!follows || schedule_ != nullptr, "layer", "follows a schedule it does not have");
  check_state(!(explicit_prompt && prompt_pending), "layer", "a prompt both open and ending");
  check_state(final || (!pinned && coordinator_ != nullptr), "layer", "a budget measured without a coordinator");
  check_state(in.get<uint64_t>("layer: heads") == rows_.heads.size(), "layer", "head count differs");
  rows_.tokens_seen = tokens;
  for (HeadStore& head : rows_.heads) head.load_state(in, tokens);
  budget_.scheduled = budget;
  budget_.now = budget_now;
  budget_.phase = pinned    ? BudgetPhase::pinned
                  : !final  ? BudgetPhase::measuring
                  : follows ? BudgetPhase::scheduled
                            : BudgetPhase::own;
  stored_any_ = first_done;
  prompt_ = explicit_prompt  ? PromptPhase::open
            : prompt_pending ? PromptPhase::ending
            : first_done     ? PromptPhase::done
                             : PromptPhase::unseen;
  concentration_ = concentration;
  budget_.per_head = std::move(head_budgets);
  policy_->load_state(in, rows_);
}

void ModelCache::save_state(StateWriter& out) const {
  out.put(kStateVersion);
  out.put(int32_t(n_layers()));
  out.put(int32_t(layers_.front()->rows().n_kv_heads));
  out.put(int32_t(layers_.front()->rows().n_batch));
  for (const LayerKind& kind : kinds_) out.put(int32_t(kind.window));
  out.put(uint8_t(coordinator_ != nullptr));
  if (coordinator_) coordinator_->save_state(out);
  for (const auto& layer : layers_) layer->save_state(out);
}

void ModelCache::load_state(StateReader& in) {
  {
    Exclusive only(busy_, "load_state");
    for (const auto& layer : layers_) {
      require(layer->tokens_seen() == 0, "load_state", "a used cache", "loads only into a cache that has seen nothing");
    }
  }
  try {
    Exclusive only(busy_, "load_state");
    check_state(in.get<uint32_t>("cache state: version") == kStateVersion, "cache state", "another state version");
    check_state(in.get<int32_t>("cache: layers") == n_layers(), "cache", "layer count differs from this cache's");
    check_state(in.get<int32_t>("cache: KV heads") == layers_.front()->rows().n_kv_heads, "cache",
                "KV head count differs from this cache's");
    check_state(in.get<int32_t>("cache: batch") == layers_.front()->rows().n_batch, "cache",
                "batch differs from this cache's");
    for (const LayerKind& kind : kinds_) {
      check_state(in.get<int32_t>("cache: layer window") == kind.window, "cache", "layer kinds differ");
    }
    check_state(in.get_bool("cache: coordinator") == (coordinator_ != nullptr), "cache", "allocators differ");
    if (coordinator_) coordinator_->load_state(in);
    for (const auto& layer : layers_) layer->load_state(in);
    const int64_t tokens = layers_.front()->tokens_seen();
    for (const auto& layer : layers_) {
      check_state(layer->tokens_seen() == tokens, "cache", "layers have seen different token counts");
    }
  } catch (...) {
    reset();  // never half loaded: back to the empty cache it was
    throw;
  }
}

}  // namespace squeezekv
