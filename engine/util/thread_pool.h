// A small persistent thread pool for data-parallel loops (the CPU backend runs
// several ParallelFor calls per layer per step, so dispatch must be cheap: workers
// spin briefly on the job word before sleeping on a condition variable).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ptxserve {

class ThreadPool {
 public:
  // Work is split over `num_threads` participants: num_threads - 1 worker threads
  // plus the thread that calls ParallelFor. num_threads < 1 is treated as 1.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Splits [0, n) into min(n, num_threads) contiguous chunks of near-equal size and
  // runs fn(begin, end) once per chunk; returns when all chunks are done. Chunks are
  // claimed by whichever participant is free, the caller included, so a descheduled
  // worker delays nothing. Nested calls (from inside fn) run inline; concurrent calls
  // from other threads take turns.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  int num_threads() const { return num_threads_; }

  // The process-wide pool, created on first use with SetDefaultThreadCount's value or
  // std::thread::hardware_concurrency().
  static ThreadPool& Default();
  // Sets the default pool's size; only effective before Default() is first called.
  // Returns false (and changes nothing) once the pool exists.
  static bool SetDefaultThreadCount(int num_threads);

 private:
  void WorkerLoop();
  // Claims and runs chunks of job `gen` until none is left.
  void RunChunks(uint64_t gen);

  const int num_threads_;
  std::vector<std::thread> workers_;

  // The current job; written by the caller before `job_` announces it.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;

  // generation << 32 | chunks << 16 | next unclaimed chunk: one word, so a claim
  // (compare-and-swap) can only succeed for the job the claimer saw.
  std::atomic<uint64_t> job_{0};
  std::atomic<int> done_{0};      // chunks of the current job finished
  std::atomic<int> sleepers_{0};  // workers blocked (or about to block) on work_cv_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::mutex call_mu_;  // serialises concurrent ParallelFor callers
};

}  // namespace ptxserve
