// `squeezekv methods`: every method id with its policy, allocator, parameters and when to use it.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "squeezekv/methods/method_registry.h"

namespace squeezekv::cli {

void register_methods(CLI::App& app) {
  auto* cmd = app.add_subcommand("methods", "list every eviction method, its parameters and when to use it");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print JSON instead of text");
  cmd->callback([json] {
    if (*json) {
      nlohmann::json out = nlohmann::json::array();
      for (const MethodInfo& m : all_methods()) {
        out.push_back({{"id", m.id}, {"policy", m.policy}, {"allocator", m.allocator},
                       {"summary", m.summary}, {"parameters", m.parameters},
                       {"when_to_use", m.when_to_use}});
      }
      std::printf("%s\n", out.dump(2).c_str());
      return;
    }
    for (const MethodInfo& m : all_methods()) {
      std::printf("%-10s %s\n", std::string(m.id).c_str(), std::string(m.summary).c_str());
      std::printf("           policy %s, allocator %s\n", std::string(m.policy).c_str(),
                  std::string(m.allocator).c_str());
      std::printf("           parameters: %s\n", std::string(m.parameters).c_str());
      std::printf("           when to use: %s\n\n", std::string(m.when_to_use).c_str());
    }
    std::printf("Any policy combines with any allocator: --policy P --allocator A.\n");
  });
}

}  // namespace squeezekv::cli
