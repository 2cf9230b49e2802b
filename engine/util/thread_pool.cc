#include "engine/util/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace ptxserve {
namespace {

// How long a worker (or the waiting caller) busy-waits before blocking. A decode step
// issues ParallelFor calls microseconds apart, so a short spin avoids a futex
// wake-up per call; between steps the threads fall asleep and cost nothing.
constexpr auto kSpinTime = std::chrono::microseconds(50);

// Set while a thread runs a chunk, so a nested ParallelFor runs inline instead of
// waiting on workers that are busy with the outer loop.
thread_local bool tls_in_pool = false;

constexpr uint64_t Gen(uint64_t job) { return job >> 32; }
constexpr int Chunks(uint64_t job) { return static_cast<int>((job >> 16) & 0xffff); }
constexpr int Next(uint64_t job) { return static_cast<int>(job & 0xffff); }

// Spins until pred() holds or kSpinTime passes; true when pred() held.
template <typename Pred>
bool SpinUntil(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    _mm_pause();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
  }
}

std::mutex default_mu;
int default_threads = 0;  // 0: hardware_concurrency
bool default_created = false;

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::clamp(num_threads, 1, 0xffff)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_.store((Gen(job_.load()) + 1) << 32);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks(uint64_t gen) {
  uint64_t job = job_.load(std::memory_order_acquire);
  for (;;) {
    if (Gen(job) != gen || Next(job) >= Chunks(job)) return;
    // A successful claim proves the job is still `gen` and unfinished, so fn_ and n_
    // are that job's (the caller cannot move on until this chunk is done).
    if (!job_.compare_exchange_weak(job, job + 1, std::memory_order_acq_rel)) continue;
    const int chunks = Chunks(job);
    const int index = Next(job);
    const int64_t begin = n_ * index / chunks;
    const int64_t end = n_ * (index + 1) / chunks;
    tls_in_pool = true;
    (*fn_)(begin, end);
    tls_in_pool = false;
    if (done_.fetch_add(1) + 1 == chunks && caller_sleeping_.load()) {
      { std::lock_guard<std::mutex> lk(mu_); }
      done_cv_.notify_one();
    }
    job = job_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    // The two-flag handshake (sleepers_ here, job_ in ParallelFor, both seq_cst)
    // guarantees that either the caller sees this worker asleep and notifies, or
    // this worker sees the new job before it waits.
    if (!SpinUntil([&] { return Gen(job_.load(std::memory_order_acquire)) != seen; })) {
      sleepers_.fetch_add(1);
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return Gen(job_.load()) != seen; });
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = Gen(job_.load(std::memory_order_acquire));
    RunChunks(seen);
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (num_threads_ == 1 || n == 1 || tls_in_pool) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  const int chunks = static_cast<int>(std::min<int64_t>(n, num_threads_));
  fn_ = &fn;
  n_ = n;
  done_.store(0);
  const uint64_t gen = Gen(job_.load()) + 1;
  job_.store(gen << 32 | static_cast<uint64_t>(chunks) << 16);  // publishes fn_, n_
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }
    work_cv_.notify_all();
  }
  RunChunks(gen);
  if (!SpinUntil([&] { return done_.load(std::memory_order_acquire) == chunks; })) {
    caller_sleeping_.store(true);
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return done_.load() == chunks; });
    caller_sleeping_.store(false);
  }
  fn_ = nullptr;
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool* pool = [] {
    std::lock_guard<std::mutex> lk(default_mu);
    default_created = true;
    int n = default_threads;
    if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return new ThreadPool(n);  // never destroyed: workers may outlive static destructors
  }();
  return *pool;
}

bool ThreadPool::SetDefaultThreadCount(int num_threads) {
  std::lock_guard<std::mutex> lk(default_mu);
  if (default_created) return false;
  default_threads = num_threads;
  return true;
}

}  // namespace ptxserve
