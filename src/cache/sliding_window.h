// The rows of a sliding layer (core/layer_kind.h): every head holds the newest `window` positions.
// Written as a TokenPolicy so that LayerCache stores, settles and accounts for a sliding layer on
// the same path as an evicting one; it is never registered, scores nothing and is never chosen by
// a method.
#pragma once

#include <memory>

#include "squeezekv/policy/token_policy.h"

namespace squeezekv {

// Its evict(layer, window) drops every row older than the newest `window` positions.
std::unique_ptr<TokenPolicy> make_sliding_window_rows();

}  // namespace squeezekv
