// Saved caches in the server (--cache-dir; docs/server.md "Saved caches"): a kept conversation
// saved by id, the server stopped and started again on the same folder, and the conversation
// continued with cached_tokens covering its history; kept caches pushed out of --kv-limit-mib go
// to the folder and come back when their conversation continues; every failure answers with the
// error contract (no --cache-dir, an id that names nothing, an unknown action, a damaged file).
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/request.h"
#include "serve/scheduler.h"
#include "served.h"
#include "stories_model.h"
#include "test_util.h"

namespace squeezekv::serve {
namespace {

using nlohmann::json;
using test::Served;
using test::stories;

json complete(const Served& s, const std::string& prompt) {
  const json body = {{"prompt", prompt},
                     {"max_tokens", 10},
                     {"temperature", 0},
                     {"squeezekv", {{"method", "squeeze"}, {"budget", 16}}}};
  auto r = s.client().Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  return r && r->status == 200 ? json::parse(r->body) : json::object();
}

// The tokens a finished turn left in its cache: the prompt and every generated token but a last
// one sampled at the length limit (never fed).
int seen_after(const json& j) {
  return j["usage"]["prompt_tokens"].get<int>() + j["usage"]["completion_tokens"].get<int>() -
         (j["choices"][0]["finish_reason"] == "length" ? 1 : 0);
}

std::string next_prompt(const std::string& prompt, const json& reply) {
  return prompt + reply["choices"][0]["text"].get<std::string>() + " Then";
}

std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = test::temp_dir() / name;
  std::filesystem::remove_all(dir);
  return dir;
}

httplib::Result action(const Served& s, const std::string& id, const std::string& what) {
  return s.client().Post("/caches/" + id + "?action=" + what, "", "application/json");
}

TEST(SavedCaches, ASavedConversationContinuesAfterARestart) {
  const auto dir = fresh_dir("saved_restart");
  const std::string prompt = "Once upon a time";
  json first;
  std::string id;
  {
    Served s(size_t(1) << 30, 64, 200, 1 << 16, {}, 16, dir.string());
    first = complete(s, prompt);
    id = first["squeezekv"]["cache_id"].get<std::string>();
    ASSERT_EQ(id.size(), 16u);
    auto r = action(s, id, "save");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    const json saved = json::parse(r->body);
    EXPECT_EQ(saved["saved"], true);
    EXPECT_EQ(saved["resident"], true);
    EXPECT_EQ(saved["tokens"], seen_after(first));
    EXPECT_TRUE(std::filesystem::exists(dir / (id + ".skv")));
  }
  Served again(size_t(1) << 30, 64, 200, 1 << 16, {}, 16, dir.string());
  auto listed = again.client().Get("/caches");
  ASSERT_TRUE(listed && listed->status == 200);
  const json list = json::parse(listed->body);
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], id);
  EXPECT_EQ(list["data"][0]["resident"], false);
  const json second = complete(again, next_prompt(prompt, first));
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], seen_after(first));
  EXPECT_EQ(again.metric("squeezekv_kept_caches_restored_total"), 1.0);
  // action=restore makes a saved cache resident; erase removes it from memory and disk.
  ASSERT_EQ(action(again, id, "restore")->status, 200);
  EXPECT_EQ(json::parse(again.client().Get("/caches")->body)["data"].size(), 2u);  // the continued turn's too
  ASSERT_EQ(action(again, id, "erase")->status, 200);
  EXPECT_FALSE(std::filesystem::exists(dir / (id + ".skv")));
}

TEST(SavedCaches, CachesPushedOutOfTheLimitGoToTheFolderAndComeBack) {
  const auto dir = fresh_dir("saved_spill");
  Served s(size_t(1) << 30, 64, 200, 1 << 16, {}, /*kept_caches=*/1, dir.string());
  const json a = complete(s, "Once upon a time");
  const json b = complete(s, "The dog");  // the count pushes a's cache out: to the folder
  EXPECT_EQ(s.metric("squeezekv_kept_caches_spilled_total"), 1.0);
  EXPECT_TRUE(std::filesystem::exists(dir / (a["squeezekv"]["cache_id"].get<std::string>() + ".skv")));
  const json a2 = complete(s, next_prompt("Once upon a time", a));
  EXPECT_EQ(a2["usage"]["prompt_tokens_details"]["cached_tokens"], seen_after(a));
  EXPECT_EQ(s.metric("squeezekv_kept_caches_restored_total"), 1.0);
  EXPECT_EQ(s.metric("squeezekv_kv_promise_violations_total"), 0.0);
  (void)b;
}

void expect_error(const httplib::Result& r, int status, const std::string& type, const std::string& text) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["error"]["type"], type) << r->body;
  EXPECT_NE(j["error"]["message"].get<std::string>().find(text), std::string::npos) << r->body;
}

TEST(SavedCaches, FailuresAnswerWithTheErrorContract) {
  {
    Served plain(size_t(1) << 30, 64);
    expect_error(action(plain, "0123456789abcdef", "save"), 400, "invalid_request_error", "--cache-dir");
  }
  const auto dir = fresh_dir("saved_errors");
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "damaged.skv") << "not a cache";  // left alone when the server starts
  Served s(size_t(1) << 30, 64, 200, 1 << 16, {}, 16, dir.string());
  EXPECT_EQ(json::parse(s.client().Get("/caches")->body)["data"].size(), 0u);
  expect_error(action(s, "damaged", "restore"), 404, "not_found_error", "no kept or saved cache has id 'damaged'");
  expect_error(action(s, "0123456789abcdef", "save"), 404, "not_found_error", "0123456789abcdef");
  const json a = complete(s, "Once upon a time");
  const std::string id = a["squeezekv"]["cache_id"].get<std::string>();
  expect_error(action(s, id, "frobnicate"), 400, "invalid_request_error", "action = frobnicate");
  ASSERT_EQ(action(s, id, "save")->status, 200);
  ASSERT_EQ(action(s, id, "erase")->status, 200);
  expect_error(action(s, id, "restore"), 404, "not_found_error", id);
}

}  // namespace
}  // namespace squeezekv::serve
