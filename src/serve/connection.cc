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
  void start_request() { deadline_ = Clock::now() + limits_.read_timeout; }
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

}  // namespace

ConnectionServer::ConnectionServer(ConnectionLimits limits) : limits_(limits) {
  new_task_queue = [n = limits_.max_connections] { return new ConnectionThreads(n); };
  set_keep_alive_max_count(1000);  // requests per connection (the library's default is 5)
}

void ConnectionServer::close_after_answer() { t_close = true; }

bool ConnectionServer::client_gone() { return t_stream != nullptr && t_stream->hung_up(); }

void ConnectionServer::refuse(socket_t sock) {
  ++refused_;
  const std::string body = error_json(
      Failure::too_many_connections,
      "too many connections: " + std::to_string(limits_.max_connections) + " are open (--max-connections)", "");
  const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
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
    if (!ok || closed || last || t_close || stream.timed_out()) break;
  }
  t_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  --open_;
  return ok;
}

}  // namespace squeezekv::serve
