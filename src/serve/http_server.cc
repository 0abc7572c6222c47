#include "serve/http_server.h"

#include <httplib.h>

#include <sys/socket.h>
#include <netinet/in.h>

#include <atomic>
#include <ctime>
#include <nlohmann/json.hpp>

#include "squeezekv/base/errors.h"

namespace squeezekv::serve {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

json error_body(const std::string& message, const std::string& type, const std::string& param) {
  return {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
                     {"code", nullptr}}}};
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param) {
  const char* type = status == 503 ? "server_overloaded" : status >= 500 ? "server_error"
                     : status == 404 ? "not_found_error" : "invalid_request_error";
  res.status = status;
  res.set_content(error_body(message, type, param).dump(), "application/json");
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

// cpp-httplib 0.11 listens with a backlog of 5, so a burst of clients connecting at once gets
// connections reset. Its socket is private: find our listening socket by its port and listen
// again with a longer backlog (Linux updates the backlog of a listening socket).
void widen_backlog(int port) {
  for (int fd = 3; fd < 1024; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port) ::listen(fd, 512);
  }
}

}  // namespace

struct HttpServer::Impl {
  const Model& model;
  Scheduler& scheduler;
  HttpOptions options;
  httplib::Server server;
  HttpCounters counters;
  std::atomic<uint64_t> next_id{1};
  int bound_port = 0;

  Impl(const Model& m, Scheduler& s, HttpOptions o) : model(m), scheduler(s), options(std::move(o)) {}

  void routes();
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
};

void HttpServer::Impl::routes() {
  server.new_task_queue = [n = options.threads] { return new httplib::ThreadPool(size_t(n)); };
  server.set_payload_max_length(options.max_body_bytes);
  server.set_read_timeout(30, 0);
  server.set_write_timeout(30, 0);
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json body = {{"object", "list"},
                       {"data", json::array({{{"id", options.limits.model_id}, {"object", "model"}, {"created", 0},
                                              {"owned_by", "squeezekv"}}})}};
    res.set_content(body.dump(), "application/json");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(scheduler.stats(), counters), "text/plain; version=0.0.4");
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  server.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
  // httplib's own refusals (unknown route, body too large, ...) get the JSON error shape too.
  server.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ++counters.client_errors;
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 404) message = "no route " + req.method + " " + req.path;
    if (res.status == 413) message = "the body is larger than --max-body (" + std::to_string(options.max_body_bytes) + " bytes)";
    send_error(res, res.status, message, "");
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, what, "");
  });
}

void HttpServer::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  ++(chat ? counters.chat_completions : counters.completions);
  CompletionRequest request;
  try {
    request = parse_request(req.body, chat, options.limits, model.tokenizer());
  } catch (const RequestError& e) {
    ++counters.client_errors;
    return send_error(res, e.status, e.what(), e.param);
  }
  const bool stream = request.stream, include_usage = request.include_usage;
  const size_t promise = scheduler.promise(request);
  auto channel = std::make_shared<Channel>();
  switch (scheduler.submit(std::move(request), channel)) {
    case Admission::running:
    case Admission::queued:
      break;
    case Admission::never_fits:
      ++counters.client_errors;
      return send_error(res, 400,
                        "this request's cache needs up to " + std::to_string(promise) + " K/V bytes, more than the " +
                            "server's limit (--kv-limit-mib); lower max_tokens or choose a smaller cache",
                        "squeezekv");
    case Admission::queue_full:
      ++counters.rejected;
      res.set_header("Retry-After", "1");
      return send_error(res, 503, "the server is busy: every K/V byte is promised and the queue is full", "");
    case Admission::shutting_down:
      ++counters.rejected;
      return send_error(res, 503, "the server is shutting down", "");
  }
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  const auto created = int64_t(std::time(nullptr));
  const std::string model_id = options.limits.model_id;
  const char* object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  auto usage_json = [](const Usage& u) {
    return json{{"prompt_tokens", u.prompt_tokens}, {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  };
  auto chunk = [=](const json& choice) {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", model_id},
                {"choices", json::array({choice})}};
  };
  // The client leaving cancels the session: a failed write, or the releaser called without success.
  auto release = [this, channel](bool success) {
    if (!success) {
      ++counters.disconnects;
      scheduler.cancel(*channel);
    }
  };
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=, this](size_t, httplib::DataSink& sink) {
          if (chat) {
            json role = chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
            const std::string s = sse(role);
            if (!sink.write(s.data(), s.size())) return false;
          }
          ChannelUpdate u;
          for (;;) {
            if (!sink.is_writable()) return false;
            if (!channel->take(u, 50ms)) continue;
            if (!u.text.empty()) {
              const json c = chat ? chunk({{"index", 0}, {"delta", {{"content", u.text}}}, {"finish_reason", nullptr}})
                                  : chunk({{"text", u.text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
              const std::string s = sse(c);
              if (!sink.write(s.data(), s.size())) return false;
            }
            if (!u.done) continue;
            std::string tail;
            if (u.error_status != 0) {
              tail = sse(error_body(u.error, u.error_status == 503 ? "server_overloaded" : "server_error", ""));
            } else {
              json last = chat ? chunk({{"index", 0}, {"delta", json::object()}, {"finish_reason", u.finish_reason}})
                               : chunk({{"text", ""}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", u.finish_reason}});
              tail = sse(last);
              if (include_usage) {
                json usage = chunk({});
                usage["choices"] = json::array();
                usage["usage"] = usage_json(u.usage);
                tail += sse(usage);
              }
            }
            tail += "data: [DONE]\n\n";
            if (!sink.write(tail.data(), tail.size())) return false;
            sink.done();
            return true;
          }
        },
        release);
    return;
  }
  // Not streamed: the answer is one JSON object, sent when complete. It goes through a content
  // provider as well, so that a client leaving while it waits is noticed and its session freed.
  res.set_chunked_content_provider(
      "application/json",
      [=, this, text = std::string()](size_t, httplib::DataSink& sink) mutable {
        ChannelUpdate u;
        for (;;) {
          if (!sink.is_writable()) return false;
          if (!channel->take(u, 50ms)) continue;
          text += u.text;
          if (!u.done) continue;
          json body;
          if (u.error_status != 0) {
            body = error_body(u.error, u.error_status == 503 ? "server_overloaded" : "server_error", "");
          } else {
            json choice = chat ? json{{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}},
                                      {"finish_reason", u.finish_reason}}
                               : json{{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", u.finish_reason}};
            body = {{"id", id}, {"object", object}, {"created", created}, {"model", model_id},
                    {"choices", json::array({choice})}, {"usage", usage_json(u.usage)}};
          }
          const std::string s = body.dump();
          if (!sink.write(s.data(), s.size())) return false;
          sink.done();
          return true;
        }
      },
      release);
}

HttpServer::HttpServer(const Model& model, Scheduler& scheduler, HttpOptions options)
    : impl_(std::make_unique<Impl>(model, scheduler, std::move(options))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  if (o.port == 0) {
    impl_->bound_port = impl_->server.bind_to_any_port(o.host.c_str());
  } else {
    impl_->bound_port = impl_->server.bind_to_port(o.host.c_str(), o.port) ? o.port : -1;
  }
  require(impl_->bound_port > 0, "port", o.port, "cannot listen on " + o.host + ":" + std::to_string(o.port));
  widen_backlog(impl_->bound_port);
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::listen() { impl_->server.listen_after_bind(); }

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace squeezekv::serve
