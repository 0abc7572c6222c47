// Each `<name>_command.cc` registers its subcommand with a static CommandRegistration, so that a
// new command is one file: no list here, in main.cc or in CMakeLists.txt names it.
#pragma once

#include <CLI/CLI.hpp>

namespace squeezekv::cli {

using AddCommand = void (*)(CLI::App& app);

// Records `add` (which adds the subcommand `name` to the app) at static initialisation. `order`
// places it in `squeezekv --help`: explicit, since the order of static initialisers across files
// is unspecified.
struct CommandRegistration {
  CommandRegistration(const char* name, int order, AddCommand add);
};

// Adds every registered command to the app by increasing order; a std::logic_error when two share
// an order (CLI11 throws when two share a name): a mistake of the program, not of its user.
void add_registered_commands(CLI::App& app);

}  // namespace squeezekv::cli
