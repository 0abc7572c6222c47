// The single-writer check of a cache (layer_cache.h): one flag per cache, held for one call.
#pragma once

#include <atomic>
#include <string>

#include "squeezekv/base/errors.h"

namespace squeezekv {

// Holds a cache's single-writer flag for one call; a second thread's call throws instead of racing.
class Exclusive {
 public:
  Exclusive(std::atomic<bool>& busy, const char* call) : busy_(busy) {
    if (busy_.exchange(true, std::memory_order_acquire)) {
      throw InvalidArgument(std::string(call) +
                            ": the cache is in use by another thread; a cache is single-writer, "
                            "so serialise the calls on one cache (docs/semantics.md)");
    }
  }
  ~Exclusive() { busy_.store(false, std::memory_order_release); }
  Exclusive(const Exclusive&) = delete;
  Exclusive& operator=(const Exclusive&) = delete;

 private:
  std::atomic<bool>& busy_;
};

}  // namespace squeezekv
