// Bounded fuzzing of the server's request handling with fixed seeds, part of every test run (and
// so of the sanitizer builds): mutated request bodies through parse_request, and mutated raw
// requests (line, headers and body) through the whole HTTP front. A body must parse or fail with a
// RequestError of the error contract whose answer serialises; a raw request must be answered with
// a status or closed, and the server must keep serving. Scale and seed: tests/fuzz_util.h.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "fuzz_util.h"
#include "serve/request.h"
#include "served.h"

namespace squeezekv::serve {
namespace {

using test::stories;

const char* const kBodies[] = {
    R"({"model":"stories260K","prompt":"Once upon a time","max_tokens":5,"temperature":0.5,"top_k":3,"top_p":0.9,"seed":7})",
    R"({"prompt":["The dog"],"max_tokens":3,"stop":["\n","end"],"stream":true,"stream_options":{"include_usage":true}})",
    R"({"prompt":"a","max_completion_tokens":4,"ignore_eos":true,"squeezekv":{"method":"squeeze","budget":16,"strength":0.5}})",
    R"({"prompt":"a","squeezekv":{"method":"h2o","budget":64,"kv_type":"kivi2","kivi_group":8,"kivi_residual":16}})",
    R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}]})",
    R"({"messages":[{"role":"user","content":"Tell me a story.","name":"x"}],"n":1,"logprobs":false,"user":"u"})",
};

TEST(ServeFuzz, MutatedBodiesParseOrFailWithAContractError) {
  const uint64_t seed = test::fuzz_seed(20261204);
  std::mt19937_64 rng(seed);
  const RequestLimits l = test::stories_limits();
  int parsed = 0, refused = 0;
  for (int i = 0; i < test::fuzz_count(10000); ++i) {
    const size_t which = size_t(rng() % std::size(kBodies));
    std::string body = kBodies[which];
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) test::mutate(body, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(i));
    try {
      parse_request(body, which >= 4, l, stories().tokenizer());
      ++parsed;
    } catch (const RequestError& e) {
      ++refused;
      EXPECT_TRUE(e.status == 400 || e.status == 404) << e.status;
      const auto answer = nlohmann::json::parse(error_json(e.failure, e.what(), e.param));  // serialises
      EXPECT_FALSE(answer["error"]["message"].get<std::string>().empty());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "escaped: " << e.what()
                    << " body: " << nlohmann::json(body).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(refused, 0);
}

TEST(ServeFuzz, MutatedRawRequestsAreAnsweredOrClosed) {
  test::ConnectionLimits fast;
  fast.read_timeout = std::chrono::milliseconds(500);
  test::Served s(size_t(64) << 20, 8, 200, 4096, fast);
  const uint64_t seed = test::fuzz_seed(41);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < test::fuzz_count(400); ++i) {
    const std::string body = kBodies[rng() % 4];
    std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) test::mutate(request, rng);
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(i));
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(s.port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);  // the end of the request: a short body ends here, not at the timeout
    std::string answer;
    bool closed = false;
    for (int waited = 0; waited < 3000 && !closed;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        waited += 100;
        continue;
      }
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) closed = true;
      else answer.append(buf, size_t(n));
    }
    ::close(fd);
    EXPECT_TRUE(closed) << "still open after 3 s";
    if (!answer.empty()) {
      EXPECT_EQ(answer.rfind("HTTP/1.1 ", 0), 0u) << answer.substr(0, 80);
    }
  }
  auto r = s.client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace squeezekv::serve
