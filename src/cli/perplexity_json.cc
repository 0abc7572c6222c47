#include "cli/perplexity_json.h"

namespace squeezekv::cli {

nlohmann::json perplexity_metrics_json(const PerplexityResult& r) {
  return {{"perplexity", r.perplexity},
          {"mean_nll", r.mean_nll},
          {"mean_kl", r.mean_kl},
          {"top1_agreement", r.top1_agreement},
          {"mean_kept_bytes", r.mean_kept_bytes},
          {"peak_kept_bytes", r.peak_kept_bytes},
          {"mean_full_bytes", r.mean_full_bytes},
          {"peak_full_bytes", r.peak_full_bytes},
          {"layer_schedule", r.layer_schedule},
          {"layer_budgets", r.layer_budgets},
          {"layer_mean_kept", r.layer_mean_kept},
          {"layer_importance", r.layer_importance},
          {"chunks", r.chunks},
          {"scored", r.scored},
          {"seconds", r.seconds},
          {"layer_windows", r.layer_windows},
          {"mean_sliding_kept_bytes", r.mean_sliding_kept_bytes},
          {"peak_sliding_kept_bytes", r.peak_sliding_kept_bytes},
          {"mean_evicting_kept_bytes", r.mean_evicting_kept_bytes},
          {"peak_evicting_kept_bytes", r.peak_evicting_kept_bytes}};
}

}  // namespace squeezekv::cli
