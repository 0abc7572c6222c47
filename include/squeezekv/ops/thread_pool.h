// A small fixed pool of worker threads, created by the caller and passed to the kernels that can
// use it (no global pool). parallel_for(n, fn) runs fn(task, worker) for every task in [0, n) and
// returns when all have finished; the calling thread works too, as worker 0, so a pool of one
// thread runs everything inline. Workers spin briefly between jobs (so back-to-back small jobs
// stay cheap), then sleep on a condition variable.
//
// Built not to collapse on a loaded machine: tasks are claimed one at a time and the caller waits
// only for tasks that were claimed, never for a worker that has not woken up yet. When another
// process holds a core, the caller simply runs every task itself instead of waiting for a
// descheduled worker (the old design waited for every worker to check in, once per job).
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
        n_tasks, [](void* context, size_t task, size_t worker) { (*static_cast<Callable*>(context))(task, worker); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* context, size_t task, size_t worker);

  void run(size_t n_tasks, TaskFn fn, void* context);
  void worker_loop(size_t worker);
  // Claims and runs tasks of job `epoch` until none is left or a newer job replaced it.
  void drain(uint64_t epoch, size_t worker);

  std::vector<std::thread> threads_;
  std::mutex run_mutex_;  // one parallel_for at a time

  // The job: epoch in the high 32 bits, the next unclaimed task in the low 32. A task is claimed
  // by a compare-exchange that also checks the epoch, so a late worker can never run a task of a
  // job other than the one whose fields it read. The fields are atomics (relaxed) because such a
  // late worker may read them while run() rewrites them for the next job; it then fails its
  // claim and discards what it read.
  std::atomic<uint64_t> job_{0};
  std::atomic<TaskFn> fn_{nullptr};
  std::atomic<void*> context_{nullptr};
  std::atomic<size_t> n_tasks_{0};
  std::atomic<size_t> done_tasks_{0};  // tasks of the current job finished
  std::exception_ptr error_;           // guarded by mutex_

  std::mutex mutex_;
  std::condition_variable wake_;  // workers: a new job or shutdown
  std::condition_variable done_;  // caller: the last claimed task has finished
  std::atomic<int> sleepers_{0};  // workers waiting on wake_ (notify only when someone sleeps)
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace squeezekv
