// A small fixed pool of worker threads, created by the caller and passed to the kernels that can
// use it (no global pool). parallel_for(n, fn) runs fn(task, worker) for every task in [0, n) and
// returns when all have finished; the calling thread works too, as worker 0, so a pool of one
// thread runs everything inline. Workers spin briefly between jobs (so back-to-back small jobs
// stay cheap), then sleep on a condition variable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace squeezekv {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 starts no thread. 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(size_t num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Workers that may run tasks (the caller included); worker ids passed to fn are < this.
  size_t num_workers() const { return threads_.size() + 1; }

  // Calls fn(task, worker) once for each task in [0, n_tasks), tasks handed out dynamically, and
  // blocks until all are done. The first exception thrown by fn is rethrown here (remaining tasks
  // still run). Calls from several threads are serialised; calling it from inside fn deadlocks.
  template <typename Fn>
  void parallel_for(size_t n_tasks, Fn&& fn) {
    using Callable = std::remove_reference_t<Fn>;
    run(
        n_tasks,
        [](void* context, size_t task, size_t worker) { (*static_cast<Callable*>(context))(task, worker); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* context, size_t task, size_t worker);

  void run(size_t n_tasks, TaskFn fn, void* context);
  void worker_loop(size_t worker);
  // Takes tasks until none is left; records the first exception.
  void drain(size_t worker);

  std::vector<std::thread> threads_;
  std::mutex run_mutex_;  // one parallel_for at a time

  // The current job, written by run() before it publishes a new epoch.
  TaskFn fn_ = nullptr;
  void* context_ = nullptr;
  size_t n_tasks_ = 0;
  std::atomic<size_t> next_task_{0};
  std::exception_ptr error_;  // guarded by mutex_

  std::mutex mutex_;
  std::condition_variable wake_;  // workers: a new epoch or shutdown
  std::condition_variable done_;  // caller: the last worker has finished the job
  std::atomic<uint64_t> epoch_{0};
  std::atomic<size_t> busy_workers_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace squeezekv
