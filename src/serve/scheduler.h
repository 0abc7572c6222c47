// The scheduler: one thread owns the Engine and every session's cache (caches are single-writer).
// Each step runs the decode tokens of all active sessions and the next prompt chunks of new ones
// as one Engine::forward_batch (continuous batching), samples each session with its own Sampler
// (seeded per request, so batching never changes a result) and pushes text to its Channel.
//
// Admission: a request's cache promises at most promised_kv_bytes (admission.h); it runs when the
// promises of the running ones plus its own fit kv_limit_bytes, else it waits in a FIFO queue of
// at most queue_limit requests, and beyond that it is refused.
//
// Kept caches: a session that finishes (cache_prompt on) leaves its cache resident, keyed by the
// tokens it has seen, up to kept_caches of them. A request with the same cache configuration
// whose prompt begins with a kept cache's whole sequence (and goes on past it) continues from it:
// only the new tokens are prefilled, with the policy and allocator as they stand (an evicting
// cache has already evicted; squeeze's schedule is not measured again). A prompt that diverges
// inside a kept sequence starts fresh: an evicting cache cannot give back the rows it dropped, so
// rewinding it to the shared prefix would not be the cache a prefill of that prefix builds.
// Kept caches count against kv_limit_bytes: admission looks only at the running sessions'
// promises, and when a session starts, the least recently used kept caches are dropped until
// promises plus kept bytes fit the limit again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/cache_store.h"
#include "serve/channel.h"
#include "serve/error_contract.h"
#include "serve/request.h"
#include "squeezekv/engine/engine.h"

namespace squeezekv::serve {

struct SchedulerOptions {
  size_t kv_limit_bytes = size_t(1) << 30;
  size_t queue_limit = 64;
  int chunk = 512;        // prompt tokens per prefill step of one session (generate's -b)
  int max_sessions = 64;  // sessions decoding together at most
  int kept_caches = 16;   // finished sessions' caches kept for continuation (0: none)
  std::string cache_dir;  // --cache-dir: kept caches saved, spilled and found again there ("": none)
};

// A kept cache, resident or saved in --cache-dir (GET /caches).
struct CacheListing {
  std::string id;
  size_t tokens = 0;
  size_t bytes = 0;  // resident K/V bytes, or the file's bytes when only saved
  bool resident = false;
  bool saved = false;
  std::string method;
};

enum class CacheAction { save, restore, erase };

// A cache action that cannot be done: its failure (error_contract.h) and message.
struct CacheActionError : std::runtime_error {
  CacheActionError(Failure f, const std::string& message) : std::runtime_error(message), failure(f) {}
  Failure failure;
};

enum class Admission { running, queued, queue_full, never_fits, shutting_down };

// What /metrics shows; a copy taken under the scheduler's lock.
struct SchedulerStats {
  struct Session {
    uint64_t id = 0;
    size_t resident_bytes = 0;
    size_t promised_bytes = 0;
    size_t sliding_bytes = 0;  // of resident_bytes: the sliding layers' windows
  };
  std::vector<Session> sessions;
  size_t queued = 0;
  size_t kept_caches = 0, kept_bytes = 0;   // idle caches kept for continuation, their K/V bytes
  uint64_t kept_hits = 0, kept_misses = 0;  // requests (cache_prompt on) that continued one / did not
  uint64_t kept_dropped = 0;                // kept caches dropped for memory or for the count
  uint64_t kept_spilled = 0;                // of those, saved to --cache-dir instead of gone
  uint64_t kept_restored = 0;               // caches loaded from --cache-dir (a prompt or action=restore)
  uint64_t prompt_tokens_reused = 0;        // prompt tokens not prefilled thanks to a kept cache
  size_t kv_limit_bytes = 0;
  size_t kv_promised_bytes = 0;                                          // reserved by the running sessions
  size_t kv_resident_bytes = 0;                                          // measured after the last step
  size_t kv_resident_sliding_bytes = 0, kv_resident_evicting_bytes = 0;  // its two parts
  std::vector<int> layer_windows;     // the model's layers: 0 global (evicting), W sliding
  size_t kv_resident_peak_bytes = 0;  // sessions and kept caches together
  uint64_t promise_violations = 0;    // a session above its promise (a bug if ever non-zero)
  uint64_t prompt_tokens = 0, completion_tokens = 0, steps = 0, finished = 0, cancelled = 0;
  double tokens_per_second = 0.0;  // generated tokens over the last few seconds
  int last_batch = 0;              // sequences in the last step
};

class Scheduler {
 public:
  Scheduler(const Model& model, ThreadPool* pool, SchedulerOptions options);
  ~Scheduler();  // shutdown()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  size_t promise(const CompletionRequest& request) const;
  // Thread-safe. On running or queued the scheduler owns the request and answers on `channel`.
  Admission submit(CompletionRequest request, std::shared_ptr<Channel> channel);
  // The client is gone: the session (or queued request) is dropped at the next step.
  void cancel(Channel& channel);
  // Stops taking requests, fails every queued and running one with 503 and joins the thread.
  void shutdown();
  SchedulerStats stats() const;

  // Saved caches (--cache-dir; docs/server.md). Thread-safe.
  std::vector<CacheListing> caches() const;
  // save: the resident kept cache `id` to --cache-dir (it stays resident); restore: the saved file
  // `id` becomes a resident kept cache (its bytes count against --kv-limit-mib as any kept cache's);
  // erase: gone from memory and disk. CacheActionError: no --cache-dir, no such id, a file that
  // cannot be written or read.
  CacheListing cache_action(const std::string& id, CacheAction action);

 private:
  struct Job {
    CompletionRequest request;
    std::shared_ptr<Channel> channel;
    size_t promise = 0;
    std::unique_ptr<ModelCache> continued;  // the kept cache it continues, taken when admitted
    size_t reused = 0;                      // the tokens that cache has taken
  };
  struct Session;
  struct Kept {
    std::string id;             // cache_id(config, seen)
    std::vector<int32_t> seen;  // every token the cache has taken, in order
    KVCacheConfig config;       // the cache's (resolved) configuration
    std::unique_ptr<ModelCache> cache;
    size_t bytes = 0;  // its K/V bytes (an idle cache does not change)
  };

  void run();
  void admit_locked();  // moves queue heads that fit into incoming_
  // Admits `job`: its promise reserved and the kept cache it continues taken out of kept_, then
  // kept caches dropped until promises + kept bytes fit the limit: one step under the lock, so
  // that /metrics never reads more than the limit.
  void reserve_locked(Job& job);
  std::unique_ptr<Session> start_locked(Job job);  // a kept cache continued, or a fresh one
  std::string keep_locked(Session& s);  // a finished session's cache (and its prompt tokens) move to kept_; its id
  void drop_kept_locked();              // LRU first, until promises + kept fit the limit and the count
  CacheListing listing_locked(const std::string& id) const;
  void step(std::vector<std::unique_ptr<Session>>& active);
  void finish(Session& s, const std::string& reason);
  bool emit(Session& s, int32_t token);  // true when the session is done

  const Model& model_;
  Engine engine_;
  SchedulerOptions options_;
  std::vector<LayerKind> layer_kinds_;  // the model's, as every cache the engine makes has them

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;      // waiting for memory
  std::vector<Job> incoming_;  // admitted, not yet picked up by the thread
  size_t running_ = 0;         // admitted sessions (incoming and active)
  size_t reserved_ = 0;        // their promises
  std::vector<Kept> kept_;     // idle caches, oldest first; changed under mutex_ only
  size_t kept_bytes_ = 0;
  CacheStore store_;  // --cache-dir
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  SchedulerStats stats_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int>> recent_;  // generated per step
  std::thread thread_;
};

}  // namespace squeezekv::serve
