// `squeezekv methods`: every method id with its policy, allocator, the parameters it reads and
// their defaults, then every policy, allocator and parameter of the registry (`--json` too).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command_registry.h"
#include "squeezekv/methods/kv_cache_config.h"
#include "squeezekv/methods/registry.h"
#include "squeezekv/ops/kv_format.h"

namespace squeezekv::cli {
namespace {

std::string defaults_text(const MethodInfo& m) {
  std::string out;
  for (const ParamSpec* spec : method_params(m)) {
    if (!out.empty()) out += ' ';
    out += spec->name;
    out += '=';
    out += method_default(m, *spec);
  }
  return out.empty() ? "none" : out;
}

nlohmann::json param_json(const ParamSpec& spec) {
  static const char* kinds[] = {"integer", "real", "choice", "text"};
  nlohmann::json j = {{"name", spec.name},
                      {"type", kinds[int(spec.kind)]},
                      {"default", spec.default_value},
                      {"help", spec.help},
                      {"flag", spec.on_command_line ? spec.cli_flag() : std::string()},
                      {"owners", param_owners(spec.name)}};
  if (spec.kind != ParamKind::text) j["rule"] = spec.range_text();
  return j;
}

template <typename Info>
nlohmann::json component_json(const Info& info) {
  nlohmann::json params = nlohmann::json::array();
  for (const ParamSpec& spec : info.params) params.push_back(spec.name);
  return {{"id", info.id}, {"summary", info.summary}, {"parameters", params}, {"reads", info.reads}};
}

void print_json() {
  nlohmann::json methods = nlohmann::json::array(), policies = nlohmann::json::array(),
                 allocators = nlohmann::json::array(), params = nlohmann::json::array();
  for (const MethodInfo& m : all_methods()) {
    nlohmann::json defaults = nlohmann::json::object();
    for (const ParamSpec* spec : method_params(m)) defaults[std::string(spec->name)] = method_default(m, *spec);
    methods.push_back({{"id", m.id},
                       {"policy", m.policy},
                       {"allocator", m.allocator},
                       {"head_split", m.head_split.empty() ? std::string_view("uniform") : m.head_split},
                       {"summary", m.summary},
                       {"parameters", defaults_text(m)},
                       {"defaults", defaults},
                       {"when_to_use", m.when_to_use}});
  }
  for (const PolicyInfo* p : all_policies()) {
    nlohmann::json j = component_json(*p);
    j["scores_rows"] = p->scores_rows;
    j["splits_heads"] = p->splits_heads;
    j["ranks_across_layers"] = p->ranks_across_layers;
    j["reconstructs_context"] = p->reconstruction != nullptr;
    policies.push_back(j);
  }
  for (const AllocatorInfo* a : all_allocators()) {
    nlohmann::json j = component_json(*a);
    j["measures"] = a->measures;
    j["ranks_globally"] = a->ranks_globally;
    allocators.push_back(j);
  }
  for (const ParamSpec* spec : all_params()) params.push_back(param_json(*spec));
  nlohmann::json formats = nlohmann::json::array();
  for (const KVFormat& f : kKVFormats) {
    formats.push_back({{"id", f.name},
                       {"summary", f.summary},
                       {"bits_per_value", kv_bits_per_value(f.type, 128)},
                       {"bits_per_value_head_dim_8", kv_bits_per_value(f.type, 8)}});
  }
  nlohmann::json storage = nlohmann::json::array();
  for (const StorageInfo* s : all_storage()) {
    nlohmann::json stores = nlohmann::json::array();
    for (const KVFormat& f : kKVFormats) {
      if (s->stores(f.type)) stores.push_back(f.name);
    }
    storage.push_back({{"id", s->id}, {"summary", s->summary}, {"parameters", s->params}, {"kv_types", stores}});
  }
  const nlohmann::json doc = {{"methods", methods},   {"policies", policies}, {"allocators", allocators},
                              {"parameters", params}, {"kv_types", formats},  {"storage", storage}};
  std::printf("%s\n", doc.dump(2).c_str());
}

void print_text() {
  for (const MethodInfo& m : all_methods()) {
    std::printf("%-10s %s\n", std::string(m.id).c_str(), std::string(m.summary).c_str());
    std::printf("           policy %s, allocator %s%s%s\n", std::string(m.policy).c_str(),
                std::string(m.allocator).c_str(), m.head_split.empty() ? "" : ", head split ",
                std::string(m.head_split).c_str());
    std::printf("           parameters: %s\n", defaults_text(m).c_str());
    std::printf("           when to use: %s\n\n", std::string(m.when_to_use).c_str());
  }
  std::printf("Token policies (--policy):\n");
  for (const PolicyInfo* p : all_policies()) {
    std::printf("  %-11s %s%s%s%s\n", std::string(p->id).c_str(), std::string(p->summary).c_str(),
                p->scores_rows ? " (reads --score)" : "", p->splits_heads ? " (--head-split adakv)" : "",
                p->ranks_across_layers ? " (--allocator global)" : "");
    if (p->reconstruction != nullptr) {
      std::printf("              scores by a reconstruction pass after the prompt (its time counts in the prefill)\n");
    }
  }
  std::printf("\nLayer allocators (--allocator):\n");
  for (const AllocatorInfo* a : all_allocators()) {
    std::printf("  %-11s %s\n", std::string(a->id).c_str(), std::string(a->summary).c_str());
    if (!a->measures.empty()) std::printf("              measures: %s\n", std::string(a->measures).c_str());
    if (a->ranks_globally) {
      std::string able;
      for (const PolicyInfo* p : all_policies()) {
        if (p->ranks_across_layers) able += (able.empty() ? "" : ", ") + std::string(p->id);
      }
      std::printf(
          "              ranks every layer's rows together: only over scores that mean the same in every "
          "layer (%s)\n",
          able.c_str());
    }
  }
  std::printf("\nK/V storage (--kv-type, or --k-type / --v-type apart), bits per value:\n");
  for (const StorageInfo* s : all_storage()) {
    std::string own;
    for (const std::string_view p : s->params) own += (own.empty() ? "" : ", ") + std::string(p);
    std::printf("  %s: %s%s%s\n", std::string(s->id).c_str(), std::string(s->summary).c_str(),
                own.empty() ? "" : "; parameters ", own.c_str());
    for (const KVFormat& f : kKVFormats) {
      if (!s->stores(f.type)) continue;
      std::printf("    %-6s %5.2g bits (%4.2g at head_dim 8)  %s\n", std::string(f.name).c_str(),
                  kv_bits_per_value(f.type, 128), kv_bits_per_value(f.type, 8), std::string(f.summary).c_str());
    }
  }
  std::printf("  Block formats quantize each row of one head in blocks of 32 values (head_dim < 32: one block).\n");
  std::printf("  KIVI's figures are at --kivi-group 32, its fp16 residual not counted.\n");
  std::printf("\nParameters (flag, default, rule):\n");
  for (const ParamSpec* spec : all_params()) {
    if (spec->kind == ParamKind::text) continue;
    std::string owners;
    for (const std::string& o : param_owners(spec->name)) owners += (owners.empty() ? "" : ", ") + o;
    std::printf("  %-18s %-20s %-14s %s [%s]\n", std::string(spec->name).c_str(),
                spec->on_command_line ? spec->cli_flag().c_str() : "(library only)",
                std::string(spec->default_value).c_str(), spec->range_text().c_str(), owners.c_str());
  }
  std::printf("\nAny policy combines with any allocator: --policy P --allocator A.\n");
}

void add_methods_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("methods", "list every eviction method, policy, allocator and parameter");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print JSON: methods, policies, allocators, parameters");
  cmd->callback([json] { *json ? print_json() : print_text(); });
}

const CommandRegistration kMethodsCommand{"methods", 20, add_methods_command};

}  // namespace
}  // namespace squeezekv::cli
