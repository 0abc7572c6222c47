#include "serve/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "serve/error_contract.h"

namespace squeezekv::serve {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Waits in slices, so that a stopping server is noticed within one.
constexpr milliseconds kSlice{100};

class ConnectionStream;
thread_local ConnectionStream* t_stream = nullptr;  // the connection this thread serves
thread_local bool t_close = false;                  // close it after the current answer
thread_local bool t_over_limit = false;             // the connection handed over is beyond the limit

// A connection's socket with one read buffer for its whole life and deadlines instead of per-call
// timeouts.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(int sock, const std::atomic<socket_t>& listening, const ConnectionLimits& limits)
      : sock_(sock), listening_(listening), limits_(limits) {}

  // Waits for the first byte of the next request; false when the connection is idle too long,
  // closed, or the server stops.
  bool wait_for_request() {
    if (begin_ < end_) return true;
    return wait(POLLIN, Clock::now() + limits_.idle_timeout, true);
  }
  void start_request() {
    deadline_ = Clock::now() + limits_.read_timeout;
    head_.start();
  }
  HeadBudget::State head_state() const { return head_.state(); }
  bool head_overflowed() const { return head_.overflowed(); }
  bool head_in_request_line() const { return head_.in_request_line(); }
  bool timed_out() const { return timed_out_; }
  bool hung_up() const {
    pollfd p{sock_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
    char c;  // readable: a pipelined request (alive) or the end of the stream (gone)
    return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

  bool is_readable() const override { return begin_ < end_; }
  bool is_writable() const override {
    if (hung_up()) return false;
    pollfd p{sock_, POLLOUT, 0};
    return ::poll(&p, 1, int(limits_.write_timeout.count())) > 0 && !(p.revents & (POLLERR | POLLHUP));
  }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == end_) {
      if (!wait(POLLIN, deadline_, true)) {
        timed_out_ = true;
        return -1;
      }
      ssize_t n;
      do n = ::recv(sock_, buffer_, sizeof buffer_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = size_t(n);
    }
    const size_t n = std::min(size, end_ - begin_);
    // The head's bytes are counted as they are handed over: past its budget the read fails, so
    // the parser holds no more of it than the budget.
    for (size_t i = 0; i < n && head_.state() == HeadBudget::State::reading; ++i) {
      if (head_.take(buffer_[begin_ + i]); head_.overflowed()) return -1;
    }
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t sent = 0;
    const auto deadline = Clock::now() + limits_.write_timeout;
    while (sent < size) {
      if (!wait(POLLOUT, deadline, false)) return -1;
      const ssize_t n = ::send(sock_, ptr + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) return -1;
      sent += size_t(n);
    }
    return ssize_t(sent);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  // Polls for events until the deadline; false on timeout, or when the server stops and
  // `stop_early` (reads wait for requests a stopping server will not serve; writes finish answers).
  bool wait(short events, Clock::time_point deadline, bool stop_early) const {
    for (;;) {
      if (stop_early && listening_ == INVALID_SOCKET) return false;
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{sock_, events, 0};
      const int r = ::poll(&p, 1, int(std::min(left, kSlice).count()));
      if (r > 0) return true;  // ready, or an error the next call reports
      if (r < 0 && errno != EINTR) return false;
    }
  }
  void address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if ((peer ? ::getpeername : ::getsockname)(sock_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    char text[INET6_ADDRSTRLEN] = "";
    if (a.ss_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
      port = ntohs(in->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof text);
      port = ntohs(in->sin6_port);
    }
    ip = text;
  }

  int sock_;
  const std::atomic<socket_t>& listening_;
  const ConnectionLimits& limits_;
  char buffer_[16384];
  size_t begin_ = 0, end_ = 0;
  Clock::time_point deadline_{};
  bool timed_out_ = false;
  HeadBudget head_{limits_};
};

// One thread per connection up to the limit. Beyond it the connection is handed over on the
// accepting thread itself, marked, and answered 503 at once.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(int limit) : limit_(limit) {}
  void enqueue(std::function<void()> fn) override {
    auto task = std::make_shared<std::function<void()>>(std::move(fn));
    bool room;
    {
      std::lock_guard lock(mutex_);
      room = active_ < limit_;
      if (room) ++active_;
    }
    if (room) {
      try {
        std::thread([this, task] {
          (*task)();
          done();
        }).detach();
        return;
      } catch (const std::system_error&) {
        done();  // no thread to be had: refused like any connection beyond the limit
      }
    }
    t_over_limit = true;
    (*task)();
    t_over_limit = false;
  }
  void shutdown() override {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return active_ == 0; });
  }

 private:
  void done() {
    std::lock_guard lock(mutex_);
    --active_;
    idle_.notify_all();
  }
  const int limit_;
  int active_ = 0;
  std::mutex mutex_;
  std::condition_variable idle_;
};

// "HTTP/1.1 <status>" with a JSON body, closing: for answers given outside cpp-httplib's parser.
std::string raw_answer(const char* status, const std::string& body, const char* extra_headers) {
  return std::string("HTTP/1.1 ") + status +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra_headers + "Connection: close\r\n\r\n" + body;
}

// After an answer to a request whose bytes still arrive: stop writing, then read (and drop) what
// the client sends for a short while, so that closing does not reset the answer before the
// client has read it; bounded in time and bytes.
void linger_close(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto end = Clock::now() + milliseconds(500);
  char drain[16384];
  for (size_t total = 0; total < (size_t(4) << 20);) {
    const auto left = std::chrono::duration_cast<milliseconds>(end - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, int(left)) <= 0) break;
    const ssize_t n = ::recv(sock, drain, sizeof drain, MSG_DONTWAIT);
    if (n <= 0) break;
    total += size_t(n);
  }
}

}  // namespace

HeadBudget::State HeadBudget::take(char c) {
  if (state_ != State::reading) return state_;
  ++bytes_;
  ++line_bytes_;
  if (c == '\n') {
    if (lines_ >= 1 && line_bytes_ == 2 && last_ == '\r') return state_ = State::done;  // the blank line
    ++lines_;
    line_bytes_ = 0;
    if (lines_ - 1 > limits_->max_header_lines) return state_ = State::too_many_lines;
  } else if (lines_ == 0 && line_bytes_ >= limits_->max_request_line) {
    return state_ = State::request_line_too_long;  // its LF would make it longer still
  } else if (lines_ >= 1 && line_bytes_ >= limits_->max_header_line) {
    return state_ = State::header_line_too_long;
  }
  last_ = c;
  if (bytes_ > limits_->max_head_bytes) state_ = State::too_many_bytes;
  return state_;
}

ConnectionServer::ConnectionServer(ConnectionLimits limits) : limits_(limits) {
  new_task_queue = [n = limits_.max_connections] { return new ConnectionThreads(n); };
  set_keep_alive_max_count(1000);  // requests per connection (the library's default is 5)
}

void ConnectionServer::close_after_answer() { t_close = true; }

bool ConnectionServer::client_gone() { return t_stream != nullptr && t_stream->hung_up(); }

HeadBudget::State ConnectionServer::head_overflow() {
  return t_stream != nullptr ? t_stream->head_state() : HeadBudget::State::reading;
}

std::string ConnectionServer::head_overflow_message(HeadBudget::State state, const ConnectionLimits& limits) {
  switch (state) {
    case HeadBudget::State::request_line_too_long:
      return "the request line is longer than " + std::to_string(limits.max_request_line) + " bytes";
    case HeadBudget::State::header_line_too_long:
      return "a header line is longer than " + std::to_string(limits.max_header_line) + " bytes";
    case HeadBudget::State::too_many_lines:
      return "the request has more than " + std::to_string(limits.max_header_lines) + " header lines";
    case HeadBudget::State::too_many_bytes:
      return "the request line and headers are longer than " + std::to_string(limits.max_head_bytes) + " bytes";
    case HeadBudget::State::reading:
    case HeadBudget::State::done:
      break;
  }
  return "";
}

void ConnectionServer::refuse(socket_t sock) {
  ++refused_;
  const std::string body = error_json(
      Failure::too_many_connections,
      "too many connections: " + std::to_string(limits_.max_connections) + " are open (--max-connections)", "");
  const std::string answer = raw_answer("503 Service Unavailable", body, "Retry-After: 1\r\n");
  // A fresh socket's send buffer takes this at once; never wait here (this is the accepting thread).
  (void)::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  char drain[4096];  // what the client sent already, so that closing does not reset the answer
  while (::recv(sock, drain, sizeof drain, MSG_DONTWAIT) > 0) {
  }
  ::close(sock);
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  if (t_over_limit) {
    refuse(sock);
    return true;
  }
  ++open_;
  const int one = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // server-sent events go out at once
  ConnectionStream stream(sock, svr_sock_, limits_);
  t_stream = &stream;
  bool ok = true;
  for (size_t served = 0; stream.wait_for_request(); ++served) {
    stream.start_request();
    t_close = false;
    bool closed = false;
    const bool last = served + 1 >= keep_alive_max_count_;  // its answer says "Connection: close"
    ok = process_request(stream, last, closed, nullptr);
    if (stream.head_overflowed() && stream.head_in_request_line()) {  // the parser gave up without an answer
      const std::string message = head_overflow_message(stream.head_state(), limits_);
      const std::string answer = raw_answer("414 URI Too Long", error_json(Failure::uri_too_long, message, ""), "");
      (void)stream.write(answer.data(), answer.size());
    }
    if (stream.head_overflowed()) {
      linger_close(sock);
      break;
    }
    if (!ok || closed || last || t_close || stream.timed_out()) break;
  }
  t_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  --open_;
  return ok;
}

}  // namespace squeezekv::serve
