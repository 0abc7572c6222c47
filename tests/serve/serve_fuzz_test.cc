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
#include <functional>
#include <random>
#include <string>

#include "fuzz_util.h"
#include "serve/connection.h"
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

// A connection to the server on loopback with `request` sent on it; -1 when it cannot connect.
int send_to(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  return fd;
}

// What arrives on fd until `enough` holds of it, the server closes (`closed`), or 3 s pass idle.
std::string read_until(int fd, const std::function<bool(const std::string&)>& enough, bool& closed) {
  std::string answer;
  closed = false;
  for (int waited = 0; waited < 3000 && !enough(answer);) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) {
      waited += 100;
      continue;
    }
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    answer.append(buf, size_t(n));
  }
  return answer;
}

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
    const int fd = send_to(s.port(), request);
    ASSERT_GE(fd, 0);
    ::shutdown(fd, SHUT_WR);  // the end of the request: a short body ends here, not at the timeout
    bool closed = false;
    const std::string answer = read_until(
        fd, [](const std::string&) { return false; }, closed);
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

// The head budget against a reference on random heads (issue 64.1): lines of random lengths and
// counts around the limits, CR and LF in odd places, bytes of every value. The reference splits
// the bytes at LF as cpp-httplib does and finds the first limit passed, or the blank CRLF line.
TEST(ServeFuzz, TheHeadBudgetStopsExactlyAtItsLimits) {
  const uint64_t seed = test::fuzz_seed(64);
  std::mt19937_64 rng(seed);
  ConnectionLimits limits;
  limits.max_request_line = 64;
  limits.max_header_line = 48;
  limits.max_header_lines = 6;
  limits.max_head_bytes = 256;
  using State = HeadBudget::State;
  int overflowed = 0, done = 0;
  for (int i = 0; i < test::fuzz_count(20000); ++i) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(i));
    std::string head;
    const int lines = int(rng() % 10);
    for (int l = 0; l <= lines; ++l) {
      const size_t n = rng() % 70;
      for (size_t k = 0; k < n; ++k) head += rng() % 8 ? char('a' + rng() % 26) : char(rng() % 256);
      head += rng() % 10 ? "\r\n" : "\n";
    }
    if (rng() % 2) head += "\r\n";
    // The reference, line by line: within a line, the first byte where the line passes its cap
    // (a byte that is not its LF) or the head passes its bytes; at a line's LF, the blank line
    // ends the head, one line too many overflows, else the bytes may. `at`: bytes taken.
    constexpr size_t npos = std::string::npos;
    State expected = State::reading;
    size_t at = 0, line = 0;
    while (at < head.size()) {
      const size_t lf = head.find('\n', at);
      const size_t end = lf == npos ? head.size() : lf + 1;
      const size_t text = (lf == npos ? end : lf) - at;  // the line's bytes but its LF
      const size_t cap = line == 0 ? limits.max_request_line : limits.max_header_line;
      const size_t cap_at = text >= cap ? at + cap - 1 : npos;
      const size_t bytes_at = limits.max_head_bytes < end ? limits.max_head_bytes : npos;
      if (cap_at != npos && cap_at <= bytes_at) {
        expected = line == 0 ? State::request_line_too_long : State::header_line_too_long;
        at = cap_at + 1;
        break;
      }
      if (bytes_at != npos && (lf == npos || bytes_at < lf)) {
        expected = State::too_many_bytes;
        at = bytes_at + 1;
        break;
      }
      if (lf == npos) {
        at = end;
        break;
      }
      at = end;
      if (line >= 1 && text == 1 && head[lf - 1] == '\r') {
        expected = State::done;
        break;
      }
      if (++line - 1 > limits.max_header_lines) {
        expected = State::too_many_lines;
        break;
      }
      if (bytes_at == lf) {
        expected = State::too_many_bytes;
        break;
      }
    }
    HeadBudget budget(limits);
    budget.start();
    size_t fed = 0;
    for (; fed < head.size() && budget.state() == State::reading; ++fed) budget.take(head[fed]);
    EXPECT_EQ(int(budget.state()), int(expected))
        << nlohmann::json(head).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
    EXPECT_EQ(fed, at);
    overflowed += budget.overflowed();
    done += budget.state() == State::done;
  }
  EXPECT_GT(overflowed, 100);
  EXPECT_GT(done, 100);
}

// Random heads through the whole front: many, long, odd header lines around the budget. Each is
// answered with a status of the error contract (431 past the budget) or closed, and the server
// keeps serving.
TEST(ServeFuzz, RandomHeadsAreAnsweredWithinTheBudget) {
  test::ConnectionLimits fast;
  fast.read_timeout = std::chrono::milliseconds(500);
  fast.max_header_lines = 20;
  fast.max_head_bytes = 2048;
  test::Served s(size_t(64) << 20, 8, 200, 4096, fast);
  const uint64_t seed = test::fuzz_seed(431);
  std::mt19937_64 rng(seed);
  int refused = 0;
  for (int i = 0; i < test::fuzz_count(150); ++i) {
    std::string request =
        rng() % 2 ? "GET /health HTTP/1.1\r\n" : "GET /v1/models?x=" + std::string(rng() % 9000, 'q') + " HTTP/1.1\r\n";
    const int lines = int(rng() % 40);
    for (int l = 0; l < lines; ++l) {
      std::string value(rng() % 200, 'v');
      if (rng() % 4 == 0) test::mutate(value, rng);
      request += "X-" + std::to_string(l) + ": " + value + (rng() % 8 ? "\r\n" : "\n");
    }
    request += "\r\n";
    SCOPED_TRACE("seed " + std::to_string(seed) + " case " + std::to_string(i));
    const int fd = send_to(s.port(), request);
    ASSERT_GE(fd, 0);
    auto complete = [](const std::string& answer) {  // the head, then Content-Length bytes of body
      const size_t head = answer.find("\r\n\r\n"), length = answer.find("Content-Length: ");
      return head != std::string::npos && length != std::string::npos && length < head &&
             answer.size() >= head + 4 + std::stoul(answer.substr(length + 16));
    };
    bool closed = false;
    const std::string answer = read_until(fd, complete, closed);
    ::close(fd);
    ASSERT_EQ(answer.rfind("HTTP/1.1 ", 0), 0u) << answer.substr(0, 80);
    const int status = std::stoi(answer.substr(9, 3));
    EXPECT_TRUE(status == 200 || status == 400 || status == 414 || status == 431) << status;
    if (status == 431 || status == 414) {
      ++refused;
      EXPECT_NE(answer.find("\"invalid_request_error\""), std::string::npos) << answer;
    }
  }
  EXPECT_GT(refused, 10);
  auto r = s.client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace squeezekv::serve
