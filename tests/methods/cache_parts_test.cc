// resolve_cache_parts (methods/cache_parts.h): what a cache is built from, resolved once from a
// config, the method's presets and the caller's overrides alike.
#include <gtest/gtest.h>

#include "squeezekv/base/errors.h"
#include "squeezekv/methods/cache_parts.h"

namespace squeezekv {
namespace {

KVCacheConfig config_of(const char* method) {
  KVCacheConfig c;
  c.method = method;
  c.head_dim = 64;
  c.budget = 300;
  return c;
}

TEST(CacheParts, ResolveTheMethodsPresets) {
  const CacheParts full = resolve_cache_parts(config_of("full"));
  EXPECT_TRUE(full.keeps_every_row);
  EXPECT_FALSE(full.ranks_globally);
  const CacheParts kvzip = resolve_cache_parts(config_of("kvzip"));
  EXPECT_FALSE(kvzip.keeps_every_row);
  EXPECT_TRUE(kvzip.ranks_globally);
  EXPECT_EQ(kvzip.make_policy()->name(), "kvzip");
  const CacheParts kivi = resolve_cache_parts(config_of("kivi"));
  EXPECT_EQ(kivi.storage.key, KVType::kivi2);
  EXPECT_EQ(kivi.storage.value, KVType::kivi2);
  EXPECT_EQ(kivi.storage.head_dim, 64);
  EXPECT_EQ(resolve_cache_parts(config_of("adakv")).head_split, HeadSplitRule::adakv);
  EXPECT_EQ(resolve_cache_parts(config_of("squeeze")).head_split, HeadSplitRule::uniform);
}

TEST(CacheParts, ResolveTheOverrides) {
  KVCacheConfig c = config_of("squeeze");
  c.policy = "snapkv";
  c.head_split = "adakv";
  c.k_type = KVType::q8_0;
  const CacheParts parts = resolve_cache_parts(c);
  EXPECT_EQ(parts.make_policy()->name(), "snapkv");
  EXPECT_EQ(parts.head_split, HeadSplitRule::adakv);
  EXPECT_EQ(parts.storage.key, KVType::q8_0);
  EXPECT_EQ(parts.storage.value, KVType::f16);
  // Each call makes a policy of its own (one per layer).
  EXPECT_NE(parts.make_policy().get(), nullptr);
}

TEST(CacheParts, RefuseABadConfigNamingTheField) {
  KVCacheConfig c = config_of("squeeze");
  c.budget = 2;
  try {
    resolve_cache_parts(c);
    FAIL() << "a budget below n_sink + 1 resolved";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("budget = 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace squeezekv
