// squeezekv: the command-line program, thin over the library. Bad input of any kind prints one
// message naming the parameter and exits with status 2.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/option_checks.h"
#include "squeezekv/base/errors.h"

int main(int argc, char** argv) {
  CLI::App app{"squeezekv: KV-cache eviction (SqueezeAttention and its siblings) for LLM inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "squeezekv 0.1.0");
  squeezekv::cli::add_registered_commands(app);  // each *_command.cc registers itself
  squeezekv::cli::check_unsigned_options(app);
  // CLI11 reports an unknown first word as a missing subcommand; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known |= sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "squeezekv: error: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
      return squeezekv::cli::kExitBadInput;
    }
  }
  try {
    squeezekv::cli::require_list_items(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line in the house form (CLI11's own adds a second), then where the options are listed.
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    const std::string command = parsed.empty() ? "" : " " + parsed.front()->get_name();
    std::fprintf(stderr, "squeezekv: error: %s\n(`squeezekv%s --help` lists the options)\n", e.what(), command.c_str());
    return squeezekv::cli::kExitBadInput;
  } catch (const squeezekv::Error& e) {
    std::fprintf(stderr, "squeezekv: error: %s\n", e.what());
    return squeezekv::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "squeezekv: internal error: %s\n", e.what());
    return 1;
  }
  // A full disk or closed pipe on stdout is an error too, not a silent loss.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "squeezekv: error: writing to standard output failed\n");
    return squeezekv::cli::kExitBadInput;
  }
  return 0;
}
