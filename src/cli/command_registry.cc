// The commands' registry: filled by the static CommandRegistrations of the *_command.cc files
// (linked into the program directly, never through a static library that would drop them).
#include "cli/command_registry.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace squeezekv::cli {
namespace {

struct Entry {
  const char* name;
  int order;
  AddCommand add;
};

// A function's static, built on first use: registrations run before main in an unspecified order.
std::vector<Entry>& entries() {
  static std::vector<Entry> list;
  return list;
}

}  // namespace

CommandRegistration::CommandRegistration(const char* name, int order, AddCommand add) {
  entries().push_back({name, order, add});
}

void add_registered_commands(CLI::App& app) {
  std::vector<Entry> sorted = entries();
  std::sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) { return a.order < b.order; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].order == sorted[i - 1].order) {
      throw std::logic_error("commands '" + std::string(sorted[i - 1].name) + "' and '" + sorted[i].name +
                             "' share the order " + std::to_string(sorted[i].order));
    }
  }
  for (const Entry& e : sorted) {
    e.add(app);  // CLI11 refuses a name added twice
    const std::vector<CLI::App*> added = app.get_subcommands({});
    if (added.empty() || added.back()->get_name() != e.name) {
      throw std::logic_error("the command registered as '" + std::string(e.name) +
                             "' added no subcommand of that name");
    }
  }
}

}  // namespace squeezekv::cli
