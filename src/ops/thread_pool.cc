// ThreadPool: one packed atomic (epoch, next task) per job. run() first moves to an odd epoch
// (preparing: no task can be claimed, workers keep waiting), writes the job's fields, then
// publishes the next, even epoch with task 0; everyone (the caller included) claims tasks by
// compare-exchange on that word, so only workers that really got a task hold the job alive. The
// caller runs tasks until none is unclaimed, then waits for done_tasks_ to reach n_tasks: a
// worker that was descheduled before claiming anything costs nothing.
#include "squeezekv/ops/thread_pool.h"

#include <algorithm>

#include "squeezekv/base/errors.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace squeezekv {
namespace {

// Spin iterations before sleeping (a pause is 10-150 cycles, so up to ~0.2 ms): bridges the gap
// between consecutive small kernels of one forward pass.
constexpr int spin_iterations = 4000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

constexpr uint64_t epoch_of(uint64_t job) { return job >> 32; }
constexpr bool published(uint64_t job) { return (epoch_of(job) & 1) == 0; }
constexpr uint64_t task_of(uint64_t job) { return job & 0xffffffffu; }

}  // namespace

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) num_threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  require(num_threads <= 1024, "num_threads", num_threads, "must be at most 1024");
  threads_.reserve(num_threads - 1);
  for (size_t worker = 1; worker < num_threads; ++worker) {
    threads_.emplace_back([this, worker] { worker_loop(worker); });
  }
}

ThreadPool::~ThreadPool() {
  {
    const std::lock_guard lock(mutex_);
    stop_.store(true, std::memory_order_seq_cst);
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void ThreadPool::drain(uint64_t epoch, size_t worker) {
  uint64_t job = job_.load();
  for (;;) {
    if (epoch_of(job) != epoch) return;
    // Read the job before claiming. All of these are seq_cst: if a field already holds the next
    // job's value, run() had moved job_ to the odd "preparing" epoch before writing it, so the
    // claim below fails; a successful claim proves the fields belong to `epoch`.
    const size_t n_tasks = n_tasks_.load();
    const TaskFn fn = fn_.load();
    void* context = context_.load();
    const uint64_t task = task_of(job);
    if (task >= n_tasks) return;
    if (!job_.compare_exchange_weak(job, job + 1)) continue;
    try {
      fn(context, size_t(task), worker);
    } catch (...) {
      const std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_tasks_.fetch_add(1) + 1 == n_tasks && caller_sleeping_.load(std::memory_order_seq_cst)) {
      const std::lock_guard lock(mutex_);  // orders the notify after the caller's predicate check
      done_.notify_one();
    }
    job = job_.load();
  }
}

void ThreadPool::run(size_t n_tasks, TaskFn fn, void* context) {
  if (n_tasks == 0) return;
  const std::lock_guard run_lock(run_mutex_);
  if (threads_.empty() || n_tasks == 1) {
    for (size_t task = 0; task < n_tasks; ++task) fn(context, task, 0);
    return;
  }
  require(n_tasks < (size_t(1) << 32), "n_tasks", n_tasks, "must be below 2^32");
  const uint64_t epoch = epoch_of(job_.load()) + 2;
  job_.store((epoch - 1) << 32);  // preparing: late workers of the last job can claim nothing now
  fn_.store(fn);
  context_.store(context);
  n_tasks_.store(n_tasks);
  done_tasks_.store(0);
  error_ = nullptr;
  job_.store(epoch << 32);  // publishes the fields above
  // A sleeper registers itself (seq_cst) before re-checking job_ under mutex_, so either it sees
  // the new epoch or we see it and notify under the lock.
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { const std::lock_guard lock(mutex_); }
    wake_.notify_all();
  }

  drain(epoch, 0);

  // Every task is claimed; wait for the ones other workers are still running.
  for (int i = 0; i < spin_iterations && done_tasks_.load(std::memory_order_acquire) != n_tasks; ++i) cpu_relax();
  std::unique_lock lock(mutex_);
  if (done_tasks_.load(std::memory_order_acquire) != n_tasks) {
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    done_.wait(lock, [&] { return done_tasks_.load(std::memory_order_seq_cst) == n_tasks; });
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    lock.unlock();
    std::rethrow_exception(error);
  }
}

void ThreadPool::worker_loop(size_t worker) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new epoch: spin first, then sleep.
    auto fresh = [&] {
      const uint64_t job = job_.load();
      return (published(job) && epoch_of(job) != seen) || stop_.load();
    };
    bool ready = false;
    for (int i = 0; i < spin_iterations; ++i) {
      if (fresh()) {
        ready = true;
        break;
      }
      cpu_relax();
    }
    if (!ready) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, fresh);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    const uint64_t job = job_.load();
    if (!published(job)) continue;  // a newer job is being prepared: wait for it
    seen = epoch_of(job);
    drain(seen, worker);
  }
}

}  // namespace squeezekv
