#include "squeezekv/engine/op_profile.h"

#include <numeric>

namespace squeezekv {

std::string_view to_string(EngineOp op) {
  switch (op) {
    case EngineOp::embed:
      return "embed";
    case EngineOp::norms:
      return "norms";
    case EngineOp::qkv:
      return "qkv";
    case EngineOp::cache_write:
      return "cache_write";
    case EngineOp::attention:
      return "attention";
    case EngineOp::cache_settle:
      return "cache_settle";
    case EngineOp::attn_out:
      return "attn_out";
    case EngineOp::mlp_up:
      return "mlp_up";
    case EngineOp::mlp_down:
      return "mlp_down";
    case EngineOp::measure:
      return "measure";
    case EngineOp::logits:
      return "logits";
    case EngineOp::count:
      break;
  }
  return "?";
}

double OpProfile::total() const { return std::accumulate(seconds_.begin(), seconds_.end(), 0.0); }

}  // namespace squeezekv
