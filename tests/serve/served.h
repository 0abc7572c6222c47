// The server in-process on a free loopback port, for the HTTP tests: the scheduler and the HTTP
// front over stories260K for the life of the object, and /metrics read back by name.
#pragma once

#include <httplib.h>

#include <string>
#include <thread>

#include "serve/http_server.h"
#include "stories_model.h"

namespace squeezekv::test {

using serve::ConnectionLimits;
using serve::HttpOptions;
using serve::HttpServer;
using serve::Scheduler;
using serve::SchedulerOptions;

// What the request tests allow: stories260K, max_tokens up to 1000, 64-token prompts, a
// full-cache context of 512.
inline serve::RequestLimits stories_limits() {
  serve::RequestLimits l;
  l.model_id = "stories260K";
  l.max_tokens = 1000;
  l.max_prompt_tokens = 64;
  l.n_ctx = 512;
  l.cache.method = "full";
  l.cache.head_dim = stories().config().head_dim;
  return l;
}

constexpr int kChunk = 8;  // prompt tokens per prefill step: prompts take several steps

class Served {
 public:
  Served(size_t kv_limit, size_t queue, int max_tokens = 200, size_t max_body = 1 << 16,
         ConnectionLimits connections = {}, int kept_caches = 16, std::string cache_dir = {})
      : pool_(2),
        scheduler_(stories(), &pool_, options(kv_limit, queue, kept_caches, std::move(cache_dir))),
        server_(stories(), scheduler_, http(max_tokens, max_body, connections)) {
    server_.bind();
    thread_ = std::thread([this] { server_.listen(); });
  }
  ~Served() {
    scheduler_.shutdown();
    server_.stop();
    thread_.join();
  }
  int port() const { return server_.port(); }
  // What SIGTERM does first: every queued and running request is told the server is shutting down.
  void shutdown_scheduler() { scheduler_.shutdown(); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port());
    c.set_read_timeout(60, 0);
    return c;
  }
  // A metric's value from /metrics.
  double metric(const std::string& name) const {
    auto r = client().Get("/metrics");
    if (!r || r->status != 200) return -1;
    // A line "NAME VALUE" (no std::regex: GCC 12 warns inside it under the sanitizers).
    const std::string key = "\n" + name + " ";
    const size_t at = ("\n" + r->body).find(key);
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + key.size() - 1));
  }

 private:
  static SchedulerOptions options(size_t kv_limit, size_t queue, int kept_caches, std::string cache_dir) {
    SchedulerOptions o;
    o.cache_dir = std::move(cache_dir);
    o.kept_caches = kept_caches;
    o.kv_limit_bytes = kv_limit;
    o.queue_limit = queue;
    o.chunk = kChunk;
    return o;
  }
  static HttpOptions http(int max_tokens, size_t max_body, ConnectionLimits connections) {
    HttpOptions o;
    o.connections = connections;
    o.port = 0;
    o.max_body_bytes = max_body;
    o.limits.model_id = "stories260K";
    o.limits.max_tokens = max_tokens;
    o.limits.n_ctx = o.limits.max_prompt_tokens = 512;
    o.limits.cache.method = "full";
    o.limits.cache.score = ScoreSource::attention;
    o.limits.cache.head_dim = stories().config().head_dim;
    return o;
  }
  ThreadPool pool_;
  Scheduler scheduler_;
  HttpServer server_;
  std::thread thread_;
};

}  // namespace squeezekv::test
