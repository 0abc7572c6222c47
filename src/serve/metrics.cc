#include "serve/metrics.h"

#include <cstdio>

namespace squeezekv::serve {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char line[64];
  std::snprintf(line, sizeof line, "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + line + "\n";
}

}  // namespace

std::string render_metrics(const SchedulerStats& s, const HttpCounters& h) {
  std::string out;
  out +=
      "# HELP squeezekv_requests_total Completion requests received, by endpoint.\n"
      "# TYPE squeezekv_requests_total counter\n";
  out += "squeezekv_requests_total{endpoint=\"completions\"} " + std::to_string(h.completions.load()) + "\n";
  out += "squeezekv_requests_total{endpoint=\"chat_completions\"} " + std::to_string(h.chat_completions.load()) + "\n";
  metric(out, "squeezekv_requests_invalid_total", "counter", "Requests answered with a 4xx error.",
         double(h.client_errors.load()));
  metric(out, "squeezekv_requests_rejected_total", "counter",
         "Requests refused with 503 (queue full or shutting down).", double(h.rejected.load()));
  metric(out, "squeezekv_requests_finished_total", "counter", "Requests that ran to their end.", double(s.finished));
  metric(out, "squeezekv_requests_cancelled_total", "counter", "Running requests dropped because their client left.",
         double(s.cancelled));
  metric(out, "squeezekv_client_disconnects_total", "counter", "Clients gone before their answer ended.",
         double(h.disconnects.load()));
  metric(out, "squeezekv_connections_open", "gauge", "HTTP connections open.", double(h.connections_open.load()));
  metric(out, "squeezekv_connections_refused_total", "counter", "Connections refused beyond --max-connections.",
         double(h.connections_refused.load()));
  metric(out, "squeezekv_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         double(s.prompt_tokens));
  metric(out, "squeezekv_generated_tokens_total", "counter", "Tokens generated.", double(s.completion_tokens));
  metric(out, "squeezekv_generated_tokens_per_second", "gauge", "Tokens generated per second over the last 5 s.",
         s.tokens_per_second);
  metric(out, "squeezekv_decode_steps_total", "counter", "Batched forward passes run.", double(s.steps));
  metric(out, "squeezekv_batch_sequences", "gauge", "Sequences in the last batched forward pass.",
         double(s.last_batch));
  metric(out, "squeezekv_sessions_active", "gauge", "Sessions running (admitted).", double(s.sessions.size()));
  metric(out, "squeezekv_sessions_queued", "gauge", "Requests waiting for K/V memory.", double(s.queued));
  metric(out, "squeezekv_kv_limit_bytes", "gauge", "The K/V memory limit (--kv-limit-mib).", double(s.kv_limit_bytes));
  metric(out, "squeezekv_kv_promised_bytes", "gauge", "K/V bytes promised to the admitted sessions.",
         double(s.kv_promised_bytes));
  metric(out, "squeezekv_kv_resident_bytes", "gauge", "K/V bytes resident in all sessions after the last step.",
         double(s.kv_resident_bytes));
  metric(out, "squeezekv_kv_resident_sliding_bytes", "gauge",
         "Of the resident K/V bytes: the sliding layers' windows (the model's own attention).",
         double(s.kv_resident_sliding_bytes));
  metric(out, "squeezekv_kv_resident_evicting_bytes", "gauge",
         "Of the resident K/V bytes: the global layers, where the method evicts.",
         double(s.kv_resident_evicting_bytes));
  out +=
      "# HELP squeezekv_layer_sliding_window Each layer's attention: 0 global (evicting), W a sliding window.\n"
      "# TYPE squeezekv_layer_sliding_window gauge\n";
  for (size_t l = 0; l < s.layer_windows.size(); ++l) {
    out += "squeezekv_layer_sliding_window{layer=\"" + std::to_string(l) + "\"} " + std::to_string(s.layer_windows[l]) +
           "\n";
  }
  metric(out, "squeezekv_kv_resident_peak_bytes", "gauge",
         "The most K/V bytes resident after any step, sessions and kept caches together.",
         double(s.kv_resident_peak_bytes));
  metric(out, "squeezekv_kv_promise_violations_total", "counter", "Steps where a session held more than it promised.",
         double(s.promise_violations));
  metric(out, "squeezekv_kept_caches", "gauge", "Finished sessions' caches kept for continuation.",
         double(s.kept_caches));
  metric(out, "squeezekv_kept_cache_bytes", "gauge", "K/V bytes of the kept caches.", double(s.kept_bytes));
  metric(out, "squeezekv_kept_cache_hits_total", "counter", "Requests that continued a kept cache.",
         double(s.kept_hits));
  metric(out, "squeezekv_kept_cache_misses_total", "counter",
         "Requests (cache_prompt on) that found no kept cache to continue.", double(s.kept_misses));
  metric(out, "squeezekv_kept_caches_dropped_total", "counter", "Kept caches dropped for memory or for --kept-caches.",
         double(s.kept_dropped));
  metric(out, "squeezekv_kept_caches_spilled_total", "counter",
         "Kept caches pushed out of memory and saved to --cache-dir instead of dropped.", double(s.kept_spilled));
  metric(out, "squeezekv_kept_caches_restored_total", "counter",
         "Caches loaded from --cache-dir (a prompt that continues one, or action=restore).", double(s.kept_restored));
  metric(out, "squeezekv_prompt_tokens_reused_total", "counter",
         "Prompt tokens not prefilled because a kept cache had seen them.", double(s.prompt_tokens_reused));
  metric(out, "squeezekv_prompt_fragments_reused_total", "counter",
         "Chat prompt fragments (text between special tokens) found tokenized already.",
         double(h.fragments_reused.load()));
  metric(out, "squeezekv_prompt_fragments_encoded_total", "counter", "Chat prompt fragments tokenized anew.",
         double(h.fragments_encoded.load()));
  out +=
      "# HELP squeezekv_session_kv_resident_bytes K/V bytes resident per session.\n"
      "# TYPE squeezekv_session_kv_resident_bytes gauge\n";
  for (const auto& x : s.sessions) {
    out += "squeezekv_session_kv_resident_bytes{session=\"" + std::to_string(x.id) + "\"} " +
           std::to_string(x.resident_bytes) + "\n";
  }
  return out;
}

}  // namespace squeezekv::serve
