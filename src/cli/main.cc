// squeezekv: the command-line program, thin over the library. Bad input of any kind prints one
// message naming the parameter and exits with status 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/cache_options.h"
#include "cli/commands.h"
#include "squeezekv/core/errors.h"

int main(int argc, char** argv) {
  CLI::App app{"squeezekv: KV-cache eviction (SqueezeAttention and its siblings) for LLM inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "squeezekv 0.1.0");
  squeezekv::cli::register_budgets(app);
  squeezekv::cli::register_methods(app);
  squeezekv::cli::register_synth(app);
  squeezekv::cli::register_info(app);
  squeezekv::cli::register_generate(app);
  squeezekv::cli::register_perplexity(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return squeezekv::cli::kExitBadInput;
  } catch (const squeezekv::Error& e) {
    std::fprintf(stderr, "squeezekv: error: %s\n", e.what());
    return squeezekv::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "squeezekv: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
