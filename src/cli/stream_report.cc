#include "cli/stream_report.h"

#include <cstdio>
#include <sstream>

#include "squeezekv/base/errors.h"
#include "squeezekv/eval/sweep.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::cli {

CLI::Option* add_stream_options(CLI::App& app, StreamArgs& a) {
  // The stream's own options need --stream: without it they would be ignored without a word.
  auto* stream = app.add_flag("--stream", a.stream,
                              "score the text as one stream, never reset (warm-up, then every "
                              "next-token prediction, per segment); -c and --chunks are refused with it")
                     ->group("Stream");
  app.add_option("--warmup", a.options.warmup, "stream: tokens fed before scoring starts")
      ->capture_default_str()
      ->group("Stream")
      ->needs(stream)
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--segment", a.options.segment, "stream: scored tokens per reported segment")
      ->capture_default_str()
      ->group("Stream")
      ->needs(stream)
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--stream-tokens", a.options.max_tokens, "stream: the first N tokens of the text (0 = all)")
      ->capture_default_str()
      ->group("Stream")
      ->needs(stream)
      ->check(CLI::Range(0, 1 << 30));
  // The chunked protocol's options do nothing to a stream: refused with it, not ignored.
  for (const char* chunked : {"--ctx-size", "--chunks"}) {
    if (CLI::Option* option = app.get_option_no_throw(chunked)) stream->excludes(option);
  }
  return stream;
}

nlohmann::json stream_json(const StreamResult& r) {
  nlohmann::json segments = nlohmann::json::array();
  for (const StreamSegment& s : r.segments) {
    segments.push_back({{"first", s.first},
                        {"scored", s.scored},
                        {"perplexity", s.perplexity},
                        {"mean_nll", s.mean_nll},
                        {"mean_kept_bytes", s.mean_kept_bytes},
                        {"peak_kept_bytes", s.peak_kept_bytes}});
  }
  const KVCacheConfig& c = r.config;
  return {{"variant", sweep_variant(c)},
          {"method", c.method},
          {"policy", resolved_policy(c)},
          {"allocator", resolved_allocator(c)},
          {"budget", keeps_every_row(c) ? 0 : c.budget},
          {"positions", to_string(c.positions)},
          {"score", to_string(c.score)},
          {"tokens", r.tokens},
          {"scored", r.scored},
          {"perplexity", r.perplexity},
          {"mean_nll", r.mean_nll},
          {"mean_kept_bytes", r.mean_kept_bytes},
          {"peak_kept_bytes", r.peak_kept_bytes},
          {"layer_schedule", r.layer_schedule},
          {"layer_budgets", r.layer_budgets},
          {"seconds", r.seconds},
          {"segments", segments},
          {"layer_windows", r.layer_windows},
          {"mean_sliding_kept_bytes", r.mean_sliding_kept_bytes},
          {"mean_evicting_kept_bytes", r.mean_evicting_kept_bytes}};
}

void print_stream_table(const std::vector<StreamResult>& results) {
  std::printf("%-48s %6s %9s %9s %9s %8s\n", "variant", "budget", "PPL", "KV KiB", "peak KiB", "seconds");
  for (const StreamResult& r : results) {
    std::printf("%-48s %6d %9.4f %9.1f %9.1f %8.1f\n", sweep_variant(r.config).c_str(), r.config.budget, r.perplexity,
                r.mean_kept_bytes / 1024.0, r.peak_kept_bytes / 1024.0, r.seconds);
  }
  if (results.empty() || results.front().segments.size() < 2) return;
  std::printf("\nper segment (first scored position: perplexity, one column per row above)\n");
  for (size_t s = 0; s < results.front().segments.size(); ++s) {
    std::printf("%10lld", static_cast<long long>(results.front().segments[s].first));
    for (const StreamResult& r : results) {
      if (s < r.segments.size()) std::printf(" %9.4f", r.segments[s].perplexity);
    }
    std::printf("\n");
  }
}

void write_stream_csv(OutputFile& out, const std::vector<StreamResult>& results) {
  std::ostringstream text;
  text << "variant,method,budget,positions,segment,first,scored,perplexity,mean_nll,mean_kept_bytes,peak_kept_bytes\n";
  auto row = [&](const StreamResult& r, const std::string& segment, int64_t first, int64_t scored, double ppl,
                 double nll, double kept, double peak) {
    text << '"' << sweep_variant(r.config) << "\"," << r.config.method << ',' << r.config.budget << ','
         << to_string(r.config.positions) << ',' << segment << ',' << first << ',' << scored << ',' << ppl << ',' << nll
         << ',' << kept << ',' << peak << "\n";
  };
  for (const StreamResult& r : results) {
    row(r, "all", r.segments.empty() ? 0 : r.segments.front().first, r.scored, r.perplexity, r.mean_nll,
        r.mean_kept_bytes, r.peak_kept_bytes);
    for (size_t s = 0; s < r.segments.size(); ++s) {
      const StreamSegment& g = r.segments[s];
      row(r, std::to_string(s), g.first, g.scored, g.perplexity, g.mean_nll, g.mean_kept_bytes, g.peak_kept_bytes);
    }
  }
  out.write(text.str());
  out.close();
}

}  // namespace squeezekv::cli
