// Token ids of text fragments already encoded, for a caller whose texts repeat fragment by
// fragment: a chat resent whole every turn, where each message lies between special tokens. The
// tokenizer splits special tokens out first and encodes each raw fragment on its own, so a
// fragment's ids never depend on what surrounds it and the memo is exact. Thread-safe (a server's
// HTTP threads share one); bounded: it holds at most `max_bytes` of fragments and ids, and starts
// over when the next fragment would not fit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace squeezekv {

class FragmentMemo {
 public:
  explicit FragmentMemo(size_t max_bytes = size_t(16) << 20) : max_bytes_(max_bytes) {}

  // Appends the fragment's ids to `out` and returns true when it is held.
  bool find(std::string_view fragment, std::vector<int32_t>& out) const;
  // Holds the fragment's ids (a fragment larger than the whole bound is not held).
  void add(std::string_view fragment, std::span<const int32_t> ids);

  size_t bytes() const;      // what the held fragments and ids take, by the bound's count
  size_t fragments() const;  // how many are held
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  // Heterogeneous look-up: a string_view finds a std::string key without a copy.
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static size_t cost(size_t fragment_bytes, size_t n_ids) { return fragment_bytes + n_ids * sizeof(int32_t) + 64; }

  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> held_;
  size_t bytes_ = 0;
  mutable uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace squeezekv
