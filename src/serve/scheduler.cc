#include "serve/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <optional>

#include "serve/admission.h"
#include "squeezekv/base/utf8.h"
#include "squeezekv/engine/prefill.h"
#include "squeezekv/engine/sampler.h"
#include "squeezekv/methods/registry.h"

namespace squeezekv::serve {

using Clock = std::chrono::steady_clock;

struct Scheduler::Session {
  uint64_t id = 0;
  Job job;
  std::unique_ptr<ModelCache> cache;
  Sampler sampler;
  std::optional<PromptFeed> feed;  // the prompt after the tokens a kept cache had seen
  int generated = 0;
  int32_t next = 0;  // the token the next decode step feeds
  std::vector<float> logits;
  Utf8Stream utf8;   // never sends half a character
  std::string held;  // text held back while it may be the start of a stop string
  bool done = false;
  bool finished = false;         // done without error: the cache may be kept
  std::string finish_reason;     // told to the client once the session has left the step (see step)
  std::vector<int32_t> decoded;  // generated tokens fed to the cache (after the whole prompt)
  int reused = 0;                // prompt tokens a kept cache had seen

  Session(uint64_t id_, Job j, std::unique_ptr<ModelCache> c)
      : id(id_), job(std::move(j)), cache(std::move(c)), sampler(job.request.sampler) {}
  bool prefilling() const { return !feed->done(); }
};

Scheduler::Scheduler(const Model& model, ThreadPool* pool, SchedulerOptions options)
    : model_(model),
      engine_(model, pool),
      options_(options),
      layer_kinds_(engine_.make_cache(KVCacheConfig{})->layer_kinds()),
      store_(options_.cache_dir, model) {
  stats_.kv_limit_bytes = options_.kv_limit_bytes;
  stats_.layer_windows = sliding_windows_of(layer_kinds_);
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { shutdown(); }

size_t Scheduler::promise(const CompletionRequest& r) const {
  return promised_kv_bytes(r.cache, model_.config(), {int64_t(r.tokens.size()), r.max_tokens, options_.chunk},
                           layer_kinds_);
}

Admission Scheduler::submit(CompletionRequest request, std::shared_ptr<Channel> channel) {
  Job job{std::move(request), std::move(channel), 0, nullptr, 0};
  job.promise = promise(job.request);
  std::lock_guard lock(mutex_);
  if (stopping_) return Admission::shutting_down;
  if (job.promise > options_.kv_limit_bytes) return Admission::never_fits;
  // First come, first served: nobody overtakes the queue.
  if (queue_.empty() && reserved_ + job.promise <= options_.kv_limit_bytes &&
      running_ < size_t(options_.max_sessions)) {
    reserve_locked(job);
    incoming_.push_back(std::move(job));
    cv_.notify_all();
    return Admission::running;
  }
  if (queue_.size() >= options_.queue_limit) return Admission::queue_full;
  queue_.push_back(std::move(job));
  stats_.queued = queue_.size();
  return Admission::queued;
}

void Scheduler::cancel(Channel& channel) {
  channel.cancel();
  std::lock_guard lock(mutex_);
  cv_.notify_all();
}

void Scheduler::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s = stats_;
  s.queued = queue_.size();
  s.kv_promised_bytes = reserved_;
  s.kept_caches = kept_.size();
  s.kept_bytes = kept_bytes_;
  return s;
}

void Scheduler::admit_locked() {
  // Cancelled requests leave the queue at once, wherever they stand.
  std::erase_if(queue_, [](const Job& j) { return j.channel->cancelled(); });
  while (!queue_.empty() && reserved_ + queue_.front().promise <= options_.kv_limit_bytes &&
         running_ < size_t(options_.max_sessions)) {
    reserve_locked(queue_.front());
    incoming_.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  stats_.queued = queue_.size();
}

void Scheduler::drop_kept_locked() {
  // kept_ is in the order the caches were kept (a continued one leaves it), so the front is the
  // least recently used.
  while (!kept_.empty() &&
         (reserved_ + kept_bytes_ > options_.kv_limit_bytes || kept_.size() > size_t(options_.kept_caches))) {
    Kept& k = kept_.front();
    if (store_.enabled() && store_.find(k.id) == nullptr) {
      try {  // to --cache-dir instead of gone: a prompt that continues it loads it again
        store_.save(k.id, *k.cache, k.seen);
        ++stats_.kept_spilled;
      } catch (const Error& e) {
        std::fprintf(stderr, "squeezekv serve: kept cache %s dropped, not saved: %s\n", k.id.c_str(), e.what());
      }
    }
    kept_bytes_ -= k.bytes;
    kept_.erase(kept_.begin());
    ++stats_.kept_dropped;
  }
}

void Scheduler::reserve_locked(Job& job) {
  reserved_ += job.promise;
  ++running_;
  // The longest kept sequence this prompt continues (at least one token must be new: the cache
  // keeps no logits), held in memory or saved in --cache-dir. It leaves kept_: one conversation,
  // one cache; the promise covers it.
  const CompletionRequest& r = job.request;
  if (r.cache_prompt && options_.kept_caches > 0) {
    const KVCacheConfig resolved = engine_.resolved_config(r.cache);
    auto best = kept_.end();
    for (auto k = kept_.begin(); k != kept_.end(); ++k) {
      if (k->seen.size() >= r.tokens.size() || !(k->config == resolved)) continue;
      if (!std::equal(k->seen.begin(), k->seen.end(), r.tokens.begin())) continue;
      if (best == kept_.end() || k->seen.size() > best->seen.size()) best = k;
    }
    const CacheStore::Entry* saved = store_.enabled() ? store_.best_match(r.tokens, resolved) : nullptr;
    if (saved != nullptr && (best == kept_.end() || saved->seen.size() > best->seen.size())) {
      try {  // a cache saved or spilled to --cache-dir (a restart's too); the file stays
        LoadedCache loaded = store_.load(saved->id);
        ++stats_.kept_hits;
        ++stats_.kept_restored;
        job.reused = saved->seen.size();
        job.continued = std::move(loaded.cache);
      } catch (const Error& e) {
        std::fprintf(stderr, "squeezekv serve: saved cache %s not used: %s\n", saved->id.c_str(), e.what());
        store_.erase(saved->id);
      }
    }
    if (job.continued) {
    } else if (best == kept_.end()) {
      ++stats_.kept_misses;
    } else {
      ++stats_.kept_hits;
      job.reused = best->seen.size();
      job.continued = std::move(best->cache);
      kept_bytes_ -= best->bytes;
      kept_.erase(best);
    }
  }
  drop_kept_locked();  // the promises, this one included, plus what stays kept fit the limit
}

std::unique_ptr<Scheduler::Session> Scheduler::start_locked(Job job) {
  const CompletionRequest& r = job.request;
  std::unique_ptr<ModelCache> cache = std::move(job.continued);
  const size_t reused = job.reused;
  if (!cache) cache = engine_.make_cache(r.cache);
  auto s = std::make_unique<Session>(next_id_++, std::move(job), std::move(cache));
  // The commands' prompt protocol (engine/prefill.h), one update per step.
  PrefillOptions prompt;
  prompt.n_batch = options_.chunk;
  const CompletionRequest& request = s->job.request;  // `r` was moved into the session
  prompt.max_rows = int64_t(request.tokens.size()) + request.max_tokens;
  prompt.reset = false;  // a new cache is empty; a kept one continues
  s->feed.emplace(engine_, *s->cache, int64_t(request.tokens.size() - reused), prompt);
  s->reused = int(reused);
  stats_.prompt_tokens_reused += reused;
  return s;
}

std::string Scheduler::keep_locked(Session& s) {
  if (!s.finished || !s.job.request.cache_prompt || options_.kept_caches <= 0) return {};
  // What the cache has taken: the whole prompt (a session finishes only after it), then the
  // generated tokens it was fed.
  std::vector<int32_t> seen = std::move(s.job.request.tokens);
  seen.insert(seen.end(), s.decoded.begin(), s.decoded.end());
  const size_t bytes = s.cache->kept_bytes();
  kept_bytes_ += bytes;  // at most the promise it replaces (checked after every step)
  std::string id = cache_id(s.cache->config(), seen);
  kept_.push_back({id, std::move(seen), s.cache->config(), std::move(s.cache), bytes});
  drop_kept_locked();  // the count
  return id;
}

void Scheduler::run() {
  std::vector<std::unique_ptr<Session>> active;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      admit_locked();
      cv_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !active.empty() ||
               std::any_of(queue_.begin(), queue_.end(), [](const Job& j) { return j.channel->cancelled(); });
      });
      if (stopping_) break;
      admit_locked();
      for (Job& job : incoming_) {
        try {  // checked when parsed, so this should not throw; if it does, only this request fails
          active.push_back(start_locked(std::move(job)));
        } catch (const std::exception& e) {
          job.channel->fail(500, std::string("cannot start the session: ") + e.what());
          reserved_ -= job.promise;
          --running_;
        }
      }
      incoming_.clear();
    }
    if (!active.empty()) step(active);
  }
  // Shutting down: every request still here is told so.
  std::lock_guard lock(mutex_);
  for (auto& s : active) s->job.channel->fail(503, "the server is shutting down");
  for (Job& j : incoming_) j.channel->fail(503, "the server is shutting down");
  for (Job& j : queue_) j.channel->fail(503, "the server is shutting down");
  queue_.clear();
  incoming_.clear();
  kept_.clear();
  running_ = reserved_ = kept_bytes_ = 0;
  stats_.sessions.clear();
}

// Text out, held back while it could still become a stop string; true when a stop string ended it.
static bool release_text(std::string& held, const std::vector<std::string>& stops, Channel& channel) {
  size_t cut = std::string::npos;
  for (const std::string& s : stops) cut = std::min(cut, held.find(s));
  if (cut != std::string::npos) {
    channel.push(held.substr(0, cut));
    held.clear();
    return true;
  }
  size_t keep = 0;  // the longest tail of held that begins some stop string
  for (const std::string& s : stops) {
    for (size_t k = std::min(s.size() - 1, held.size()); k > keep; --k) {
      if (held.compare(held.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  channel.push(held.substr(0, held.size() - keep));
  held.erase(0, held.size() - keep);
  return false;
}

void Scheduler::finish(Session& s, const std::string& reason) {
  s.done = s.finished = true;
  s.finish_reason = reason;
}

bool Scheduler::emit(Session& s, int32_t token) {
  const CompletionRequest& r = s.job.request;
  if (!r.ignore_eos && (model_.tokenizer().is_end_of_generation(token) || (r.stop_token && token == *r.stop_token))) {
    s.held += s.utf8.finish();
    s.job.channel->push(s.held);
    finish(s, "stop");
    return true;
  }
  ++s.generated;
  s.held += s.utf8.push(model_.tokenizer().piece(token));
  if (release_text(s.held, r.stop, *s.job.channel)) {
    finish(s, "stop");
    return true;
  }
  if (s.generated >= r.max_tokens) {
    s.held += s.utf8.finish();
    if (!release_text(s.held, r.stop, *s.job.channel)) s.job.channel->push(s.held);
    finish(s, "length");
    return true;
  }
  s.next = token;
  return false;
}

void Scheduler::step(std::vector<std::unique_ptr<Session>>& active) {
  // Sessions whose client left go first: their memory is free before this step runs.
  uint64_t dropped = 0;
  std::erase_if(active, [&](const std::unique_ptr<Session>& s) {
    if (!s->job.channel->cancelled()) return false;
    ++dropped;
    std::lock_guard lock(mutex_);
    reserved_ -= s->job.promise;
    --running_;
    return true;
  });
  std::vector<SequenceStep> steps;
  std::vector<Session*> in_step;
  int prefill_tokens = 0;  // one chunk's worth of prompt per step, so decoding keeps its pace
  for (auto& s : active) {
    const auto& tokens = s->job.request.tokens;
    if (s->prefilling()) {
      PromptFeed& feed = *s->feed;
      const int64_t n = feed.next();
      if (prefill_tokens > 0 && prefill_tokens + n > options_.chunk) continue;
      const size_t first = size_t(s->reused) + size_t(feed.fed());
      feed.take();
      steps.push_back({std::span(tokens).subspan(first, size_t(n)), s->cache.get(),
                       feed.done() ? Logits::last : Logits::none, &s->logits});
      prefill_tokens += int(n);
    } else {
      steps.push_back({std::span(&s->next, 1), s->cache.get(), Logits::last, &s->logits});
      s->decoded.push_back(s->next);
    }
    in_step.push_back(s.get());
  }
  int generated = 0;
  if (!steps.empty()) {
    try {
      engine_.forward_batch(steps);
      for (size_t i = 0; i < steps.size(); ++i) {
        Session& s = *in_step[i];
        if (steps[i].mode == Logits::none) continue;
        if (!s.prefilling() && steps[i].tokens.data() != &s.next) {
          s.feed->finish(std::span(s.job.request.tokens).subspan(size_t(s.reused)));
        }
        const int32_t token = s.sampler.sample(s.logits.data(), model_.config().vocab);
        const int before = s.generated;
        emit(s, token);
        generated += s.generated - before;
      }
    } catch (const std::exception& e) {
      // The batch's caches may be half updated: every session in it ends with the error.
      for (Session* s : in_step) {
        s->job.channel->fail(500, std::string("inference failed: ") + e.what());
        s->done = true;  // not finished: a half-updated cache is never kept
      }
    }
  }
  // Measure before freeing: what this step held at its peak.
  size_t resident = 0;
  uint64_t violations = 0;
  std::vector<SchedulerStats::Session> sessions;
  for (auto& s : active) {
    const size_t bytes = s->cache->kept_bytes();
    resident += bytes;
    if (bytes > s->job.promise) {
      ++violations;
      std::fprintf(stderr, "squeezekv serve: session %llu holds %zu KV bytes, above its promise of %zu\n",
                   static_cast<unsigned long long>(s->id), bytes, s->job.promise);
#ifdef SQUEEZEKV_CHECK_INVARIANTS
      // Debug and sanitizer builds: the admission arithmetic (admission.cc) is wrong; stop here.
      std::abort();
#endif
    }
    if (!s->done) sessions.push_back({s->id, bytes, s->job.promise, s->cache->sliding_kept_bytes()});
  }
  const size_t sessions_peak = resident;
  resident = 0;
  size_t sliding = 0;
  for (const auto& x : sessions) {  // what stays after this step
    resident += x.resident_bytes;
    sliding += x.sliding_bytes;
  }
  uint64_t finished = 0, prompt = 0;
  std::lock_guard lock(mutex_);
  // The kept caches with the sessions (admission may drop kept caches, and a restore add one, from
  // other threads, under this lock).
  const size_t peak = sessions_peak + kept_bytes_;
  // Done sessions leave the step (kept order for the rest) and free their promise.
  const auto first_done =
      std::stable_partition(active.begin(), active.end(), [](const std::unique_ptr<Session>& s) { return !s->done; });
  std::vector<std::unique_ptr<Session>> finished_sessions(std::make_move_iterator(first_done),
                                                          std::make_move_iterator(active.end()));
  active.erase(first_done, active.end());
  // The client hears of the end only once its cache is kept and the stats count it (all under this
  // lock), so a client that reads /metrics or sends its next turn after an answer sees its effects.
  for (auto& s : finished_sessions) {
    ++finished;
    prompt += s->job.request.tokens.size();
    reserved_ -= s->job.promise;
    --running_;
    if (!s->finished) continue;  // failed: told already, its half-updated cache never kept
    Usage usage{int(s->job.request.tokens.size()), s->generated, s->reused, {}};
    const std::shared_ptr<Channel> channel = s->job.channel;
    usage.cache_id = keep_locked(*s);  // takes the request's tokens
    channel->finish(s->finish_reason, usage);
  }
  const auto now = Clock::now();
  recent_.emplace_back(now, generated);
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(5)) recent_.pop_front();
  int window_tokens = 0;
  for (const auto& [t, n] : recent_) window_tokens += n;
  const double span = recent_.size() > 1 ? std::chrono::duration<double>(now - recent_.front().first).count() : 0.0;
  stats_.tokens_per_second = span > 0 ? double(window_tokens) / span : 0.0;
  stats_.sessions = std::move(sessions);
  stats_.kv_resident_bytes = resident;
  stats_.kv_resident_sliding_bytes = sliding;
  stats_.kv_resident_evicting_bytes = resident - sliding;
  stats_.kv_resident_peak_bytes = std::max(stats_.kv_resident_peak_bytes, peak);
  stats_.promise_violations += violations;
  stats_.prompt_tokens += prompt;
  stats_.completion_tokens += uint64_t(generated);
  stats_.steps += steps.empty() ? 0 : 1;
  stats_.finished += finished;
  stats_.cancelled += dropped;
  stats_.last_batch = int(steps.size());
}

CacheListing Scheduler::listing_locked(const std::string& id) const {
  CacheListing out;
  out.id = id;
  for (const Kept& k : kept_) {
    if (k.id != id) continue;
    out = {id, k.seen.size(), k.bytes, true, false, k.config.method};
  }
  if (const CacheStore::Entry* e = store_.enabled() ? store_.find(id) : nullptr) {
    if (!out.resident) out = {id, e->seen.size(), size_t(e->file_bytes), false, true, e->config.method};
    out.saved = true;
  }
  return out;
}

std::vector<CacheListing> Scheduler::caches() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> ids;
  for (const Kept& k : kept_) ids.push_back(k.id);
  if (store_.enabled()) {
    for (const CacheStore::Entry& e : store_.entries()) {
      if (std::find(ids.begin(), ids.end(), e.id) == ids.end()) ids.push_back(e.id);
    }
  }
  std::vector<CacheListing> out;
  for (const std::string& id : ids) out.push_back(listing_locked(id));
  return out;
}

CacheListing Scheduler::cache_action(const std::string& id, CacheAction action) {
  std::lock_guard lock(mutex_);
  if (!store_.enabled()) {
    throw CacheActionError(Failure::no_cache_dir, "the server runs without --cache-dir: caches are not saved");
  }
  const auto kept = std::find_if(kept_.begin(), kept_.end(), [&](const Kept& k) { return k.id == id; });
  const bool saved = store_.find(id) != nullptr;
  if (kept == kept_.end() && !saved) {
    throw CacheActionError(Failure::cache_not_found,
                           "no kept or saved cache has id '" + id + "' (GET /caches lists them)");
  }
  try {
    if (action == CacheAction::save) {
      if (kept == kept_.end()) return listing_locked(id);  // saved already, not resident
      store_.save(id, *kept->cache, kept->seen);
    } else if (action == CacheAction::restore) {
      if (kept != kept_.end()) return listing_locked(id);  // resident already
      LoadedCache loaded = store_.load(id);
      const size_t bytes = loaded.cache->kept_bytes();
      if (reserved_ + bytes > options_.kv_limit_bytes) {
        throw CacheActionError(Failure::never_fits, "cache '" + id + "' holds " + std::to_string(bytes) +
                                                        " K/V bytes, more than --kv-limit-mib leaves now");
      }
      kept_bytes_ += bytes;
      kept_.push_back({id, std::move(loaded.contents.tokens), loaded.cache->config(), std::move(loaded.cache), bytes});
      ++stats_.kept_restored;
      drop_kept_locked();  // others give way, least recently used first (to the folder)
    } else {
      if (kept != kept_.end()) {
        kept_bytes_ -= kept->bytes;
        kept_.erase(kept);
      }
      store_.erase(id);
      CacheListing gone;
      gone.id = id;
      return gone;
    }
  } catch (const FormatError& e) {
    throw CacheActionError(Failure::cache_file_failed, e.what());
  }
  return listing_locked(id);
}

}  // namespace squeezekv::serve
