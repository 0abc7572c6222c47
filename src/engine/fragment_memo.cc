#include "squeezekv/engine/fragment_memo.h"

namespace squeezekv {

bool FragmentMemo::find(std::string_view fragment, std::vector<int32_t>& out) const {
  std::lock_guard lock(mutex_);
  const auto it = held_.find(fragment);
  if (it == held_.end()) {
    ++misses_;
    return false;
  }
  ++hits_;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void FragmentMemo::add(std::string_view fragment, std::span<const int32_t> ids) {
  const size_t c = cost(fragment.size(), ids.size());
  if (c > max_bytes_) return;
  std::lock_guard lock(mutex_);
  if (held_.find(fragment) != held_.end()) return;  // another thread encoded it too
  if (bytes_ + c > max_bytes_) {
    held_.clear();  // starting over keeps the bound without a recency list to maintain
    bytes_ = 0;
  }
  held_.emplace(std::string(fragment), std::vector<int32_t>(ids.begin(), ids.end()));
  bytes_ += c;
}

size_t FragmentMemo::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

size_t FragmentMemo::fragments() const {
  std::lock_guard lock(mutex_);
  return held_.size();
}

uint64_t FragmentMemo::hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}

uint64_t FragmentMemo::misses() const {
  std::lock_guard lock(mutex_);
  return misses_;
}

}  // namespace squeezekv
