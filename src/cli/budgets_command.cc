// `squeezekv budgets`: the per-layer schedule an allocator gives, so a user can see what measured
// concentrations (or a pyramid taper) would do to memory before running a model.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/commands.h"
#include "squeezekv/alloc/pyramid_budgets.h"
#include "squeezekv/alloc/squeeze_budgets.h"
#include "squeezekv/core/errors.h"

namespace squeezekv::cli {
namespace {

struct BudgetsArgs {
  std::string allocator = "squeeze";
  std::vector<double> concentrations;
  int avg = 512;
  int n_sink = 4;
  double strength = 1.0;
  int layers = 0;
  double beta = 2.0;
  bool json = false;
};

void run(const BudgetsArgs& a) {
  std::vector<int> budgets;
  nlohmann::json out = {{"allocator", a.allocator}, {"avg", a.avg}, {"n_sink", a.n_sink}};
  if (a.allocator == "squeeze") {
    require(!a.concentrations.empty(), "--concentrations", "(none)",
            "the squeeze allocator needs one concentration per layer");
    budgets = squeeze_budgets(a.concentrations, a.avg, a.n_sink, a.strength);
    std::vector<double> clamped;
    for (double c : a.concentrations) clamped.push_back(std::clamp(c, 0.0, 1.0));
    out["strength"] = a.strength;
    out["concentrations"] = clamped;
  } else if (a.allocator == "pyramid") {
    require(a.layers >= 1, "--layers", a.layers, "the pyramid allocator needs the layer count");
    budgets = pyramid_budgets(a.layers, a.avg, a.n_sink, a.beta);
    out["beta"] = a.beta;
  } else if (a.allocator == "uniform") {
    require(a.layers >= 1, "--layers", a.layers, "the uniform allocator needs the layer count");
    require(a.avg > a.n_sink, "--avg", a.avg, "must exceed --sinks = " + std::to_string(a.n_sink));
    budgets.assign(size_t(a.layers), a.avg);
  } else {
    throw InvalidArgument(invalid_value("--allocator", a.allocator, "expected squeeze, pyramid or uniform"));
  }
  const long long total = std::accumulate(budgets.begin(), budgets.end(), 0LL);
  if (a.json) {
    out["budgets"] = budgets;
    out["total"] = total;
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  for (size_t i = 0; i < budgets.size(); ++i) std::printf(i ? " %d" : "%d", budgets[i]);
  std::printf("\n");
}

}  // namespace

void register_budgets(CLI::App& app) {
  auto args = std::make_shared<BudgetsArgs>();
  auto* cmd = app.add_subcommand("budgets", "print the per-layer budget schedule of an allocator");
  cmd->add_option("--allocator", args->allocator, "squeeze, pyramid or uniform")->capture_default_str();
  cmd->add_option("--concentrations", args->concentrations,
                  "squeeze: per-layer concentrations, comma-separated (e.g. 0.1,0.5,0.9)")
      ->delimiter(',');
  cmd->add_option("--avg", args->avg, "average budget per layer")->capture_default_str();
  cmd->add_option("--sinks", args->n_sink, "attention sinks (floor is sinks + 1)")->capture_default_str();
  cmd->add_option("--strength", args->strength, "squeeze strength in [0, 1]")->capture_default_str();
  cmd->add_option("--layers", args->layers, "pyramid/uniform: number of layers");
  cmd->add_option("--beta", args->beta, "pyramid: taper steepness (>= 1)")->capture_default_str();
  cmd->add_flag("--json", args->json, "print JSON: budgets, clamped concentrations, total");
  cmd->callback([args] { run(*args); });
}

}  // namespace squeezekv::cli
