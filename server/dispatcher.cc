#include "server/dispatcher.h"

#include <pthread.h>

#include <algorithm>

namespace ptxserve::server {

Dispatcher::Dispatcher(int num_threads) {
  for (int i = 0; i < std::max(num_threads, 1); ++i) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "ptx-writer");
      Run();
    });
  }
}

Dispatcher::~Dispatcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (auto& t : threads_) t.join();
}

void Dispatcher::Post(Pumpable* p) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(p);
}

void Dispatcher::Run() {
  while (true) {
    Pumpable* p = nullptr;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Dispatcher* d)
               ABSL_SHARED_LOCKS_REQUIRED(d->mu_) { return !d->queue_.empty() || d->stop_; },
          this));
      if (queue_.empty()) return;  // stopping and drained
      p = queue_.front();
      queue_.pop_front();
    }
    p->Pump();
  }
}

}  // namespace ptxserve::server
