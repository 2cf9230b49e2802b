// A few threads that run stream writes off the engine thread: the engine only posts a
// pointer (a mutex and a wake-up), the serialization and the socket write happen here.
#pragma once

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ptxserve::server {

// Something with work to do on a dispatcher thread.
class Pumpable {
 public:
  virtual ~Pumpable() = default;
  virtual void Pump() = 0;
};

class Dispatcher {
 public:
  explicit Dispatcher(int num_threads);
  ~Dispatcher();  // runs what was posted, then joins
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Runs p->Pump() soon on one of the threads. Never blocks on the work itself.
  void Post(Pumpable* p);

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<Pumpable*> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ptxserve::server
