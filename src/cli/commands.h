// Each subcommand registers itself on the top-level app; its callback does the work.
#pragma once

#include <CLI/CLI.hpp>

namespace squeezekv::cli {

void register_budgets(CLI::App& app);
void register_methods(CLI::App& app);
void register_synth(CLI::App& app);
void register_info(CLI::App& app);
void register_generate(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_bench(CLI::App& app);
void register_sweep(CLI::App& app);
void register_needle(CLI::App& app);
void register_random_model(CLI::App& app);
void register_serve(CLI::App& app);
void register_cache(CLI::App& app);

}  // namespace squeezekv::cli
