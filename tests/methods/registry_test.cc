// The registry is the one list of parameters: every parameter is accepted by the command line and
// the C API with the same default, the struct's own defaults agree with it, each method's
// parameters are what its policy and allocator read, and unknown names fail by name.
#include "squeezekv/methods/registry.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/cache_options.h"
#include "squeezekv/c/squeezekv.h"
#include "squeezekv/c/squeezekv.hpp"
#include "squeezekv/base/errors.h"
#include "squeezekv/policy/token_policy.h"

namespace squeezekv {
namespace {

// Parses `args` (argv[0] added) into a fresh app carrying the cache options.
KVCacheConfig parse_cli(std::vector<std::string> args) {
  CLI::App app;
  cli::CacheOptions options;
  cli::add_cache_options(app, options);
  args.insert(args.begin(), "squeezekv");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(int(argv.size()), argv.data());
  return options.resolve();
}

std::string c_api_get(const squeezekv_cache_params* p, const std::string& name) {
  char buf[256];
  const int32_t n = squeezekv_cache_params_get(p, name.c_str(), buf, sizeof buf);
  return n >= 0 ? std::string(buf, size_t(n)) : "<error " + std::to_string(n) + ">";
}

TEST(Registry, NamesAreUniqueAndDefaultsPassTheirOwnRules) {
  std::set<std::string> names, flags;
  for (const ParamSpec* spec : all_params()) {
    EXPECT_TRUE(names.insert(std::string(spec->name)).second) << spec->name;
    if (spec->on_command_line) {
      EXPECT_TRUE(flags.insert(spec->cli_flag()).second) << spec->cli_flag();
    }
    if (spec->kind == ParamKind::text) continue;
    EXPECT_NO_THROW(spec->check(spec->default_parsed())) << spec->name;
    EXPECT_FALSE(param_owners(spec->name).empty());
  }
  std::set<std::string> ids;
  for (const PolicyInfo* p : all_policies()) EXPECT_TRUE(ids.insert("policy " + std::string(p->id)).second);
  for (const AllocatorInfo* a : all_allocators()) EXPECT_TRUE(ids.insert("allocator " + std::string(a->id)).second);
}

TEST(Registry, TheStructsDefaultsAreTheRegistrys) {
  const KVCacheConfig config;
  for (const ParamSpec* spec : all_params()) {
    EXPECT_EQ(config.get_text(spec->name), format_value(spec->default_parsed())) << spec->name;
  }
}

TEST(Registry, EveryParameterIsAcceptedByTheCommandLineWithTheSameDefault) {
  const KVCacheConfig defaults = parse_cli({});
  for (const ParamSpec* spec : all_params()) {
    EXPECT_EQ(defaults.get_text(spec->name), format_value(spec->default_parsed())) << spec->name;
    if (!spec->on_command_line || spec->kind == ParamKind::text) continue;
    // Given explicitly at its default, the option is accepted and changes nothing.
    const KVCacheConfig given = parse_cli({spec->cli_flag(), std::string(spec->default_value)});
    EXPECT_EQ(given.get_text(spec->name), defaults.get_text(spec->name)) << spec->cli_flag();
  }
  EXPECT_EQ(parse_cli({"--chunk-size", "3", "--method", "chunkkv"}).get_int("chunk_size"), 3);
  EXPECT_THROW(parse_cli({"--chunk-size", "0"}), InvalidArgument);
  EXPECT_THROW(parse_cli({"--beta", "1e308"}), InvalidArgument);
}

TEST(Registry, EveryParameterIsAcceptedByTheCApiWithTheSameDefault) {
  c::ParamsPtr p(squeezekv_cache_params_new());
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(squeezekv_param_count(), int32_t(all_params().size()));
  for (int32_t i = 0; i < squeezekv_param_count(); ++i) {
    const std::string name = squeezekv_param_name(i);
    const ParamSpec& spec = require_param(name);
    EXPECT_EQ(squeezekv_param_default(i), spec.default_value);
    const std::string value = c_api_get(p.get(), name);
    EXPECT_EQ(value, format_value(spec.default_parsed())) << name;
    if (spec.kind == ParamKind::text) continue;
    EXPECT_EQ(squeezekv_cache_params_set(p.get(), name.c_str(), value.c_str()), SQUEEZEKV_STATUS_OK)
        << name << ": " << squeezekv_last_error();
  }
  EXPECT_EQ(squeezekv_cache_params_validate(p.get()), SQUEEZEKV_STATUS_OK);
  EXPECT_EQ(squeezekv_cache_params_set(p.get(), "chunk_size", "8"), SQUEEZEKV_STATUS_OK);
  EXPECT_EQ(squeezekv_cache_params_set_int(p.get(), "chunk_size", int64_t(1) << 40), SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(squeezekv_last_error()).find("chunk_size"), std::string::npos);
}

TEST(Registry, AMethodReadsWhatItsPolicyAndAllocatorRead) {
  auto names = [](const MethodInfo& m) {
    std::set<std::string> out;
    for (const ParamSpec* spec : method_params(m)) out.insert(std::string(spec->name));
    return out;
  };
  EXPECT_EQ(names(find_method("full")), std::set<std::string>{});
  // Every evicting cache reads the position rule and its distance (the engine and the cache apply
  // them); the full cache always uses text positions.
  EXPECT_EQ(names(find_method("window")), (std::set<std::string>{"budget", "positions", "max_distance"}));
  // A policy that scores rows may share them among its heads (head_split); the floor is read
  // under the adakv split alone.
  EXPECT_EQ(names(find_method("chunkkv")),
            (std::set<std::string>{"budget", "n_sink", "recent", "decay", "score", "positions", "max_distance",
                                   "chunk_size", "head_split"}));
  EXPECT_EQ(names(find_method("squeeze")),
            (std::set<std::string>{"budget", "n_sink", "recent", "decay", "score", "positions", "max_distance",
                                   "strength", "importance", "squeeze_fraction", "head_split"}));
  EXPECT_EQ(names(find_method("adakv")),
            (std::set<std::string>{"budget", "n_sink", "score", "positions", "max_distance", "window", "kernel",
                                   "head_split", "head_floor"}));
  KVCacheConfig c;
  EXPECT_TRUE(reads_param(c, "max_distance"));  // the span rule, the default
  c.positions = PositionRule::cache;
  EXPECT_FALSE(reads_param(c, "max_distance"));
  c.positions = PositionRule::span;
  c.method = "squeeze";
  EXPECT_FALSE(reads_param(c, "squeeze_fraction"));  // key-dispersion does not use it
  c.set("importance", "hidden-cosine");
  EXPECT_TRUE(reads_param(c, "squeeze_fraction"));
  EXPECT_FALSE(reads_param(c, "chunk_size"));
  EXPECT_TRUE(reads_param(c, "head_split"));
  EXPECT_FALSE(reads_param(c, "head_floor"));
  c.head_split = "adakv";
  EXPECT_TRUE(reads_param(c, "head_floor"));
  c.method = "window";
  c.head_split = "auto";
  EXPECT_FALSE(reads_param(c, "head_split"));  // rows without scores
}

TEST(Registry, EveryPolicyBuildsWithEveryAllocator) {
  for (const PolicyInfo* p : all_policies()) {
    for (const AllocatorInfo* a : all_allocators()) {
      KVCacheConfig c;
      c.method = "h2o";
      c.policy = std::string(p->id);
      c.allocator = std::string(a->id);
      c.head_dim = 8;
      c.budget = 64;
      // Refused: the full policy without the unbounded allocator (and the reverse), and a global
      // ranking over scores that do not rank across layers.
      if ((p->id == "full") != (a->id == "none") || (a->ranks_globally && !p->ranks_across_layers)) {
        EXPECT_THROW(c.validate(), InvalidArgument) << p->id << " x " << a->id;
        continue;
      }
      EXPECT_NO_THROW(c.validate()) << p->id << " x " << a->id;
      EXPECT_EQ(make_token_policy(c)->name(), p->id);
    }
  }
}

TEST(Registry, UnknownNamesAndBadTextFailByName) {
  KVCacheConfig c;
  auto message = [&](auto&& fn) {
    try {
      fn();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(message([&] { c.set("chunk", "3"); }).rfind("parameter = chunk", 0), 0u);
  EXPECT_EQ(message([&] { c.set("chunk_size", "3x"); }).rfind("chunk_size = \"3x\"", 0), 0u);
  EXPECT_EQ(message([&] { c.set("chunk_size", "99999999999999999999"); }).rfind("chunk_size", 0), 0u);
  EXPECT_EQ(message([&] { c.set("importance", "magic"); }).rfind("importance = magic", 0), 0u);
  EXPECT_EQ(message([&] { c.set("decay", 0.0); }).rfind("decay = 0", 0), 0u);
  EXPECT_EQ(message([&] { c.set("budget", int64_t(1) << 31); }).rfind("budget = 2147483648", 0), 0u);
  EXPECT_EQ(message([&] { find_policy("lru"); }).rfind("policy = lru", 0), 0u);
  EXPECT_EQ(c.get_int("chunk_size"), 8);  // nothing was changed by the refused values
}

TEST(Registry, HeadSplitResolvesFromTheMethodAndNeedsAScoringPolicy) {
  KVCacheConfig c;
  c.head_dim = 8;
  c.budget = 64;
  EXPECT_EQ(resolved_head_split(c), "uniform");  // squeeze
  for (const std::string method : {"adakv", "squeeze_adakv", "h2o_adakv"}) {
    c.method = method;
    EXPECT_EQ(resolved_head_split(c), "adakv") << method;
    EXPECT_NO_THROW(c.validate()) << method;
  }
  c.head_split = "uniform";
  EXPECT_EQ(resolved_head_split(c), "uniform");
  c.method = "squeeze_snapkv";
  c.head_split = "auto";
  EXPECT_EQ(resolved_head_split(c), "uniform");
  EXPECT_EQ(resolved_policy(c), "snapkv");
  EXPECT_EQ(resolved_allocator(c), "squeeze");
  // Every policy with scores splits with every budget allocator; the others are refused by name.
  for (const PolicyInfo* p : all_policies()) {
    if (p->keeps_every_row) continue;
    c.method = "h2o";
    c.policy = std::string(p->id);
    c.set("head_split", "adakv");
    if (p->splits_heads) {
      EXPECT_NO_THROW(c.validate()) << p->id;
      continue;
    }
    try {
      c.validate();
      ADD_FAILURE() << p->id << " was accepted with head_split adakv";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("head_split = adakv: policy " + std::string(p->id), 0), 0u) << e.what();
    }
  }
  c.policy = "window";
  EXPECT_THROW(c.validate(), InvalidArgument);
  c.policy = "full";
  c.allocator = "none";
  EXPECT_THROW(c.validate(), InvalidArgument);
  EXPECT_THROW(c.set("head_floor", 1.5), InvalidArgument);
  EXPECT_THROW(c.set("head_floor", -0.1), InvalidArgument);
  EXPECT_THROW(c.set("head_split", "greedy"), InvalidArgument);
  c.set("head_floor", 1.0);
  EXPECT_EQ(c.head_floor, 1.0);
}

}  // namespace
}  // namespace squeezekv

namespace squeezekv {
namespace {

// What a component is built from: the cache's fields, and each of its own parameters resolved as
// the configuration resolves it (set, else the method's override, else the default); nothing
// else, so a component cannot read another's parameters.
TEST(ComponentParams, ResolveEachOwnParameterAsTheConfigDoes) {
  for (const MethodInfo& m : all_methods()) {
    KVCacheConfig c;
    c.method = std::string(m.id);
    c.budget = 96;
    c.n_sink = 3;
    c.recent = 0.25;
    for (const std::span<const ParamSpec> own : {find_policy(m.policy).params, find_allocator(m.allocator).params}) {
      const ComponentParams params = component_params(c, own);
      EXPECT_EQ(params.budget, 96);
      EXPECT_EQ(params.n_sink, 3);
      EXPECT_EQ(params.recent, 0.25);
      EXPECT_EQ(params.score, c.score);
      EXPECT_EQ(params.own.size(), own.size()) << m.id;
      for (const ParamSpec& spec : own) EXPECT_EQ(params.get_text(spec.name), c.get_text(spec.name)) << m.id;
    }
  }
  KVCacheConfig c;
  c.method = "chunkkv";
  c.set("chunk_size", 5);
  const ComponentParams params = component_params(c, find_policy("chunked").params);
  EXPECT_EQ(params.get_int("chunk_size"), 5);
  EXPECT_EQ(params.get_real("chunk_size"), 5.0);
  EXPECT_THROW(params.get_int("beta"), InvalidArgument);  // the pyramid's, not the policy's
}

}  // namespace
}  // namespace squeezekv
