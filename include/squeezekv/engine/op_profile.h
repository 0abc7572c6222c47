// OpProfile: where a forward pass's time goes, by operation (`squeezekv bench --profile`). The
// engine times each section on the calling thread, so a section that hands work to the pool
// counts the hand-off and the wait with the work. Off (no profile set), a section costs one branch.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <string_view>

namespace squeezekv {

enum class EngineOp {
  embed,         // token embedding and the RoPE tables
  norms,         // RMS norms, biases, residual adds, the finiteness checks
  qkv,           // the q, k and v projections
  cache_write,   // RoPE on q and k, rows into the cache (its quantization, the policy's update)
  attention,     // scores and weighted values over the cache
  cache_settle,  // the end of an update: eviction, the budget, compaction
  attn_out,      // the attention output projection
  mlp_up,        // gate and up projections and the activation
  mlp_down,      // the down projection
  measure,       // the residual measurements of a measuring allocator
  logits,        // the output norm and projection
  count
};
inline constexpr size_t kEngineOps = size_t(EngineOp::count);

std::string_view to_string(EngineOp op);

class OpProfile {
 public:
  void add(EngineOp op, double seconds) { seconds_[size_t(op)] += seconds; }
  double seconds(EngineOp op) const { return seconds_[size_t(op)]; }
  double total() const;

 private:
  std::array<double, kEngineOps> seconds_{};
};

// Charges the time since the last lap (or construction) to an operation; nothing when the
// profile is null.
class OpTimer {
 public:
  explicit OpTimer(OpProfile* profile) : profile_(profile) {
    if (profile_) last_ = Clock::now();
  }
  void lap(EngineOp op) {
    if (!profile_) return;
    const Clock::time_point now = Clock::now();
    profile_->add(op, std::chrono::duration<double>(now - last_).count());
    last_ = now;
  }

 private:
  using Clock = std::chrono::steady_clock;
  OpProfile* profile_;
  Clock::time_point last_{};
};

}  // namespace squeezekv
