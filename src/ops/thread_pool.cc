// ThreadPool: epoch-based job hand-off. run() publishes a job by bumping epoch_ under mutex_
// (so a sleeping worker cannot miss it); each worker drains tasks, then decrements busy_workers_,
// and the last one wakes the caller. The job's fields are written before the epoch store
// (release) and read after the worker's epoch load (acquire).
#include "squeezekv/ops/thread_pool.h"

#include <algorithm>

#include "squeezekv/core/errors.h"

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
    stop_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void ThreadPool::drain(size_t worker) {
  for (;;) {
    const size_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) return;
    try {
      fn_(context_, task, worker);
    } catch (...) {
      const std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::run(size_t n_tasks, TaskFn fn, void* context) {
  if (n_tasks == 0) return;
  const std::lock_guard run_lock(run_mutex_);
  if (threads_.empty() || n_tasks == 1) {
    for (size_t task = 0; task < n_tasks; ++task) fn(context, task, 0);
    return;
  }
  fn_ = fn;
  context_ = context;
  n_tasks_ = n_tasks;
  error_ = nullptr;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(threads_.size(), std::memory_order_relaxed);
  {
    const std::lock_guard lock(mutex_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();

  drain(0);

  // Wait until every worker has left drain(): only then may fn and context go out of scope.
  for (int i = 0; i < spin_iterations && busy_workers_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return busy_workers_.load(std::memory_order_acquire) == 0; });
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
    bool ready = false;
    for (int i = 0; i < spin_iterations; ++i) {
      if (epoch_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_acquire)) {
        ready = true;
        break;
      }
      cpu_relax();
    }
    if (!ready) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return epoch_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_acquire);
      });
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = epoch_.load(std::memory_order_acquire);

    drain(worker);

    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      const std::lock_guard lock(mutex_);  // orders the notify after the caller's predicate check
      done_.notify_one();
    }
  }
}

}  // namespace squeezekv
