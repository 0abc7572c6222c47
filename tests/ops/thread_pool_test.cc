// ThreadPool: every task runs exactly once, the pool is reusable, zero tasks and one thread work,
// worker ids are in range and exceptions reach the caller.
#include "squeezekv/ops/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace squeezekv {
namespace {

TEST(ops_thread_pool, EveryTaskRunsExactlyOnce) {
  for (const size_t threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_workers(), threads);
    for (const size_t n_tasks : {1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> runs(n_tasks);
      std::atomic<bool> bad_worker{false};
      pool.parallel_for(n_tasks, [&](size_t task, size_t worker) {
        runs[task].fetch_add(1, std::memory_order_relaxed);
        if (worker >= pool.num_workers()) bad_worker = true;
      });
      for (size_t t = 0; t < n_tasks; ++t) ASSERT_EQ(runs[t].load(), 1) << "threads " << threads << " task " << t;
      EXPECT_FALSE(bad_worker);
    }
  }
}

TEST(ops_thread_pool, RepeatedUseOfTinyJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 20000; ++round) {
    pool.parallel_for(3, [&](size_t task, size_t) { total.fetch_add(static_cast<int64_t>(task) + 1); });
  }
  EXPECT_EQ(total.load(), 20000 * 6);
}

TEST(ops_thread_pool, WorkersSleepAndWakeUp) {
  ThreadPool pool(3);
  std::atomic<int> count{0};
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // long enough for workers to sleep
    pool.parallel_for(10, [&](size_t, size_t) { count.fetch_add(1); });
  }
  EXPECT_EQ(count.load(), 50);
}

// More threads than cores and a competing busy thread: workers are often descheduled between
// jobs, so late workers meet newer jobs. Every job must still run each of its own tasks exactly
// once, with its own function and context (each job checks its own id).
TEST(ops_thread_pool, OversubscribedPoolRunsEveryJobExactlyOnce) {
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  ThreadPool pool(8);
  for (int job = 0; job < 3000; ++job) {
    const size_t n_tasks = size_t(1 + job % 13);
    std::vector<int> runs(n_tasks, 0);
    std::atomic<int> wrong_job{0};
    const int id = job;
    pool.parallel_for(n_tasks, [&, id](size_t task, size_t) {
      if (id != job) wrong_job.fetch_add(1);
      ++runs[task];  // each task index is claimed once, so no two threads write one slot
    });
    ASSERT_EQ(wrong_job.load(), 0);
    for (size_t t = 0; t < n_tasks; ++t) ASSERT_EQ(runs[t], 1) << "job " << job << " task " << t;
  }
  stop = true;
  hog.join();
}

TEST(ops_thread_pool, ZeroTasks) {
  ThreadPool pool(2);
  bool called = false;
  pool.parallel_for(0, [&](size_t, size_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ops_thread_pool, OneThreadRunsInline) {
  ThreadPool pool(1);
  const auto caller = std::this_thread::get_id();
  std::vector<size_t> order;
  pool.parallel_for(5, [&](size_t task, size_t worker) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(worker, 0u);
    order.push_back(task);
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

TEST(ops_thread_pool, ExceptionReachesCaller) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  EXPECT_THROW(pool.parallel_for(50,
                                 [&](size_t task, size_t) {
                                   count.fetch_add(1);
                                   if (task == 17) throw std::runtime_error("task 17");
                                 }),
               std::runtime_error);
  EXPECT_EQ(count.load(), 50);  // the other tasks still ran
  // And the pool still works.
  std::atomic<int> after{0};
  pool.parallel_for(4, [&](size_t, size_t) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 4);
}

TEST(ops_thread_pool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  auto submit = [&] {
    for (int i = 0; i < 500; ++i) pool.parallel_for(4, [&](size_t, size_t) { count.fetch_add(1); });
  };
  std::thread other(submit);
  submit();
  other.join();
  EXPECT_EQ(count.load(), 2 * 500 * 4);
}

}  // namespace
}  // namespace squeezekv
