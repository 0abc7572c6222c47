// `squeezekv serve`: an OpenAI-compatible HTTP server (src/serve/) with the cache options as the
// server's default cache and K/V memory as the admission rule. SIGINT/SIGTERM end it cleanly:
// running and queued requests are told the server is shutting down, then it exits 0.
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/cache_options.h"
#include "cli/command_registry.h"
#include "cli/model_options.h"
#include "cli/option_checks.h"
#include "serve/http_server.h"
#include "squeezekv/base/errors.h"

namespace squeezekv::cli {
namespace {

struct ServeArgs {
  ModelOptions model;
  CacheOptions cache;
  serve::HttpOptions http;
  double kv_limit_mib = 1024;
  size_t queue = 64;
  int max_sessions = 64;
  int kept_caches = 16;
  std::string cache_dir;
  int max_tokens = 1 << 16;
  double read_timeout_s = 10, idle_timeout_s = 5;
};

// Seconds as milliseconds, in (0, 1 hour].
std::chrono::milliseconds timeout(const char* name, double seconds) {
  require(std::isfinite(seconds) && seconds > 0 && seconds <= 3600, name, seconds, "must lie in (0, 3600] seconds");
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

void run(ServeArgs& a) {
  const KVCacheConfig config = a.cache.resolve();
  require_effective(a.cache, config);
  // Finite and at most 1 PiB, so that the byte count is exact and not 0 (inf converted to size_t is undefined).
  require(std::isfinite(a.kv_limit_mib) && a.kv_limit_mib * 1024.0 * 1024.0 >= 1.0 && a.kv_limit_mib <= double(1 << 30),
          "--kv-limit-mib", a.kv_limit_mib, "must lie in (0, 1073741824] MiB (at least one byte)");
  require(a.model.n_batch >= 1, "--batch-size", a.model.n_batch, "must be >= 1");
  // Signals are taken by one thread (sigwait), so every thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a crash

  const Model model = Model::load(a.model.model_path, a.model.load_options());
  auto pool = a.model.make_pool();
  serve::HttpOptions http = a.http;
  http.connections.read_timeout = timeout("--read-timeout", a.read_timeout_s);
  http.connections.idle_timeout = timeout("--idle-timeout", a.idle_timeout_s);
  serve::RequestLimits& limits = http.limits;
  limits.model_id = std::filesystem::path(a.model.model_path).stem().string();
  limits.n_ctx = a.model.n_ctx > 0 ? a.model.n_ctx : model.config().context_length;
  limits.max_prompt_tokens = limits.n_ctx;
  limits.max_tokens = a.max_tokens;
  limits.cache = config;
  limits.cache.head_dim = model.config().head_dim;
  limits.chat = chat_template_of(model.file());

  serve::SchedulerOptions sched;
  sched.kv_limit_bytes = size_t(a.kv_limit_mib * 1024.0 * 1024.0);
  sched.queue_limit = a.queue;
  sched.chunk = a.model.n_batch;
  sched.max_sessions = a.max_sessions;
  sched.kept_caches = a.kept_caches;
  sched.cache_dir = a.cache_dir;
  serve::Scheduler scheduler(model, pool.get(), sched);
  serve::HttpServer server(model, scheduler, http);
  server.bind();
  std::fprintf(
      stderr, "squeezekv serve: listening on http://%s:%d (model %s, cache %s budget %d, chat %s, KV limit %.1f MiB)\n",
      http.host.c_str(), server.port(), limits.model_id.c_str(), cache_label(config).c_str(), config.budget,
      std::string(chat_format_name(limits.chat.format)).c_str(), a.kv_limit_mib);
  std::fflush(stderr);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "squeezekv serve: signal %d, shutting down\n", sig);
    scheduler.shutdown();  // every running and queued request ends with "shutting down"
    server.stop();
  });
  server.listen();
  // listen() returns only after stop(), i.e. after the waiter took a signal.
  waiter.join();
}

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "an OpenAI-compatible HTTP server with bounded K/V memory");
  args->model.n_batch = 64;  // prompt chunks interleave with other sessions' decoding (before the help captures it)
  add_model_options(*cmd, args->model);
  cmd->add_option("-c,--ctx-size", args->model.n_ctx, "longest prompt, and a full cache's context (0 = the model's)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--host", args->http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->http.port, "port (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--kv-limit-mib", args->kv_limit_mib, "K/V memory of all sessions and kept caches together, in MiB")
      ->capture_default_str();
  cmd->add_option("--queue", args->queue, "requests waiting for memory at most; beyond, 503")
      ->capture_default_str()
      ->check(uint_range(1 << 20));
  cmd->add_option("--max-sessions", args->max_sessions, "sessions decoding together at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--kept-caches", args->kept_caches,
                  "finished conversations' caches kept resident, so that a request continuing one prefills only "
                  "its new tokens (within --kv-limit-mib, least recently used dropped first; 0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--cache-dir", args->cache_dir,
                  "save kept caches here: POST /caches/{id}?action=save|restore|erase, those pushed out of "
                  "--kv-limit-mib or --kept-caches instead of dropping them, and found again after a restart");
  cmd->add_option("--max-tokens", args->max_tokens, "largest max_tokens a request may ask")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--max-body", args->http.max_body_bytes, "largest request body in bytes (413 beyond)")
      ->capture_default_str()
      ->check(int_range(1, 1 << 30));
  cmd->add_option("--max-connections,--http-threads", args->http.connections.max_connections,
                  "connections open at once, a thread each (streams hold one); beyond, 503 at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--read-timeout", args->read_timeout_s,
                  "seconds a request (line, headers, body) may take to arrive; beyond, the connection closes")
      ->capture_default_str();
  cmd->add_option("--idle-timeout", args->idle_timeout_s, "seconds an idle keep-alive connection stays open")
      ->capture_default_str();
  args->cache.command_defaults = {{"method", "full"}, {"score", "attention"}};
  add_cache_options(*cmd, args->cache);
  cmd->callback([args] { run(*args); });
}

const CommandRegistration kServeCommand{"serve", 110, add_serve_command};

}  // namespace
}  // namespace squeezekv::cli
