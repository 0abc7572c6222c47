// The HTTP front: OpenAI's routes (POST /v1/completions, /v1/chat/completions, GET /v1/models)
// plus GET /health and GET /metrics, on cpp-httplib's request parser inside our connection loop
// (connection.h). Handlers parse and check the request, hand it to the Scheduler and relay its
// Channel to the client (server-sent events when streaming; a plain answer is sent only once
// complete, so its status is the outcome's); a client that goes away cancels its session at once.
// Every failure is answered as error_contract.h says.
#pragma once

#include <memory>
#include <string>

#include "serve/connection.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/scheduler.h"

namespace squeezekv::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                          // 0: any free port (see HttpServer::port)
  size_t max_body_bytes = size_t(1) << 20;  // larger bodies get 413
  ConnectionLimits connections;             // open at once, read / idle / write timeouts
  RequestLimits limits;
};

class HttpServer {
 public:
  HttpServer(const Model& model, Scheduler& scheduler, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void bind();       // InvalidArgument naming --host/--port when it cannot listen there
  int port() const;  // the bound port
  void listen();     // serves until stop()
  void stop();       // thread-safe; listen() returns

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace squeezekv::serve
