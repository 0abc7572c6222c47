#include "serve/http_server.h"

#include <httplib.h>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "serve/error_contract.h"
#include "squeezekv/base/errors.h"

namespace squeezekv::serve {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

// Every error answer goes through here (error_contract.h): its one status and body, and the
// connection closed after it when the request's bytes could not all be read.
void send_error(const httplib::Request& req, httplib::Response& res, Failure failure, const std::string& message,
                const std::string& param) {
  const FailureSpec& spec = failure_spec(failure);
  res.status = spec.status;
  res.set_content(error_json(failure, message, param), "application/json");
  if (spec.closes) {
    if (req.get_header_value("Connection") != "close") res.set_header("Connection", "close");
    ConnectionServer::close_after_answer();
  }
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const std::string& data) { return "data: " + data + "\n\n"; }
std::string sse(const json& j) { return sse(dump(j)); }

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

// --host must be an address of this machine: a name that does not resolve, or resolves elsewhere,
// is named as the host's fault (not the port's).
void require_local_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found);
  require(rc == 0 && found != nullptr, "--host", host, std::string("not an address: ") + ::gai_strerror(rc));
  std::string why;
  bool ok = false;
  for (const addrinfo* a = found; a != nullptr && !ok; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    ok = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;  // port 0: any free one, only the address is tried
    if (!ok) why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  require(ok, "--host", host, "cannot listen on this address (" + why + ")");
}

}  // namespace

struct HttpServer::Impl {
  const Model& model;
  Scheduler& scheduler;
  HttpOptions options;
  ConnectionServer server;
  HttpCounters counters;
  FragmentMemo fragments;  // a chat resent whole every turn is tokenized message by message once
  std::atomic<uint64_t> next_id{1};
  int bound_port = 0;

  Impl(const Model& m, Scheduler& s, HttpOptions o)
      : model(m), scheduler(s), options(std::move(o)), server(options.connections) {}

  void routes();
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
};

void HttpServer::Impl::routes() {
  server.set_payload_max_length(options.max_body_bytes);
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json body = {
        {"object", "list"},
        {"data",
         json::array(
             {{{"id", options.limits.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "squeezekv"}}})}};
    res.set_content(dump(body), "application/json");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    counters.connections_open = server.open_connections();
    counters.connections_refused = server.refused_connections();
    counters.fragments_reused = fragments.hits();
    counters.fragments_encoded = fragments.misses();
    res.set_content(render_metrics(scheduler.stats(), counters), "text/plain; version=0.0.4");
  });
  // Kept caches saved and restored by id (--cache-dir), as llama-server's slot save/restore.
  auto listing_json = [](const CacheListing& c) {
    return json{{"id", c.id},       {"tokens", c.tokens}, {"bytes", c.bytes}, {"resident", c.resident},
                {"saved", c.saved}, {"method", c.method}};
  };
  server.Get("/caches", [this, listing_json](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const CacheListing& c : scheduler.caches()) data.push_back(listing_json(c));
    res.set_content(dump(json{{"object", "list"}, {"data", data}}), "application/json");
  });
  server.Post(R"(/caches/([^/]+))", [this, listing_json](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    const std::string action = req.has_param("action") ? req.get_param_value("action") : "";
    CacheAction what = CacheAction::save;
    if (action == "restore") what = CacheAction::restore;
    else if (action == "erase") what = CacheAction::erase;
    else if (action != "save") {
      ++counters.client_errors;
      return send_error(req, res, Failure::invalid_field, "action = " + action + ": expected save, restore or erase",
                        "action");
    }
    try {
      json body = listing_json(scheduler.cache_action(id, what));
      body["action"] = action;
      res.set_content(dump(body), "application/json");
    } catch (const CacheActionError& e) {
      if (failure_spec(e.failure).status < 500) ++counters.client_errors;
      send_error(req, res, e.failure, e.what(), e.failure == Failure::cache_not_found ? "id" : "");
    }
  });
  server.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  server.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
  // The body's length is checked before any of it is read: cpp-httplib takes "-5" for 2^64 - 5
  // bytes and waits for them, and it reads chunked bodies without a limit.
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    using Handled = httplib::Server::HandlerResponse;
    if (req.has_header("Transfer-Encoding")) {
      ++counters.client_errors;
      send_error(req, res, Failure::length_required,
                 "a request body needs a Content-Length (chunked bodies are refused)", "Transfer-Encoding");
      return Handled::Handled;
    }
    const size_t count = req.get_header_value_count("Content-Length");
    if (count == 0) return Handled::Unhandled;
    const std::string text = req.get_header_value("Content-Length");
    uint64_t length = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), length);
    if (count > 1 || text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      ++counters.client_errors;
      send_error(req, res, Failure::bad_content_length,
                 "Content-Length = " + text + ": must be one decimal byte count" + (count > 1 ? " (given twice)" : ""),
                 "Content-Length");
      return Handled::Handled;
    }
    if (length > options.max_body_bytes) {
      ++counters.client_errors;
      send_error(req, res, Failure::body_too_large,
                 "Content-Length = " + text + ": the body is larger than --max-body (" +
                     std::to_string(options.max_body_bytes) + " bytes)",
                 "Content-Length");
      return Handled::Handled;
    }
    return Handled::Unhandled;
  });
  // httplib's own refusals (unknown route, a request it could not read) get the JSON shape too.
  server.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ++counters.client_errors;
    // A head past its budget (connection.h): its reading stopped there, hence the parser's 400.
    if (const HeadBudget::State head = ConnectionServer::head_overflow();
        head != HeadBudget::State::reading && head != HeadBudget::State::done) {
      return send_error(req, res, Failure::headers_too_large,
                        ConnectionServer::head_overflow_message(head, options.connections), "");
    }
    if (res.status == 404)
      return send_error(req, res, Failure::no_route, "no route " + req.method + " " + req.path, "");
    if (res.status == 413) {
      return send_error(req, res, Failure::body_too_large,
                        "the body is larger than --max-body (" + std::to_string(options.max_body_bytes) + " bytes)",
                        "");
    }
    send_error(req, res, Failure::bad_head,
               "the request could not be read (HTTP " + std::to_string(res.status) +
                   "): a request line or header that does not parse, or a request that did not arrive within "
                   "the read timeout",
               "");
  });
  server.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(req, res, Failure::inference_failed, what, "");
  });
}

void HttpServer::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  ++(chat ? counters.chat_completions : counters.completions);
  CompletionRequest request;
  try {
    request = parse_request(req.body, chat, options.limits, model.tokenizer(), &fragments);
  } catch (const RequestError& e) {
    ++counters.client_errors;
    return send_error(req, res, e.failure, e.what(), e.param);
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
      return send_error(req, res, Failure::never_fits,
                        "this request's cache needs up to " + std::to_string(promise) + " K/V bytes, more than the " +
                            "server's limit (--kv-limit-mib); lower max_tokens or choose a smaller cache",
                        "squeezekv");
    case Admission::queue_full:
      ++counters.rejected;
      res.set_header("Retry-After", "1");
      return send_error(req, res, Failure::queue_full,
                        "the server is busy: every K/V byte is promised and the queue is full", "");
    case Admission::shutting_down:
      ++counters.rejected;
      return send_error(req, res, Failure::shutting_down, "the server is shutting down", "");
  }
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  const auto created = int64_t(std::time(nullptr));
  const std::string model_id = options.limits.model_id;
  const char* object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  auto usage_json = [](const Usage& u) {
    return json{{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  };
  auto chunk = [=](const json& choice) {
    return json{
        {"id", id}, {"object", object}, {"created", created}, {"model", model_id}, {"choices", json::array({choice})}};
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
        [=](size_t, httplib::DataSink& sink) {
          if (chat) {
            json role =
                chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
            const std::string s = sse(role);
            if (!sink.write(s.data(), s.size())) return false;
          }
          ChannelUpdate u;
          for (;;) {
            if (!sink.is_writable()) return false;
            if (!channel->take(u, 50ms)) continue;
            if (!u.text.empty()) {
              const json c =
                  chat ? chunk({{"index", 0}, {"delta", {{"content", u.text}}}, {"finish_reason", nullptr}})
                       : chunk({{"text", u.text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
              const std::string s = sse(c);
              if (!sink.write(s.data(), s.size())) return false;
            }
            if (!u.done) continue;
            std::string tail;
            if (u.error_status != 0) {
              tail = sse(error_json(failure_of_status(u.error_status), u.error, ""));
            } else {
              json last =
                  chat ? chunk({{"index", 0}, {"delta", json::object()}, {"finish_reason", u.finish_reason}})
                       : chunk({{"text", ""}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", u.finish_reason}});
              tail = sse(last);
              if (include_usage) {
                json usage = chunk({});
                usage["choices"] = json::array();
                usage["usage"] = usage_json(u.usage);
                if (!u.usage.cache_id.empty()) usage["squeezekv"] = {{"cache_id", u.usage.cache_id}};
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
  // Not streamed: the answer waits here until the end, so that its status is the outcome's (a 503
  // when the server shuts down meanwhile, not a 200 sent ahead of it). The client leaving while
  // it waits cancels the session.
  std::string text;
  ChannelUpdate u;
  for (;;) {
    if (ConnectionServer::client_gone()) return release(false);
    if (!channel->take(u, 50ms)) continue;
    text += u.text;
    if (u.done) break;
  }
  if (u.error_status != 0) return send_error(req, res, failure_of_status(u.error_status), u.error, "");
  const json choice =
      chat ? json{{"index", 0},
                  {"message", {{"role", "assistant"}, {"content", text}}},
                  {"finish_reason", u.finish_reason}}
           : json{{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", u.finish_reason}};
  const json body = {{"id", id},
                     {"object", object},
                     {"created", created},
                     {"model", model_id},
                     {"choices", json::array({choice})},
                     {"usage", usage_json(u.usage)}};
  json answer = body;
  if (!u.usage.cache_id.empty()) answer["squeezekv"] = {{"cache_id", u.usage.cache_id}};
  res.set_content(dump(answer), "application/json");
}

HttpServer::HttpServer(const Model& model, Scheduler& scheduler, HttpOptions options)
    : impl_(std::make_unique<Impl>(model, scheduler, std::move(options))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  require_local_address(o.host);
  if (o.port == 0) {
    impl_->bound_port = impl_->server.bind_to_any_port(o.host.c_str());
  } else {
    impl_->bound_port = impl_->server.bind_to_port(o.host.c_str(), o.port) ? o.port : -1;
  }
  require(impl_->bound_port > 0, "--port", o.port,
          "cannot listen on " + o.host + ":" + std::to_string(o.port) + " (the port is in use, or needs privileges)");
  widen_backlog(impl_->bound_port);
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::listen() { impl_->server.listen_after_bind(); }

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace squeezekv::serve
