// /metrics in Prometheus' text format: the HTTP layer's request counts and the scheduler's
// sessions, tokens and K/V memory against the limit.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "serve/scheduler.h"

namespace squeezekv::serve {

struct HttpCounters {
  std::atomic<uint64_t> completions{0}, chat_completions{0};
  std::atomic<uint64_t> client_errors{0};                             // 4xx answers
  std::atomic<uint64_t> rejected{0};                                  // 503: queue full or shutting down
  std::atomic<uint64_t> disconnects{0};                               // clients gone before their answer ended
  std::atomic<uint64_t> connections_open{0}, connections_refused{0};  // copied from the connection loop
  // Chat messages between special tokens found encoded already, and encoded anew (FragmentMemo).
  std::atomic<uint64_t> fragments_reused{0}, fragments_encoded{0};  // copied from the memo
};

std::string render_metrics(const SchedulerStats& stats, const HttpCounters& http);

}  // namespace squeezekv::serve
