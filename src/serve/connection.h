// The server's connections. cpp-httplib (0.11) parses each request and writes each answer, but the
// loop around them is ours, because the library's own drops pipelined requests (its read buffer
// lives per request), waits up to 30 s on each read, keeps a connection open after a garbage
// request, and queues new connections behind slow clients in a fixed thread pool:
//  - one thread per connection, at most max_connections open at once; beyond, a 503 at once and
//    the connection closed (so a flood of slow clients costs threads, never a wait for the others);
//  - a request (line, headers and body) must arrive within read_timeout of its first byte, else
//    the connection closes; an idle keep-alive connection closes after idle_timeout;
//  - one buffered stream per connection: pipelined requests are answered in order;
//  - an answer after which the request's bytes cannot be trusted (close_after_answer) closes it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace squeezekv::serve {

struct ConnectionLimits {
  int max_connections = 512;
  std::chrono::milliseconds read_timeout{10000};
  std::chrono::milliseconds idle_timeout{5000};
  std::chrono::milliseconds write_timeout{30000};
};

class ConnectionServer : public httplib::Server {
 public:
  explicit ConnectionServer(ConnectionLimits limits);

  // The connection of the request this thread is answering closes after the answer.
  static void close_after_answer();
  // Whether the client of the request this thread is answering has hung up.
  static bool client_gone();

  uint64_t open_connections() const { return open_.load(); }
  uint64_t refused_connections() const { return refused_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void refuse(socket_t sock);

  ConnectionLimits limits_;
  std::atomic<uint64_t> open_{0}, refused_{0};
};

}  // namespace squeezekv::serve
