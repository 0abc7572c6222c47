// The server's connections. cpp-httplib (0.11) parses each request and writes each answer, but the
// loop around them is ours, because the library's own drops pipelined requests (its read buffer
// lives per request), waits up to 30 s on each read, keeps a connection open after a garbage
// request, and queues new connections behind slow clients in a fixed thread pool:
//  - one thread per connection, at most max_connections open at once; beyond, a 503 at once and
//    the connection closed (so a flood of slow clients costs threads, never a wait for the others);
//  - a request (line, headers and body) must arrive within read_timeout of its first byte, else
//    the connection closes; an idle keep-alive connection closes after idle_timeout;
//  - one buffered stream per connection: pipelined requests are answered in order;
//  - an answer after which the request's bytes cannot be trusted (close_after_answer) closes it;
//  - a request's head (request line and header lines) has a budget, counted as its bytes arrive:
//    a request line beyond max_request_line bytes is answered 414, more than max_header_lines
//    header lines or max_head_bytes bytes in all 431, and the connection closed, so that no
//    request holds more than the budget in memory (cpp-httplib caps a line only once it has read
//    it whole, and the number of lines not at all).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace squeezekv::serve {

struct ConnectionLimits {
  int max_connections = 512;
  size_t max_request_line = 8192;  // bytes of the request line, its CRLF included (else 414)
  size_t max_header_lines = 100;   // header lines of one request (else 431)
  size_t max_header_line = 8192;   // bytes of one header line, its CRLF included (else 431)
  size_t max_head_bytes = 32768;   // bytes of the request line and header lines together (else 431)
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds idle_timeout{5000};
  std::chrono::milliseconds write_timeout{30000};
};

// The budget of one request's head, fed its bytes as they are read: where the head ends is where
// cpp-httplib ends it (a line that is exactly CRLF; lines end at LF).
class HeadBudget {
 public:
  enum class State { reading, done, request_line_too_long, header_line_too_long, too_many_lines, too_many_bytes };
  explicit HeadBudget(const ConnectionLimits& limits) : limits_(&limits) {}
  void start() { *this = HeadBudget(*limits_); }
  // Takes one byte of the head; the state after it (done and the overflows are final).
  State take(char c);
  State state() const { return state_; }
  bool overflowed() const { return state_ != State::reading && state_ != State::done; }
  bool in_request_line() const { return lines_ == 0; }

 private:
  const ConnectionLimits* limits_;
  State state_ = State::reading;
  size_t bytes_ = 0, lines_ = 0, line_bytes_ = 0;  // lines_: complete lines, the request line first
  char last_ = 0;
};

class ConnectionServer : public httplib::Server {
 public:
  explicit ConnectionServer(ConnectionLimits limits);

  // The connection of the request this thread is answering closes after the answer.
  static void close_after_answer();
  // Whether the client of the request this thread is answering has hung up.
  static bool client_gone();
  // The head budget the request this thread is answering ran past (HeadBudget::State::reading
  // when none): its answer is then 431 (414 when the request line ran past it, answered here:
  // the parser gives up on a request line without an answer).
  static HeadBudget::State head_overflow();
  // What the answer to an overflowed head says.
  static std::string head_overflow_message(HeadBudget::State state, const ConnectionLimits& limits);

  uint64_t open_connections() const { return open_.load(); }
  uint64_t refused_connections() const { return refused_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void refuse(socket_t sock);

  ConnectionLimits limits_;
  std::atomic<uint64_t> open_{0}, refused_{0};
};

}  // namespace squeezekv::serve
