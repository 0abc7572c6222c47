// `squeezekv budgets`: the per-layer schedule any registered allocator gives, so a user can see
// what measured values (or a fixed taper) would do to memory before running a model. The
// allocator's own parameters and their defaults come from the registry.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "squeezekv/alloc/budget_allocator.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::cli {
namespace {

// More layers than any model has: a bound checked before anything is allocated.
constexpr int kMaxLayers = 4096;

struct BudgetsArgs {
  std::string allocator = "squeeze";
  std::vector<double> measurements;
  int avg = KVCacheConfig{}.budget;
  int n_sink = KVCacheConfig{}.n_sink;
  int layers = 0;
  int max_rows = 0;
  std::map<std::string, std::string, std::less<>> params;  // the allocators' own, by name
  std::map<std::string, CLI::Option*, std::less<>> options;
  bool json = false;
};

const AllocatorInfo& allocator_named(const std::string& id) {
  for (const AllocatorInfo* a : all_allocators()) {
    if (a->id == id) return *a;
  }
  std::string known;
  for (const AllocatorInfo* a : all_allocators()) known += (known.empty() ? "" : ", ") + std::string(a->id);
  throw InvalidArgument(invalid_value("--allocator", id, "unknown layer allocator (" + known + ")"));
}

void run(const BudgetsArgs& a) {
  const AllocatorInfo& info = allocator_named(a.allocator);
  KVCacheConfig config;
  config.method = "h2o";
  config.allocator = std::string(info.id);
  config.policy = info.unbounded ? "full" : "cumulative";
  config.set("n_sink", int64_t(a.n_sink));
  config.set("budget", int64_t(a.avg));
  for (const auto& [name, option] : a.options) {
    if (option->count() > 0) config.set(name, a.params.at(name));
  }
  const bool measures = !info.measures.empty();
  int layers = a.layers;
  if (measures) {
    require(!a.measurements.empty(), "--concentrations", "(none)",
            "the " + std::string(info.id) + " allocator needs one measurement per layer");
    require(a.layers == 0 || a.layers == int(a.measurements.size()), "--layers", a.layers,
            "must equal the number of measurements (" + std::to_string(a.measurements.size()) + ")");
    layers = int(a.measurements.size());
  } else {
    require(a.layers >= 1, "--layers", a.layers, "the " + std::string(info.id) + " allocator needs the layer count");
  }
  require(layers <= kMaxLayers, "--layers", layers, "must be at most " + std::to_string(kMaxLayers));
  require(a.max_rows >= 0, "--max-rows", a.max_rows, "must be >= 0 (0 = unknown)");
  for (double m : a.measurements) require(std::isfinite(m), "--concentrations", m, "must be finite");
  if (!info.unbounded && !measures) {  // a measuring allocator checks its own floor
    require(a.avg > a.n_sink, "--avg", a.avg, "must exceed --sinks = " + std::to_string(a.n_sink));
  }
  if (info.validate) info.validate(component_params(config, info.params));
  const std::vector<int> budgets =
      make_allocator(config)->allocate(layers, measures ? a.measurements : std::vector<double>{}, a.max_rows);
  const long long total = std::accumulate(budgets.begin(), budgets.end(), 0LL);
  if (a.json) {
    nlohmann::json out = {{"allocator", info.id}, {"avg", a.avg}, {"n_sink", a.n_sink}};
    for (const ParamSpec& spec : info.params) out[std::string(spec.name)] = to_json(config.get(spec.name));
    if (config.get_text("importance") == "key-dispersion" && measures) {
      std::vector<double> clamped;
      for (double c : a.measurements) clamped.push_back(std::clamp(c, 0.0, 1.0));
      out["concentrations"] = clamped;
    } else if (measures) {
      out["measurements"] = a.measurements;
    }
    out["budgets"] = budgets;
    out["total"] = total;
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  for (size_t i = 0; i < budgets.size(); ++i) std::printf(i ? " %d" : "%d", budgets[i]);
  std::printf("\n");
}

void add_budgets_command(CLI::App& app) {
  auto args = std::make_shared<BudgetsArgs>();
  auto* cmd = app.add_subcommand("budgets", "print the per-layer budget schedule of an allocator");
  std::string ids;
  for (const AllocatorInfo* a : all_allocators()) ids += (ids.empty() ? "" : ", ") + std::string(a->id);
  cmd->add_option("--allocator", args->allocator, "layer allocator: " + ids)->capture_default_str();
  cmd->add_option("--concentrations,--measurements", args->measurements,
                  "measuring allocators: one value per layer, comma-separated (e.g. 0.1,0.5,0.9)")
      ->delimiter(',');
  cmd->add_option("--avg", args->avg, "average budget per layer")->capture_default_str();
  cmd->add_option("--sinks", args->n_sink, "attention sinks (floor is sinks + 1)")->capture_default_str();
  cmd->add_option("--layers", args->layers, "number of layers (measuring allocators: the measurements' count)");
  cmd->add_option("--max-rows", args->max_rows, "longest sequence the cache will see (0 = unknown)")
      ->capture_default_str();
  for (const AllocatorInfo* a : all_allocators()) {
    for (const ParamSpec& spec : a->params) {
      const std::string name(spec.name);
      args->options[name] = cmd->add_option(spec.cli_flag(), args->params[name],
                                            std::string(spec.help) + " [allocator " + std::string(a->id) + "]")
                                ->default_str(std::string(spec.default_value));
    }
  }
  cmd->add_flag("--json", args->json, "print JSON: budgets, the allocator's parameters, clamped concentrations, total");
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kBudgetsCommand{"budgets", 10, add_budgets_command};

}  // namespace
}  // namespace squeezekv::cli
