#include "engine/util/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ptxserve {
namespace {

// Every index in [0, n) is visited exactly once, by at most num_threads chunks.
TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 5, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> chunks{0};
      pool.ParallelFor(n, [&](int64_t b, int64_t e) {
        EXPECT_LT(b, e);
        chunks.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
      EXPECT_LE(chunks.load(), threads);
      EXPECT_EQ(chunks.load(), std::min<int64_t>(n, threads));
    }
  }
}

TEST(ThreadPoolTest, ManyCallsAndSleepingWorkers) {
  ThreadPool pool(3);
  int64_t total = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
    total += sum.load();
    // Now and then let the workers fall asleep so the wake-up path runs too.
    if (iter % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(total, 2000 * 45);
}

TEST(ThreadPoolTest, NestedAndConcurrentCallers) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(10, [&](int64_t ib, int64_t ie) { sum.fetch_add(ie - ib); });
    }
  });
  EXPECT_EQ(sum.load(), 40);

  sum = 0;
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        pool.ParallelFor(8, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 3 * 200 * 8);
}

TEST(ThreadPoolTest, DefaultPoolExistsAndSizeIsFixedAfterwards) {
  ThreadPool& pool = ThreadPool::Default();
  EXPECT_GE(pool.num_threads(), 1);
  EXPECT_FALSE(ThreadPool::SetDefaultThreadCount(pool.num_threads() + 1));
  EXPECT_EQ(&pool, &ThreadPool::Default());
}

}  // namespace
}  // namespace ptxserve
