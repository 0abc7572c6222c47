// Kept caches (scheduler.h): a conversation whose every turn resends the whole history continues
// from the cache its previous turn left, prefilling only the new tokens; the full cache gives the
// tokens a fresh prefill gives; conversations do not cross; an edited history starts fresh; the
// kept caches stay inside the K/V limit, the least recently used dropped first.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve/request.h"
#include "serve/scheduler.h"
#include "served.h"
#include "stories_model.h"

namespace squeezekv::serve {
namespace {

using nlohmann::json;
using test::Served;
using test::stories;

struct Reply {
  int status = 0;
  std::string text, finish_reason;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = -1;
};

Reply complete(const Served& s, json body) {
  Reply out;
  auto r = s.client().Post("/v1/completions", body.dump(), "application/json");
  if (!r) return out;
  out.status = r->status;
  if (r->status != 200) return out;
  const json j = json::parse(r->body);
  out.text = j["choices"][0]["text"].get<std::string>();
  out.finish_reason = j["choices"][0]["finish_reason"].get<std::string>();
  out.prompt_tokens = j["usage"]["prompt_tokens"].get<int>();
  out.completion_tokens = j["usage"]["completion_tokens"].get<int>();
  out.cached_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  return out;
}

const char* const kFollowUps[] = {" Then", " One day,", " She said,", " The next day", " But"};

json turn_body(const std::string& prompt, const json& cache = nullptr, bool cache_prompt = true) {
  json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}};
  if (!cache.is_null()) body["squeezekv"] = cache;
  if (!cache_prompt) body["cache_prompt"] = false;
  return body;
}

// Tokens a finished turn fed to its cache: its prompt and every generated token but one that
// ended it by length (sampled, never fed); an end of text is not counted in completion_tokens.
int seen_after(const Reply& r) { return r.prompt_tokens + r.completion_tokens - (r.finish_reason == "length" ? 1 : 0); }

// One conversation on `s`: each turn sends the whole history, the previous turn's prompt, its
// reply and a follow-up. Returns every turn's reply.
std::vector<Reply> converse(const Served& s, std::string prompt, int turns, const json& cache = nullptr) {
  std::vector<Reply> replies;
  for (int t = 0; t < turns; ++t) {
    replies.push_back(complete(s, turn_body(prompt, cache)));
    if (replies.back().status != 200) break;
    prompt += replies.back().text + kFollowUps[t % 5];
  }
  return replies;
}

TEST(KeptCaches, EachTurnPrefillsOnlyItsNewTokensAndAFullCacheGivesTheFreshTokens) {
  Served s(size_t(1) << 30, 64);
  std::string prompt = "Once upon a time";
  Reply previous;
  for (int t = 0; t < 8; ++t) {
    SCOPED_TRACE("turn " + std::to_string(t));
    const Reply r = complete(s, turn_body(prompt));
    ASSERT_EQ(r.status, 200);
    if (t == 0) {
      EXPECT_EQ(r.cached_tokens, 0);
    } else {
      EXPECT_EQ(r.cached_tokens, seen_after(previous));
      // Prefilled: the follow-up, the previous turn's unfed last token and at most one token
      // where the text's boundaries tokenize together.
      const auto follow = int(stories().tokenizer().encode(kFollowUps[(t - 1) % 5], false).size());
      EXPECT_LE(r.prompt_tokens - r.cached_tokens, follow + 2);
    }
    // The same history prefilled whole (cache_prompt off) gives the same tokens.
    EXPECT_EQ(complete(s, turn_body(prompt, nullptr, false)).text, r.text);
    previous = r;
    prompt += r.text + kFollowUps[t % 5];
  }
  EXPECT_EQ(s.metric("squeezekv_kept_cache_hits_total"), 7.0);
  EXPECT_EQ(s.metric("squeezekv_kept_cache_misses_total"), 1.0);
  EXPECT_GT(s.metric("squeezekv_prompt_tokens_reused_total"), 7 * 4.0);
  // The requests with cache_prompt off left nothing behind: one kept cache, the conversation's.
  EXPECT_EQ(s.metric("squeezekv_kept_caches"), 1.0);
  EXPECT_EQ(s.metric("squeezekv_kv_promise_violations_total"), 0.0);
}

TEST(KeptCaches, AnEvictingConversationStaysWithinItsPromise) {
  Served s(size_t(1) << 30, 64);
  const json squeeze = {{"method", "squeeze"}, {"budget", 16}};
  const std::vector<Reply> replies = converse(s, "Lily and Ben went to the park.", 14, squeeze);
  ASSERT_EQ(replies.size(), 14u);
  for (size_t t = 1; t < replies.size(); ++t) {
    SCOPED_TRACE("turn " + std::to_string(t));
    EXPECT_EQ(replies[t].cached_tokens, seen_after(replies[t - 1]));
  }
  EXPECT_GT(replies.back().prompt_tokens, 16 * 8);  // far past the budget: the cache has evicted
  RequestLimits limits = test::stories_limits();
  limits.max_prompt_tokens = limits.n_ctx = 512;
  const size_t promise = Scheduler(stories(), nullptr, {})
                             .promise(parse_request(turn_body(std::string(400, 'a'), squeeze).dump(), false, limits,
                                                    stories().tokenizer()));
  EXPECT_GT(s.metric("squeezekv_kept_cache_bytes"), 0.0);
  EXPECT_LE(s.metric("squeezekv_kept_cache_bytes"), double(promise));
  EXPECT_EQ(s.metric("squeezekv_kv_promise_violations_total"), 0.0);
}

TEST(KeptCaches, InterleavedConversationsDoNotCrossAndAnEditedHistoryStartsFresh) {
  Served s(size_t(1) << 30, 64);
  std::string a = "Once upon a time", b = "The dog";
  Reply last_a, last_b;
  for (int t = 0; t < 4; ++t) {
    SCOPED_TRACE("turn " + std::to_string(t));
    const Reply ra = complete(s, turn_body(a));
    const Reply rb = complete(s, turn_body(b));
    ASSERT_EQ(ra.status, 200);
    ASSERT_EQ(rb.status, 200);
    EXPECT_EQ(ra.cached_tokens, t == 0 ? 0 : seen_after(last_a));
    EXPECT_EQ(rb.cached_tokens, t == 0 ? 0 : seen_after(last_b));
    EXPECT_EQ(complete(s, turn_body(a, nullptr, false)).text, ra.text);
    EXPECT_EQ(complete(s, turn_body(b, nullptr, false)).text, rb.text);
    last_a = ra;
    last_b = rb;
    a += ra.text + kFollowUps[t % 5];
    b += rb.text + kFollowUps[t % 5];
  }
  // The first word of a's history edited: no kept sequence begins the prompt.
  const double misses = s.metric("squeezekv_kept_cache_misses_total");
  const std::string edited = "Twice" + a.substr(4);
  const Reply r = complete(s, turn_body(edited));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(s.metric("squeezekv_kept_cache_misses_total"), misses + 1);
  EXPECT_EQ(complete(s, turn_body(edited, nullptr, false)).text, r.text);
  // A different cache configuration does not continue a kept cache either.
  EXPECT_EQ(complete(s, turn_body(a, json{{"method", "h2o"}, {"budget", 32}})).cached_tokens, 0);
  EXPECT_GT(complete(s, turn_body(a)).cached_tokens, 0);
}

TEST(KeptCaches, ATightLimitDropsTheLeastRecentlyUsedAndAnswersEveryRequest) {
  RequestLimits limits = test::stories_limits();
  limits.max_prompt_tokens = limits.n_ctx = 512;
  const size_t one =
      Scheduler(stories(), nullptr, {})
          .promise(parse_request(turn_body("Once upon a time").dump(), false, limits, stories().tokenizer()));
  const size_t limit = one * 5 / 2;  // one session and not all four kept caches
  Served s(limit, 64);
  const char* const starts[] = {"Once upon a time", "The dog", "One day, a little bird", "Lily and Ben"};
  for (const char* start : starts) ASSERT_EQ(complete(s, turn_body(start)).status, 200) << start;
  // How many go depends on the caches' capacities; at least the first must have gone.
  EXPECT_GE(s.metric("squeezekv_kept_caches_dropped_total"), 1.0);
  EXPECT_LT(s.metric("squeezekv_kept_caches"), 4.0);
  EXPECT_LE(s.metric("squeezekv_kept_cache_bytes") + s.metric("squeezekv_kv_promised_bytes"), double(limit));
  EXPECT_LE(s.metric("squeezekv_kv_resident_peak_bytes"), double(limit));
  EXPECT_EQ(s.metric("squeezekv_kv_promise_violations_total"), 0.0);
  // The most recent conversation is still kept; the first was dropped and starts fresh.
  const std::vector<Reply> last = converse(s, starts[3], 2);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_GT(last[1].cached_tokens, 0);
  EXPECT_EQ(complete(s, turn_body(std::string(starts[0]) + " there was")).cached_tokens, 0);
}

TEST(KeptCaches, EveryStorageFormatAndPolicyContinuesWithinItsPromise) {
  Served s(size_t(1) << 30, 64);
  const json caches[] = {{{"method", "full"}, {"kv_type", "q8_0"}},
                         {{"method", "squeeze"}, {"budget", 24}, {"kv_type", "q4_0"}},
                         {{"method", "kivi"}},
                         {{"method", "h2o"}, {"budget", 24}},
                         {{"method", "snapkv"}, {"budget", 48}},
                         {{"method", "streaming"}, {"budget", 24}, {"kv_type", "f32"}}};
  for (const json& cache : caches) {
    SCOPED_TRACE(cache.dump());
    const std::vector<Reply> replies = converse(s, "One day, a little bird", 5, cache);
    ASSERT_EQ(replies.size(), 5u);
    for (size_t t = 1; t < replies.size(); ++t) EXPECT_EQ(replies[t].cached_tokens, seen_after(replies[t - 1]));
  }
  EXPECT_EQ(s.metric("squeezekv_kv_promise_violations_total"), 0.0);
}

TEST(KeptCaches, ConcurrentConversationsEachContinueTheirOwn) {
  Served s(size_t(1) << 30, 64);
  const char* const starts[] = {"Once upon a time", "The dog", "Lily and Ben went to the park.", "One day"};
  std::vector<std::vector<Reply>> replies(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&, i] { replies[size_t(i)] = converse(s, starts[i], 6); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(starts[i]);
    ASSERT_EQ(replies[size_t(i)].size(), 6u);
    for (size_t t = 1; t < 6; ++t)
      EXPECT_EQ(replies[size_t(i)][t].cached_tokens, seen_after(replies[size_t(i)][t - 1]));
  }
  EXPECT_EQ(s.metric("squeezekv_kept_cache_hits_total"), 4 * 5.0);
  EXPECT_EQ(s.metric("squeezekv_kept_caches"), 4.0);
}

TEST(KeptCaches, AStreamedTurnContinuesAndIsKeptToo) {
  Served s(size_t(1) << 30, 64);
  const Reply first = complete(s, turn_body("Once upon a time"));
  ASSERT_EQ(first.status, 200);
  json body = turn_body("Once upon a time" + first.text + " Then");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = s.client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::string key = "\"cached_tokens\":";
  const size_t at = r->body.find(key);
  ASSERT_NE(at, std::string::npos) << r->body;
  EXPECT_EQ(std::stoi(r->body.substr(at + key.size())), seen_after(first));
  EXPECT_EQ(s.metric("squeezekv_kept_cache_hits_total"), 1.0);
  EXPECT_EQ(s.metric("squeezekv_kept_caches"), 1.0);  // the streamed turn's cache replaced the first's
}

// A client that has its answer and reads /metrics at once (as the openai chat test does) sees the
// answer's cache kept and the request counted: the scheduler tells the client last. Before that
// order, a read raced the keeping and now and then found 0 kept bytes.
TEST(KeptCaches, AnAnswerIsKeptAndCountedBeforeItsClientHearsOfIt) {
  Served s(size_t(1) << 30, 64);
  const json squeeze = {{"method", "squeeze"}, {"budget", 16}};
  std::string prompt = "Lily and Ben went to the park.";
  for (int t = 0; t < 24; ++t) {
    SCOPED_TRACE("turn " + std::to_string(t));
    const Reply r = complete(s, turn_body(prompt, squeeze));
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(s.metric("squeezekv_requests_finished_total"), double(t + 1));
    EXPECT_EQ(s.metric("squeezekv_kept_caches"), 1.0);
    EXPECT_GT(s.metric("squeezekv_kept_cache_bytes"), 0.0);
    prompt += r.text + kFollowUps[t % 5];
  }
}

TEST(KeptCaches, OffWithKeptCachesZero) {
  Served s(size_t(1) << 30, 64, 200, 1 << 16, {}, 0);
  const std::vector<Reply> replies = converse(s, "Once upon a time", 3);
  ASSERT_EQ(replies.size(), 3u);
  for (const Reply& r : replies) EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(s.metric("squeezekv_kept_caches"), 0.0);
  EXPECT_EQ(s.metric("squeezekv_kept_cache_hits_total"), 0.0);
}

}  // namespace
}  // namespace squeezekv::serve
