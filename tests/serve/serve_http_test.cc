// The HTTP front and the scheduler in-process on a free loopback port, driven by concurrent
// clients (cpp-httplib's): every finished answer is the text the request gives alone, clients
// that leave mid-stream free their sessions, the K/V limit holds at every moment /metrics is read,
// a full queue answers 503, and bad input gets a JSON 4xx while the server keeps serving.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "served.h"
#include "squeezekv/engine/generate.h"
#include "stories_model.h"

namespace squeezekv::serve {
namespace {

using nlohmann::json;
using test::kChunk;
using test::Served;
using test::stories;

const char* const kPrompts[] = {"Once upon a time", "The dog", "Lily and Ben went to the park. They saw",
                                "One day, a little bird"};

// What `generate` gives for a request alone (the same chunked prompt, cache and sampler).
std::string alone(const std::string& prompt, int n, const KVCacheConfig& cache, const SamplerOptions& sampler) {
  Engine engine(stories(), nullptr);
  KVCacheConfig c = cache;
  auto model_cache = engine.make_cache(c);
  GenerateOptions o;
  o.n_predict = n;
  o.n_batch = kChunk;
  o.sampler = sampler;
  std::string text;
  generate(engine, *model_cache, prompt, o, [&](int32_t t) { text += stories().tokenizer().piece(t); });
  return text;
}

struct Outcome {
  int status = 0;
  std::string text;
  bool done = false;  // a stream that reached [DONE]
};

// POST a completion; a streamed one is read event by event, and `leave_after` > 0 hangs up after
// that many text events.
Outcome post(const Served& s, const json& body, int leave_after = 0) {
  auto client = s.client();
  Outcome out;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer, raw;
  int events = 0;
  const bool stream = body.value("stream", false);
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    raw.append(data, len);
    if (!stream) return true;
    buffer.append(data, len);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(0, end);
      if (event.rfind("data: ", 0) != 0) continue;
      if (event == "data: [DONE]") {
        out.done = true;
        continue;
      }
      const json j = json::parse(event.substr(6));
      if (j.contains("choices") && !j["choices"].empty()) out.text += j["choices"][0]["text"].get<std::string>();
      if (++events == leave_after) return false;  // hang up
    }
    return true;
  };
  auto r = client.send(req);
  if (!r) {  // a hang-up: no status
    return out;
  }
  out.status = r->status;
  if (!stream && r->status == 200) out.text = json::parse(raw)["choices"][0]["text"].get<std::string>();
  return out;
}

TEST(ServeHttp, ThirtyTwoClientsAtOnceSomeLeavingMidStream) {
  KVCacheConfig full;
  full.method = "full";
  full.score = ScoreSource::attention;
  KVCacheConfig squeeze = full;
  squeeze.method = "squeeze";
  squeeze.budget = 16;
  constexpr int kClients = 32, kTokens = 48;
  // Each client: a prompt, a cache, greedy or seeded sampling, streamed or not, leaving or not.
  struct Client {
    json body;
    std::string expected;
    int leave_after = 0;
  };
  std::vector<Client> clients(kClients);
  for (int i = 0; i < kClients; ++i) {
    const std::string prompt = kPrompts[i % 4];
    SamplerOptions sampler;
    sampler.temperature = i % 3 == 0 ? 0.8f : 0.0f;
    sampler.seed = uint64_t(i);
    const bool evicting = i % 2 == 1;
    json body = {{"prompt", prompt},    {"max_tokens", kTokens},  {"temperature", sampler.temperature},
                 {"seed", i},           {"top_k", sampler.top_k}, {"top_p", sampler.top_p},
                 {"stream", i % 4 != 0}};
    if (evicting) body["squeezekv"] = {{"method", "squeeze"}, {"budget", 16}};
    clients[size_t(i)] = {body, "", i % 8 == 5 ? 3 : 0};
    if (clients[size_t(i)].leave_after > 0)
      clients[size_t(i)].body["max_tokens"] = 190;  // long: it is left, not finished
    if (clients[size_t(i)].leave_after == 0)
      clients[size_t(i)].expected = alone(prompt, kTokens, evicting ? squeeze : full, sampler);
  }
  // Room for about six full-cache sessions at once: the rest queue.
  const size_t one_full =
      Scheduler(stories(), nullptr, {})
          .promise(parse_request(clients[0].body.dump(), false, RequestLimits{"m", 200, 512, 512, full, ChatTemplate{}},
                                 stories().tokenizer()));
  const size_t limit = 6 * one_full;
  Served s(limit, 64);
  std::atomic<bool> running{true};
  std::atomic<double> most_resident{0}, most_promised{0}, most_evicting{0}, most_sliding{0};
  std::thread monitor([&] {
    while (running) {
      most_resident = std::max(most_resident.load(), s.metric("squeezekv_kv_resident_bytes"));
      most_evicting = std::max(most_evicting.load(), s.metric("squeezekv_kv_resident_evicting_bytes"));
      most_sliding = std::max(most_sliding.load(), s.metric("squeezekv_kv_resident_sliding_bytes"));
      most_promised = std::max(most_promised.load(), s.metric("squeezekv_kv_promised_bytes"));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::vector<Outcome> outcomes(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back(
        [&, i] { outcomes[size_t(i)] = post(s, clients[size_t(i)].body, clients[size_t(i)].leave_after); });
  }
  for (auto& t : threads) t.join();
  running = false;
  monitor.join();
  int left = 0;
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(clients[size_t(i)].body.dump());
    if (clients[size_t(i)].leave_after > 0) {
      ++left;  // whether it ran to its end before the hang-up was seen is a matter of timing
      continue;
    }
    EXPECT_EQ(outcomes[size_t(i)].status, 200);
    EXPECT_EQ(outcomes[size_t(i)].text, clients[size_t(i)].expected);
    if (clients[size_t(i)].body["stream"]) {
      EXPECT_TRUE(outcomes[size_t(i)].done);
    }
  }
  EXPECT_EQ(left, 4);
  EXPECT_GT(most_promised.load(), 0.0);
  EXPECT_LE(most_promised.load(), double(limit));
  EXPECT_LE(most_resident.load(), double(limit));
  // stories260K's 5 layers are global: every resident byte is an evicting layer's.
  EXPECT_GT(most_evicting.load(), 0.0);
  EXPECT_LE(most_evicting.load(), double(limit));
  EXPECT_EQ(most_sliding.load(), 0.0);
  EXPECT_EQ(s.metric("squeezekv_layer_sliding_window{layer=\"0\"}"), 0.0);
  EXPECT_EQ(s.metric("squeezekv_layer_sliding_window{layer=\"4\"}"), 0.0);
  EXPECT_EQ(s.metric("squeezekv_layer_sliding_window{layer=\"5\"}"), -1.0);  // no such layer
  EXPECT_LE(s.metric("squeezekv_kv_resident_peak_bytes"), double(limit));
  EXPECT_EQ(s.metric("squeezekv_kv_promise_violations_total"), 0.0);
  // Nothing leaks: the sessions of the clients that left are gone too.
  for (int i = 0; i < 200 && s.metric("squeezekv_sessions_active") != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.metric("squeezekv_sessions_active"), 0.0);
  EXPECT_EQ(s.metric("squeezekv_sessions_queued"), 0.0);
  EXPECT_EQ(s.metric("squeezekv_kv_resident_bytes"), 0.0);
  EXPECT_EQ(s.metric("squeezekv_kv_promised_bytes"), 0.0);
  EXPECT_EQ(s.metric("squeezekv_requests_finished_total") + s.metric("squeezekv_requests_cancelled_total"), kClients);
  EXPECT_GE(s.metric("squeezekv_requests_cancelled_total"), 1.0);
}

TEST(ServeHttp, AFullQueueAnswers503WithRetryAfter) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 150}, {"temperature", 0}};
  const size_t one =
      Scheduler(stories(), nullptr, {})
          .promise(parse_request(body.dump(), false,
                                 RequestLimits{"m", 200, 512, 512, KVCacheConfig{.method = "full"}, ChatTemplate{}},
                                 stories().tokenizer()));
  Served s(one, 1);  // one session runs, one waits
  std::vector<int> statuses(4);
  std::vector<std::string> retry(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto r = s.client().Post("/v1/completions", body.dump(), "application/json");
      statuses[size_t(i)] = r ? r->status : 0;
      if (r) retry[size_t(i)] = r->get_header_value("Retry-After");
    });
  }
  for (auto& t : threads) t.join();
  const auto count = [&](int status) { return std::count(statuses.begin(), statuses.end(), status); };
  EXPECT_GE(count(200), 2);  // the running one and the queued one
  EXPECT_GE(count(503), 1);
  for (size_t i = 0; i < 4; ++i) {
    if (statuses[i] == 503) {
      EXPECT_EQ(retry[i], "1");
    }
  }
}

TEST(ServeHttp, BadInputGetsAJson4xxAndTheServerKeepsServing) {
  Served s(size_t(64) << 20, 8, 200, 4096);
  auto c = s.client();
  struct Case {
    std::string path, body;
    int status;
    std::string param;
  };
  const Case cases[] = {
      {"/v1/completions", "{\"prompt\": ", 400, ""},
      {"/v1/completions", R"({"prompt":"a","max_tokens":-1})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"a","max_tokens":1000000000000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"a","wat":true})", 400, "wat"},
      {"/v1/completions", R"({"prompt":"a","model":"other"})", 404, "model"},
      {"/v1/completions", R"({"prompt":"a","squeezekv":{"method":"squeeze","budget":0}})", 400, "squeezekv.budget"},
      {"/v1/chat/completions", R"({"messages":"hi"})", 400, "messages"},
      {"/v1/completions", R"({"prompt":")" + std::string(5000, 'a') + "\"}", 413, ""},
      {"/v1/nothing", "{}", 404, ""},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.body.substr(0, 80));
    auto r = c.Post(k.path, k.body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, k.status);
    const json j = json::parse(r->body);
    ASSERT_TRUE(j.contains("error"));
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (!k.param.empty()) {
      EXPECT_EQ(j["error"]["param"], k.param);
    }
  }
  // A cache that can never fit the limit: 400 naming the extra field, not a wait forever.
  Served tiny(1024, 8);
  auto r = tiny.client().Post("/v1/completions", R"({"prompt":"a","max_tokens":100})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "squeezekv");
  // Still serving.
  auto ok =
      c.Post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body)["usage"]["completion_tokens"], 4);
  EXPECT_GE(s.metric("squeezekv_requests_invalid_total"), 9.0);
}

}  // namespace
}  // namespace squeezekv::serve
