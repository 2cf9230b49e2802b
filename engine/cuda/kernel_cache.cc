#include "engine/cuda/kernel_cache.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ptxserve::cuda {

// One key's slot. The thread that creates it compiles outside the cache lock; others
// wait on `done`. Once done, `status`, `kernel` and `module` never change.
struct KernelCache::Entry {
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status;
  CompiledKernel kernel;
  ModuleHandle module;
};

KernelCache::KernelCache(Device* device, std::function<void(absl::string_view, double)> on_compile)
    : device_(device), on_compile_(std::move(on_compile)) {}

KernelCache::~KernelCache() {
  absl::MutexLock l(&mu_);
  entries_.clear();  // unloads the modules while the device is alive
}

std::atomic<int64_t>* KernelCache::LaunchCounter(const char* entry) {
  absl::MutexLock l(&mu_);
  auto it = launch_counters_.find(absl::string_view(entry));
  if (it == launch_counters_.end()) {
    it = launch_counters_.emplace(entry, std::make_unique<std::atomic<int64_t>>(0)).first;
  }
  return it->second.get();
}

absl::Status KernelCache::Compile(const KernelSpec& spec, Entry* e) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::string> ptx = spec.generate();
  absl::Status st;
  if (!ptx.ok()) {
    st = absl::Status(ptx.status().code(),
                      absl::StrCat("generating kernel ", spec.key, ": ", ptx.status().message()));
  }
  if (st.ok()) {
    absl::StatusOr<ModuleHandle> m = device_->LoadModule(*ptx, spec.key);
    if (m.ok()) {
      e->module = *std::move(m);
      absl::StatusOr<CUfunction> fn = device_->GetFunction(e->module, spec.entry, spec.key);
      absl::StatusOr<uint32_t> dyn =
          fn.ok() ? device_->MaxDynamicShared(*fn, spec.key) : fn.status();
      if (dyn.ok()) {
        e->kernel.fn = *fn;
        e->kernel.grid_dependent = spec.grid_dependent;
        e->kernel.max_dynamic_shared.store(*dyn, std::memory_order_relaxed);
      } else {
        st = dyn.status();
      }
    } else {
      st = m.status();
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  e->kernel.key = spec.key;
  e->kernel.entry = spec.entry;
  e->kernel.launches = LaunchCounter(spec.entry);
  {
    absl::MutexLock l(&mu_);
    compile_seconds_ += seconds;
    if (!st.ok()) ++failures_;
  }
  if (on_compile_) on_compile_(spec.key, seconds);
  return st;
}

absl::StatusOr<const CompiledKernel*> KernelCache::Get(const KernelSpec& spec) {
  Entry* e = nullptr;
  bool compile = false;
  {
    absl::MutexLock l(&mu_);
    auto it = entries_.find(spec.key);
    if (it == entries_.end()) {
      it = entries_.emplace(spec.key, std::make_unique<Entry>()).first;
      compile = true;
      ++misses_;
    }
    e = it->second.get();
  }
  if (compile) {
    absl::Status st = Compile(spec, e);
    absl::MutexLock l(&e->mu);
    e->status = std::move(st);
    e->done = true;
  } else {
    hits_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock l(&e->mu);
    e->mu.Await(absl::Condition(&e->done));
  }
  if (!e->status.ok()) return e->status;
  return &e->kernel;
}

absl::Status KernelCache::RaiseDynamicShared(const CompiledKernel& k, uint32_t bytes) {
  if (absl::Status st = device_->SetMaxDynamicShared(k.fn, bytes, k.key); !st.ok()) return st;
  k.max_dynamic_shared.store(bytes, std::memory_order_relaxed);
  return absl::OkStatus();
}

std::vector<const CompiledKernel*> KernelCache::StopRecording() {
  recording_ = nullptr;
  return std::exchange(recorded_, {});
}

LaunchTally KernelCache::Tally(const std::vector<const CompiledKernel*>& launches) {
  LaunchTally t;
  for (const CompiledKernel* k : launches) {
    auto it = std::find_if(t.per_kernel.begin(), t.per_kernel.end(),
                           [&](const auto& e) { return e.first == k->launches; });
    if (it == t.per_kernel.end()) {
      t.per_kernel.emplace_back(k->launches, 1);
    } else {
      ++it->second;
    }
    ++t.total;
  }
  return t;
}

KernelCacheStats KernelCache::stats() const {
  KernelCacheStats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  s.misses = misses_;
  s.failures = failures_;
  s.compile_seconds = compile_seconds_;
  s.modules = static_cast<int64_t>(entries_.size()) - failures_;
  for (const auto& [name, n] : launch_counters_) s.launches[name] = n->load();
  return s;
}

}  // namespace ptxserve::cuda
