// What a token policy, a layer allocator and a method id say about themselves: their parameters
// (with defaults and ranges), what they read, their factory and their own validation. Each policy
// and allocator defines one of these in its own file; methods/registry.h lists them.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "squeezekv/core/component_params.h"
#include "squeezekv/core/param_spec.h"

namespace squeezekv {

class TokenPolicy;
class BudgetAllocator;

// A parameter value a method sets unless the caller sets it (component parameters only).
struct ParamOverride {
  std::string_view name;
  std::string_view value;
};

struct MethodInfo {
  std::string_view id;
  std::string_view policy;
  std::string_view allocator;
  std::string_view summary;      // one line
  std::string_view when_to_use;  // the reference library's "when to use it" line
  std::span<const ParamOverride> overrides = {};
  std::string_view kv_type = {};     // storage preset used when kv_type is left at f16 ("" = none)
  bool fp16_sinks = false;           // KIVI keeps the first n_sink positions in fp16 (kivi_sink)
  std::string_view head_split = {};  // the head split when head_split is left at auto ("" = uniform)
};

// How a policy that scores rows by context reconstruction (KVzip) wants the pass run: the context
// reconstructed in chunks of at most `chunk` tokens; read once (the whole context prefilled, then
// scored and compressed once) or streaming (each chunk prefilled, reconstructed over the rows held,
// and the cache compressed to its budget before the next).
struct ReconstructionPlan {
  int chunk = 2048;
  bool streaming = false;
};

struct PolicyInfo {
  std::string_view id;
  std::string_view summary;
  std::span<const ParamSpec> params;        // the parameters it owns
  std::span<const std::string_view> reads;  // the cache fields it reads besides the budget
  bool scores_rows;                         // reads `score`: may want attention fed back
  std::unique_ptr<TokenPolicy> (*make)(const ComponentParams& params);
  void (*validate)(const ComponentParams& params) = nullptr;  // rules across parameters
  // Method ids this policy's file defines (e.g. `knorm`: policy knorm, allocator uniform); the
  // registry lists them after the reference library's table.
  std::span<const MethodInfo> methods = {};
  // What callers ask instead of comparing ids (admission, prefill, the sweep, the command line):
  bool keeps_every_row = false;         // never evicts: no budget, rows grow with the text
  bool holds_prompt_until_end = false;  // chooses once when the prompt ends, holding all of it until then
  // Gives each row a keep priority (TokenPolicy::keep_priorities), so that a head split other than
  // uniform (head_split adakv) can share the layer's rows among its heads by it.
  bool splits_heads = false;
  // Scores rows by how much the model needs them to reproduce the context (KVzip): the callers
  // that prefill a prompt run the reconstruction pass this returns (engine/reconstruction.h) and
  // the policy reads its attention (TokenPolicy::score_reconstruction). Null: no such pass.
  ReconstructionPlan (*reconstruction)(const ComponentParams& params) = nullptr;
  // Its keep priorities mean the same in every layer, so one ranking of all layers' rows (an
  // allocator that ranks_globally) may share the model's rows among layers and heads by them.
  bool ranks_across_layers = false;
};

struct AllocatorInfo {
  std::string_view id;
  std::string_view summary;
  std::span<const ParamSpec> params;
  std::span<const std::string_view> reads;
  std::string_view measures;  // what it measures during the prompt ("" = nothing)
  std::unique_ptr<BudgetAllocator> (*make)(const ComponentParams& params);
  void (*validate)(const ComponentParams& params) = nullptr;
  // Whether one of its own parameters matters under this config (null = all of them always).
  bool (*uses)(const ComponentParams& params, std::string_view param) = nullptr;
  bool unbounded = false;  // gives every layer an unbounded budget: the allocator of the policies
                           // that keep every row, and only of those
  // Shares every layer's and head's rows by one ranking of the policy's keep priorities when the
  // prompt is compressed (the global allocator): only over a policy that ranks_across_layers.
  bool ranks_globally = false;
};

}  // namespace squeezekv
