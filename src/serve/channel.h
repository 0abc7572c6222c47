// One request's results on their way from the scheduler thread (the only writer) to the HTTP
// thread that answers it: text as it is generated, then the end (a finish reason or an error).
// The HTTP side cancels when its client goes away; the scheduler frees the session at its next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

namespace squeezekv::serve {

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens a kept cache had already seen (not prefilled again)
  std::string cache_id;   // the kept cache this request left (POST /caches/{id}); "" when none
};

// What the HTTP side takes at once: the text since its last take, and the end if it came.
struct ChannelUpdate {
  std::string text;
  bool done = false;
  std::string finish_reason;  // "stop" | "length" when done without error
  Usage usage;
  int error_status = 0;  // non-zero: failed (500: engine error, 503: shutting down)
  std::string error;
  std::chrono::steady_clock::time_point first_text{};  // when the first text was pushed
};

class Channel {
 public:
  // Scheduler side.
  void push(const std::string& text) {
    if (text.empty()) return;
    std::lock_guard lock(mutex_);
    if (first_.time_since_epoch().count() == 0) first_ = std::chrono::steady_clock::now();
    text_ += text;
    cv_.notify_all();
  }
  void finish(std::string reason, Usage usage) {
    std::lock_guard lock(mutex_);
    done_ = true;
    reason_ = std::move(reason);
    usage_ = usage;
    cv_.notify_all();
  }
  void fail(int status, std::string message) {
    std::lock_guard lock(mutex_);
    done_ = true;
    status_ = status;
    error_ = std::move(message);
    cv_.notify_all();
  }

  // HTTP side: waits up to `timeout` for news; false when nothing new came.
  bool take(ChannelUpdate& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !text_.empty() || (done_ && !reported_); });
    if (text_.empty() && (!done_ || reported_)) return false;
    out.text = std::move(text_);
    text_.clear();
    out.first_text = first_;
    if (done_) {
      reported_ = true;
      out.done = true;
      out.finish_reason = reason_;
      out.usage = usage_;
      out.error_status = status_;
      out.error = error_;
    }
    return true;
  }
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string text_;
  bool done_ = false, reported_ = false;
  std::string reason_;
  Usage usage_;
  int status_ = 0;
  std::string error_;
  std::chrono::steady_clock::time_point first_{};
  std::atomic<bool> cancelled_{false};
};

}  // namespace squeezekv::serve
