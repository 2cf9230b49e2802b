// A small persistent thread pool for data-parallel loops (the CPU backend runs
// several ParallelFor calls per layer per step, so dispatch must be cheap: workers
// spin briefly on a generation counter before sleeping on a condition variable).
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
  // runs fn(begin, end) once per chunk, the caller taking the first; returns when all
  // chunks are done. Calls from inside fn (nested) and concurrent calls from other
  // threads are safe: nested ones run inline, concurrent ones take turns.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  int num_threads() const { return num_threads_; }

  // The process-wide pool, created on first use with SetDefaultThreadCount's value or
  // std::thread::hardware_concurrency().
  static ThreadPool& Default();
  // Sets the default pool's size; only effective before Default() is first called.
  // Returns false (and changes nothing) once the pool exists.
  static bool SetDefaultThreadCount(int num_threads);

 private:
  void WorkerLoop(int index);
  void RunChunk(int index);

  const int num_threads_;
  std::vector<std::thread> workers_;

  // The current job; written by the caller before generation_ is bumped.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0;

  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};   // workers that have not finished the current job
  std::atomic<int> sleepers_{0};  // workers blocked (or about to block) on work_cv_
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::mutex call_mu_;  // serialises concurrent ParallelFor callers
};

}  // namespace ptxserve
